"""The panels with real processes: a web process without NVML planning on the worker's published GPUs (as compose
splits them), Hearth's /metrics (its bearer token, and every series the Grafana dashboard queries present in a
real scrape), the dashboard and the request log behind a served simulator deployment."""

import asyncio
import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families

from console.observability.models import PriceSetting
from gateway.metrics_endpoint import metrics_app
from tests.conftest import ROOT, Proc, Workers, free_port, login
from tests.simworld import Served, ensure_model, hearth_metrics

pytestmark = pytest.mark.django_db(transaction=True)
DASHBOARD = ROOT / "scripts" / "monitoring" / "grafana" / "dashboards" / "hearth.json"


@pytest.fixture
def web_without_nvml(live_env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    """A second web process whose own GPU inventory is NVML's (none on this machine), like compose's web."""
    port = free_port()
    env = {**live_env, "HEARTH_GPU_INVENTORY": "auto"}
    argv = [sys.executable, "-m", "uvicorn", "appliance.asgi:application", "--port", str(port), "--no-access-log"]
    proc = Proc(argv, env, tmp_path / "web.log")
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(base + "/login/", timeout=1)
            break
        except httpx.TransportError:
            assert proc.proc.poll() is None and time.monotonic() < deadline, proc.output()
            time.sleep(0.2)
    yield base
    proc.stop()


def test_a_web_without_nvml_shows_and_plans_on_the_workers_eight_gpus_with_their_age(
    web_without_nvml: str, worker: Workers, admin_user: object
) -> None:
    client = login(web_without_nvml)
    deadline = time.monotonic() + 20
    while True:  # the worker (simulated 8× H100) publishes every scrape interval
        header = re.search(r'data-field="inventory"[^>]*>(.*?)</span>', client.get("/deployments/").text, re.S)
        assert header, "no inventory in the header"
        text = re.sub(r"<[^>]+>", "", header.group(1))
        if "8×" in text or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert "8× NVIDIA H100 80GB HBM3 (79.6 GiB each), simulated (8xH100-80GB)" in text, worker.output()[-2000:]
    assert re.search(r"read by the worker on \S+ \(pid \d+\) \d+ s ago", text), text
    ensure_model()
    plan = client.post("/api/plan", json={"model": "llama-8b", "engine": "simulator", "max_model_len": 8192}).json()
    assert plan["inventory"].startswith("8× NVIDIA H100") or "held by running deployments" in plan["reasons"][0]
    assert plan["fits"] and plan["tensor_parallel_size"] == 1
    assert re.fullmatch(r"read by the worker on \S+ \(pid \d+\) \d+ s ago", plan["inventory_origin"])


def scrape_names(text: str) -> set[str]:
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def dashboard_names() -> set[str]:
    exprs = [t["expr"] for panel in json.loads(DASHBOARD.read_text())["panels"] for t in panel["targets"]]
    return {name for expr in exprs for name in re.findall(r"\bhearth_[a-z0-9_]+", expr)}


def test_every_series_the_grafana_dashboard_queries_is_in_a_real_scrape_of_hearths_metrics(served: Served) -> None:
    stream = served.openai().chat.completions.create(
        model="llama", messages=[{"role": "user", "content": "Hello there"}], max_tokens=24, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    PriceSetting.objects.get_or_create(gpu_model="NVIDIA H100 80GB HBM3", defaults={"usd_per_gpu_hour": "3.00"})
    wanted = dashboard_names()
    assert len(wanted) >= 10
    deadline = time.monotonic() + 20
    while not wanted <= (names := scrape_names(hearth_metrics(served.web))):
        assert time.monotonic() < deadline, f"queried but not exported: {sorted(wanted - names)}"
        time.sleep(0.5)
    text = hearth_metrics(served.web)
    assert re.search(r'hearth_engine_requests_running\{deployment="llama",replica="[^"]+"\}', text)
    assert 'hearth_gateway_time_to_first_token_seconds_bucket{le="1800.0",model="llama"}' in text


def call_metrics(headers: list[tuple[bytes, bytes]]) -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request"}

    async def send(message: Any) -> None:
        sent.append(dict(message))

    asyncio.run(metrics_app({"type": "http", "path": "/metrics", "headers": headers}, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


@override_settings(HEARTH_METRICS_TOKEN="metrics-token-for-tests")
def test_metrics_want_the_bearer_token_when_one_is_set() -> None:
    assert call_metrics([])[0] == 401
    assert call_metrics([(b"authorization", b"Bearer wrong")])[0] == 401
    status, body = call_metrics([(b"authorization", b"Bearer metrics-token-for-tests")])
    assert status == 200 and b"# HELP hearth_engine_scrape_age_seconds" in body
