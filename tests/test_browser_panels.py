"""The dashboard and a deployment's panels in headless Chromium while the simulator is under load: numbers that
move between refreshes, charts with points, the simulated GPU strip, then the engine's /metrics stalls (the
process is stopped with SIGSTOP) and the staleness warning appears. Screenshots go to the test's folder, and are
copied to the folder HEARTH_SCREENSHOTS names when it is set (keep, for whoever reviews the pages)."""

import os
import shutil
import signal
import threading
import time
from pathlib import Path

import openai
import pytest
from playwright.sync_api import Browser, Page, expect

from console.deployments.models import Replica
from console.observability.models import PriceSetting
from tests.chromium import browser  # noqa: F401 - the module's Chromium
from tests.conftest import Workers, login
from tests.gatewayworld import within
from tests.simworld import ensure_model, wait_state

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SCREENSHOTS = os.environ.get("HEARTH_SCREENSHOTS", "")  # a folder to copy each screenshot into; none when unset


def keep(path: Path) -> None:
    """A copy of the screenshot at ``path`` in HEARTH_SCREENSHOTS, when that is set."""
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(SCREENSHOTS) / path.name)


PROMPT = "Tell me a long story about a lighthouse keeper and the sea. " * 60  # ~700 tokens: KV use shows


class Load:
    """``streams`` clients each streaming chat completions back to back until stopped."""

    def __init__(self, base: str, key: str, streams: int) -> None:
        self.stop = threading.Event()
        self.client = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=30)
        self.threads: list[threading.Thread] = []
        self.add(streams)

    def add(self, streams: int) -> None:
        for n in range(len(self.threads), len(self.threads) + streams):
            self.threads.append(threading.Thread(target=self._run, args=(n,), daemon=True))
            self.threads[-1].start()

    def _run(self, n: int) -> None:
        while not self.stop.is_set():
            try:
                for _ in self.client.chat.completions.create(
                    model="busy",
                    messages=[{"role": "user", "content": f"Story {n}: " + PROMPT}],
                    max_tokens=160,
                    stream=True,
                ):
                    pass
            except openai.OpenAIError:
                time.sleep(0.2)

    def end(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=40)


def shot(page: Page, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    keep(path)


def test_panels_move_under_load_chart_and_gpu_strip_then_a_stalled_engine_turns_stale(
    browser: Browser,  # noqa: F811 - the fixture
    web: str,
    worker: Workers,
    admin_user: object,
    tmp_path: Path,
) -> None:
    client = login(web)
    ensure_model()
    PriceSetting.objects.get_or_create(gpu_model="NVIDIA H100 80GB HBM3", defaults={"usd_per_gpu_hour": "3.00"})
    resp = client.post(
        "/api/deployments",
        json={
            "name": "busy",
            "model": "llama-8b",
            "engine": "simulator",
            "max_model_len": 8192,
            "max_num_seqs": 8,
            "extra_args": ["--kv-cache-tokens", "20000"],
        },
    )
    assert resp.status_code == 201, resp.text
    dep_id = resp.json()["id"]
    assert client.post(f"/api/deployments/{dep_id}/launch").status_code == 202
    assert wait_state(client, dep_id, {"ready", "failed"})["state"] == "ready"
    key = client.post("/api/keys", json={"name": "load"}).json()["key"]
    load = Load(web, key, streams=2)
    page = browser.new_context(base_url=web, viewport={"width": 1440, "height": 900}).new_page()
    replica = Replica.objects.filter(deployment_id=dep_id, running=True).get()
    try:
        page.goto("/login/")
        page.get_by_label("Username").fill("admin")
        page.get_by_label("Password").fill("admin-password-1")
        page.get_by_role("button", name="Log in").click()
        row = page.locator("tr[data-deployment=busy]")
        expect(row.locator("[data-field=kv_cache_usage]")).not_to_have_text("no data", timeout=20_000)
        expect(row.locator("[data-field=queue]")).to_contain_text("/", timeout=10_000)
        kv, queue = row.locator("[data-field=kv_cache_usage]"), row.locator("[data-field=queue]")
        before = (kv.inner_text(), queue.inner_text())
        load.add(12)  # the load grows: more running, some waiting, more of the KV cache held
        within(20, lambda: (kv.inner_text(), queue.inner_text()) != before, every=0.5)  # refreshed every 2 s
        expect(page.locator("[data-field=gpu_simulated]")).to_be_visible()
        gpu0 = page.locator(".gpu[data-gpu='0']")
        expect(gpu0.locator("[data-field=gpu_util]")).not_to_have_text("0 %", timeout=10_000)
        expect(gpu0.locator("[data-field=gpu_power]")).to_contain_text("W")
        expect(row.locator("[data-field=usd_per_hour]")).to_have_text("$3.00")
        shot(page, tmp_path, "dashboard-under-load")

        row.get_by_role("link", name="busy").click()
        expect(page.locator("[data-field=kv_cache_usage]")).not_to_have_text("no data", timeout=10_000)
        expect(page.locator("[data-field=user_ttft_p50]")).not_to_have_text("no data", timeout=15_000)
        chart = page.locator("[data-chart=kv]")
        expect(chart.locator("canvas")).to_be_visible(timeout=10_000)
        # functions, not expressions: Playwright evaluates an expression with eval, which the console's CSP refuses
        points = "() => Number(document.querySelector('[data-chart=kv]').dataset.points)"
        page.wait_for_function(f"{points} > 3", timeout=20_000)
        first = int(chart.get_attribute("data-points") or 0)
        page.wait_for_function(f"{points} > {first}", timeout=15_000)  # new points arrive without a reload
        shot(page, tmp_path, "deployment-under-load")

        os.kill(int(replica.handle), signal.SIGSTOP)  # the engine stops answering, /metrics included
        expect(page.locator("[data-field=stale]")).to_be_visible(timeout=20_000)
        expect(page.locator("[data-field=failing_replica]")).to_contain_text("has not answered")
        shot(page, tmp_path, "deployment-stale")
        page.goto("/")
        expect(page.locator("tr[data-deployment=busy] [data-field=age]")).to_contain_text("stale")
        shot(page, tmp_path, "dashboard-stale")
    finally:
        os.kill(int(replica.handle), signal.SIGCONT)
        load.end()
        page.context.close()
        client.post(f"/api/deployments/{dep_id}/stop")
        wait_state(client, dep_id, {"stopped", "failed"})
