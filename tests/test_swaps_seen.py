"""Sharing the GPUs over time, seen (issue 29; console.observability.swaps, panel, gpu_strip, cost, export): each
deployment's state in coloured words and since when, the memory an asleep engine still holds on the GPU strip, its
wake times (p50/p99) and how often it slept, GPU time by state with sleeping time not charged, and /metrics."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client import generate_latest

from console.deployments.models import Deployment, DeploymentEvent, DeploymentState, DesiredState
from console.observability import cost, history
from console.observability.export import engine_registry
from console.observability.models import MetricSample, RequestLog, Resolution
from console.observability.swaps import percentile, swaps
from console.observability.templatetags import panel_format
from tests.test_panels import Engine, deployment
from tests.test_room_console import box_of_two

pytestmark = pytest.mark.django_db
S = DeploymentState
K = DeploymentEvent.Kind


def event(dep_id: int, kind: str, hours_ago: float, seconds: float | None = None, level: int | None = None) -> None:
    at = timezone.now() - timedelta(hours=hours_ago)
    DeploymentEvent.objects.create(deployment_id=dep_id, kind=kind, at=at, seconds=seconds, level=level, reason="r")


def asleep_for_an_hour(dep_id: int) -> None:
    """Slept three times today (twice at level 1, then at level 2), woke twice (2 s and 9 s), asleep for 1 h now."""
    event(dep_id, K.SLEEP, 10, 1.0, 1)
    event(dep_id, K.WAKE, 8, 2.0)  # asleep 2 h
    event(dep_id, K.SLEEP, 6, 1.0, 1)
    event(dep_id, K.WAKE, 5, 9.0)  # asleep 1 h
    event(dep_id, K.SLEEP, 1, 1.0, 2)
    Deployment.objects.filter(pk=dep_id).update(
        state=S.ASLEEP, desired=DesiredState.ASLEEP, state_since=timezone.now() - timedelta(hours=1)
    )


def held_for_wakes(dep_id: int, *seconds: float) -> None:
    """Requests held for the deployment's wakes, each ``seconds`` long (a trial's two clients held 107.6 s while
    the wake itself took 2.12 s: the rest was the wait for room)."""
    model = Deployment.objects.get(pk=dep_id).served_model_name
    for n, held in enumerate(seconds):
        RequestLog.objects.create(
            model=model, surface="openai", endpoint="/v1/chat/completions", status=200, request_id=f"held-{n}",
            woke_engine=True, wake_seconds=held, duration_seconds=held + 1,
        )  # fmt: skip


def test_the_dashboard_shows_each_state_in_coloured_words_since_when_and_the_memory_an_asleep_engine_holds(
    admin: Client,
) -> None:
    a, b = box_of_two(admin)
    asleep_for_an_hour(a)
    held_for_wakes(a, 107.6, 2.5, 110.0)
    html = admin.get("/").content.decode()
    row = html[html.index('data-deployment="a"') :]
    row = row[: row.index("</tr>")]
    assert '<span class="state asleep" data-field="state">asleep (level 2)</span>' in row
    assert ">for 1 h 0 min</small>" in row
    assert (
        "asleep: the next request wakes it · holds 1.4 GiB on each of GPUs 0–3 · wakes in 2.00 s (p50)"
        " · requests held 108 s (p50)<"  # no wake failed: nothing said of failures
    ) in row
    event(a, K.WAKE_FAILED, 0.5, 1.0)
    DeploymentEvent.objects.create(deployment_id=a, kind=K.WAKE_FAILED, reason="Not woken: every GPU is held by b")
    row = admin.get("/").content.decode()
    assert (
        'held 108 s (p50) · <span class="warn">1 wake failed (24 h)</span>'
        ' · <span class="warn">1 not woken for want of room (24 h)</span></td>'
    ) in row
    assert ">not charged<" in row and "$12.00 an hour while it serves" in row  # 4 GPUs × $3.00
    # the API says it as the dashboard does: the price while it serves, nothing charged now
    metrics = admin.get(f"/api/deployments/{a}/metrics").json()
    assert (metrics["usd_per_hour"], metrics["charged_per_hour_now"]) == ("12.0000", "0")
    gpu0 = html[html.index('data-gpu="0"') :]
    gpu0 = gpu0[: gpu0.index('data-gpu="1"')]
    assert 'data-field="gpu_memory">1.4 / 79.6 GiB<' in gpu0
    assert 'a · <span class="state asleep">asleep (level 2)</span> 1.4 GiB' in gpu0 and 'class="asleep"' in gpu0
    gpu4 = html[html.index('data-gpu="4"') :]
    assert 'data-field="gpu_memory">73.2 / 79.6 GiB<' in gpu4
    assert 'b · <span class="state ready">ready</span> 73.2 GiB' in gpu4

    Deployment.objects.filter(pk=b).update(state=S.STOPPED, desired=DesiredState.STOPPED_IDLE)
    Deployment.objects.filter(pk=a).update(state=S.WAKING)
    html = admin.get("/").content.decode()
    assert '<span class="state saving" data-field="state">stopped to save</span>' in html
    assert "stopped to save: the next request launches it again" in html
    assert '<span class="state waking" data-field="state">waking</span>' in html
    assert "waking: requests for it are held until it serves · holds 73.2 GiB on each of GPUs 0–3" in html
    assert 'data-gpu="4"' in html and html.count('<li class="muted">free</li>') == 4  # GPUs 4–7: b stopped


def test_the_deployment_panel_shows_its_wake_times_how_often_it_slept_and_gpu_time_by_state(admin: Client) -> None:
    a, _ = box_of_two(admin)
    asleep_for_an_hour(a)
    panel = admin.get(f"/deployments/{a}/panel/").content.decode()
    assert '<span class="state asleep" data-field="swap_state">asleep (level 2)</span>' in panel
    assert 'data-field="sleeps">slept 3 times (2 at level 1, 1 at level 2)<' in panel
    assert 'data-field="wake_times">wake p50 2.00 s · p99 9.00 s <small class="muted">over 2 wakes</small><' in panel
    assert 'data-field="held_times"' not in panel  # no request was held yet
    held_for_wakes(a, 107.6, 2.5, 110.0)
    held = admin.get(f"/deployments/{a}/panel/").content.decode()
    assert 'requests held for a wake: p50 108 s · p99 110 s <small class="muted">over 3 requests<' in held
    assert 'data-field="held">holds 1.4 GiB on each of GPUs 0–3<' in panel
    assert 'data-field="hours_asleep">4.0 h</span> (not charged); GPU-hours = hours × 4 GPUs' in panel
    assert 'data-field="hours_serving">none<' in panel  # never scraped: no serving time counted


def test_asleep_time_counts_from_each_sleep_to_its_wake_and_the_window_s_edges(admin: Client) -> None:
    a, _ = box_of_two(admin)
    dep = Deployment.objects.get(pk=a)
    event(a, K.SLEEP, 30, 1.0, 1)  # before the window: asleep at its start
    event(a, K.WAKE, 20, 3.0)
    event(a, K.SLEEP, 3, 1.0, 1)
    event(a, K.WAKE_FAILED, 2.5, 1.0)  # "Not woken" would leave it asleep; a failed wake ends it
    found = swaps(dep, timezone.now())
    assert found.asleep_seconds == pytest.approx(4 * 3600 + 1800, abs=5)
    assert (found.sleeps, found.wakes, found.failed, found.wake_p50) == (1, 1, 1, 3.0)
    assert cost.gpu_time(dep, timezone.now()).asleep == pytest.approx(4.5, abs=0.01)


def test_time_stopped_to_save_counts_as_put_aside_as_asleep_time_does(admin: Client) -> None:
    """A trial's model stopped to save twice, ~12 min, read "asleep none" and 0 s in /metrics."""
    _, b = box_of_two(admin)
    event(b, K.STOP_IDLE, 3, 2.0)
    event(b, K.WAKE, 2, 50.0)  # launched again by a request: an hour stopped
    event(b, K.STOP_IDLE, 0.5, 2.0)  # and stopped to save again, half an hour ago: still
    Deployment.objects.filter(pk=b).update(
        state=S.STOPPED, desired=DesiredState.STOPPED_IDLE, state_since=timezone.now() - timedelta(hours=0.5)
    )
    dep = Deployment.objects.get(pk=b)
    assert swaps(dep, timezone.now()).asleep_seconds == pytest.approx(1.5 * 3600, abs=5)
    panel = admin.get(f"/deployments/{b}/panel/").content.decode()
    assert 'asleep or stopped to save <span data-field="hours_asleep">1.5 h</span> (not charged)' in panel


