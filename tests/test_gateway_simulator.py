"""The gateway with the official SDKs against the engine simulator, launched by Celery on a simulated 8×H100.

Each fault the simulator injects is shown with what Hearth does about it.
"""

import json
import time

import anthropic
import httpx
import openai
import pytest

from appliance.runtimes import get_runtime
from console.deployments.models import Replica
from console.observability.models import RequestLog, ScrapeHealth
from tests.conftest import Workers, login
from tests.gatewayworld import within
from tests.simworld import (
    CLAUDE_TOOLS,
    TOOLS,
    Served,
    deploy,
    truncated_count,
    wait_for_logs,
    wait_state,
)

pytestmark = pytest.mark.django_db(transaction=True)


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
    page = claude.models.list()  # the same GET /v1/models, in Anthropic's fields too (a trial found only OpenAI's)
    assert [(m.id, m.type, m.display_name) for m in page.data] == [("llama", "model", "llama")]
    assert page.has_more is False and page.first_id == page.last_id == "llama"
    one = claude.models.retrieve("llama")
    assert one.display_name == "llama" and abs(one.created_at.timestamp() - time.time()) < 86400


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


def test_an_engine_that_dies_mid_stream_is_restarted_and_its_last_run_kept(served: Served) -> None:
    """And the cut request's row keeps its prompt, counted at admission for the key's token limit: the dead engine
    could count nothing at the end (a trial's row had no prompt, so the prompt went unbilled)."""
    limited = served.client.post("/api/keys", json={"name": "limited", "tokens_per_day": 100_000}).json()
    sdk = openai.OpenAI(base_url=f"{served.web}/v1", api_key=limited["key"], max_retries=0, timeout=60)
    stream = sdk.chat.completions.create(
        model="llama", messages=[{"role": "user", "content": "Go [[sim:die-mid-stream=3]]"}], stream=True
    )
    with pytest.raises(openai.APIError, match="ended the stream before it finished"):
        for _ in stream:
            pass
    rows = RequestLog.objects.filter(api_key_id=limited["id"])
    within(15, rows.exists)
    row = rows.get()
    assert row.truncated and row.prompt_tokens and row.completion_tokens == 3, (
        row.prompt_tokens,
        row.completion_tokens,
    )
    deadline = time.monotonic() + 30
    while not ((replica := served.state()["replicas"][0])["restarts"] and replica["ready"]):
        assert time.monotonic() < deadline, replica
        time.sleep(0.3)
    assert replica["previous_exit_code"] == 1
    assert "EngineCore encountered a fatal error" in replica["previous_log_tail"]
    page = served.client.get(f"/deployments/{served.dep_id}/").text
    assert "Previous run: exit code 1" in page and '<tr data-event="crash">' in page  # in its history too
    [crash] = [e for e in served.state()["events"] if e["kind"] == "crash"]
    assert crash["reason"].startswith(f"{replica['runtime_name']}: ") and "Restarting in " in crash["reason"]
    answer = served.openai().chat.completions.create(model="llama", messages=[{"role": "user", "content": "Hi"}])
    assert answer.choices[0].message.content


def test_an_engine_that_runs_out_of_memory_at_start_fails_with_the_remedy(
    web: str, worker: Workers, admin_user: object
) -> None:
    client = login(web)
    dep_id = deploy(web, client, "oom", ["--fault-oom-at-start"])
    dep = wait_state(client, dep_id, {"ready", "failed"})
    assert dep["state"] == "failed"
    assert "torch.OutOfMemoryError: CUDA out of memory" in dep["state_reason"]
    assert "It ran out of GPU memory; the deployment page offers the known remedy." in dep["state_reason"]
    assert [c["name"] for c in dep["remedy"]] == ["gpu_memory_utilization", "PYTORCH_CUDA_ALLOC_CONF", "max_num_seqs"]


def test_an_engine_that_cannot_listen_on_its_port_fails_its_launch_at_once_saying_so(
    web: str, worker: Workers, admin_user: object
) -> None:
    """SGLang logs uvicorn's bind error and hangs for minutes (tests/data/sglang-0.5.15.post1-cpu-port-taken.log):
    the launch fails at the next poll, not after HEARTH_START_TIMEOUT (1,800 s here), and no engine is left."""
    client = login(web)
    dep_id = deploy(web, client, "port-taken", ["--fault-port-taken"])
    dep = wait_state(client, dep_id, {"ready", "failed"}, within=30)
    assert dep["state"] == "failed"
    assert "The engine could not listen on its port ([Errno 98] error while attempting to bind" in dep["state_reason"]
    assert "address already in use): another process holds it." in dep["state_reason"]
    replica = Replica.objects.get(deployment_id=dep_id)
    assert not replica.running and replica.stopped_at is not None
    assert not get_runtime(replica.runtime).status(replica.runtime_name).running


