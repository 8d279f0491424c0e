"""Every console page in headless Chromium at 1280×800 and 1920×1080, light and dark (the browser's
prefers-color-scheme, which static/hearth.css follows), with no page error and no console error: one full-page
screenshot of each in the test's folder, copied to HEARTH_SCREENSHOTS when it is set (tests/test_browser_panels.keep),
for whoever looks at the pages. The pages hold something: a running simulator deployment that has served requests,
a key, a member, two capacity runs and a tuning. Every page URL the console's URL confs name is visited; the others
(actions, fragments htmx polls, downloads) are listed apart, so a new page cannot be missed. Then the charts'
shared parts (static/hearth-chart-kit.js, static/hearth-charts.js): the range remembered, the theme followed, the
hover read-out."""

import json
import os
import time
from datetime import timedelta
from pathlib import Path

import openai
import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from playwright.sync_api import Browser, ConsoleMessage, Page, Route, expect

from console.batches.models import Batch
from console.capacity.models import Tuning
from console.deployments.models import Deployment
from console.observability.models import PriceSetting
from tests.chromium import browser  # noqa: F401 - the module's Chromium
from tests.conftest import MEMBER_PASSWORD, Workers, login
from tests.simworld import deploy, wait_state
from tests.test_browser_chart_shapes import a_run, log_in, series
from tests.test_browser_panels import keep
from tests.test_console_display import a_deployment

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SIZES = ((1280, 800), (1920, 1080))
SCHEMES = ("light", "dark")
# URL names that are no page of their own: POST actions, htmx fragments, JSON, downloads, redirects.
NOT_PAGES = {
    "access:logout", "access:oidc_start", "access:oidc_callback", "access:rotate", "access:revoke",
    "audit:export_csv", "audit:export_json", "usage:export_csv", "observability:requests_csv", "preflight:bundle",
    "capacity:export-json", "capacity:export-csv", "deployments:export-file", "capacity:slo", "capacity:tune",
    "capacity:run-status", "capacity:cancel", "capacity:tuning-status", "capacity:tuning-cancel",
    "capacity:tuning-apply", "catalog:delete", "catalog:demo-plan", "deployments:plan", "deployments:status",
    "deployments:logs", "deployments:launch", "deployments:stop", "deployments:sleep", "deployments:wake",
    "deployments:remedy", "deployments:delete", "deployments:add-endpoint", "deployments:remove-endpoint",
    "observability:dashboard", "observability:dashboard_live", "observability:panel", "observability:series",
    "observability:slo", "preflight:checks", "weights:free", "alerts:rule", "alerts:destination", "alerts:test",
    "batches:table", "batches:progress", "batches:cancel", "batches:file", "batches:guessed", "access:member_password",
}  # fmt: skip
# Chromium logs a 404 answer as a console error; the 404 page is that answer on purpose.
EXPECTED_CONSOLE = {"not-found": "404"}


def url_names() -> set[str]:
    """Every named URL of the console's URL confs (the JSON API's aside: it is no page)."""
    names: set[str] = set()

    def walk(patterns: list[URLPattern | URLResolver], ns: str) -> None:
        for p in patterns:
            if isinstance(p, URLResolver):
                if not str(p.pattern).startswith("api/"):
                    walk(p.url_patterns, f"{p.namespace}:" if p.namespace else ns)
            elif p.name:
                names.add(ns + p.name)

    walk(get_resolver().url_patterns, "")
    return names


