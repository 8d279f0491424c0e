"""The gateway's surfaces with the official SDKs against the real vLLM CPU engine (SmolLM2-135M).

One deployment serves the whole module. What a 135M model cannot do (tool calls) and the faults only a
simulator can inject are covered against the simulator in tests/test_gateway_simulator.py.
"""

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from console.deployments.models import Replica
from tests.conftest import Proc, login
from tests.simworld import wait_for_logs
from tests.test_e2e_vllm import MODEL_DIR, READY_WITHIN, wait_for

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]
HI = [{"role": "user", "content": "Say hello."}]


class Engine:
    def __init__(self, web: str, key: str, dep_id: int) -> None:
        self.web, self.key, self.dep_id = web, key, dep_id

    def openai(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.web}/v1", api_key=self.key, max_retries=0, timeout=120)

    def anthropic(self) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.web, api_key=self.key, max_retries=0, timeout=120)

    def running(self) -> float:
        replica = Replica.objects.filter(deployment_id=self.dep_id).latest("id")
        for family in text_string_to_metric_families(httpx.get(f"{replica.base_url}/metrics").text):
            for sample in family.samples:
                if sample.name == "vllm:num_requests_running":
                    return sample.value
        return -1.0


@pytest.fixture
def engine(web: str, worker: Proc, admin_user: object) -> Iterator[Engine]:
    client = login(web)
    client.post("/api/models", json={"name": "smollm2", "path": str(MODEL_DIR)})
    dep = client.post(
        "/api/deployments",
        json={"name": "smol", "model": "smollm2", "engine": "vllm-cpu", "max_model_len": 2048, "kv_space_gib": 1},
    ).json()
    dep_id = dep["id"]
    # the plan chose the parsers from the folder's config and chat template; the launch passes them
    assert dep["plan"]["parsers"]["tool_call_parser"], dep["plan"]["parsers"]["reasons"]
    client.post(f"/api/deployments/{dep_id}/launch")
    assert wait_for(client, dep_id, {"ready", "failed"}, READY_WITHIN)["state"] == "ready"
    yield Engine(web, client.post("/api/keys", json={"name": "conformance"}).json()["key"], dep_id)
    client.post(f"/api/deployments/{dep_id}/stop")
    wait_for(client, dep_id, {"stopped"}, 60)


def test_vllm_through_the_gateway_with_both_sdks_and_a_client_that_leaves(engine: Engine) -> None:

    sdk = engine.openai()
    chunks = list(
        sdk.chat.completions.create(
            model="smol",
            messages=HI,
            max_tokens=6,
            stream=True,  # type: ignore[arg-type]
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].usage and chunks[-1].usage.completion_tokens == 6 and chunks[-2].choices[0].finish_reason
    plain = list(sdk.chat.completions.create(model="smol", messages=HI, max_tokens=4, stream=True))  # type: ignore[arg-type]
    assert all(chunk.choices for chunk in plain)  # no usage chunk the client did not ask for...
    reply = sdk.chat.completions.create(
        model="smol",
        messages=HI,
        n=2,
        max_tokens=50,  # type: ignore[arg-type]
        max_completion_tokens=3,
        logprobs=True,
    )
    assert [c.index for c in reply.choices] == [0, 1] and reply.usage and reply.usage.completion_tokens <= 6
    assert reply.choices[0].logprobs is not None
    text = "".join(
        c.choices[0].text for c in sdk.completions.create(model="smol", prompt="Once upon", max_tokens=4, stream=True)
    )
    assert text
    with pytest.raises(openai.BadRequestError, match="2048"):
        sdk.chat.completions.create(model="smol", max_tokens=4, messages=[{"role": "user", "content": "word " * 3000}])

    claude = engine.anthropic()
    with claude.messages.stream(
        model="smol",
        max_tokens=8,
        system=[{"type": "text", "text": "Be brief."}],
        messages=[{"role": "user", "content": "Hi"}],
    ) as stream:
        kinds = [event.type for event in stream]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert claude.messages.count_tokens(model="smol", messages=[{"role": "user", "content": "Hi"}]).input_tokens > 0
    logs = wait_for_logs(6)  # rows are written in batches: the six answers above, the refusal among them
    assert logs[1].stream and logs[1].completion_tokens == 4  # ...yet its usage was recorded
    assert [log.status for log in logs if log.status != 200] == [400]  # the refusal counts as an error

    # A client that leaves stops vLLM generating for it.
    with httpx.stream(
        "POST",
        f"{engine.web}/v1/chat/completions",
        timeout=60,
        headers={"Authorization": f"Bearer {engine.key}"},
        json={"model": "smol", "max_tokens": 1500, "stream": True, "messages": HI},
    ) as resp:
        lines = resp.iter_lines()
        for _ in range(6):
            next(lines)
    deadline = time.monotonic() + 3
    while engine.running() != 0:
        assert time.monotonic() < deadline, "vLLM kept generating for a client that left"
        time.sleep(0.1)


WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def test_vllm_with_the_chosen_parsers_takes_tool_requests_on_every_api(engine: Engine) -> None:
    """A 135M model may not call the tool: what must hold is that each request carrying tools is accepted and
    streamed to a clean end, never refused ("auto" tool choice requires --enable-auto-tool-choice)."""
    sdk, claude = engine.openai(), engine.anthropic()
    chunks = list(sdk.chat.completions.create(model="smol", messages=HI, tools=[WEATHER], max_tokens=24, stream=True))  # type: ignore[arg-type]
    assert chunks[-1].choices[0].finish_reason in ("stop", "length", "tool_calls")
    tool = {
        "name": "get_weather",
        "description": "Weather for a city",
        "input_schema": WEATHER["function"]["parameters"],
    }
    with claude.messages.stream(model="smol", max_tokens=24, tools=[tool], messages=HI) as stream:  # type: ignore[list-item]
        final = stream.get_final_message()
    assert final.stop_reason in ("end_turn", "max_tokens", "tool_use")
    responses_tool = {"type": "function", **WEATHER["function"]}
    with sdk.responses.stream(model="smol", input="Say hello.", tools=[responses_tool], max_output_tokens=24) as rs:
        kinds = [event.type for event in rs]
        response = rs.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed" and response.usage
    whole = sdk.responses.create(model="smol", input="Say hello.", max_output_tokens=8)
    assert whole.output and whole.usage and whole.usage.output_tokens <= 8
