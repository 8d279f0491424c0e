"""Hearth's own /metrics, engine side: the canonical engine series of every serving replica's last good scrape,
labelled ``deployment`` and ``replica``, beside the gateway's series (gateway.accounting). Served by
gateway.metrics_endpoint's ``metrics_app``; names are ``hearth_engine_<canonical>``
(engines.metrics.CANONICAL): gauges as gauges, counters as counters (``_total``), histograms with the
engine's own buckets, plus
``hearth_engine_scrape_age_seconds`` (how old each replica's numbers are) and each deployment's
``hearth_deployment_usd_per_hour`` and ``hearth_deployment_tokens_per_second``.
"""

import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from console.deployments.models import Deployment, DeploymentState
from console.observability.history import _decode_hists
from console.observability.models import MetricSample, Resolution
from console.observability.panel import panels
from engines.metrics import CANONICAL, COUNTER, HISTOGRAM

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
        age = GaugeMetricFamily("hearth_engine_scrape_age_seconds", "Seconds since the replica's last good scrape",
                                labels=LABELS)  # fmt: skip
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


def _add(families: dict[str, Any], labels: list[str], values: dict) -> None:  # type: ignore[type-arg]
    for name, value in values.get("v", {}).items():
        if name in families:
            families[name].add_metric(labels, value)
    for name, h in _decode_hists(values.get("h", {})).items():
        if name in families:
            buckets = [(repr(b), c) for b, c in zip(h.bounds, h.counts, strict=False)] + [("+Inf", h.counts[-1])]
            families[name].add_metric(labels, buckets, h.total)


def _deployment_families(deps: list[Deployment]) -> Iterator[Metric]:
    hourly = GaugeMetricFamily("hearth_deployment_usd_per_hour", "A deployment's GPUs' price, USD/hour",
                               labels=["deployment"])  # fmt: skip
    tps = GaugeMetricFamily("hearth_deployment_tokens_per_second", "Prompt + generation tokens/s over the last minute",
                            labels=["deployment"])  # fmt: skip
    for panel in panels(deps):
        if panel.cost is not None and panel.cost.usd_per_hour is not None:
            hourly.add_metric([panel.dep.name], float(panel.cost.usd_per_hour))
        if panel.tokens_per_second is not None:
            tps.add_metric([panel.dep.name], panel.tokens_per_second)
    yield hourly
    yield tps


def engine_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector())
    return registry
