"""A Batch API batch for a deployment asleep (issue 30 item 3): with HEARTH_BATCH_WAKES_DEPLOYMENTS off (the
default) its lines wait, the batch in_progress and the deployment left asleep, each try refused 503
``deployment_asleep`` in the request log under the batch's id; once something else wakes it (here the admin), the
batch completes. The session's web server and worker; the simulator sleeps and wakes as vLLM does."""

import json
import time

import openai
import pytest

from console.observability.models import RequestLog
from tests.conftest import Proc, login
from tests.simworld import wait_state
from tests.test_sleep_live import RECONCILED, idle_for_an_hour, launched

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_batch_waits_for_a_deployment_asleep_and_does_not_wake_it(web: str, worker: Proc, admin_user: object) -> None:
    client = login(web)
    dep = launched(client, "dozer", idle_policy="sleep", idle_minutes=1, sleep_level=1)
    key = client.post("/api/keys", json={"name": "batch"}).json()["key"]
    idle_for_an_hour(dep["id"])
    assert wait_state(client, dep["id"], {"asleep", "failed"}, within=RECONCILED)["state"] == "asleep"

    gpt = openai.OpenAI(base_url=f"{web}/v1", api_key=key, max_retries=0)
    lines = [
        {
            "custom_id": f"z-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "dozer", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
        }
        for i in range(3)
    ]
    uploaded = gpt.files.create(file=("z.jsonl", "\n".join(json.dumps(x) for x in lines).encode()), purpose="batch")
    batch = gpt.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    deadline = time.monotonic() + 60
    while not RequestLog.objects.filter(batch_id=batch.id, status=503).exists():
        assert time.monotonic() < deadline, worker.output()[-3000:]
        time.sleep(0.5)
    waiting = gpt.batches.retrieve(batch.id)
    assert waiting.status == "in_progress" and waiting.request_counts.completed == 0  # type: ignore[union-attr]
    assert client.get(f"/api/deployments/{dep['id']}").json()["state"] == "asleep"

    assert client.post(f"/api/deployments/{dep['id']}/wake").status_code == 202
    assert wait_state(client, dep["id"], {"ready", "failed"}, within=RECONCILED)["state"] == "ready"
    deadline = time.monotonic() + 90
    while (done := gpt.batches.retrieve(batch.id)).status not in ("completed", "failed", "expired", "cancelled"):
        assert time.monotonic() < deadline, done
        time.sleep(0.5)
    assert done.status == "completed" and done.request_counts.completed == 3, done  # type: ignore[union-attr]
    client.post(f"/api/deployments/{dep['id']}/stop")
    wait_state(client, dep["id"], {"stopped", "failed"})
