"""The gateway with the official SDKs against the engine simulator, launched by Celery on a simulated 8×H100.

Each fault the simulator injects is shown with what Hearth does about it.
"""

import json
import os
import re
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from console.models import ModelSource, Replica
from tests.conftest import Proc, login

pytestmark = pytest.mark.django_db(transaction=True)
LLAMA_8B = "tests/data/models/llama-3.1-8b-instruct.json"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
CLAUDE_TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather for a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]


class Served:
    """A ready simulator deployment behind the gateway, and a key for it."""

    def __init__(self, web: str, client: httpx.Client, dep_id: int, key: str) -> None:
        self.web, self.client, self.dep_id, self.key = web, client, dep_id, key

    def openai(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.web}/v1", api_key=self.key, max_retries=0, timeout=60)

    def anthropic(self) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.web, api_key=self.key, max_retries=0, timeout=60)

    def state(self) -> dict[str, Any]:
        return self.client.get(f"/api/deployments/{self.dep_id}").json()  # type: ignore[no-any-return]

    def engine_metrics(self) -> str:
        replica = Replica.objects.filter(deployment_id=self.dep_id).latest("id")
        return httpx.get(f"{replica.base_url}/metrics", timeout=10).text


def ensure_model() -> None:
    """The llama-8b model row (a Hugging Face repo: the simulator loads no weights)."""
    config = json.loads(open(LLAMA_8B).read())["config"]
    if not ModelSource.objects.filter(name="llama-8b").exists():
        ModelSource.objects.create(
            name="llama-8b",
            kind="hf",
            repo_id="meta-llama/Llama-3.1-8B-Instruct",
            revision="0e9e39f249a16976918f6564b8830bc894c89659",
            config=config,
            weights_bytes=16_060_522_496,
        )


def deploy(web: str, client: httpx.Client, name: str, extra_args: list[str] | None = None) -> int:
    ensure_model()
    resp = client.post(
        "/api/deployments",
        json={
            "name": name,
            "model": "llama-8b",
            "engine": "simulator",
            "max_model_len": 8192,
            "extra_args": extra_args or [],
        },
    )
    assert resp.status_code == 201, resp.text
    dep_id: int = resp.json()["id"]
    assert client.post(f"/api/deployments/{dep_id}/launch").status_code == 202
    return dep_id


