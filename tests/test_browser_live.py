"""Live means live (issue 33's first acceptance point), in headless Chromium: with 30 long streams in flight on a
slow simulator deployment and none of them ended, the dashboard and the deployment page show the users' TTFT p50
and "30 running" (the requests the gateway relays now, from its notes in Redis), not "no requests". Screenshots go
to the test's folder (and HEARTH_SCREENSHOTS, when set: tests/test_browser_panels.shot)."""

import re
import threading
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, expect

from tests.chromium import browser
from tests.conftest import Workers, login
from tests.gatewayworld import within
from tests.simworld import deploy, wait_state
from tests.test_browser_panels import shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
__all__ = ["browser"]  # the fixture, shared with the other panels' browser test
STREAMS = 30
# 300 ms a decode step and answers of 1,000 tokens: every stream runs ~5 minutes, far past the test's checks
SLOW = ["--decode-ms-per-token", "300", "--natural-output-tokens", "4000", "--kv-cache-tokens", "200000"]
MILLISECONDS_OR_SECONDS = re.compile(r"^\d[\d.,]* (ms|s)$")


class Streams:
    """``count`` streamed chats held open, each in a thread, until ``close``; ``first_bytes`` counts those whose
    first content chunk came."""

    def __init__(self, base: str, key: str, count: int) -> None:
        self.stop, self.lock, self.first_bytes = threading.Event(), threading.Lock(), 0
        self.client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        self.threads = [threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(count)]
        for t in self.threads:
            t.start()

    def _run(self, n: int) -> None:
        body = {"model": "slow", "stream": True, "max_tokens": 1000, "messages": [{"role": "user", "content": f"{n}"}]}
        first = True
        try:
            with self.client.stream("POST", "/v1/chat/completions", json=body) as answer:
                for line in answer.iter_lines():
                    if self.stop.is_set():
                        return  # leaving closes the stream: the gateway aborts the engine's request
                    if first and '"content"' in line:
                        first = False
                        with self.lock:
                            self.first_bytes += 1
        except httpx.HTTPError:
            return

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)
        self.client.close()


def test_thirty_streams_in_flight_show_user_ttft_and_30_running_on_the_dashboard_and_deployment_page(
    browser: Browser, web: str, worker: Workers, admin_user: object, tmp_path: Path
) -> None:
    client = login(web)
    dep_id = deploy(web, client, "slow", SLOW)
    assert wait_state(client, dep_id, {"ready", "failed"})["state"] == "ready"
    key = client.post("/api/keys", json={"name": "live"}).json()["key"]
    streams = Streams(web, key, STREAMS)
    page = browser.new_context(base_url=web, viewport={"width": 1440, "height": 900}).new_page()
    try:
        page.goto("/login/")
        page.get_by_label("Username").fill("admin")
        page.get_by_label("Password").fill("admin-password-1")
        page.get_by_role("button", name="Log in").click()
        within(60, lambda: streams.first_bytes == STREAMS, every=0.2)  # every stream past its first byte
        row = page.locator("tr[data-deployment=slow]")
        expect(row.locator("[data-field=gateway_running]")).to_have_text(f"{STREAMS} running", timeout=60_000)
        expect(row.locator("[data-field=user_ttft_q]")).to_contain_text(" / ", timeout=20_000)  # p50 / p99
        p50 = row.locator("[data-field=user_ttft_q]").inner_text().split(" / ")[0]
        assert MILLISECONDS_OR_SECONDS.match(p50), p50
        assert all(t.is_alive() for t in streams.threads)  # none has ended
        expect(row.locator("[data-field=finished]")).to_have_text("0 finished")
        expect(row.locator("[data-field=error_rate]")).to_have_text("none finished")
        shot(page, tmp_path, "dashboard-30-running")

        row.get_by_role("link", name="slow").click()
        expect(page.locator("[data-field=gateway_running]")).to_have_text(f"{STREAMS} running", timeout=20_000)
        expect(page.locator("[data-field=user_ttft_p50]")).to_have_text(MILLISECONDS_OR_SECONDS, timeout=20_000)
        expect(page.locator("[data-field=user_ttft_from]")).to_contain_text(f"({STREAMS} still running)")
        expect(page.locator("[data-field=finished]")).to_have_text("0 finished")
        expect(page.locator("[data-field=user_itl_p50]")).to_have_text(MILLISECONDS_OR_SECONDS, timeout=20_000)
        shot(page, tmp_path, "deployment-30-running")
    finally:
        streams.close()
        page.context.close()
        client.post(f"/api/deployments/{dep_id}/stop")
        wait_state(client, dep_id, {"stopped", "failed"})
