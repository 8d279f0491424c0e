"""The replica count changed in headless Chromium, as an admin would: the change form's preview (the GPUs each replica
takes, no downtime), the confirm, the deployment page saying what it does; screenshots of each step (kept in
HEARTH_SCREENSHOTS when set). The requests kept flowing meanwhile are tests/test_replica_scaling_live.py's."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from console.deployments.models import Replica
from tests.chromium import browser  # noqa: F401 - the module's Chromium
from tests.simworld import Served
from tests.test_browser_panels import shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def page(browser: Browser, served: Served) -> Iterator[Page]:  # noqa: F811 - the fixture
    context = browser.new_context(base_url=served.web, viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.goto("/login/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill("admin-password-1")
    page.get_by_role("button", name="Log in").click()
    yield page
    context.close()


def test_an_admin_adds_a_replica_then_removes_it_from_the_change_page(
    page: Page, served: Served, tmp_path: Path
) -> None:
    page.goto(f"/deployments/{served.dep_id}/change/")
    page.locator("#id_replica_count").fill("2")
    page.get_by_role("button", name="Preview the new plan").click()
    expect(page.locator("[data-field=scale]")).to_contain_text("From 1 to 2 replicas, in place")
    expect(page.locator("[data-field=downtime]")).to_have_text("none")
    expect(page.locator("[data-field=replica-gpus]")).to_have_text(
        "GPUs each replica takes: replica 1 GPU 0; replica 2 GPU 1."
    )
    shot(page, tmp_path, "replicas-preview-1-to-2")
    page.get_by_role("button", name="Confirm: 2 replicas").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("2 replicas")
    expect(page.locator("[data-field=state]")).to_have_text("ready")
    shot(page, tmp_path, "replicas-adding")
    expect(page.locator("[data-field=reason]")).to_have_text("Serving.", timeout=60_000)
    assert Replica.objects.filter(deployment_id=served.dep_id, running=True, ready_at__isnull=False).count() == 2

    page.goto(f"/deployments/{served.dep_id}/change/")
    expect(page.locator("#id_replica_count")).to_have_value("2")
    page.locator("#id_replica_count").fill("1")
    page.get_by_role("button", name="Preview the new plan").click()
    expect(page.locator("[data-field=scale]")).to_contain_text(
        "its requests in flight end (up to 120 s), then it stops"
    )
    shot(page, tmp_path, "replicas-preview-2-to-1")
    page.get_by_role("button", name="Confirm: 1 replica").click()
    expect(page.locator("[data-field=reason]")).to_have_text("Serving.", timeout=60_000)
    assert Replica.objects.filter(deployment_id=served.dep_id, stopped_at__isnull=True).count() == 1
    shot(page, tmp_path, "replicas-back-to-1")

    page.goto(f"/deployments/{served.dep_id}/change/")
    count = page.locator("#id_replica_count")  # the browser holds a count out of range back (the server refuses it too)
    expect(count).to_have_attribute("min", "1")
    expect(count).to_have_attribute("max", "8")