def wait_state(client: httpx.Client, dep_id: int, states: set[str], within: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while (dep := client.get(f"/api/deployments/{dep_id}").json())["state"] not in states:
        assert time.monotonic() < deadline, dep
        time.sleep(0.5)
    return dep  # type: ignore[no-any-return]


@pytest.fixture
def served(web: str, worker: Proc, admin_user: object) -> Iterator[Served]:
    client = login(web)
    dep_id = deploy(web, client, "llama")
    dep = wait_state(client, dep_id, {"ready", "failed"})
    assert dep["state"] == "ready", (dep, worker.output()[-3000:])
    assert dep["plan"]["inventory"].startswith("8× NVIDIA H100") and dep["plan"]["tensor_parallel_size"] == 1
    yield Served(web, client, dep_id, client.post("/api/keys", json={"name": "sim"}).json()["key"])
    client.post(f"/api/deployments/{dep_id}/stop")
    wait_state(client, dep_id, {"stopped", "failed"})


def test_openai_sdk_streams_and_calls_tools_through_the_gateway(served: Served) -> None:
    sdk = served.openai()
    chunks = list(
        sdk.chat.completions.create(
            model="llama",
            messages=[{"role": "user", "content": "Hello"}],
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-2].choices[0].finish_reason == "length" and chunks[-1].usage.completion_tokens == 12
    reply = sdk.chat.completions.create(
        model="llama", messages=[{"role": "user", "content": "Use get_weather"}], tools=TOOLS
    )  # type: ignore[arg-type]
    call = reply.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert reply.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"  # type: ignore[union-attr]
    assert "city" in json.loads(call.function.arguments)  # type: ignore[union-attr]
    args, finish = "", None
    for chunk in sdk.chat.completions.create(
        model="llama", messages=[{"role": "user", "content": "get_weather"}], tools=TOOLS, stream=True
    ):  # type: ignore[arg-type]
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                args += delta.function.arguments or ""  # type: ignore[union-attr]
            finish = choice.finish_reason or finish
    assert finish == "tool_calls" and "city" in json.loads(args)
    assert [m.id for m in sdk.models.list()] == ["llama"] and sdk.models.retrieve("llama").id == "llama"


def test_anthropic_sdk_streams_in_the_documented_order_and_uses_tools(served: Served) -> None:
    claude = served.anthropic()
    with claude.messages.stream(
        model="llama",
        max_tokens=10,
        system=[{"type": "text", "text": "Be brief."}],
        messages=[{"role": "user", "content": "Hi"}],
    ) as stream:
        kinds = [
            event.type
            for event in stream
            if event.type
            in {
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
            }
        ]
    assert kinds[:2] == ["message_start", "content_block_start"] and kinds[-3:] == [
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert set(kinds[2:-3]) == {"content_block_delta"}
    message = claude.messages.create(
        model="llama",
        max_tokens=64,
        tools=CLAUDE_TOOLS,  # type: ignore[arg-type]
        messages=[{"role": "user", "content": "Call get_weather"}],
    )
    assert message.stop_reason == "tool_use" and message.content[-1].type == "tool_use"
    counted = claude.messages.count_tokens(model="llama", messages=[{"role": "user", "content": "Hi there"}])
    assert counted.input_tokens > 0


def test_an_engine_that_drops_a_stream_gives_the_client_an_error_not_a_clean_end(served: Served) -> None:
    stream = served.openai().chat.completions.create(
        model="llama", messages=[{"role": "user", "content": "Go [[sim:drop-mid-stream=3]]"}], stream=True
    )
    with pytest.raises(openai.APIError, match="ended the stream before it finished"):
        for _ in stream:
            pass
    with pytest.raises(anthropic.APIError, match="ended the stream before it finished"):
        with served.anthropic().messages.stream(
            model="llama", max_tokens=32, messages=[{"role": "user", "content": "Go [[sim:drop-mid-stream=2]]"}]
        ) as claude_stream:
            for _ in claude_stream:
                pass
    assert served.state()["state"] == "ready"


def test_engine_errors_arrive_in_each_apis_shape(served: Served) -> None:
    with pytest.raises(openai.InternalServerError) as server_error:
        served.openai().chat.completions.create(
            model="llama", messages=[{"role": "user", "content": "[[sim:error-500]]"}]
        )
    assert server_error.value.body["type"] == "server_error"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError, match="maximum context length is 8192 tokens"):
        served.openai().chat.completions.create(
            model="llama", messages=[{"role": "user", "content": "[[sim:context-length]]"}]
        )
    with pytest.raises(anthropic.InternalServerError):
        served.anthropic().messages.create(
            model="llama", max_tokens=8, messages=[{"role": "user", "content": "[[sim:error-500]]"}]
        )


def test_a_long_silence_before_the_first_token_is_waited_out(served: Served) -> None:
    started = time.monotonic()
    chunks = list(
        served.openai().chat.completions.create(
            model="llama",
            messages=[{"role": "user", "content": "Think [[sim:stall-first=3]]"}],
            max_tokens=4,
            stream=True,
        )
    )
    assert time.monotonic() - started >= 3
    assert chunks[-1].choices[0].finish_reason == "length"


def test_a_client_that_leaves_aborts_the_engine_request(served: Served) -> None:
    with httpx.stream(
        "POST",
        f"{served.web}/v1/chat/completions",
        timeout=30,
        headers={"Authorization": f"Bearer {served.key}"},
        json={
            "model": "llama",
            "max_tokens": 2000,
            "stream": True,
            "messages": [{"role": "user", "content": "A long story please"}],
        },
    ) as resp:
        lines = resp.iter_lines()
        next(lines)
        next(lines)
    deadline = time.monotonic() + 5
    while 'finished_reason="abort"' not in (scrape := served.engine_metrics()) or not _aborted(scrape):
        assert time.monotonic() < deadline, "the engine never saw the request aborted"
        time.sleep(0.2)


def _aborted(scrape: str) -> bool:
    for line in scrape.splitlines():
        if line.startswith("vllm:request_success_total") and 'finished_reason="abort"' in line:
            return float(line.rsplit(" ", 1)[1]) >= 1
    return False


def test_an_engine_that_dies_mid_stream_fails_the_deployment_with_its_log(served: Served) -> None:
    stream = served.openai().chat.completions.create(
        model="llama", messages=[{"role": "user", "content": "Go [[sim:die-mid-stream=3]]"}], stream=True
    )
    with pytest.raises(openai.APIError, match="ended the stream before it finished"):
        for _ in stream:
            pass
    dep = wait_state(served.client, served.dep_id, {"failed"}, within=30)
    assert "exited while serving with code 1" in dep["state_reason"]
    page = served.client.get(f"/deployments/{served.dep_id}/").text
    assert "exit code 1" in page
    with pytest.raises(openai.APIStatusError) as gone:
        served.openai().chat.completions.create(model="llama", messages=[{"role": "user", "content": "Hi"}])
    assert gone.value.status_code == 503


def test_an_engine_that_runs_out_of_memory_at_start_fails_with_the_remedy(
    web: str, worker: Proc, admin_user: object
) -> None:
    client = login(web)
    dep_id = deploy(web, client, "oom", ["--fault-oom-at-start"])
    dep = wait_state(client, dep_id, {"ready", "failed"})
    assert dep["state"] == "failed"
    assert "torch.OutOfMemoryError: CUDA out of memory" in dep["state_reason"]
    assert "It ran out of GPU memory: lower gpu_memory_utilization" in dep["state_reason"]


def test_slow_engine_metrics_show_no_numbers_rather_than_old_or_zero_ones(
    web: str, worker: Proc, admin_user: object
) -> None:
    client = login(web)
    dep_id = deploy(web, client, "slow-metrics", ["--fault-metrics-delay", "10"])
    assert wait_state(client, dep_id, {"ready", "failed"})["state"] == "ready"
    time.sleep(4)  # several scrape intervals (1 s in tests), each timing out
    metrics = client.get(f"/api/deployments/{dep_id}/metrics").json()
    assert metrics["age_seconds"] is None and metrics["values"] == {}
    assert 'data-field="requests_running">no data<' in client.get(f"/deployments/{dep_id}/panel/").text
    client.post(f"/api/deployments/{dep_id}/stop")
    assert wait_state(client, dep_id, {"stopped"})["state"] == "stopped"
    assert not Replica.objects.get(deployment_id=dep_id).running


def test_keep_alives_flow_while_the_engine_thinks_and_sdks_ignore_them(served: Served) -> None:
    body = {
        "model": "llama",
        "max_tokens": 3,
        "stream": True,
        "messages": [{"role": "user", "content": "Think hard [[sim:stall-first=3]]"}],
    }
    with httpx.stream(
        "POST",
        f"{served.web}/v1/chat/completions",
        json=body,
        timeout=30,
        headers={"Authorization": f"Bearer {served.key}"},
    ) as resp:
        lines = [line for line in resp.iter_lines() if line]
    first_data = next(i for i, line in enumerate(lines) if line.startswith("data:"))
    assert lines[:first_data].count(": keep-alive") >= 2  # HEARTH_SSE_KEEPALIVE is 1 s in tests
    assert lines[-1] == "data: [DONE]"
    with served.anthropic().messages.stream(
        model="llama", max_tokens=3, messages=[{"role": "user", "content": "Think [[sim:stall-first=2]]"}]
    ) as stream:
        assert stream.get_final_message().stop_reason == "max_tokens"


def test_every_request_is_accounted_even_when_the_client_did_not_ask_for_usage(served: Served) -> None:

    body = {"model": "llama", "max_tokens": 5, "stream": True, "messages": [{"role": "user", "content": "Count"}]}
    with httpx.stream(
        "POST",
        f"{served.web}/v1/chat/completions",
        json=body,
        timeout=30,
        headers={"Authorization": f"Bearer {served.key}"},
    ) as resp:
        data = [json.loads(line[6:]) for line in resp.iter_lines() if line.startswith("data: {")]
    assert all(chunk["choices"] for chunk in data)  # the usage chunk Hearth asked for is not passed on
    served.openai().chat.completions.create(model="llama", max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
    logs = wait_for_logs(2)
    assert (
        [(r.stream, r.completion_tokens, r.status, r.api_key.prefix) for r in logs]
        == [  # type: ignore[union-attr]
            (True, 5, 200, served.key[:11]),
            (False, 4, 200, served.key[:11]),
        ]
    )
    assert logs[0].ttft_seconds is not None and logs[0].prompt_tokens and logs[0].finish_reason == "length"


def test_truncated_and_cancelled_requests_are_logged_and_counted(served: Served) -> None:

    before = truncated_count(served.web)
    stream = served.openai().chat.completions.create(
        model="llama", messages=[{"role": "user", "content": "Go [[sim:drop-mid-stream=2]]"}], stream=True
    )
    with pytest.raises(openai.APIError):
        list(stream)
    with httpx.stream(
        "POST",
        f"{served.web}/v1/chat/completions",
        timeout=30,
        headers={"Authorization": f"Bearer {served.key}"},
        json={
            "model": "llama",
            "max_tokens": 2000,
            "stream": True,
            "messages": [{"role": "user", "content": "A long story"}],
        },
    ) as resp:
        next(resp.iter_lines())
    truncated, cancelled = wait_for_logs(2)
    assert truncated.truncated and not truncated.client_cancelled
    assert cancelled.client_cancelled and not cancelled.truncated
    assert truncated_count(served.web) == before + 1


def truncated_count(web: str) -> float:
    """The appliance's own counter of truncated streams for "llama" (the web process lives all session)."""
    for family in text_string_to_metric_families(httpx.get(f"{web}/metrics").text):
        for sample in family.samples:
            if sample.name == "hearth_gateway_truncated_streams_total" and sample.labels["model"] == "llama":
                return sample.value
    return 0.0


def wait_for_logs(count: int) -> list[Any]:
    """The request log once it holds ``count`` rows (rows are written after the answer is out)."""
    from gateway.models import RequestLog

    deadline = time.monotonic() + 10
    while len(logs := list(RequestLog.objects.order_by("id"))) < count:
        assert time.monotonic() < deadline, f"{len(logs)} of {count} request log rows"
        time.sleep(0.1)
    return logs


def test_a_key_limited_to_other_models_gets_403_in_each_apis_shape(served: Served) -> None:
    key = served.client.post("/api/keys", json={"name": "only-other", "allowed_models": ["other"]}).json()["key"]
    sdk = openai.OpenAI(base_url=f"{served.web}/v1", api_key=key, max_retries=0)
    assert sdk.models.list().data == []
    with pytest.raises(openai.PermissionDeniedError, match="may not use the model 'llama'"):
        sdk.chat.completions.create(model="llama", messages=[{"role": "user", "content": "Hi"}])
    with pytest.raises(anthropic.PermissionDeniedError):
        anthropic.Anthropic(base_url=served.web, api_key=key, max_retries=0).messages.create(
            model="llama", max_tokens=5, messages=[{"role": "user", "content": "Hi"}]
        )


def test_a_keys_max_tokens_cap_lowers_what_a_request_asks_for(served: Served) -> None:
    key = served.client.post("/api/keys", json={"name": "capped", "max_tokens_cap": 3}).json()["key"]
    sdk = openai.OpenAI(base_url=f"{served.web}/v1", api_key=key, max_retries=0)
    for asked in ({"max_tokens": 50}, {"max_completion_tokens": 50}, {}):
        reply = sdk.chat.completions.create(model="llama", messages=[{"role": "user", "content": "Talk"}], **asked)
        assert reply.usage and reply.usage.completion_tokens <= 3  # type: ignore[union-attr]
    claude = anthropic.Anthropic(base_url=served.web, api_key=key, max_retries=0)
    message = claude.messages.create(model="llama", max_tokens=50, messages=[{"role": "user", "content": "Talk"}])
    assert message.usage.output_tokens <= 3 and message.stop_reason == "max_tokens"


def test_an_expired_key_is_refused(served: Served) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from console.models import ApiKey
    from console.services import bump_routing_version

    resp = served.client.post("/api/keys", json={"name": "short", "expires_in_days": 1}).json()
    sdk = openai.OpenAI(base_url=f"{served.web}/v1", api_key=resp["key"], max_retries=0)
    assert [m.id for m in sdk.models.list()] == ["llama"]
    ApiKey.objects.filter(pk=resp["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    bump_routing_version()
    with pytest.raises(openai.AuthenticationError):
        sdk.models.list()


def _served_requests(replica: Replica) -> float:
    total = 0.0
    for family in text_string_to_metric_families(httpx.get(f"{replica.base_url}/metrics", timeout=10).text):
        for sample in family.samples:
            if sample.name == "vllm:request_success_total":
                total += sample.value
    return total


def test_two_replicas_share_the_load_keep_conversations_together_and_survive_one_dying(
    web: str, worker: Proc, admin_user: object
) -> None:
    client = login(web)
    ensure_model()
    resp = client.post(
        "/api/deployments",
        json={"name": "pair", "model": "llama-8b", "engine": "simulator", "max_model_len": 8192, "replica_count": 2},
    )
    dep_id = resp.json()["id"]
    client.post(f"/api/deployments/{dep_id}/launch")
    assert wait_state(client, dep_id, {"ready", "failed"})["state"] == "ready"
    key = client.post("/api/keys", json={"name": "pair"}).json()["key"]
    sdk = openai.OpenAI(base_url=f"{web}/v1", api_key=key, max_retries=0)
    first, second = Replica.objects.filter(deployment_id=dep_id, running=True).order_by("id")

    conversation = [{"role": "system", "content": "You are a patient tutor. " * 100}]
    for turn in range(3):
        conversation.append({"role": "user", "content": f"Question {turn}"})
        sdk.chat.completions.create(model="pair", messages=conversation, max_tokens=4)  # type: ignore[arg-type]
    counts = sorted([_served_requests(first), _served_requests(second)])
    assert counts == [0, 3]  # one conversation, one replica: its prefix cache keeps hitting

    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda i: sdk.chat.completions.create(
                    model="pair", messages=[{"role": "user", "content": f"Different question {i}"}], max_tokens=30
                ),
                range(8),
            )
        )
    assert min(_served_requests(first), _served_requests(second)) > 0  # concurrent load spread over both

    os.kill(int(first.handle), signal.SIGKILL)
    for i in range(4):  # the gateway retries on the live replica while reconcile has not noticed yet
        sdk.chat.completions.create(model="pair", messages=[{"role": "user", "content": f"After {i}"}], max_tokens=2)
    deadline = time.monotonic() + 20
    while "1 of 2 replicas serving" not in (dep := client.get(f"/api/deployments/{dep_id}").json())["state_reason"]:
        assert time.monotonic() < deadline, dep
        time.sleep(0.5)
    assert dep["state"] == "ready"
    client.post(f"/api/deployments/{dep_id}/stop")
    wait_state(client, dep_id, {"stopped"})


def test_replicas_that_need_more_gpus_than_the_box_has_are_refused(web: str, worker: Proc, admin_user: object) -> None:
    client = login(web)
    ensure_model()
    resp = client.post(
        "/api/deployments",
        json={"name": "big", "model": "llama-8b", "engine": "simulator", "tensor_parallel_size": 4, "replica_count": 3},
    )
    assert resp.status_code == 400
    assert re.fullmatch(
        r"3 replicas at tensor parallel 4 need 12 GPUs; [0-8] are free on this box\.", resp.json()["detail"]
    )


def test_anthropic_clients_work_with_an_engine_that_only_speaks_openai(
    web: str, worker: Proc, admin_user: object
) -> None:
    client = login(web)
    dep_id = deploy(web, client, "chat-only", ["--no-anthropic"])  # answers /v1/messages with 404, like SGLang
    assert wait_state(client, dep_id, {"ready", "failed"})["state"] == "ready"
    key = client.post("/api/keys", json={"name": "claude"}).json()["key"]
    claude = anthropic.Anthropic(base_url=web, api_key=key, max_retries=0)
    with claude.messages.stream(
        model="chat-only", max_tokens=8, system="Be brief.", messages=[{"role": "user", "content": "Hi"}]
    ) as stream:
        kinds = [event.type for event in stream]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert stream.get_final_message().stop_reason == "max_tokens"
    message = claude.messages.create(
        model="chat-only",
        max_tokens=64,
        tools=CLAUDE_TOOLS,  # type: ignore[arg-type]
        messages=[{"role": "user", "content": "Call get_weather"}],
    )
    assert message.stop_reason == "tool_use" and message.content[-1].type == "tool_use"
    assert claude.messages.count_tokens(model="chat-only", messages=[{"role": "user", "content": "Hi"}]).input_tokens
    with pytest.raises(anthropic.APIError, match="ended the stream before it finished"):
        with claude.messages.stream(
            model="chat-only", max_tokens=32, messages=[{"role": "user", "content": "Go [[sim:drop-mid-stream=2]]"}]
        ) as broken:
            list(broken)
    client.post(f"/api/deployments/{dep_id}/stop")
    wait_state(client, dep_id, {"stopped"})


def test_quotas_answer_429_with_retry_after_and_are_logged_as_errors(served: Served) -> None:
    rpm = served.client.post("/api/keys", json={"name": "rpm", "requests_per_minute": 2}).json()
    sdk = openai.OpenAI(base_url=f"{served.web}/v1", api_key=rpm["key"], max_retries=0)
    for _ in range(2):
        sdk.chat.completions.create(model="llama", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    with pytest.raises(openai.RateLimitError) as limited:
        sdk.chat.completions.create(model="llama", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    assert 1 <= int(limited.value.response.headers["retry-after"]) <= 60
    assert limited.value.body["code"] == "rate_limit_exceeded"  # type: ignore[index]
    with pytest.raises(anthropic.RateLimitError):
        anthropic.Anthropic(base_url=served.web, api_key=rpm["key"], max_retries=0).messages.create(
            model="llama", max_tokens=2, messages=[{"role": "user", "content": "Hi"}]
        )
    assert [log.status for log in wait_for_logs(4)] == [200, 200, 429, 429]

    tokens = served.client.post("/api/keys", json={"name": "tpm", "tokens_per_minute": 5}).json()["key"]
    sdk = openai.OpenAI(base_url=f"{served.web}/v1", api_key=tokens, max_retries=0)
    sdk.chat.completions.create(model="llama", messages=[{"role": "user", "content": "Hello there"}], max_tokens=8)
    with pytest.raises(openai.RateLimitError, match="tokens per minute"):
        sdk.chat.completions.create(model="llama", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)


def test_a_key_limited_to_one_request_at_once_is_refused_a_second(served: Served) -> None:
    key = served.client.post("/api/keys", json={"name": "one", "max_concurrent": 1}).json()["key"]
    sdk = openai.OpenAI(base_url=f"{served.web}/v1", api_key=key, max_retries=0)
    slow = sdk.chat.completions.create(
        model="llama", max_tokens=3, stream=True, messages=[{"role": "user", "content": "Slow [[sim:stall-first=2]]"}]
    )
    with pytest.raises(openai.RateLimitError, match="requests at once"):
        sdk.chat.completions.create(model="llama", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    assert list(slow)[-1].choices[0].finish_reason == "length"
    sdk.chat.completions.create(model="llama", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)  # freed


def test_a_deployments_max_tokens_cap_applies_to_every_key(web: str, worker: Proc, admin_user: object) -> None:
    client = login(web)
    ensure_model()
    resp = client.post(
        "/api/deployments",
        json={"name": "capped", "model": "llama-8b", "engine": "simulator", "max_model_len": 8192, "max_tokens_cap": 2},
    )
    dep_id = resp.json()["id"]
    client.post(f"/api/deployments/{dep_id}/launch")
    assert wait_state(client, dep_id, {"ready", "failed"})["state"] == "ready"
    key = client.post("/api/keys", json={"name": "any"}).json()["key"]
    reply = openai.OpenAI(base_url=f"{web}/v1", api_key=key, max_retries=0).chat.completions.create(
        model="capped", messages=[{"role": "user", "content": "Talk a lot"}], max_tokens=100
    )
    assert reply.usage and reply.usage.completion_tokens == 2
    client.post(f"/api/deployments/{dep_id}/stop")
    wait_state(client, dep_id, {"stopped"})


def test_silences_between_tokens_keep_the_stream_alive_and_whole(served: Served) -> None:
    body = {
        "model": "llama",
        "max_tokens": 3,
        "stream": True,
        "messages": [{"role": "user", "content": "Slowly [[sim:stall-between=2]]"}],
    }
    with httpx.stream(
        "POST",
        f"{served.web}/v1/chat/completions",
        json=body,
        timeout=30,
        headers={"Authorization": f"Bearer {served.key}"},
    ) as resp:
        lines = [line for line in resp.iter_lines() if line]
    first = next(i for i, line in enumerate(lines) if line.startswith("data:"))
    assert ": keep-alive" in lines[first:]  # between events, never inside one
    assert lines[-1] == "data: [DONE]" and '"finish_reason":"length"' in lines[-2].replace(" ", "")