def test_slow_engine_metrics_show_no_numbers_rather_than_old_or_zero_ones(
    web: str, worker: Workers, admin_user: object
) -> None:
    client = login(web)
    dep_id = deploy(web, client, "slow-metrics", ["--fault-metrics-delay", "10"])
    assert wait_state(client, dep_id, {"ready", "failed"})["state"] == "ready"
    failing = ScrapeHealth.objects.filter(replica__deployment_id=dep_id, failures_in_row__gte=2)
    within(30, failing.exists, every=0.2)  # two scrapes (every 1 s in tests) have timed out
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
        raw = b"".join(resp.iter_raw())
    head = raw[: raw.index(b"data:")]
    assert head.count(b"\n") >= 2 and not head.strip()  # blank lines (HEARTH_SSE_KEEPALIVE is 1 s in tests)
    assert raw.rstrip().endswith(b"data: [DONE]")
    stream = served.openai().chat.completions.create(
        model="llama", max_tokens=3, stream=True, messages=[{"role": "user", "content": "Think [[sim:stall-first=2]]"}]
    )
    assert [c.choices[0].finish_reason for c in stream if c.choices][-1] == "length"
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


def test_anthropic_clients_work_with_an_engine_that_only_speaks_openai(
    web: str, worker: Workers, admin_user: object
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
        raw = b"".join(resp.iter_raw())
    body = raw[raw.index(b"data:") :]
    assert b"\n\n\n" in body  # a keep-alive (a blank line) between two events, never inside one
    events = [e.strip() for e in body.split(b"\n\n") if e.strip()]
    assert all(e.startswith(b"data: ") and b"\n" not in e for e in events)
    assert events[-1] == b"data: [DONE]" and b'"finish_reason":"length"' in events[-2].replace(b" ", b"")


def test_anthropic_clients_get_pings_while_the_engine_is_silent_before_and_after_message_start(served: Served) -> None:
    """A 60 s proxy idle limit would cut a stream that sends no byte while the engine thinks before its first
    event: the gateway pings from the response head on, and the SDKs skip pings wherever they come."""

    def events(content: str) -> list[str]:
        body = {"model": "llama", "max_tokens": 3, "stream": True, "messages": [{"role": "user", "content": content}]}
        headers = {"x-api-key": served.key, "anthropic-version": "2023-06-01"}
        with httpx.stream("POST", f"{served.web}/v1/messages", json=body, headers=headers, timeout=30) as resp:
            return [line.removeprefix("event: ") for line in resp.iter_lines() if line.startswith("event:")]

    thinking = events("Think [[sim:stall-first=2]]")  # the engine sends message_start with the first token
    assert thinking[0] == "ping" and thinking[thinking.index("message_start") - 1] == "ping"
    assert thinking[-1] == "message_stop"
    slow = events("Slowly [[sim:stall-between=2]]")
    assert "ping" in slow[slow.index("message_start") :] and slow[-1] == "message_stop"
    with served.anthropic().messages.stream(
        model="llama", max_tokens=3, messages=[{"role": "user", "content": "Think [[sim:stall-first=2]]"}]
    ) as stream:
        assert stream.get_final_message().stop_reason == "max_tokens"


def test_a_request_made_with_a_rotated_keys_old_secret_is_logged_under_that_secrets_prefix(served: Served) -> None:
    """During a rotation's grace the request log says which secret each request used, so the key's owner
    sees who is still on the old one."""
    from console.observability.models import RequestLog

    old = served.client.post("/api/keys", json={"name": "rotating"}).json()
    new = served.client.post(f"/api/keys/{old['id']}/rotate", json={"grace_seconds": 60}).json()
    for secret in (old["key"], new["key"]):
        answer = httpx.post(
            f"{served.web}/v1/chat/completions",
            headers={"Authorization": f"Bearer {secret}"},
            json={"model": "llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
    deadline = time.monotonic() + 10
    while len(rows := list(RequestLog.objects.filter(api_key_id=old["id"]).order_by("id"))) < 2:
        assert time.monotonic() < deadline, rows
        time.sleep(0.1)
    assert [r.key_prefix for r in rows] == [old["prefix"], new["prefix"]]
    page = served.client.get("/requests/").text
    assert f"<code>{old['prefix']}</code>" in page and "(its secret before rotation)" in page
