"""history.engine_points with the in-process step cache: the same points as differencing every sample afresh
(counter resets and gaps included), as new samples arrive refresh after refresh, and never a kept step for a
sample whose time changed under it."""

import pytest
from django.conf import settings

from console.observability import history, step_cache
from console.observability.models import MetricSample, Resolution
from engines.metrics import Histogram
from tests.test_panels import deployment

pytestmark = pytest.mark.django_db
INTERVAL = float(settings.HEARTH_SCRAPE_INTERVAL)
BOUNDS = (0.01, 0.1, 1.0)


def sample(replica: object, at: float, tokens: float, ttft: tuple[float, ...]) -> None:
    values = {
        "v": {"generation_tokens_total": tokens, "requests_running": tokens % 7},
        "h": {"ttft_seconds": history._encode_hist(Histogram(BOUNDS, ttft, sum(ttft) / 10))},
    }
    MetricSample.objects.create(
        deployment_id=replica.deployment_id,
        replica=replica,  # type: ignore[attr-defined]
        at=history.to_datetime(at),
        values=values,
    )


def afresh(dep_id: int, start: float, end: float) -> dict[int, list[history.Point]]:
    """The points without the cache: every sample of the window read and differenced."""
    rows = MetricSample.objects.filter(
        deployment_id=dep_id,
        replica__isnull=False,
        resolution=Resolution.SCRAPE,
        at__gte=history.to_datetime(start - history.GAP_STEPS * INTERVAL - 1),
        at__lte=history.to_datetime(end),
    ).order_by("replica_id", "at")
    out: dict[int, list[MetricSample]] = {}
    for row in rows:
        out.setdefault(row.replica_id or 0, []).append(row)
    return {rid: [p for p in history.steps(mine, INTERVAL) if p.at >= start] for rid, mine in out.items()}


def test_cached_points_equal_points_made_afresh_as_history_grows() -> None:
    dep = deployment("cached", replicas=2)
    a, b = dep.replicas.order_by("id")
    t0, tokens = 1_000_000.0, 0.0
    for k in range(40):
        at = t0 + k * INTERVAL
        if k == 25:  # replica b's engine restarts: its counters start again from zero
            tokens = 0.0
        tokens += 10
        if k != 30:  # a missed scrape of replica a: a gap of two intervals
            sample(a, at, 100.0 * k, (k, 2 * k, 3 * k, 3 * k))
        sample(b, at, tokens, (tokens, tokens, tokens, tokens))
        if k >= 8:  # a refresh after every scrape, over the last 40 s
            end = at
            assert history.engine_points(dep.pk, end - 40, end, Resolution.SCRAPE, INTERVAL) == afresh(
                dep.pk, end - 40, end
            )
    again = [history.engine_points(dep.pk, end - 40, end, Resolution.SCRAPE, INTERVAL) for _ in range(2)]
    assert all(x is y for x, y in zip(again[0][a.pk], again[1][a.pk], strict=True))  # kept, not made again
    step_cache.clear()
    assert history.engine_points(dep.pk, end - 40, end, Resolution.SCRAPE, INTERVAL) == again[0]


def test_a_sample_whose_time_changed_is_differenced_again() -> None:
    dep = deployment("moved")
    (replica,) = dep.replicas.all()
    t0 = 2_000_000.0
    for k in range(6):
        sample(replica, t0 + k * INTERVAL, 10.0 * k, (k, k, k, k))
    end = t0 + 5 * INTERVAL
    first = history.engine_points(dep.pk, end - 30, end, Resolution.SCRAPE, INTERVAL)
    shift = 1000.0
    for row in MetricSample.objects.filter(replica=replica):
        row.at = history.to_datetime(row.at.timestamp() + shift)
        row.save(update_fields=["at"])
    moved = history.engine_points(dep.pk, end - 30 + shift, end + shift, Resolution.SCRAPE, INTERVAL)
    assert [p.at - shift for p in moved[replica.pk]] == [p.at for p in first[replica.pk]]
    assert moved == afresh(dep.pk, end - 30 + shift, end + shift)