def pages(ids: dict[str, int | str]) -> dict[str, tuple[str, str]]:
    """Screenshot name → (URL name, path) for every console page, given the ids of what the test made."""
    dep, key, member, run_a, run_b, tuning, batch = (
        ids[k] for k in ("dep", "key", "member", "run_a", "run_b", "tuning", "batch")
    )  # fmt: skip
    return {
        "dashboard": ("home", "/"),
        "deployments": ("deployments:list", "/deployments/"),
        "deployment": ("deployments:detail", f"/deployments/{dep}/"),
        "deployment-change": ("deployments:change", f"/deployments/{dep}/change/"),
        "deployment-export": ("deployments:export", f"/deployments/{dep}/export/"),
        "deployment-external": ("deployments:external", "/deployments/external/"),
        "capacity": ("capacity:deployment", f"/deployments/{dep}/capacity/"),
        "capacity-run": ("capacity:run", f"/capacity/runs/{run_a}/"),
        "capacity-compare": ("capacity:compare", f"/capacity/compare/?a={run_a}&b={run_b}"),
        "capacity-tuning": ("capacity:tuning", f"/capacity/tunings/{tuning}/"),
        "models": ("catalog:models", "/models/"),
        "weights": ("weights:cache", "/weights/"),
        "keys": ("access:keys", "/keys/"),
        "key": ("access:key", f"/keys/{key}/"),
        "requests": ("observability:requests", "/requests/"),
        "costs": ("observability:costs", "/costs/"),
        "metric-mappings": ("observability:mappings", "/metric-mappings/"),
        "usage": ("usage:page", "/usage/"),
        "batches": ("batches:list", "/batch-jobs/"),
        "batch": ("batches:detail", f"/batch-jobs/{batch}/"),
        "doctor": ("preflight:page", "/doctor/"),
        "settings": ("preflight:settings", "/settings/"),
        "members": ("access:members", "/members/"),
        "member": ("access:member", f"/members/{member}/"),
        "audit": ("audit:log", "/audit/"),
        "alerts": ("alerts:page", "/alerts/"),
        "password": ("access:password", "/password/"),
        "not-found": ("", "/no-such-page/"),
    }


def settled(page: Page) -> None:
    """The page's first htmx loads answered and its charts drawn (a function: the CSP refuses eval)."""
    page.wait_for_function("() => !document.querySelector('.htmx-request')", timeout=30_000)
    page.wait_for_function(
        "() => !document.querySelector('#charts') || document.querySelector('#charts canvas')"
        " || document.querySelector('[data-field=chart_status]')?.textContent",
        timeout=20_000,
    )


def watch(page: Page, errors: list[str], where: list[str]) -> None:
    """Page errors and console errors added to ``errors``, each with the page it happened on (``where[0]``)."""
    page.on("pageerror", lambda exc: errors.append(f"{where[0]}: page error: {exc}"))

    def console(msg: ConsoleMessage) -> None:
        if msg.type == "error" and EXPECTED_CONSOLE.get(where[0], "\0") not in msg.text:
            errors.append(f"{where[0]}: console error: {msg.text} ({msg.location.get('url', '')})")

    page.on("console", console)


def content(web: str, django_user_model: type) -> dict[str, int | str]:
    """A ready simulator deployment that has served requests (one refused), a key, a member, two capacity runs
    and a tuning, a completed batch; returns their ids."""
    from console.access.models import Member

    client = login(web)
    PriceSetting.objects.get_or_create(gpu_model="NVIDIA H100 80GB HBM3", defaults={"usd_per_gpu_hour": "3.00"})
    dep_id = deploy(web, client, "screens")
    assert wait_state(client, dep_id, {"ready", "failed"})["state"] == "ready"
    made = client.post("/api/keys", json={"name": "screens"}).json()
    llm = openai.OpenAI(base_url=f"{web}/v1", api_key=made["key"], max_retries=0, timeout=60)
    for n in range(3):
        llm.chat.completions.create(
            model="screens", messages=[{"role": "user", "content": f"Hello {n}"}], max_tokens=40
        )  # fmt: skip
    with pytest.raises(openai.BadRequestError):
        llm.chat.completions.create(model="screens", messages=[{"role": "user", "content": "hi"}], max_tokens=0)
    user = django_user_model.objects.create_user("mia", "", MEMBER_PASSWORD)  # type: ignore[attr-defined]
    Member.objects.create(user=user, role="member")
    dep = Deployment.objects.get(pk=dep_id)
    run_a, run_b = a_run(dep, [1, 4, 16], {}), a_run(dep, [1, 4, 16, 32], {})
    tuning = Tuning.objects.create(
        deployment=dep, deployment_name=dep.name, knob="max_num_seqs", values=[8, 16],
        check_settings={"profile": "chat", "mode": "concurrency", "levels": [1, 4, 16]}, state="done", step=2,
        best_value=16,
    )  # fmt: skip
    run_a.tuning, run_a.tuning_value, run_b.tuning, run_b.tuning_value = tuning, 8, tuning, 16
    run_a.save()
    run_b.save()
    now = timezone.now()
    batch = Batch.objects.create(
        key_id=made["id"], endpoint="/v1/chat/completions", input_file_id="file-0", status="completed", total=3,
        completed=3, in_progress_at=now, completed_at=now, expires_at=now + timedelta(hours=24),
    )  # fmt: skip
    return {
        "batch": batch.public_id,
        "dep": dep_id,
        "key": made["id"],
        "member": user.pk,
        "run_a": run_a.pk,
        "run_b": run_b.pk,
        "tuning": tuning.pk,
    }


