"""Several replicas behind the gateway: load spread, prefix affinity, a replica dying, GPUs to hold them."""

import os
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from console.deployments.models import Replica
from tests.conftest import Workers, login
from tests.simworld import (
    ensure_model,
    wait_state,
)

pytestmark = pytest.mark.django_db(transaction=True)


def _served_requests(replica: Replica) -> float:
    total = 0.0
    for family in text_string_to_metric_families(httpx.get(f"{replica.base_url}/metrics", timeout=10).text):
        for sample in family.samples:
            if sample.name == "vllm:request_success_total":
                total += sample.value
    return total


def test_two_replicas_share_the_load_keep_conversations_together_and_survive_one_dying(
    web: str, worker: Workers, admin_user: object
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
    deadline = time.monotonic() + 30
    while "1 of 2 serving" not in (dep := client.get(f"/api/deployments/{dep_id}").json())["state_reason"]:
        assert time.monotonic() < deadline, dep
        time.sleep(0.2)
    assert dep["state"] == "ready"  # the other replica serves while the crashed one restarts
    while not all(r["ready"] for r in client.get(f"/api/deployments/{dep_id}").json()["replicas"]):
        assert time.monotonic() < deadline
        time.sleep(0.5)
    dep = client.get(f"/api/deployments/{dep_id}").json()
    crashed = next(r for r in dep["replicas"] if r["restarts"])
    assert crashed["previous_exit_code"] == -9 and "Starting vLLM API server" in crashed["previous_log_tail"]
    client.post(f"/api/deployments/{dep_id}/stop")
    wait_state(client, dep_id, {"stopped"})


def test_replicas_that_need_more_gpus_than_the_box_has_are_refused(
    web: str, worker: Workers, admin_user: object
) -> None:
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
