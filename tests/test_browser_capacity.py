"""The capacity check in headless Chromium: start a check from the console, watch its progress, cancel it,
complete two more (the shared prefix off, then on) and compare them. Screenshots go to the test's folder,
and to $HEARTH_SCREENSHOT_DIR when set (capacity-*.png)."""

import os
import re
import shutil
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.chromium import browser  # noqa: F401 - the module's Chromium
from tests.conftest import Workers, login
from tests.simworld import deploy, wait_state

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
FAST = ["--decode-ms-per-token", "4", "--decode-ms-per-seq", "0.2"]


def shot(page: Page, folder: Path, name: str) -> None:
    path = folder / f"capacity-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if target := os.environ.get("HEARTH_SCREENSHOT_DIR"):
        shutil.copy(path, Path(target) / path.name)


def start_check(page: Page, levels: str, requests: str, label: str, shared: bool = False) -> None:
    page.get_by_role("link", name="Capacity check…").click()
    page.locator("#id_check-profile").select_option("chat")
    page.locator("#id_check-levels").fill(levels)
    page.locator("#id_check-requests_per_level").fill(requests)
    page.locator("#id_check-max_seconds").fill("120")
    page.locator("#id_check-label").fill(label)
    page.locator("#id_check-shared_prefix").set_checked(shared)
    page.get_by_role("button", name="Start the check").click()
    expect(page.get_by_role("heading", name="Capacity run")).to_be_visible()


def test_start_watch_cancel_complete_and_compare_checks_from_the_console(
    browser: Browser,  # noqa: F811 - the fixture
    web: str,
    worker: Workers,
    admin_user: object,
    tmp_path: Path,
) -> None:
    client = login(web)
    dep_id = deploy(web, client, "browse", FAST)
    assert wait_state(client, dep_id, {"ready", "failed"})["state"] == "ready"
    page = browser.new_context(base_url=web, viewport={"width": 1400, "height": 900}).new_page()
    page.goto("/login/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill("admin-password-1")
    page.get_by_role("button", name="Log in").click()

    page.goto(f"/deployments/{dep_id}/")
    start_check(page, "2, 4", "300", "to cancel")
    expect(page.locator("[data-field=run-state]")).to_have_text("running", timeout=30_000)
    expect(page.locator("[data-field=progress-text]")).to_contain_text("requests answered", timeout=30_000)
    expect(page.locator("[data-field=progress]")).not_to_have_attribute("value", "0.0", timeout=30_000)
    shot(page, tmp_path, "progress")
    page.get_by_role("button", name="Cancel the check").click()
    expect(page.locator("[data-field=run-state]")).to_have_text("cancelled", timeout=30_000)
    shot(page, tmp_path, "cancelled")

    page.goto(f"/deployments/{dep_id}/")
    start_check(page, "1, 4, 8", "16", "no shared prefix")
    expect(page.locator("[data-field=run-state]")).to_have_text("done", timeout=120_000)
    expect(page.locator("[data-field=summary]")).to_contain_text("plan: ")
    expect(page.locator("table.results tr[data-level]")).to_have_count(3)
    expect(page.locator("#charts figure")).to_have_count(6)
    expect(page.locator("#charts canvas").first).to_be_visible()
    shot(page, tmp_path, "done")

    page.goto(f"/deployments/{dep_id}/")
    start_check(page, "1, 4, 8", "16", "shared prefix", shared=True)
    expect(page.locator("[data-field=run-state]")).to_have_text("done", timeout=120_000)

    page.goto(f"/deployments/{dep_id}/capacity/")
    rows = page.locator("#runs tr[data-run]")
    expect(rows).to_have_count(3)
    shot(page, tmp_path, "runs")
    page.get_by_role("button", name="Compare A and B").click()  # B: the newest, A: the one before
    expect(page.locator("h1")).to_have_text(re.compile(r"^Run \d+ and run \d+"))
    differences = page.locator("[data-field=differences]")
    expect(differences).to_contain_text("shared prefix")
    expect(page.locator("[data-field=comparison]")).to_contain_text("prefix-cache hits")
    expect(page.locator("#charts figure")).to_have_count(6)
    shot(page, tmp_path, "compare")
    client.post(f"/api/deployments/{dep_id}/stop")
