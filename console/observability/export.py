"""Hearth's own /metrics, engine side: the canonical engine series of every serving replica's last good scrape,
labelled ``deployment`` and ``replica``, beside the gateway's series (gateway.accounting). Served by
gateway.metrics_endpoint's ``metrics_app``; names are ``hearth_engine_<canonical>``
(engines.metric_mappings.CANONICAL): gauges as gauges, counters as counters (``_total``), histograms with the
engine's own buckets, plus
``hearth_engine_scrape_age_seconds`` (how old each replica's numbers are) and each deployment's
``hearth_deployment_usd_per_hour`` and ``hearth_deployment_tokens_per_second``.

Sharing the GPUs over time (issue 29), for every deployment Hearth launched, from its state and its history of
sleeps and wakes (console.observability.swaps): ``hearth_deployment_state`` (1 for the state it is in, 0 for the
others: STATES), ``hearth_deployment_state_seconds`` (since it entered it), and over the last 24 h
``hearth_deployment_sleeps_last_24h`` (by level), ``..._wakes_last_24h``, ``..._wake_failures_last_24h``,
``..._wakes_without_room_last_24h`` (no room was made: it stayed asleep; not a failure),
``..._stops_to_save_last_24h``, ``..._asleep_seconds_last_24h`` and ``hearth_deployment_wake_seconds_last_24h``
(quantile 0.5 and 0.99). Gauges over a window, not counters: the history keeps a deployment's newest
DeploymentEvent.KEPT events, so a count of all of them would stop growing and then fall, which a counter may not.
"""

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from console.deployments.models import Deployment, DeploymentState
from console.observability.history import _decode_hists
from console.observability.models import MetricSample, Resolution
from console.observability.panel import panels
from console.observability.swaps import state_class, swaps
from engines.external import EXTERNAL_ENGINE
from engines.metric_mappings import CANONICAL, COUNTER, HISTOGRAM

LABELS = ["deployment", "replica"]


def _families() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, c in CANONICAL.items():
        full = f"hearth_engine_{name}"
        if c.kind == COUNTER:
            out[name] = CounterMetricFamily(full.removesuffix("_total"), f"Engine {c.what} ({c.unit})", labels=LABELS)
        elif c.kind == HISTOGRAM:
            out[name] = HistogramMetricFamily(full, f"Engine {c.what} ({c.unit})", labels=LABELS)
        else:
            out[name] = GaugeMetricFamily(full, f"Engine {c.what} ({c.unit})", labels=LABELS)
    return out


class EngineCollector(Collector):
    """Reads the database at each collection: one query per serving replica for its last sample."""

    def collect(self) -> Iterator[Metric]:
        families = _families()
        age = GaugeMetricFamily(
            "hearth_engine_scrape_age_seconds", "Seconds since the replica's last good scrape", labels=LABELS
        )
        deps = list(Deployment.objects.filter(state=DeploymentState.READY).order_by("name"))
        now = time.time()
        for dep in deps:
            for replica in dep.replicas.filter(running=True).order_by("id"):
                row = MetricSample.objects.filter(replica=replica, resolution=Resolution.SCRAPE).order_by("-at").first()
                if row is None:
                    continue
                labels = [dep.name, replica.runtime_name or str(replica.pk)]
                age.add_metric(labels, now - row.at.timestamp())
                _add(families, labels, row.values)
        yield age
        yield from families.values()
        yield from _deployment_families(deps)
        yield from _swap_families(list(Deployment.objects.exclude(engine=EXTERNAL_ENGINE).order_by("name")))


def _add(families: dict[str, Any], labels: list[str], values: dict) -> None:  # type: ignore[type-arg]
    for name, value in values.get("v", {}).items():
        if name in families:
            families[name].add_metric(labels, value)
    for name, h in _decode_hists(values.get("h", {})).items():
        if name in families:
            buckets = [(repr(b), c) for b, c in zip(h.bounds, h.counts, strict=False)] + [("+Inf", h.counts[-1])]
            families[name].add_metric(labels, buckets, h.total)


def _deployment_families(deps: list[Deployment]) -> Iterator[Metric]:
    hourly = GaugeMetricFamily(
        "hearth_deployment_usd_per_hour",
        "A serving deployment's GPUs' price, USD/hour (one asleep or not running is charged nothing: not listed)",
        labels=["deployment"],
    )
    tps = GaugeMetricFamily(
        "hearth_deployment_tokens_per_second",
        "Prompt + generation tokens/s over the last minute",
        labels=["deployment"],
    )
    for panel in panels(deps):
        if panel.cost is not None and panel.cost.usd_per_hour is not None:
            hourly.add_metric([panel.dep.name], float(panel.cost.usd_per_hour))
        if panel.tokens_per_second is not None:
            tps.add_metric([panel.dep.name], panel.tokens_per_second)
    yield hourly
    yield tps


STATES = (*DeploymentState.values, "stopped_to_save")  # a stop to save is "stopped" with desired "stopped_idle"


def _swap_families(deps: list[Deployment]) -> Iterator[Metric]:
    now = datetime.now(UTC)
    one = ["deployment"]
    state = GaugeMetricFamily("hearth_deployment_state", "1 for the state a deployment is in", labels=[*one, "state"])
    since = GaugeMetricFamily(
        "hearth_deployment_state_seconds", "Seconds a deployment has been in its state", labels=one
    )
    sleeps = GaugeMetricFamily(
        "hearth_deployment_sleeps_last_24h", "Sleeps in the last 24 h, by level", labels=[*one, "level"]
    )
    counts = {
        "wakes": GaugeMetricFamily("hearth_deployment_wakes_last_24h", "Wakes in the last 24 h", labels=one),
        "failed": GaugeMetricFamily(
            "hearth_deployment_wake_failures_last_24h", "Failed wakes in the last 24 h", labels=one
        ),
        "not_woken": GaugeMetricFamily(
            "hearth_deployment_wakes_without_room_last_24h",
            "Wakes no room was made for in the last 24 h (it stayed asleep)",
            labels=one,
        ),
        "stops": GaugeMetricFamily(
            "hearth_deployment_stops_to_save_last_24h", "Stops to save in the last 24 h", labels=one
        ),
        "asleep_seconds": GaugeMetricFamily(
            "hearth_deployment_asleep_seconds_last_24h",
            "Seconds asleep or stopped to save (put aside) in the last 24 h",
            labels=one,
        ),
    }
    wake = GaugeMetricFamily(
        "hearth_deployment_wake_seconds_last_24h",
        "Wake time (its start to ready), seconds, over the last 24 h's wakes",
        labels=[*one, "quantile"],
    )
    for dep in deps:
        name = dep.name
        now_in = "stopped_to_save" if state_class(dep) == "saving" else dep.state
        for each in STATES:
            state.add_metric([name, each], 1.0 if each == now_in else 0.0)
        since.add_metric([name], max((now - dep.state_since).total_seconds(), 0.0))
        found = swaps(dep, now)
        for level, n in found.by_level:
            sleeps.add_metric([name, str(level)], n)
        for key, family in counts.items():
            family.add_metric([name], float(getattr(found, key)))
        for q, seconds in (("0.5", found.wake_p50), ("0.99", found.wake_p99)):
            if seconds is not None:
                wake.add_metric([name, q], seconds)
    yield from (state, since, sleeps, *counts.values(), wake)


def engine_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector())
    return registry