def test_every_console_page_at_two_sizes_light_and_dark_without_an_error(
    browser: Browser,  # noqa: F811 - the fixture
    web: str,
    worker: Workers,
    django_user_model: type,
    tmp_path: Path,
) -> None:
    shots: list[str] = []
    errors: list[str] = []
    where = ["setup"]  # the page being visited, for the errors' messages
    for (width, height), scheme in ((s, c) for s in SIZES for c in SCHEMES):  # the first admin's form: no user yet
        ctx = browser.new_context(base_url=web, viewport={"width": width, "height": height}, color_scheme=scheme)
        page = ctx.new_page()
        watch(page, errors, where)
        page.goto("/setup/")
        shots.append(shoot(page, tmp_path, "setup", width, height, scheme))
        ctx.close()
    django_user_model.objects.create_superuser("admin", "", "admin-password-1")  # type: ignore[attr-defined]
    names = url_names()
    listed = {
        shot: (url, path) for shot, (url, path) in pages(content(web, django_user_model)).items() if url in names | {""}
    }
    missing = names - NOT_PAGES - {url for url, _ in listed.values()} - {"access:setup", "access:login"}
    assert not missing, f"pages not screened: {missing}"
    for (width, height), scheme in ((s, c) for s in SIZES for c in SCHEMES):
        ctx = browser.new_context(base_url=web, viewport={"width": width, "height": height}, color_scheme=scheme)
        page = ctx.new_page()
        watch(page, errors, where)
        try:
            where[0] = "login"
            page.goto("/login/")
            shots.append(shoot(page, tmp_path, "login", width, height, scheme))
            page.get_by_label("Username").fill("admin")
            page.get_by_label("Password").fill("admin-password-1")
            page.get_by_role("button", name="Log in").click()
            page.wait_for_url(f"{web}/")
            for where[0], (_, path) in listed.items():
                page.goto(path)
                settled(page)
                if where[0] == "deployment":  # the hover read-out, over the throughput chart's latest points
                    over = page.locator("[data-chart=tps] .u-over")
                    box = over.bounding_box()
                    assert box
                    over.hover(position={"x": box["width"] - 4, "y": box["height"] / 2})
                    page.locator("[data-chart=tps] .chart-readout").wait_for(state="visible")
                    figure = page.locator("figure:has([data-chart=tps])")
                    readout = tmp_path / f"deployment-readout-{width}x{height}-{scheme}.png"
                    figure.screenshot(path=str(readout))
                    keep(readout)
                    page.evaluate("() => window.scrollTo(0, 0)")  # a function: the CSP refuses eval
                shots.append(shoot(page, tmp_path, where[0], width, height, scheme))
        finally:
            ctx.close()
    assert not errors, "\n".join(errors)
    assert len(shots) == (len(listed) + 2) * len(SIZES) * len(SCHEMES)
    assert min(os.path.getsize(path) for path in shots) > 5_000  # pages, not blanks