@pytest.mark.parametrize(("values", "q", "p"), [([], 0.5, None), ([3.0], 0.99, 3.0), ([1, 2, 3, 4], 0.5, 2)])
def test_percentiles_by_nearest_rank(values: list[float], q: float, p: float | None) -> None:
    assert percentile(values, q) == p


def test_metrics_export_the_state_sleeps_wakes_and_wake_seconds(admin: Client) -> None:
    a, _ = box_of_two(admin)
    asleep_for_an_hour(a)
    text = generate_latest(engine_registry()).decode()
    assert 'hearth_deployment_state{deployment="a",state="asleep"} 1.0' in text
    assert 'hearth_deployment_state{deployment="a",state="ready"} 0.0' in text
    assert 'hearth_deployment_state{deployment="b",state="ready"} 1.0' in text
    assert 'hearth_deployment_sleeps_last_24h{deployment="a",level="1"} 2.0' in text
    assert 'hearth_deployment_sleeps_last_24h{deployment="a",level="2"} 1.0' in text
    assert 'hearth_deployment_wakes_last_24h{deployment="a"} 2.0' in text
    assert 'hearth_deployment_wake_seconds_last_24h{deployment="a",quantile="0.99"} 9.0' in text
    assert 'hearth_deployment_wake_failures_last_24h{deployment="b"} 0.0' in text
    assert 'hearth_deployment_wakes_without_room_last_24h{deployment="b"} 0.0' in text
    seconds = next(
        line for line in text.splitlines() if line.startswith('hearth_deployment_state_seconds{deployment="a"}')
    )
    assert 3590 < float(seconds.split()[-1]) < 3700


