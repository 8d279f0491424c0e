"""The metric history in the database: samples written at each scrape, rolled up into 5-minute periods, pruned,
and read back as points.

Retention (beat's ``maintain_history``): scrape resolution for ``RAW_KEEP`` (24 h), 5-minute rollups for
``ROLLUP_KEEP`` (30 days). An engine sample stores what the engine reported, cumulative (``MetricSample``'s
docstring has the shape); a point read back is the step between two samples: gauges as they were, counter and
histogram deltas with resets (a counter going down: the engine restarted) counted from zero, as Prometheus does.
Measured size: bench/dashboard_time.py prints bytes per replica per day (README "Panels" quotes it).
"""

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache

from django.db import transaction

from console.deployments.models import Replica
from console.observability import step_cache
from console.observability.models import HistogramBounds, MetricSample, Resolution
from engines.metrics import Histogram, Scrape, add_histograms, counter_delta, histogram_delta

RAW_KEEP = timedelta(hours=24)
ROLLUP_KEEP = timedelta(days=30)
ROLLUP = 300  # seconds in a rollup period
GAP_STEPS = 3  # samples further apart than this many scrape intervals are not differenced across the gap


@dataclass
class Point:
    """One step of one replica: ``at`` (Unix s, the step's end), ``dt`` (seconds it covers; 0 = a baseline with
    no deltas), gauges, counter deltas and histogram deltas (observations in the step)."""

    at: float
    dt: float
    gauges: dict[str, float] = field(default_factory=dict)
    deltas: dict[str, float] = field(default_factory=dict)
    hists: dict[str, Histogram] = field(default_factory=dict)


