"""A deployment going to sleep and waking, seen on the dashboard in headless Chromium (issue 29): its state as a
coloured word and since when, the GPU strip's memory falling to what an asleep engine keeps and coming back, and its
page's sleeps and wakes with their times. The simulator copies at 2 GB/s here (its own flag) so that going to sleep
and waking last a few seconds each, long enough for the dashboard's 2-s refresh to show them. Screenshots go to
the test's folder and to $HEARTH_SCREENSHOT_DIR when set (room-*.png)."""

import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from console.observability.models import PriceSetting
from tests.chromium import browser  # noqa: F401 - the module's Chromium
from tests.conftest import Workers, login
from tests.simworld import ensure_model, wait_state

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SLOW_COPY = ["--sleep-host-gb-per-s", "2"]  # 16 GB of Llama-3.1-8B weights: 8 s to sleep, 8 s to wake


def shot(page: Page, tmp_path: Path, name: str, part: Locator | None = None) -> None:
    """A screenshot of the whole page, or of the region ``part`` covers now (htmx replaces parts every 2 s, so the
    region, not the element), copied to $HEARTH_SCREENSHOT_DIR when set."""
    path = tmp_path / f"{name}.png"
    box = part.bounding_box() if part is not None else None
    if box is not None:
        page.screenshot(path=str(path), full_page=True, clip=box)
    else:
        page.screenshot(path=str(path), full_page=True)
    if target := os.environ.get("HEARTH_SCREENSHOT_DIR"):
        shutil.copy(path, Path(target) / path.name)


@pytest.fixture
def page(browser: Browser, web: str) -> Iterator[Page]:  # noqa: F811
    context = browser.new_context(base_url=web, viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    yield page
    context.close()


def test_a_deployment_goes_to_sleep_and_wakes_on_the_dashboard(
    page: Page, web: str, worker: Workers, admin_user: object, tmp_path: Path
) -> None:
    client = login(web)
    ensure_model()
    PriceSetting.objects.get_or_create(gpu_model="NVIDIA H100 80GB HBM3", defaults={"usd_per_gpu_hour": "3.00"})
    body = {
        "name": "napper",
        "model": "llama-8b",
        "engine": "simulator",
        "max_model_len": 8192,
        "idle_policy": "sleep",
        "idle_minutes": 600,
        "extra_args": SLOW_COPY,
    }
    dep = client.post("/api/deployments", json=body).json()
    assert client.post(f"/api/deployments/{dep['id']}/launch").status_code == 202
    assert wait_state(client, dep["id"], {"ready", "failed"})["state"] == "ready"
    key = client.post("/api/keys", json={"name": "napper"}).json()["key"]

    page.goto("/login/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill("admin-password-1")
    page.get_by_role("button", name="Log in").click()
    page.goto("/")
    row = page.locator("tr[data-deployment=napper]")
    state = row.locator("[data-field=state]")
    expect(state).to_have_text("ready")
    expect(state).to_have_class("state ready")
    gpu = page.locator(".gpu[data-gpu='0']")
    expect(gpu.locator("[data-field=gpu_memory]")).to_have_text("73.2 / 79.6 GiB")
    shot(page, tmp_path, "room-dashboard-awake")

    assert client.post(f"/api/deployments/{dep['id']}/sleep").status_code == 202
    expect(state).to_have_text("going to sleep", timeout=10_000)
    expect(state).to_have_class("state sleeping")
    shot(page, tmp_path, "room-dashboard-going-to-sleep")
    expect(state).to_have_text("asleep (level 1)", timeout=30_000)
    expect(state).to_have_class("state asleep")
    expect(row.locator("[data-field=put_aside]")).to_contain_text("asleep: the next request wakes it")
    expect(row.locator("[data-field=put_aside]")).to_contain_text("holds 1.4 GiB on GPU 0")
    expect(row.locator("[data-field=usd_per_hour]")).to_have_text("not charged")
    expect(page.locator("[data-field=scraper_warning]")).to_have_count(0)  # an asleep engine is not scraped
    expect(gpu.locator("[data-field=gpu_memory]")).to_have_text("1.4 / 79.6 GiB", timeout=10_000)
    expect(gpu.locator("[data-field=gpu_holders]")).to_have_text("napper · asleep (level 1) 1.4 GiB")
    shot(page, tmp_path, "room-dashboard-asleep")

    answers: list[str] = []
    sdk = openai.OpenAI(base_url=f"{web}/v1", api_key=key, max_retries=0, timeout=120)
    asking = threading.Thread(
        target=lambda: answers.append(
            sdk.chat.completions.create(model="napper", messages=[{"role": "user", "content": "Hi"}], max_tokens=8)
            .choices[0]
            .message.content
            or ""
        )
    )
    asking.start()  # held by the gateway while the engine wakes
    expect(state).to_have_text("waking", timeout=10_000)
    expect(state).to_have_class("state waking")
    expect(row.locator("[data-field=put_aside]")).to_contain_text("waking: requests for it are held until it serves")
    shot(page, tmp_path, "room-dashboard-waking")
    expect(state).to_have_text("ready", timeout=30_000)
    expect(gpu.locator("[data-field=gpu_memory]")).to_have_text("73.2 / 79.6 GiB", timeout=10_000)
    asking.join(60)
    assert answers and answers[0], answers
    shot(page, tmp_path, "room-dashboard-awake-again")

    row.get_by_role("link", name="napper").click()
    card = page.locator("[data-card=swaps]")
    expect(card.locator("[data-field=sleeps]")).to_have_text("slept 1 time (1 at level 1)", timeout=10_000)
    expect(card.locator("[data-field=wake_times]")).to_contain_text("wake p50 ")
    expect(card.locator("[data-field=wake_times]")).to_contain_text("over 1 wake")
    page.get_by_role("tab", name="Engine").click()  # the sleeps and wakes are in the Engine tab
    expect(page.locator("#events tr[data-event=sleep]")).to_contain_text("Put to sleep by an admin.")
    expect(page.locator("#events tr[data-event=wake]")).to_be_visible()
    shot(page, tmp_path, "room-deployment-after-a-wake")
    shot(page, tmp_path, "room-deployment-cards", page.locator("#panel .cards"))
    shot(page, tmp_path, "room-deployment-state", page.locator("#state"))
    client.post(f"/api/deployments/{dep['id']}/stop")
    wait_state(client, dep["id"], {"stopped"})
