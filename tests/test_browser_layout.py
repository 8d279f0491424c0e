"""Issue 33's layout in headless Chromium at 1280×800: a deployment's first screen holds what an operator checks
first (its state, the live cards, latency and outcomes); the rest is in tabs whose choice survives a reload and
the page's htmx refreshes; the API keys table fits 1280 px without a horizontal scroll bar; the create form shows
its plan before its submit button. Screenshots go to the test's folder (and HEARTH_SCREENSHOTS, when set)."""

from pathlib import Path

import openai
import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from console.access.keys import create_key
from console.observability.models import PriceSetting
from tests.chromium import browser  # noqa: F401 - the module's Chromium
from tests.conftest import Workers, login
from tests.simworld import deploy, wait_state
from tests.test_browser_panels import keep

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
WIDTH, HEIGHT = 1280, 800
NO_SIDEWAYS = "() => document.documentElement.scrollWidth <= document.documentElement.clientWidth"


def signed_in(browser: Browser, web: str) -> Page:  # noqa: F811 - the fixture
    page = browser.new_context(base_url=web, viewport={"width": WIDTH, "height": HEIGHT}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.errors = errors  # type: ignore[attr-defined]
    page.goto("/login/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill("admin-password-1")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{web}/")
    return page


def shot(page: Page, tmp_path: Path, name: str, full_page: bool = False) -> None:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    keep(path)


def on_first_screen(locator: Locator) -> None:
    """``locator`` is shown whole within the first 1280×800 screen, with nothing scrolled. Playwright's own
    assertion, retried: a panel htmx swaps in between two reads had no bounding box (a loaded full run saw it)."""
    expect(locator).to_be_visible()
    expect(locator).to_be_in_viewport(ratio=1)


def test_a_deployment_leads_with_state_cards_latency_and_outcomes_and_keeps_its_tab(
    browser: Browser,  # noqa: F811 - the fixture
    web: str,
    worker: Workers,
    admin_user: object,
    tmp_path: Path,
) -> None:
    client = login(web)
    PriceSetting.objects.get_or_create(gpu_model="NVIDIA H100 80GB HBM3", defaults={"usd_per_gpu_hour": "3.00"})
    dep_id = deploy(web, client, "layout")
    assert wait_state(client, dep_id, {"ready", "failed"})["state"] == "ready"
    key = client.post("/api/keys", json={"name": "layout"}).json()["key"]
    llm = openai.OpenAI(base_url=f"{web}/v1", api_key=key, max_retries=0, timeout=60)
    for n in range(3):  # streamed: the users' TTFT is a streamed request's
        asked = [{"role": "user", "content": f"Hi {n}"}]
        for _ in llm.chat.completions.create(model="layout", messages=asked, max_tokens=20, stream=True):
            pass
    page = signed_in(browser, web)
    try:
        page.goto(f"/deployments/{dep_id}/")
        expect(page.locator("[data-field=user_ttft_p50]")).not_to_have_text("no data", timeout=20_000)
        expect(page.locator("[data-field=finished]")).to_have_text("3 finished", timeout=20_000)
        page.evaluate("() => document.fonts.ready")
        shot(page, tmp_path, "layout-deployment-first-screen")
        for part in ("[data-field=state]", "#panel .cards", "table.latency", "[data-table=outcomes]"):
            on_first_screen(page.locator(part))

        tabs = page.get_by_role("tablist", name="More about this deployment")
        expect(tabs.get_by_role("tab", name="History")).to_have_attribute("aria-selected", "true")  # by default
        expect(page.locator("#charts canvas").first).to_be_visible(timeout=10_000)
        expect(page.locator("[data-table=scrapes]")).to_be_hidden()
        tabs.get_by_role("tab", name="Engine").click()
        expect(page.locator("[data-table=scrapes]")).to_be_visible()
        expect(page.locator("#charts")).to_be_hidden()
        assert page.url.endswith("#engine")
        page.wait_for_timeout(4500)  # two refreshes of the live panel and the state (every 2 s): the tab stays
        expect(page.locator("[data-table=scrapes]")).to_be_visible()
        expect(tabs.get_by_role("tab", name="Engine")).to_have_attribute("aria-selected", "true")
        shot(page, tmp_path, "layout-deployment-engine-tab", full_page=True)

        page.reload()
        expect(tabs.get_by_role("tab", name="Engine")).to_have_attribute("aria-selected", "true")
        expect(page.locator("[data-table=scrapes]")).to_be_visible()
        tabs.get_by_role("tab", name="Goodput and usage").click()
        page.get_by_label("TTFT target (s)").fill("0.75")  # typed, not saved: the refreshes leave it be
        page.wait_for_timeout(4500)
        expect(page.get_by_label("TTFT target (s)")).to_have_value("0.75")
        expect(page.locator("[data-table=keys]")).to_be_visible()
        tabs.get_by_role("tab", name="Log").click()
        expect(page.locator("#logs pre").first).to_be_visible()
        page.goto(f"/deployments/{dep_id}/")  # no fragment: the tab chosen last on this browser
        expect(tabs.get_by_role("tab", name="Log")).to_have_attribute("aria-selected", "true")
        tabs.get_by_role("tab", name="History").click()  # charts drawn in a hidden tab take the full width shown
        page.wait_for_function("() => document.querySelector('#charts canvas')?.clientWidth > 400", timeout=10_000)
        shot(page, tmp_path, "layout-deployment-history-tab", full_page=True)
        page.emulate_media(color_scheme="dark")
        shot(page, tmp_path, "layout-deployment-dark")
        for path in ("/", "/deployments/", f"/deployments/{dep_id}/change/", f"/deployments/{dep_id}/capacity/"):
            page.goto(path)
            assert page.evaluate(NO_SIDEWAYS), f"{path} scrolls sideways at 1280 px"
        page.emulate_media(color_scheme="light")
        page.goto(f"/deployments/{dep_id}/change/")
        page.get_by_role("button", name="Preview the new plan").click()
        confirm = page.get_by_role("button", name="Confirm: save these settings")
        expect(confirm).to_be_visible()
        plan, button = page.locator("#plan").bounding_box(), confirm.bounding_box()
        assert plan is not None and button is not None and plan["y"] + plan["height"] <= button["y"], (plan, button)
        fields = page.locator("form.plan-form > .fields").bounding_box()
        assert fields is not None and plan["x"] >= fields["x"] + fields["width"], (plan, fields)  # beside the fields
        shot(page, tmp_path, "layout-change-form", full_page=True)
        assert page.errors == []  # type: ignore[attr-defined]
    finally:
        page.context.close()
        client.post(f"/api/deployments/{dep_id}/stop")
        wait_state(client, dep_id, {"stopped", "failed"})


def test_the_keys_table_fits_1280_px_and_the_plan_comes_before_create(
    browser: Browser,  # noqa: F811 - the fixture
    web: str,
    admin_user: object,
    tmp_path: Path,
) -> None:
    from tests.simworld import ensure_model

    for name in ("laptop", "ci runner for the nightly evaluation of every model", "a" * 100):
        create_key(name, admin_user)
    ensure_model()
    page = signed_in(browser, web)
    try:
        page.goto("/keys/")
        header = page.locator("table thead th").first
        assert page.evaluate(NO_SIDEWAYS), "the keys page scrolls sideways at 1280 px"
        table = page.locator("main table").first.bounding_box()
        assert table is not None and table["x"] + table["width"] <= WIDTH, table
        shot(page, tmp_path, "layout-keys", full_page=True)
        assert header.evaluate("(th) => getComputedStyle(th).position") == "sticky"
        for path in ("/requests/", "/usage/", "/costs/", "/audit/", "/members/", "/models/", "/weights/"):
            page.goto(path)
            assert page.evaluate(NO_SIDEWAYS), f"{path} scrolls sideways at 1280 px"

        page.goto("/deployments/")
        page.locator("#id_name").fill("planned")
        page.locator("#id_model").select_option(label="llama-8b")
        page.locator("#id_engine").select_option("simulator")
        page.locator("#id_max_model_len").fill("8192")
        page.locator("#id_max_model_len").dispatch_event("change")
        expect(page.locator("#plan")).to_contain_text("Fits.", timeout=10_000)
        page.wait_for_function("() => !document.querySelector('.htmx-request')")  # the plan swapped in, settled
        shot(page, tmp_path, "layout-create-form", full_page=True)
        plan = page.locator("#plan").bounding_box()
        create = page.get_by_role("button", name="Create deployment").bounding_box()
        assert plan is not None and create is not None
        assert plan["y"] < create["y"] or plan["x"] > create["x"] + create["width"], (plan, create)
        assert page.errors == []  # type: ignore[attr-defined]
    finally:
        page.context.close()
