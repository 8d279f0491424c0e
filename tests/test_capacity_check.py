"""Capacity checks end to end: the real web server and Celery worker, a simulator deployment launched by the
worker on the simulated 8× H100, the check's requests through the real gateway with its own key."""

import csv
import io
import math
import time
from typing import Any

import httpx
import openai
import pytest

from console.access.models import ApiKey
from console.deployments.models import Deployment
from console.observability import pricing
from console.observability.models import DeploymentPrice
from tests.conftest import Workers, login
from tests.simworld import deploy, wait_state

pytestmark = pytest.mark.django_db(transaction=True)
FAST = ["--decode-ms-per-token", "2", "--decode-ms-per-seq", "0.2"]  # a quick engine: 128 tokens in ~0.3 s


def wait_run(client: httpx.Client, run_id: int, states: set[str], within: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while (run := client.get(f"/api/capacity-checks/{run_id}").json())["state"] not in states:
        assert time.monotonic() < deadline, run
        time.sleep(0.3)
    return run  # type: ignore[no-any-return]


@pytest.fixture
def ready(web: str, worker: Workers, admin_user: object) -> Any:
    """A ready simulator deployment "cap" (max_model_len 8192) and a logged-in client."""
    client = login(web)
    dep_id = deploy(web, client, "cap", FAST)
    dep = wait_state(client, dep_id, {"ready", "failed"})
    assert dep["state"] == "ready", worker.output()[-3000:]
    yield client, dep_id
    client.post(f"/api/deployments/{dep_id}/stop")
    wait_state(client, dep_id, {"stopped", "failed"})


def start(client: httpx.Client, dep_id: int, **check: Any) -> httpx.Response:
    body = {"profile": "chat", "levels": [1, 4], "requests_per_level": 8, "max_seconds": 90} | check
    return client.post(f"/api/deployments/{dep_id}/capacity-checks", json=body)


@pytest.mark.usefixtures("seeded_gpu_prices")
def test_a_check_measures_each_level_through_the_gateway_and_revokes_its_key(ready: Any, worker: Workers) -> None:
    client, dep_id = ready
    resp = start(client, dep_id, label="baseline")
    assert resp.status_code == 202, resp.text
    run = wait_run(client, resp.json()["id"], {"done", "failed", "cancelled"})
    assert run["state"] == "done", (run, worker.output()[-3000:])
    assert [r["level"] for r in run["results"]] == [1, 4]
    for level in run["results"]:
        assert level["requests"] == 8 and level["succeeded"] == 8 and level["failures"] == {}
        assert 0 < level["ttft_p50"] <= level["ttft_p90"] <= level["ttft_p99"]
        assert level["output_tokens_per_s"] > 0 and level["per_user_tokens_per_s"] > 0
        assert level["engine"]["kv_cache_peak"] is not None and level["engine"]["scrapes"] >= 1
    one, four = run["results"]
    assert four["output_tokens_per_s"] > one["output_tokens_per_s"]  # four users are served at once
    assert run["shape"] == {"prompt_tokens": 256, "output_tokens": 128, "prefix_tokens": 0}
    assert 240 <= one["mean_prompt_tokens"] <= 272 and one["mean_output_tokens"] == 128  # calibrated lengths
    assert run["summary"].startswith("plan: ") and "sessions of" in run["summary"]
    slo = run["provenance"]["slo"]
    ttft, itl = slo["ttft_seconds"] or math.inf, slo["itl_seconds"] or math.inf
    held = [
        r["prompt_tokens_per_s"] + r["output_tokens_per_s"]
        for r in run["results"]
        if r["ttft_p90"] <= ttft and (r["itl_p90"] is None or r["itl_p90"] <= itl)
    ]
    price = DeploymentPrice.objects.filter(deployment_id=dep_id).first()  # the deployment charges from the check
    assert held, run["results"]  # the simulator holds a default SLO at 4 users
    assert price is not None and (price.measured_run_id, price.measured_tokens_per_second) == (
        run["id"],
        pytest.approx(max(held)),
    )
    assert pricing.charged_price(Deployment.objects.get(pk=dep_id)).source == "capacity"
    prov = run["provenance"]
    assert prov["model_revision"] == "0e9e39f249a16976918f6564b8830bc894c89659" and prov["engine"] == "simulator"
    assert prov["engine_version"] == "0.32.0+sim" and prov["gpu_indices"] == [0]
    key = ApiKey.objects.get(name=f"capacity check {run['id']}")
    assert key.revoked_at is not None and key.allowed_models == ["cap"]

    exported = client.get(f"/capacity/runs/{run['id']}/export.csv")
    rows = list(csv.DictReader(io.StringIO(exported.text)))
    assert [float(r["level"]) for r in rows] == [1.0, 4.0] and rows[0]["engine_version"] == "0.32.0+sim"
    assert float(rows[1]["ttft_p50_s"]) == pytest.approx(four["ttft_p50"])
    assert client.get(f"/api/capacity-checks/{run['id']}/export").json()["results"][1]["level"] == 4


def test_a_cancelled_check_keeps_what_it_measured_and_revokes_its_key(ready: Any) -> None:
    client, dep_id = ready
    run_id = start(client, dep_id, levels=[2, 4], requests_per_level=400, max_seconds=300).json()["id"]
    deadline = time.monotonic() + 60
    while (run := client.get(f"/api/capacity-checks/{run_id}").json())["progress"] == 0:
        assert time.monotonic() < deadline and run["state"] in {"queued", "running"}, run
        time.sleep(0.2)
    assert client.post(f"/api/capacity-checks/{run_id}/cancel").status_code == 202
    run = wait_run(client, run_id, {"cancelled", "done", "failed"}, within=30)
    assert run["state"] == "cancelled" and "Cancelled" in run["state_reason"]
    assert ApiKey.objects.get(name=f"capacity check {run_id}").revoked_at is not None
    assert client.post(f"/api/capacity-checks/{run_id}/cancel").status_code == 400  # already ended


def test_one_check_at_a_time_and_a_confirmation_under_live_traffic(ready: Any, web: str) -> None:
    client, dep_id = ready
    first = start(client, dep_id, levels=[1], requests_per_level=20)
    assert first.status_code == 202
    second = start(client, dep_id)
    assert second.status_code == 400 and "already running" in second.json()["detail"]
    assert client.post(f"/api/capacity-checks/{first.json()['id']}/cancel").status_code == 202
    wait_run(client, first.json()["id"], {"cancelled", "done"})

    key = client.post("/api/keys", json={"name": "a developer"}).json()["key"]
    sdk = openai.OpenAI(base_url=f"{web}/v1", api_key=key, max_retries=0)
    sdk.chat.completions.create(model="cap", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    deadline = time.monotonic() + 10
    while (refused := start(client, dep_id)).status_code == 202:  # the request log is written in batches
        client.post(f"/api/capacity-checks/{refused.json()['id']}/cancel")
        wait_run(client, refused.json()["id"], {"cancelled", "done"})
        assert time.monotonic() < deadline
        time.sleep(0.5)
    assert refused.status_code == 400 and "serving live traffic (1 request from 1 key" in refused.json()["detail"]
    confirmed = start(client, dep_id, levels=[1], requests_per_level=2, confirm_live_traffic=True)
    assert confirmed.status_code == 202
    run = wait_run(client, confirmed.json()["id"], {"done", "failed", "cancelled"})
    assert run["state"] == "done", run


def test_a_check_refuses_bad_settings_in_the_apis_error_shape(ready: Any) -> None:
    client, dep_id = ready
    for check, words in [
        ({"profile": "nope"}, "Profile must be one of"),
        ({"levels": [0]}, "whole numbers of users"),
        ({"levels": [1.5]}, "whole numbers of users"),
        ({"requests_per_level": 5000}, "At most 2,000 requests"),
        ({"max_seconds": 3}, "10 to 1,800 seconds"),
        ({"mode": "burst"}, "Mode must be one of"),
        ({"label": "x" * 10_000}, "The label is 10,000 characters long; at most 200 are allowed."),
    ]:
        resp = start(client, dep_id, **check)
        assert resp.status_code == 400 and words in resp.json()["detail"], (check, resp.text)
    assert client.get(f"/api/deployments/{dep_id}/capacity-checks").json() == []


def test_slo_changes_goodput_and_a_rate_sweep_runs(ready: Any) -> None:
    client, dep_id = ready
    strict_slo = {"ttft_seconds": 0.0001, "itl_seconds": 1}
    assert client.post(f"/api/deployments/{dep_id}/slo", json=strict_slo).status_code == 200
    strict = wait_run(client, start(client, dep_id, levels=[1], requests_per_level=4).json()["id"], {"done"})
    assert strict["results"][0]["goodput_rps"] == 0 and "TTFT p90 passed 0.0001 s already at 1" in strict["summary"]
    client.post(f"/api/deployments/{dep_id}/slo", json={"ttft_seconds": 5, "itl_seconds": 1})
    rate = wait_run(client, start(client, dep_id, mode="rate", levels=[4], requests_per_level=8).json()["id"], {"done"})
    assert rate["results"][0]["goodput_ratio"] == 1 and rate["results"][0]["requests"] == 8
    bad = client.post(f"/api/deployments/{dep_id}/slo", json={"ttft_seconds": 0, "itl_seconds": 1})
    assert bad.status_code == 400