def test_a_model_up_three_minutes_of_a_period_is_counted_three_minutes_before_and_after_its_rollup() -> None:
    """A trial's swapping model read "20 min up … $8.00" for ~6 min: up time counted in whole 5-minute periods."""
    dep = deployment()  # one H100 at the seeded $3.00 per GPU-hour
    engine = Engine(dep.replicas.get())
    day = (timezone.now() - timedelta(hours=3)).date()
    period = datetime(day.year, day.month, day.day, 1, tzinfo=UTC).timestamp()  # 01:00–01:05 UTC
    for at in [*range(10, 131), *range(230, 291)]:  # woken at :10, asleep from 2:10 to 3:50 (not scraped), up again
        engine.step(period + at, 5 if at == 100 else 0, 0, running=0, kv=0.0)
    start, end = datetime.fromtimestamp(period, UTC), datetime.fromtimestamp(period + 300, UTC)

    def counted() -> tuple[float, Decimal | None]:
        return cost.hours_up(dep, day) * 3600, cost.use_cost(dep, "", start, end, Decimal(3)).usd

    assert counted() == pytest.approx((180.0, Decimal(3) * 180 / 3600))  # 120 s + 60 s, the sleep not counted
    assert history.roll_up(period + 2 * 3600, 1.0) == 1
    assert counted() == pytest.approx((180.0, Decimal(3) * 180 / 3600))  # the rollup keeps its seconds up
    rollup = MetricSample.objects.get(resolution=Resolution.FIVE_MINUTES)
    del rollup.values["u"]  # a rollup made before up time was kept counts its whole period, as all did then
    rollup.save()
    assert counted()[0] == 300.0


@pytest.mark.parametrize(
    ("hours", "said"),
    [(0, "none"), (0.0001, "under 1 s"), (5 / 3600, "5 s"), (59 / 3600, "59 s"), (0.083, "5 min"), (4.0, "4.0 h")],
)
def test_gpu_time_under_a_minute_is_said_in_seconds_not_0_min_beside_its_dollars(hours: float, said: str) -> None:
    """A trial's panel read "idle awake 0 min ($0.0043 spent serving nobody)" for about 5 s."""
    assert panel_format.hours(hours) == said