def to_datetime(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


@lru_cache(maxsize=256)
def bounds_id(bounds: tuple[float, ...]) -> int:
    """The id of a histogram bounds row, made on first use."""
    row, _ = HistogramBounds.objects.get_or_create(bounds=list(bounds))
    return row.pk


@lru_cache(maxsize=256)
def bounds_of(pk: int) -> tuple[float, ...] | None:
    """The bounds of a row; None when it is gone (a database emptied under a running process)."""
    row = HistogramBounds.objects.filter(pk=pk).first()
    return tuple(row.bounds) if row else None


def check_bounds_cache() -> None:
    """Forget cached bounds ids when their rows are gone (the database was emptied while this process ran)."""
    known = {bounds_id(b) for b in _cached_bounds()}
    if known and HistogramBounds.objects.filter(pk__in=known).count() != len(known):
        bounds_id.cache_clear()
        bounds_of.cache_clear()


def _cached_bounds() -> list[tuple[float, ...]]:
    return [b for (b,) in _seen_bounds]


_seen_bounds: set[tuple[tuple[float, ...]]] = set()


def _encode_hist(h: Histogram) -> list[float]:
    _seen_bounds.add((h.bounds,))
    return [bounds_id(h.bounds), round(h.total, 6), *h.counts]


def _decode_hists(raw: dict[str, Sequence[float]], only: frozenset[str] | None = None) -> dict[str, Histogram]:
    out = {}
    for name, h in raw.items():
        if only is not None and name not in only:
            continue
        bounds = bounds_of(int(h[0]))
        if bounds is not None and len(bounds) + 1 == len(h) - 2:
            out[name] = Histogram(bounds, tuple(h[2:]), float(h[1]))
    return out


def record_scrape(replica: Replica, scrape: Scrape) -> MetricSample:
    """Store one engine scrape as a raw sample."""
    values = {"v": scrape.values, "h": {k: _encode_hist(h) for k, h in scrape.histograms.items()}}
    return MetricSample.objects.create(
        deployment_id=replica.deployment_id, replica=replica, at=to_datetime(scrape.time), values=values
    )


SHOWN_HISTOGRAMS = frozenset({"ttft_seconds", "itl_seconds"})  # the panels and charts read these two


def _raw_point(row: MetricSample, only: frozenset[str] | None) -> tuple[float, dict[str, float], dict[str, Histogram]]:
    v = row.values
    return row.at.timestamp(), v.get("v", {}), _decode_hists(v.get("h", {}), only)


RawSample = tuple[float, dict[str, float], dict[str, Histogram]]  # (Unix s, gauges and counters, histograms)


def step(prev: RawSample | None, cur: RawSample, interval: float) -> Point:
    """The point ending at ``cur``: a baseline (dt 0) without ``prev`` or across a gap, else its deltas."""
    at, values, hists = cur
    point = Point(at, 0.0, dict(values))
    if prev is not None and 0 < at - prev[0] <= GAP_STEPS * interval + 1:
        point.dt = at - prev[0]
        point.deltas = {k: counter_delta(prev[1][k], x) for k, x in values.items() if k in prev[1]}
        point.hists = {k: histogram_delta(prev[2].get(k), h) for k, h in hists.items() if k in prev[2]}
    return point


def steps(rows: Iterable[MetricSample], interval: float, only: frozenset[str] | None = SHOWN_HISTOGRAMS) -> list[Point]:
    """Consecutive raw samples of one replica (oldest first) as points, with the histograms named in ``only``
    (None: all); the first, and the first after a gap, is a baseline (dt 0)."""
    points: list[Point] = []
    prev: RawSample | None = None
    for row in rows:
        cur = _raw_point(row, only)
        points.append(step(prev, cur, interval))
        prev = cur
    return points


def rollup_points(rows: Iterable[MetricSample]) -> list[Point]:
    """Rollup rows as points (each covers ROLLUP seconds and ends ROLLUP after its ``at``)."""
    out = []
    for row in rows:
        v = row.values
        hists = _decode_hists(v.get("h", {}), SHOWN_HISTOGRAMS)
        out.append(Point(row.at.timestamp() + ROLLUP, ROLLUP, v.get("v", {}), v.get("d", {}), hists))
    return out


def engine_points(
    deployment_id: int, start: float, end: float, resolution: int, interval: float
) -> dict[int, list[Point]]:
    """Each replica's points of a deployment between ``start`` and ``end`` (Unix s) at a resolution. The points
    are shared with later calls (step_cache): read them, never change them."""
    if resolution == Resolution.SCRAPE:
        return _scrape_points(deployment_id, start, end, interval)
    rows = MetricSample.objects.filter(
        deployment_id=deployment_id,
        replica__isnull=False,
        resolution=resolution,
        at__gte=to_datetime(start - ROLLUP),
        at__lte=to_datetime(end),
    ).order_by("replica_id", "at")
    by_replica: dict[int, list[MetricSample]] = {}
    for row in rows:
        by_replica.setdefault(row.replica_id or 0, []).append(row)
    return {rid: [p for p in rollup_points(mine) if p.at >= start] for rid, mine in by_replica.items()}


def _scrape_points(deployment_id: int, start: float, end: float, interval: float) -> dict[int, list[Point]]:
    """Scrape-resolution points, reading the window's ids and times and the values of only the samples this
    process has no step for (step_cache says why)."""
    rows = MetricSample.objects.filter(
        deployment_id=deployment_id,
        replica__isnull=False,
        resolution=Resolution.SCRAPE,
        at__gte=to_datetime(start - GAP_STEPS * interval - 1),
        at__lte=to_datetime(end),
    ).order_by("replica_id", "at")
    times: dict[int, float] = {}
    by_replica: dict[int, list[int]] = {}
    for replica_id, sample_id, at in rows.values_list("replica_id", "id", "at"):
        times[sample_id] = at.timestamp()
        by_replica.setdefault(replica_id, []).append(sample_id)
    pairs = [(prev, sid) for ids in by_replica.values() for prev, sid in zip([0, *ids[:-1]], ids, strict=True)]
    known = {pair: p for pair, p in step_cache.steps(pairs).items() if p.at == times[pair[1]]}
    wanted = {i for pair in pairs if pair not in known for i in pair if i}
    raw = step_cache.samples(wanted)
    raw = {i: r for i, r in raw.items() if r[0] == times[i]}
    for sid, values in MetricSample.objects.filter(id__in=wanted - raw.keys()).values_list("id", "values"):
        raw[sid] = (times[sid], values.get("v", {}), _decode_hists(values.get("h", {}), SHOWN_HISTOGRAMS))
    made = {  # a sample deleted since the first query (its deployment removed) has no raw: its step is left out
        pair: step(raw.get(pair[0]) if pair[0] else None, raw[pair[1]], interval)
        for pair in pairs
        if pair not in known and pair[1] in raw and (not pair[0] or pair[0] in raw)
    }
    step_cache.keep(made, {ids[-1]: raw[ids[-1]] for ids in by_replica.values() if ids[-1] in raw})
    points = known | made
    out = {}
    for replica_id, ids in by_replica.items():
        mine = [points[pair] for pair in zip([0, *ids[:-1]], ids, strict=True) if pair in points]
        out[replica_id] = [p for p in mine if p.at >= start]
    return out


def gateway_rows(deployment_id: int, start: float, end: float, resolution: int) -> list[tuple[float, dict]]:  # type: ignore[type-arg]
    """The gateway's per-period request counts of a deployment: (period end, values), oldest first."""
    shift = ROLLUP if resolution == Resolution.FIVE_MINUTES else 0
    rows = MetricSample.objects.filter(
        deployment_id=deployment_id,
        replica__isnull=True,
        resolution=resolution,
        at__gte=to_datetime(start - shift),
        at__lte=to_datetime(end),
    ).order_by("at")
    return [(r.at.timestamp() + shift, r.values) for r in rows]


def _engine_rollup(period: list[Point]) -> dict[str, object]:
    gauges: dict[str, list[float]] = {}
    deltas: dict[str, float] = {}
    hists: dict[str, list[Histogram]] = {}
    for p in period:
        for k, x in p.gauges.items():
            gauges.setdefault(k, []).append(x)
        for k, x in p.deltas.items():
            deltas[k] = deltas.get(k, 0.0) + x
        for k, h in p.hists.items():
            hists.setdefault(k, []).append(h)
    merged = {k: add_histograms(hs) for k, hs in hists.items()}
    return {
        "v": {k: sum(xs) / len(xs) for k, xs in gauges.items()},
        "d": deltas,
        "h": {k: _encode_hist(h) for k, h in merged.items() if h is not None},
        "n": len(period),
        "u": round(sum(p.dt for p in period), 3),  # seconds up: the steps' widths (a gap's baseline adds none)
    }


def merge_gateway(values: Iterable[dict]) -> dict:  # type: ignore[type-arg]
    """Several gateway periods' counts added up (``d`` counts, ``e`` errors by status, ``uh`` sparse histograms)."""
    out: dict = {"d": {}, "e": {}, "uh": {}}  # type: ignore[type-arg]
    for v in values:
        for part in ("d", "e"):
            for k, x in v.get(part, {}).items():
                out[part][k] = out[part].get(k, 0) + x
        for name, buckets in v.get("uh", {}).items():
            acc = out["uh"].setdefault(name, {})
            for idx, n in buckets.items():
                acc[idx] = acc.get(idx, 0) + n
    return out


def roll_up(now: float, interval: float) -> int:
    """Make the 5-minute rollups of every closed period not rolled up yet; returns how many were made."""
    made = 0
    closed = math.floor(now / ROLLUP) * ROLLUP
    keys = MetricSample.objects.filter(resolution=Resolution.SCRAPE).values_list("deployment_id", "replica_id")
    for deployment_id, replica_id in set(keys.distinct()):
        mine = MetricSample.objects.filter(deployment_id=deployment_id, resolution=Resolution.FIVE_MINUTES)
        mine = mine.filter(replica__isnull=True) if replica_id is None else mine.filter(replica_id=replica_id)
        last = mine.order_by("-at").values_list("at", flat=True).first()
        start = last.timestamp() + ROLLUP if last else now - RAW_KEEP.total_seconds()
        if start >= closed:
            continue
        made += _roll_up_one(deployment_id, replica_id, start, closed, interval)
    return made


def _roll_up_one(deployment_id: int, replica_id: int | None, start: float, closed: float, interval: float) -> int:
    base = MetricSample.objects.filter(deployment_id=deployment_id, resolution=Resolution.SCRAPE)
    base = base.filter(replica__isnull=True) if replica_id is None else base.filter(replica_id=replica_id)
    lead = GAP_STEPS * interval + 1 if replica_id is not None else 0
    rows = list(base.filter(at__gte=to_datetime(start - lead), at__lt=to_datetime(closed)).order_by("at"))
    periods: dict[int, list[object]] = {}
    if replica_id is not None:
        for p in steps(rows, interval, only=None):
            if p.at >= start:
                periods.setdefault(int(p.at // ROLLUP) * ROLLUP, []).append(p)
    else:
        for row in rows:
            periods.setdefault(int(row.at.timestamp() // ROLLUP) * ROLLUP, []).append(row.values)
    made = [
        MetricSample(
            deployment_id=deployment_id,
            replica_id=replica_id,
            at=to_datetime(at),
            resolution=Resolution.FIVE_MINUTES,
            values=_engine_rollup(items) if replica_id is not None else merge_gateway(items),  # type: ignore[arg-type]
        )
        for at, items in sorted(periods.items())
    ]
    with transaction.atomic():
        MetricSample.objects.bulk_create(made)
    return len(made)


def prune(now: float) -> int:
    """Delete raw samples older than RAW_KEEP and rollups older than ROLLUP_KEEP; returns rows deleted."""
    raw = MetricSample.objects.filter(resolution=Resolution.SCRAPE, at__lt=to_datetime(now - RAW_KEEP.total_seconds()))
    old = MetricSample.objects.filter(
        resolution=Resolution.FIVE_MINUTES, at__lt=to_datetime(now - ROLLUP_KEEP.total_seconds())
    )
    return raw.delete()[0] + old.delete()[0]
