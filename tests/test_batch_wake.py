"""A Batch API batch for a deployment asleep (issue 30 item 3): with HEARTH_BATCH_WAKES_DEPLOYMENTS off (the default)
its lines wait unsent, the batch in_progress saying so and the deployment left asleep, nothing in the request log
under the batch's id (a 503 a line would be an error on the panels and alerts), while another batch for a deployment
awake runs to its end; once something else wakes it (here the admin), the batch completes. With it on (a web server
and worker of their own instance), the batch wakes the deployment itself. The simulator sleeps and wakes as vLLM
does."""

import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from django.test import override_settings

from console.observability.models import RequestLog
from tests.conftest import Workers, _stop_engines_left_running, login, start_web, start_worker
from tests.simworld import wait_state
from tests.test_sleep_live import RECONCILED, idle_for_an_hour, launched

pytestmark = pytest.mark.django_db(transaction=True)


def asleep_with_a_batch(web: str, name: str) -> tuple[httpx.Client, dict[str, Any], openai.OpenAI, Any]:
    """A simulator deployment ``name`` put to sleep by its idle policy, and a 3-line batch for it just created."""
    client = login(web)
    dep = launched(client, name, idle_policy="sleep", idle_minutes=1, sleep_level=1)
    key = client.post("/api/keys", json={"name": "batch"}).json()["key"]
    idle_for_an_hour(dep["id"])
    assert wait_state(client, dep["id"], {"asleep", "failed"}, within=RECONCILED)["state"] == "asleep"
    gpt = openai.OpenAI(base_url=f"{web}/v1", api_key=key, max_retries=0)
    return client, dep, gpt, batch_for(gpt, name)


def batch_for(gpt: openai.OpenAI, model: str) -> Any:
    """A new 3-line chat batch for ``model``."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    lines = [{"custom_id": f"z-{i}", "method": "POST", "url": "/v1/chat/completions", "body": body} for i in range(3)]
    uploaded = gpt.files.create(file=("z.jsonl", "\n".join(json.dumps(x) for x in lines).encode()), purpose="batch")
    return gpt.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")


def completed(gpt: openai.OpenAI, batch_id: str) -> Any:
    deadline = time.monotonic() + 90
    while (done := gpt.batches.retrieve(batch_id)).status not in ("completed", "failed", "expired", "cancelled"):
        assert time.monotonic() < deadline, done
        time.sleep(0.5)
    assert done.status == "completed" and done.request_counts.completed == 3, done  # type: ignore[union-attr]
    return done


def test_a_batch_waits_for_a_deployment_asleep_and_does_not_wake_it(
    web: str, worker: Workers, admin_user: object
) -> None:
    client, dep, gpt, batch = asleep_with_a_batch(web, "dozer")
    deadline = time.monotonic() + 60
    waits = (
        "deployment dozer is asleep: batches do not wake it (HEARTH_BATCH_WAKES_DEPLOYMENTS is off); the lines go "
        "once a request or an admin wakes it"
    )
    while getattr(gpt.batches.retrieve(batch.id), "waiting_reason", None) != waits:
        assert time.monotonic() < deadline, worker.output()[-3000:]
        time.sleep(0.5)
    awake = launched(client, "waker")  # a batch for a deployment awake runs meanwhile: the one asleep holds up none
    completed(gpt, batch_for(gpt, "waker").id)
    client.post(f"/api/deployments/{awake['id']}/stop")
    waiting = gpt.batches.retrieve(batch.id)
    assert waiting.status == "in_progress" and waiting.request_counts.completed == 0  # type: ignore[union-attr]
    assert not RequestLog.objects.filter(batch_id=batch.id).exists()  # not sent: no 503 rows
    assert client.get(f"/api/deployments/{dep['id']}").json()["state"] == "asleep"

    asked = client.post(f"/api/deployments/{dep['id']}/wake")
    assert asked.status_code == 202 and asked.json()["state_reason"].startswith("Wake asked: the worker wakes it")
    assert wait_state(client, dep["id"], {"ready", "failed"}, within=RECONCILED)["state"] == "ready"
    completed(gpt, batch.id)
    client.post(f"/api/deployments/{dep['id']}/stop")
    wait_state(client, dep["id"], {"stopped", "failed"})


INSTANCE = f"batch-wake-{secrets.token_hex(4)}"


@pytest.fixture
def waking_box(live_env: dict[str, str], tmp_path: Any) -> Iterator[str]:
    """A web server and worker of their own instance with HEARTH_BATCH_WAKES_DEPLOYMENTS on."""
    env = {**live_env, "HEARTH_INSTANCE": INSTANCE, "HEARTH_BATCH_WAKES_DEPLOYMENTS": "true"}
    web, base = start_web(env, tmp_path / "web.log")
    worker = start_worker({**env, "HEARTH_GATEWAY_URL": base}, tmp_path)
    yield base
    worker.stop()
    web.stop()
    with override_settings(HEARTH_INSTANCE=INSTANCE):
        _stop_engines_left_running()


def test_a_batch_wakes_a_deployment_asleep_when_the_policy_says_so(waking_box: str, admin_user: object) -> None:
    client, dep, gpt, batch = asleep_with_a_batch(waking_box, "riser")
    done = completed(gpt, batch.id)
    deadline = time.monotonic() + 15  # the request log's rows are written after the answers went out
    while not RequestLog.objects.filter(batch_id=done.id, woke_engine=True).exists():
        assert time.monotonic() < deadline, "no row of the batch held for the wake"
        time.sleep(0.3)
    assert not RequestLog.objects.filter(batch_id=done.id, status=503).exists()
    client.post(f"/api/deployments/{dep['id']}/stop")
    wait_state(client, dep["id"], {"stopped", "failed"})
