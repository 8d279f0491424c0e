"""The Alerts page and the header's alert list in headless Chromium, from the session's real web server: a firing
alert listed in every page's header, the page's tables (firing, rules, a failed delivery), an admin tuning a rule
through its form, a test sent to the destinations, the webhook shown as scheme and host only, and nothing the
Content-Security-Policy refuses.
Screenshots go to the test's folder (and HEARTH_SCREENSHOTS, when set)."""

import time
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from console.alerts import delivery
from console.alerts.evaluate import evaluate
from console.alerts.models import AlertRule, Destination
from console.alerts.rules import rules
from tests.alert_receivers import Webhook, webhook
from tests.chromium import browser  # noqa: F401 - the module's Chromium
from tests.test_browser_panels import keep

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
__all__ = ["webhook"]
SECRET = "T000/B000/XXXXsecretXXXX"


def test_the_header_lists_a_firing_alert_and_the_page_shows_rules_failures_and_no_secret(
    browser: Browser,  # noqa: F811 - the fixture
    web: str,
    webhook: Webhook,
    django_user_model: Any,
    tmp_path: Path,
) -> None:
    django_user_model.objects.create_superuser("admin", "", "admin-password-1")
    Destination.objects.update_or_create(  # the web server may have made the row (Destination.current) already
        pk=1, defaults={"webhook_url": f"{webhook.url}/hooks/{SECRET}", "email_to": "ops@example.com"}
    )
    rules()
    AlertRule.objects.exclude(kind="weights_disk").update(enabled=False)
    AlertRule.objects.filter(kind="weights_disk").update(threshold=1e12)  # no disk has that free: it fires
    webhook.failures = [502]
    made = evaluate(time.time())
    for delivery_id in made:
        delivery.attempt(delivery_id)  # the webhook's first try fails (502); the email's, with no SMTP server too
    page = browser.new_context(base_url=web, viewport={"width": 1280, "height": 800}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("requestfailed", lambda request: errors.append(f"{request.url}: {request.failure}"))
    try:
        page.goto("/login/")
        page.get_by_label("Username").fill("admin")
        page.get_by_label("Password").fill("admin-password-1")
        page.get_by_role("button", name="Log in").click()
        listed = page.locator("[data-field=alerts]")
        expect(listed).to_contain_text("1 alert firing")
        expect(listed.locator("li[data-alert=weights_disk]")).to_contain_text("GiB free, under 1e+12 GiB")
        page.screenshot(path=str(tmp_path / "alerts-header.png"))
        listed.get_by_role("link", name="1 alert firing").click()
        expect(page.get_by_role("heading", name="Alerts", exact=True)).to_be_visible()
        expect(page.locator("table[data-table=firing] tr[data-alert=weights_disk]")).to_have_count(1)
        failures = page.locator("table[data-table=failures]")
        expect(failures).to_contain_text(f"{webhook.url}/… answered 502")
        expect(page.locator("[data-field=webhook]")).to_contain_text(f"{webhook.url}/…")
        row = page.locator("tr[data-rule=kv_cache_high]")
        row.locator("input[name='kv_cache_high-threshold']").fill("0.75")
        row.get_by_role("button", name="Save").click()
        expect(page.get_by_text("Rule “KV cache nearly full” saved.")).to_be_visible()
        assert AlertRule.objects.get(kind="kv_cache_high").threshold == 0.75
        shot = tmp_path / "alerts.png"
        page.screenshot(path=str(shot), full_page=True)
        posts = len(webhook.posts)
        page.get_by_role("button", name="Send a test").click()
        expect(page.get_by_text(f"Test sent by webhook ({webhook.url}/…): it was accepted.")).to_be_visible()
        expect(page.get_by_text("The test by email (ops@example.com) failed at the SMTP server")).to_be_visible()
        assert webhook.bodies()[posts:][0]["event"] == "test"
        page.screenshot(path=str(tmp_path / "alerts-test.png"))
        keep(shot)
        keep(tmp_path / "alerts-header.png")
        keep(tmp_path / "alerts-test.png")
        assert SECRET not in page.content() and "hooks" not in page.content()
        assert errors == []
    finally:
        page.context.close()
