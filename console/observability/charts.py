"""A deployment's time series for its charts (static/hearth-charts.js draws them with uPlot), over a range.

Ranges: 15 min and 1 h from scrape-resolution samples, 24 h from 5-minute rollups, 30 days from rollups merged
into hours. Replicas are combined per time slot as the panels combine them (counts and rates add up, KV-cache
use averages, histograms merge before their percentiles are read); a slot without data is null, and a gap
longer than three slots is broken with a null so the chart shows it rather than drawing across it.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from console.deployments.models import Deployment
from console.observability.history import ROLLUP, Point, engine_points, gateway_rows, merge_gateway
from console.observability.models import Resolution, ServiceLevel
from console.observability.outcomes import ERRORS
from console.observability.request_stats import sparse_histogram
from engines.metrics import Histogram, add_histograms, quantile


@dataclass(frozen=True)
class Range:
    seconds: int
    resolution: int
    step: float  # seconds per slot; 0 = the scrape interval


RANGES = {
    "15m": Range(900, Resolution.SCRAPE, 0),
    "1h": Range(3600, Resolution.SCRAPE, 0),
    "24h": Range(86400, Resolution.FIVE_MINUTES, ROLLUP),
    "30d": Range(30 * 86400, Resolution.FIVE_MINUTES, 3600),
}
SERIES = (
    "kv_cache_usage",
    "requests_running",
    "requests_waiting",
    "prompt_tps",
    "generation_tps",
    "ttft_p50",
    "ttft_p99",
    "user_ttft_p50",
    "user_ttft_p99",
    "itl_p50",
    "itl_p99",
    "user_itl_p50",
    "user_itl_p99",
    "requests_per_s",
    "errors_per_s",
)


def _q(q: float, h: Histogram | None) -> float | None:
    found = quantile(q, h)
    return None if found is None else round(found.seconds, 6)


def _engine_slot(points_by_replica: list[list[Point]]) -> dict[str, float | None]:
    """One slot's engine values from each replica's points in it."""
    kv, running, waiting, prompt, gen = [], [], [], [], []
    ttft: list[Histogram] = []
    itl: list[Histogram] = []
    for points in points_by_replica:
        last = points[-1].gauges
        if "kv_cache_usage" in last:
            kv.append(last["kv_cache_usage"])
        running += [last["requests_running"]] if "requests_running" in last else []
        waiting += [last["requests_waiting"]] if "requests_waiting" in last else []
        dt = sum(p.dt for p in points)
        if dt > 0:
            prompt.append(sum(p.deltas.get("prompt_tokens_total", 0.0) for p in points) / dt)
            gen.append(sum(p.deltas.get("generation_tokens_total", 0.0) for p in points) / dt)
        ttft += [p.hists["ttft_seconds"] for p in points if "ttft_seconds" in p.hists]
        itl += [p.hists["itl_seconds"] for p in points if "itl_seconds" in p.hists]
    merged_ttft, merged_itl = add_histograms(ttft), add_histograms(itl)
    return {
        "kv_cache_usage": round(100 * sum(kv) / len(kv), 2) if kv else None,
        "requests_running": sum(running) if running else None,
        "requests_waiting": sum(waiting) if waiting else None,
        "prompt_tps": round(sum(prompt), 2) if prompt else None,
        "generation_tps": round(sum(gen), 2) if gen else None,
        "ttft_p50": _q(0.5, merged_ttft),
        "ttft_p99": _q(0.99, merged_ttft),
        "itl_p50": _q(0.5, merged_itl),
        "itl_p99": _q(0.99, merged_itl),
    }


def _gateway_slot(values: list[dict], seconds: float) -> dict[str, float | None]:  # type: ignore[type-arg]
    merged = merge_gateway(values)
    ttft, itl = sparse_histogram(merged["uh"].get("ttft", {})), sparse_histogram(merged["uh"].get("itl", {}))
    d = merged["d"]
    return {
        "user_ttft_p50": _q(0.5, ttft),
        "user_ttft_p99": _q(0.99, ttft),
        "user_itl_p50": _q(0.5, itl),
        "user_itl_p99": _q(0.99, itl),
        "requests_per_s": round(d.get("requests", 0) / seconds, 3),
        # the service's failures, from the outcome counts (ERRORS): the same for samples stored before refusals
        # were counted apart, whose "errors" held them too
        "errors_per_s": round(sum(d.get(o, 0) for o in ERRORS) / seconds, 3),
    }


def series(dep: Deployment, name: str, now: float, since: float | None = None) -> dict[str, object]:
    """The range's series: ``{"t": [Unix s], "series": {name: [value | null]}, "step": s, "slo": {...},
    "max_num_seqs": n}``; with ``since``, only slots after it (the live update). Raises KeyError for an
    unknown range."""
    rng = RANGES[name]
    interval = float(settings.HEARTH_SCRAPE_INTERVAL)
    step = rng.step or interval
    start = max(now - rng.seconds, since or 0.0)
    slot: Callable[[float], int] = lambda at: math.floor(at / step)  # noqa: E731
    engine: dict[int, dict[int, list[Point]]] = {}
    for replica_points in engine_points(dep.pk, start, now, rng.resolution, interval).values():
        for p in replica_points:
            engine.setdefault(slot(p.at), {}).setdefault(id(replica_points), []).append(p)
    gateway: dict[int, list[dict]] = {}  # type: ignore[type-arg]
    for at, values in gateway_rows(dep.pk, start, now, rng.resolution):
        s = slot(at)
        if s not in engine:  # written in the same scrape as the engines' samples: the slot beside them
            s = next((n for n in (s - 1, s + 1) if n in engine and n not in gateway), s)
        gateway.setdefault(s, []).append(values)
    return _assemble(dep, engine, gateway, step, since)


def _assemble(
    dep: Deployment,
    engine: dict[int, dict[int, list[Point]]],
    gateway: dict[int, list[dict]],  # type: ignore[type-arg]
    step: float,
    since: float | None,
) -> dict[str, object]:
    t: list[float] = []
    out: dict[str, list[float | None]] = {k: [] for k in SERIES}
    previous = None
    for s in sorted(set(engine) | set(gateway)):
        if previous is not None and s - previous > 3:
            t.append((previous + 1) * step)
            for k in SERIES:
                out[k].append(None)
        row: dict[str, float | None] = dict.fromkeys(SERIES)
        if s in engine:
            row.update(_engine_slot(list(engine[s].values())))
        if s in gateway:
            row.update(_gateway_slot(gateway[s], step))
        elif s in engine:
            row.update({"requests_per_s": 0.0, "errors_per_s": 0.0})  # the gateway logs every request
        t.append((s + 1) * step)
        for k in SERIES:
            out[k].append(row[k])
        previous = s
    slo = ServiceLevel.objects.filter(deployment=dep).first()
    per = dep.stored_plan.max_num_seqs
    return {
        "t": t,
        "series": out,
        "step": step,
        "since": since,
        "slo": {"ttft": slo.ttft_seconds if slo else None, "itl": slo.itl_seconds if slo else None},
        "max_num_seqs": per * max(dep.replica_count, 1) if per else None,
    }
