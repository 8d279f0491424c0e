"""The whole flow on the real SGLang CPU engine (PyPI sglang 0.5.15.post1, built by
scripts/setup-sglang-cpu.sh), as tests/test_e2e_vllm.py does it for vLLM: launched by the Celery task through
the process runtime, chat completions streamed with the openai SDK, an Anthropic message through the
gateway's translation (SGLang is served as an engine without /v1/messages), tool-carrying requests with the
parser the plan chose, the panel reading its metrics with the plan's KV pool, and a stop that leaves no
process."""

import time
from pathlib import Path

import anthropic
import openai
import pytest
from django.conf import settings
from openai.types.chat import ChatCompletionMessageParam

from tests.conftest import ENGINE_READY_WITHIN, Workers, login
from tests.simworld import CLAUDE_TOOLS, TOOLS, wait_for_logs
from tests.test_e2e_vllm import MODEL_DIR, panel_number, wait_for

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]
READY_WITHIN = ENGINE_READY_WITHIN


@pytest.fixture(scope="module", autouse=True)
def engine_built() -> None:
    missing = [p for p in (Path(settings.HEARTH_SGLANG_CPU_PYTHON), MODEL_DIR / "config.json") if not p.exists()]
    if missing:
        pytest.fail(f"the SGLang CPU engine is not built ({missing}); run scripts/setup-sglang-cpu.sh")


def stream_text(sdk: openai.OpenAI, **request: object) -> tuple[str, str | None, int]:
    text, finish, completion = "", None, 0
    for chunk in sdk.chat.completions.create(
        model="smol-sglang",
        stream=True,  # type: ignore[call-overload]
        stream_options={"include_usage": True},
        **request,
    ):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            text += "".join(c.function.arguments or "" for c in choice.delta.tool_calls or [] if c.function)
            finish = choice.finish_reason or finish
        if chunk.usage:
            completion = chunk.usage.completion_tokens
    return text, finish, completion


def test_it_serves_a_real_sglang_end_to_end(web: str, worker: Workers, admin_user: object) -> None:
    client = login(web)
    assert client.post("/api/models", json={"name": "smollm2-sg", "path": str(MODEL_DIR)}).status_code == 201
    resp = client.post(
        "/api/deployments",
        json={
            "name": "smol-sglang",
            "model": "smollm2-sg",
            "engine": "sglang-cpu",
            "max_model_len": 2048,
            "kv_space_gib": 1,
        },
    )
    assert resp.status_code == 201, resp.text
    dep_id, plan = resp.json()["id"], resp.json()["plan"]
    assert plan["kv_capacity_tokens"] == 46_603  # 1 GiB / 23,040 bytes per token, SGLang's pages of 1 token
    assert plan["parsers"]["tool_call_parser"], plan["parsers"]["reasons"]
    assert client.post(f"/api/deployments/{dep_id}/launch").status_code == 202
    dep = wait_for(client, dep_id, {"ready", "failed"}, READY_WITHIN)
    assert dep["state"] == "ready", f"{dep}\n--- worker log ---\n{worker.output()[-4000:]}"
    assert str(dep["engine_version"]).startswith("0.5.15"), f"{dep}\n--- worker log ---\n{worker.output()[-4000:]}"

    key = client.post("/api/keys", json={"name": "e2e-sglang"}).json()["key"]
    sdk = openai.OpenAI(base_url=f"{web}/v1", api_key=key, max_retries=0)
    text, finish, completion = stream_text(
        sdk, messages=[{"role": "user", "content": "Name three colours."}], max_tokens=24
    )
    assert text.strip() and finish in {"stop", "length"} and completion > 0

    claude = anthropic.Anthropic(base_url=web, api_key=key, max_retries=0)
    with claude.messages.stream(model="smol-sglang", max_tokens=16, messages=[{"role": "user", "content": "Hi"}]) as s:
        events = [event.type for event in s]
    assert events[0] == "message_start" and events[-1] == "message_stop" and "content_block_delta" in events
    final = s.get_final_message()
    assert final.stop_reason in {"end_turn", "max_tokens"} and final.usage.output_tokens > 0

    # Requests that carry tools are accepted and end cleanly on both APIs (a 135M model may not call the tool).
    _, finish, _ = stream_text(
        sdk, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=TOOLS, max_tokens=32
    )
    assert finish in {"stop", "length", "tool_calls"}
    with claude.messages.stream(
        model="smol-sglang",
        max_tokens=32,
        tools=CLAUDE_TOOLS,  # type: ignore[arg-type]
        messages=[{"role": "user", "content": "Weather in Paris?"}],
    ) as s:
        events = [event.type for event in s]
    assert events[-1] == "message_stop" and s.get_final_message().stop_reason in {"end_turn", "max_tokens", "tool_use"}

    deadline = time.monotonic() + 30
    while True:
        panel = client.get(f"/deployments/{dep_id}/panel/").text
        generated = panel_number(panel, "generation_tokens_total")
        if generated not in {"no data", "0 tokens"} or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert generated not in {"no data", "0 tokens"} and generated.endswith(" tokens"), panel
    assert panel_number(panel, "kv_cache_size_tokens") == "46,603 tokens"  # what SGLang reports of its pool
    assert panel_number(panel, "requests_running") != "no data"

    from console.deployments.models import Replica

    logs = wait_for_logs(4)  # written in batches just after each answer
    assert {r.model for r in logs} == {"smol-sglang"} and all(r.status == 200 and not r.truncated for r in logs)
    assert all(r.completion_tokens for r in logs) and logs[1].surface == "anthropic"

    # A key's cap holds though SGLang generates "max_completion_tokens or max_tokens" (gateway.rewrite.cap_max_tokens
    # caps both); a 0 in the first, which would hand SGLang the second, is refused before the engine (no API takes it)
    capped = client.post("/api/keys", json={"name": "capped", "max_tokens_cap": 3}).json()["key"]
    capped_client = openai.OpenAI(base_url=f"{web}/v1", api_key=capped, max_retries=0)
    ask: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Count from 1 to 50."}]
    reply = capped_client.chat.completions.create(model="smol-sglang", messages=ask, max_tokens=200)
    assert reply.usage and 0 < reply.usage.completion_tokens <= 3, reply
    with pytest.raises(openai.BadRequestError, match="'max_completion_tokens' must be 1 or more"):
        capped_client.chat.completions.create(
            model="smol-sglang",
            messages=ask,
            max_completion_tokens=0,
            max_tokens=200,
        )

    pid = int(Replica.objects.filter(deployment_id=dep_id).latest("id").handle)
    assert client.post(f"/api/deployments/{dep_id}/stop").status_code == 202
    assert wait_for(client, dep_id, {"stopped"}, 90)["state"] == "stopped"
    # SGLang runs a scheduler and a detokenizer beside its server: none of its process group is left
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _group(p) == pid]
    assert not left, [(p.name, (p / "cmdline").read_bytes()[:80]) for p in left]


def _group(proc: Path) -> int | None:
    """The process group of a live (not zombie) /proc entry, None when it is gone."""
    try:
        fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[2])
