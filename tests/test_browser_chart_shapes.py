"""Every chart draws for every data shape, in headless Chromium with no page error: the capacity check's charts
(static/capacity/charts.js) for a sweep whose levels span 64× (a log x axis), a single level, a gap (a level
whose requests all failed) and an all-null series (no engine numbers), from real runs in the database; a
deployment's charts (static/hearth-charts.js) for no points, one point, a gap and all-null series, with
observability:series' answer given by the test (route.fulfill) so each shape is exact. Their time axes read
24-hour UTC, as the "times in UTC" label says. A screenshot of each shape goes to the test's folder."""

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, Route

from console.capacity.models import CapacityResult, CapacityRun
from console.deployments.models import Deployment
from console.observability.charts import SERIES
from tests.chromium import browser  # noqa: F401 - the module's Chromium
from tests.test_console_display import KEEP_PLOTS, a_deployment

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
X_LABELS = """() => window.__plots.filter((p) => document.contains(p.root)).map((p) => p.axes[0]._values || [])"""
SIZES = """() => [...document.querySelectorAll('#charts canvas')].map((c) => [c.clientWidth, c.clientHeight])"""


def log_in(chromium: Browser, web: str) -> tuple[Page, list[str]]:
    """A logged-in admin's page, and the list its page errors (uncaught exceptions) are added to."""
    context = chromium.new_context(base_url=web, viewport={"width": 1440, "height": 900})
    context.add_init_script(KEEP_PLOTS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto("/login/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill("admin-password-1")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{web}/")
    return page, errors


def a_run(dep: Deployment, levels: list[float], numbers: dict[float, dict[str, object]]) -> CapacityRun:
    """A done run of ``levels`` users; each level's results are plausible numbers unless ``numbers`` says."""
    run = CapacityRun.objects.create(
        deployment=dep, deployment_name="shapes", profile="chat", mode="concurrency", levels=levels,
        requests_per_level=26, max_seconds=120, shape={"prompt_tokens": 1000, "output_tokens": 100}, state="done",
    )  # fmt: skip
    for level in levels:
        fields: dict[str, object] = {
            "requests": 26, "succeeded": 26, "duration_s": 10.0, "ttft_p50": 0.05 * level, "ttft_p90": 0.08 * level,
            "ttft_p99": 0.1 * level, "itl_p50": 0.01, "itl_p90": 0.02, "itl_p99": 0.03, "tpot_p50": 0.01,
            "per_user_tokens_per_s": 100 / level, "output_tokens_per_s": 90.0 * level, "prompt_tokens_per_s": 900.0,
            "goodput_rps": 2.0, "goodput_ratio": 1.0, "engine": {"kv_cache_peak": min(0.9, 0.01 * level)},
        }  # fmt: skip
        CapacityResult.objects.create(run=run, level=level, **{**fields, **numbers.get(level, {})})
    return run


NO_ENGINE = dict.fromkeys(
    ("kv_cache_peak", "preemptions", "running_peak", "waiting_peak", "waiting_mean", "running_while_waiting", "scrapes")
)  # engine_window's keys, an engine with no such series
FAILED = {"succeeded": 0, "failures": {"timeout": 26}, "ttft_p50": None, "ttft_p90": None, "ttft_p99": None,
          "itl_p50": None, "itl_p90": None, "itl_p99": None, "tpot_p50": None, "per_user_tokens_per_s": None,
          "output_tokens_per_s": 0.0, "goodput_rps": 0.0, "goodput_ratio": 0.0}  # fmt: skip


def test_the_capacity_charts_draw_a_log_sweep_a_single_level_a_gap_and_all_null(
    browser: Browser,  # noqa: F811 - the fixture
    web: str,
    admin_user: object,
    tmp_path: Path,
) -> None:
    dep = a_deployment("shapes")
    shapes = {
        "log-sweep": a_run(dep, [1, 4, 16, 64], {}),
        "single-level": a_run(dep, [8], {}),
        "gap": a_run(dep, [1, 2, 4, 8], {4: FAILED}),
        "all-null": a_run(
            dep, [1, 10, 100], {lv: {"engine": NO_ENGINE, "per_user_tokens_per_s": None} for lv in (1, 10, 100)}
        ),
    }
    page, errors = log_in(browser, web)
    for name, run in shapes.items():
        page.goto(f"/capacity/runs/{run.pk}/")
        page.wait_for_function("() => document.querySelectorAll('#charts figure canvas').length === 6")
        sizes = page.evaluate(SIZES)
        assert all(w >= 300 and h >= 150 for w, h in sizes), (name, sizes)  # not the 53×27 px of a failed draw
        page.locator("#charts").screenshot(path=str(tmp_path / f"capacity-charts-{name}.png"))
        assert errors == [], (name, errors)
    page.goto(f"/capacity/runs/{shapes['log-sweep'].pk}/")
    labels = page.evaluate(X_LABELS)
    assert all({"1", "10"} <= {str(v) for v in axis} for axis in labels), labels  # a log axis: 1, 10, …


def series(t: list[float], values: dict[str, list[float | None]]) -> dict[str, object]:
    """observability:series' answer: ``values`` for the named series, null for every other one."""
    every = {name: values.get(name, [None] * len(t)) for name in SERIES}
    return {"t": t, "series": every, "step": 15.0, "since": None, "slo": {"ttft": 0.5, "itl": None}, "max_num_seqs": 8}


def shapes(now: float) -> dict[str, dict[str, object]]:
    t = [now - 1800 + 15 * i for i in range(40)]
    wave = [float(i % 5) for i in range(40)]
    gap: list[float | None] = [*wave[:15], *[None] * 10, *wave[25:]]  # 150 s without data, drawn as a gap
    full: dict[str, list[float | None]] = {key: list(wave) for key in SERIES}
    return {
        "no-points": series([], {}),
        "single-point": series([now - 30], {name: [2.0] for name in SERIES}),
        "gap": series(t, {name: gap for name in SERIES}),
        "all-null": series(
            t, {**full, "ttft_p50": [None] * 40, "user_ttft_p50": [None] * 40, "kv_cache_usage": [None] * 40}
        ),
    }


def answer(body: dict[str, object]) -> Callable[[Route], None]:
    """A route handler giving ``body`` for the range, and nothing new for each live update (?since=)."""

    def fulfill(route: Route) -> None:
        sent = series([], {}) if "since=" in route.request.url else body
        route.fulfill(status=200, content_type="application/json", body=json.dumps(sent))

    return fulfill


def test_the_deployment_charts_draw_no_points_one_point_a_gap_and_all_null_with_24_hour_utc_times(
    browser: Browser,  # noqa: F811 - the fixture
    web: str,
    admin_user: object,
    tmp_path: Path,
) -> None:
    dep = a_deployment("history")
    page, errors = log_in(browser, web)
    for name, body in shapes(time.time()).items():
        page.unroute(f"**/deployments/{dep.pk}/series/**")
        page.route(f"**/deployments/{dep.pk}/series/**", answer(body))
        page.goto(f"/deployments/{dep.pk}/")
        points = len(body["t"])  # type: ignore[arg-type]
        page.wait_for_function(
            f"() => document.querySelectorAll('[data-chart][data-points=\"{points}\"]').length === 6"
        )
        status = page.locator("[data-field=chart_status]")
        # after the first live update (every 5 s): what the status says with nothing new
        page.wait_for_function(
            "() => /nothing new|no data/.test(document.querySelector('[data-field=chart_status]').textContent)",
            timeout=15_000,
        )
        said = status.text_content() or ""
        assert "AM" not in said and "PM" not in said and "1970" not in said, (name, said)
        if points == 0:
            assert said == "no data in this range yet", said
        else:
            assert "nothing new since" in said and said.endswith(" UTC"), said
        labels = [str(v) for axis in page.evaluate(X_LABELS) for v in axis if v]
        assert labels and all(re.fullmatch(r"([01]\d|2[0-3]):[0-5]\d(:[0-5]\d)?(\n\d\d-\d\d)?", v) for v in labels), (
            labels
        )
        days = {time.strftime("%m-%d", time.gmtime(time.time() - back)) for back in (0, 3600)}  # the 1 h range's
        assert any(day in labels[0] for day in days), (
            name,
            labels,
        )  # the range ending now, not uPlot's years-wide padding of one point
        sizes = page.evaluate(SIZES)
        assert len(sizes) == 6 and all(w >= 300 and h >= 150 for w, h in sizes), (name, sizes)
        page.locator("#charts").screenshot(path=str(tmp_path / f"deployment-charts-{name}.png"))
        assert errors == [], (name, errors)
