"""Issue 33's small things in headless Chromium: the one-time key and the base URL copy with one click (the
Clipboard API where the browser gives it, else the whole secret selected, never a fragment), under the console's
Content-Security-Policy; the request log shows each request's ids and cost. Screenshots go to the test's folder."""

from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import Browser, BrowserContext, Page, expect

from console.access.keys import create_key
from console.observability.models import RequestLog
from tests.chromium import browser

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
__all__ = ["browser"]  # the fixture this module takes from test_browser_console
NO_CLIPBOARD = "Object.defineProperty(Navigator.prototype, 'clipboard', { get: () => undefined });"


def signed_in(context: BrowserContext) -> Page:
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None)
    page.errors = errors  # type: ignore[attr-defined]
    page.goto("/login/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill("admin-password-1")
    page.get_by_role("button", name="Log in").click()
    return page


@pytest.fixture
def context(browser: Browser, web: str, admin_user: object) -> Iterator[BrowserContext]:
    context = browser.new_context(base_url=web, viewport={"width": 1280, "height": 800})
    yield context
    context.close()


def new_key(page: Page) -> str:
    page.goto("/keys/")
    page.get_by_label("Name").fill("laptop")
    page.get_by_role("button", name="Create key").click()
    return page.locator("[data-field=new_key]").inner_text()


def test_the_key_and_the_base_url_copy_with_one_click(context: BrowserContext, web: str, tmp_path: Path) -> None:
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    page = signed_in(context)
    key = new_key(page)
    page.get_by_role("button", name="Copy key").click()
    expect(page.get_by_role("button", name="Copied")).to_be_visible()
    assert page.evaluate("() => navigator.clipboard.readText()") == key
    page.locator("button[data-copy=base-url]").click()
    assert page.evaluate("() => navigator.clipboard.readText()") == f"{web}/v1"
    page.screenshot(path=str(tmp_path / "key-copied.png"), full_page=True)
    page.get_by_role("link", name="laptop").click()
    page.get_by_role("button", name="Rotate key").click()  # the key's own page shows the new secret once
    rotated = page.locator("[data-field=new_key]").inner_text()
    page.get_by_role("button", name="Copy key").click()
    assert rotated != key and page.evaluate("() => navigator.clipboard.readText()") == rotated
    page.screenshot(path=str(tmp_path / "key-page-rotated.png"), full_page=True)
    assert page.errors == []  # type: ignore[attr-defined]


def test_without_the_clipboard_api_a_click_selects_the_whole_key(context: BrowserContext, tmp_path: Path) -> None:
    context.add_init_script(NO_CLIPBOARD)
    page = signed_in(context)
    key = new_key(page)
    assert "." in key and "-" in key  # what a double-click would have cut it at
    page.get_by_role("button", name="Copy key").click()
    expect(page.locator("button[data-copy=new-key]")).to_have_text("Press Ctrl+C")
    assert page.evaluate("() => getSelection().toString().trim()") == key
    page.screenshot(path=str(tmp_path / "key-selected.png"), full_page=True)
    assert page.errors == []  # type: ignore[attr-defined]


def test_the_request_log_shows_ids_and_costs(context: BrowserContext, admin_user: object, tmp_path: Path) -> None:
    key, _ = create_key("laptop", admin_user)
    fields = {"api_key": key, "model": "llama", "surface": "openai", "endpoint": "/v1/chat/completions"}
    at = timezone.now()
    RequestLog.objects.create(
        created_at=at,
        request_id="a" * 32,
        client_request_id="trace-42",
        status=200,
        stream=True,
        prompt_tokens=1200,
        completion_tokens=310,
        ttft_seconds=0.21,
        duration_seconds=4.2,
        cost_usd=Decimal("0.000254"),
        **fields,
    )
    RequestLog.objects.create(
        created_at=at - timedelta(seconds=1),
        request_id="b" * 32,
        status=400,
        duration_seconds=0.01,
        cost_usd=None,
        **fields,
    )
    page = signed_in(context)
    page.goto("/requests/")
    expect(page.locator("[data-field=request-id]")).to_have_count(2)
    expect(page.locator("[data-field=client-request-id]")).to_have_text("trace-42")
    expect(page.locator("[data-field=cost]")).to_have_text(["$0.00025", "—"])
    page.screenshot(path=str(tmp_path / "requests.png"), full_page=True)
    table = page.locator("table[data-table=requests]").bounding_box()
    assert table is not None and table["width"] <= 1280
    assert page.errors == []  # type: ignore[attr-defined]