def shoot(page: Page, folder: Path, name: str, width: int, height: int, scheme: str) -> str:
    """The whole page as ``<name>-<width>x<height>-<scheme>.png`` in ``folder`` (and HEARTH_SCREENSHOTS)."""
    path = folder / f"{name}-{width}x{height}-{scheme}.png"
    page.screenshot(path=str(path), full_page=True)
    keep(path)
    return str(path)


def test_the_chosen_range_is_remembered_charts_follow_the_theme_and_hovering_reads_out_values(
    browser: Browser,  # noqa: F811 - the fixture
    web: str,
    admin_user: object,
    tmp_path: Path,
) -> None:
    """The range buttons apply to every chart and the choice outlives a reload (localStorage); turning the browser
    dark draws the charts again in the dark theme's colours; hovering a point shows its time and value with the
    unit, on every chart at once (one synced cursor). observability:series' answer is the test's (route.fulfill)."""
    dep = a_deployment("picker")
    now = time.time()
    body = series([now - 15 * i for i in range(20, 0, -1)], {"generation_tps": [float(i) for i in range(20)]})
    asked: list[str] = []
    page, errors = log_in(browser, web)

    def fulfill(route: Route) -> None:
        asked.append(route.request.url)
        route.fulfill(status=200, content_type="application/json", body=json.dumps(body))

    page.route(f"**/deployments/{dep.pk}/series/**", fulfill)
    page.goto(f"/deployments/{dep.pk}/")
    page.wait_for_function("() => document.querySelectorAll('[data-chart][data-points=\"20\"]').length === 6")
    page.get_by_role("button", name="15 min").click()
    page.wait_for_function("() => document.querySelector('[data-range=\"15m\"]').ariaPressed === 'true'")
    reloaded = len(asked)
    page.reload()
    page.wait_for_function("() => document.querySelectorAll('[data-chart][data-points=\"20\"]').length === 6")
    assert page.locator("[data-range='15m']").get_attribute("aria-pressed") == "true"
    assert asked[reloaded:] and all("range=15m" in url for url in asked[reloaded:]), asked

    axis = "() => window.HearthChartKit.theme().axis"
    light, drawn = page.evaluate(axis), page.evaluate("() => window.__plots.length")  # KEEP_PLOTS keeps each
    page.emulate_media(color_scheme="dark")
    page.wait_for_function(f"() => window.__plots.length > {drawn}")  # drawn again
    assert page.evaluate(axis) != light

    # Over the latest point, not the right edge: a 5 s update moves each chart's end to "now" one chart after
    # another, and a moment by the edge can fall past the end of a chart not yet moved. A chart drawn again after
    # the pointer arrived (the theme's redraw can come late) shows its read-out at the pointer's next move, as a
    # user's hand makes: the pointer moves a pixel until every chart reads out the same moment.
    latest = """() => { const p = window.__plots.find(
                   (p) => document.contains(p.root) && p.root.parentElement.dataset.chart === "tps");
                 return p.valToPos(p.data[0][p.data[0].length - 1], "x"); }"""
    shown = "() => [...document.querySelectorAll('[data-chart] .chart-readout')].map((b) => !b.hidden)"
    for nudge in range(20):
        over = page.locator("[data-chart=tps] .u-over")
        box = over.bounding_box()
        assert box
        over.hover(position={"x": page.evaluate(latest) - nudge % 2, "y": box["height"] / 2})
        if page.evaluate(shown) == [True] * 6:
            break
        page.wait_for_timeout(250)
    assert page.evaluate(shown) == [True] * 6, page.evaluate(shown)  # the same moment on every chart
    readout = page.locator("[data-chart=tps] .chart-readout")
    expect(readout).to_contain_text("generation: 19 tokens/s")
    expect(readout).to_contain_text(" UTC")
    # the chart, read-out and all: the read-out alone may be hidden by then, its chart drawn again by a 5 s update
    page.locator("[data-chart=tps]").screenshot(path=str(tmp_path / "readout.png"))
    assert errors == [], errors
