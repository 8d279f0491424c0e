"""A deployment's numbers now, from the history and the request log, for the panels, the dashboard and the API.

Honesty rules (issue 12): a replica whose last good scrape is older than ``STALE_AFTER_SCRAPES`` intervals is
flagged and left out of every sum (never averaged in as zero); a panel older than that reads as stale; a metric
the engine does not expose has no value and a reason; counters become rates over ``THROUGHPUT_WINDOW`` with
engine restarts counted as resets; engine percentiles come from the histograms' observations over
``LATENCY_WINDOW`` and read "> X s" beyond the last finite bucket; user-visible figures are exact, from the
request log over the same window and the requests the gateway relays now (console.observability.in_flight: a
busy box's long streams count from their first byte, not only once they end).
"""

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.conf import settings

from console.deployments.models import (
    ACTIVE_STATES,
    ASLEEP_STATES,
    Deployment,
    DeploymentEvent,
    DeploymentState,
    Replica,
)
from console.observability.cost import THROUGHPUT_WINDOW, HourlyCost, hourly_cost, usd_per_million
from console.observability.history import Point, engine_points
from console.observability.in_flight import in_flight
from console.observability.mappings import mapping_rows, no_data_reason
from console.observability.models import PriceSetting, Resolution, ScrapeHealth
from console.observability.pricing import ChargedPrice, charged_price
from console.observability.request_stats import RequestStats, window_stats
from console.observability.swaps import Swaps, since_words, state_class, state_label, swaps
from engines.metric_mappings import RATIO_METRICS, MappingRow
from engines.metrics import Quantile, add_histograms, quantile
from engines.room import asleep_bytes_per_gpu, awake_bytes_per_gpu, gib, gpus_words

STALE_AFTER_SCRAPES = 3
LATENCY_WINDOW = 300  # seconds behind percentiles, outcomes, error rate and goodput
GAUGES = (
    "kv_cache_usage",
    "requests_running",
    "requests_waiting",
    "kv_cache_size_tokens",
    "prefix_cache_hit_rate",
    "spec_accept_length",
)
COUNTERS_SHOWN = ("generation_tokens_total", "prompt_tokens_total")
NO_ANSWER = "no replica's /metrics answered in the last scrapes"  # a number's reason, the scraper being at work


@dataclass
class ReplicaHealth:
    """One serving replica's scrapes: age of its last good one (seconds), failures in a row, the last error."""

    replica_id: int
    name: str
    age_seconds: float | None
    failures: int
    error: str
    series: int
    flavor: str

    @property
    def fresh(self) -> bool:
        return self.age_seconds is not None and self.age_seconds <= STALE_AFTER_SCRAPES * _interval()


@dataclass
class Panel:
    """One deployment's numbers now. Absent keys have no data; ``reasons`` says why."""

    dep: Deployment
    replicas: list[ReplicaHealth] = field(default_factory=list)
    values: dict[str, float] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    engine_ttft: dict[str, Quantile | None] = field(default_factory=dict)
    engine_itl: dict[str, Quantile | None] = field(default_factory=dict)
    requests: RequestStats = field(default_factory=RequestStats)
    cost: HourlyCost | None = None
    charged: ChargedPrice | None = None
    age_seconds: float | None = None
    swaps: Swaps = field(default_factory=Swaps)
    woke_seconds: float | None = None  # since it became ready after a wake, while it is ready; else None
    ready_seconds: float | None = None  # since it became ready, while it is ready; else None
    held_by_class: dict[str, int] | None = None  # held in the gateway's lanes, per class (queue_depth; None: unknown)
    unscraped: bool = False  # the scraper has tried nothing lately (the dashboard's banner says why): no replica judged

    @property
    def state(self) -> str:
        """Its state in words: "ready", "asleep (level 2)", "stopped to save"... (console.observability.swaps)."""
        return state_label(self.dep)

    @property
    def state_class(self) -> str:
        return state_class(self.dep)

    @property
    def since(self) -> str:
        return since_words(self.dep)

    @property
    def put_aside(self) -> bool:
        """Asleep, going to sleep or waking: its engine runs, serving nothing."""
        return self.dep.state in ASLEEP_STATES

    @property
    def held(self) -> str:
        """What its engines hold of the GPUs now, in words ("1.4 GiB on each of GPUs 0–3", "73.2 GiB on GPU 0"); ""
        on the CPU."""
        plan = self.dep.stored_plan
        if plan.gpu is None or not plan.gpu_indices or self.dep.state not in ACTIVE_STATES:
            return ""
        awake = awake_bytes_per_gpu(plan.as_gpu())
        held = asleep_bytes_per_gpu(awake) if self.dep.state == DeploymentState.ASLEEP else awake
        where = gpus_words(plan.gpu_indices)
        return f"{gib(held)} on {where}" if len(plan.gpu_indices) == 1 else f"{gib(held)} on each of {where}"

    @property
    def held_words(self) -> str:
        """The gateway's lanes' queue, in words: "3 standard · 12 batch held", "none held", or why it is unknown."""
        if self.held_by_class is None:
            return "held: unknown (no gateway count: Redis does not answer)"
        held = [f"{n:,} {name}" for name, n in self.held_by_class.items() if n]
        return f"{' · '.join(held)} held" if held else "none held"

    @property
    def ready(self) -> bool:
        return self.dep.state == DeploymentState.READY

    @property
    def stale(self) -> bool:
        late = self.age_seconds is None or self.age_seconds > STALE_AFTER_SCRAPES * _interval()
        return self.ready and late and not self.just_woke and not self.first_scrape_due

    @property
    def failing(self) -> list[ReplicaHealth]:
        """Replicas without a recent good scrape; none while the scraper itself tries nothing (``unscraped``: a trial
        saw "1 replica not answering" for one serving every request, with the upkeep worker killed)."""
        if self.just_woke or self.first_scrape_due or self.unscraped:
            return []
        return [r for r in self.replicas if not r.fresh]

    def scraper_silent(self) -> None:
        """The scraper has tried nothing lately (the dashboard's banner says why): no replica is judged by its old
        scrapes (``failing``), and a number is missing for that, not because the engine did not answer (a trial)."""
        self.unscraped = True
        for name, why in self.reasons.items():
            if why.startswith(NO_ANSWER):
                self.reasons[name] = "nothing was scraped lately: the scraper is silent (the dashboard says why)"

    @property
    def first_scrape_due(self) -> bool:
        """Ready less than STALE_AFTER_SCRAPES scrape intervals ago, with no scrape yet: its first has not come;
        neither stale nor failing."""
        since = self.ready_seconds
        return since is not None and self.age_seconds is None and since <= STALE_AFTER_SCRAPES * _interval()

    @property
    def just_woke(self) -> bool:
        """Ready again after a wake less than STALE_AFTER_SCRAPES scrape intervals ago: its last scrape is from before
        its sleep (an asleep engine is not scraped), and the next one has not come yet; neither stale nor failing."""
        return self.woke_seconds is not None and self.woke_seconds <= STALE_AFTER_SCRAPES * _interval()

    @property
    def max_num_seqs(self) -> int | None:
        per = self.dep.stored_plan.max_num_seqs
        return per * max(self.dep.replica_count, 1) if per else None

    @property
    def tokens_per_second(self) -> float | None:
        """Prompt + generation tokens/s over THROUGHPUT_WINDOW (what $ per million tokens divides by)."""
        parts = [self.values.get("prompt_tokens_per_second"), self.values.get("generation_tokens_per_second")]
        return None if any(p is None for p in parts) else sum(p for p in parts if p is not None)

    @property
    def usd_per_million(self) -> object:
        """Cost per million tokens at the last LATENCY_WINDOW's use: $/hour over the prompt + generation tokens/s
        of those 5 minutes (console.observability.cost); not the price charged (``charged``)."""
        return usd_per_million(self.cost.usd_per_hour if self.cost else None, self.values.get("tokens_per_second_5m"))


def _interval() -> float:
    return float(settings.HEARTH_SCRAPE_INTERVAL)


def replica_health(deps: list[Deployment], now: float) -> dict[int, list[ReplicaHealth]]:
    """Health of each deployment's running replicas, by deployment id (a replica never scraped has no age);
    two queries for all of them."""
    running = list(
        Replica.objects.filter(deployment__in=deps, running=True).only("deployment_id", "runtime_name").order_by("id")
    )
    health = {h.replica_id: h for h in ScrapeHealth.objects.filter(replica__in=running)}
    out: dict[int, list[ReplicaHealth]] = {d.pk: [] for d in deps}
    for replica in running:
        h = health.get(replica.pk)
        age = now - h.last_success_at.timestamp() if h and h.last_success_at else None
        out[replica.deployment_id].append(
            ReplicaHealth(
                replica.pk,
                replica.runtime_name,
                age,
                h.failures_in_row if h else 0,
                h.last_error if h else "",
                h.series if h else 0,
                h.flavor if h else "",
            )
        )
    return out


def panels(deps: list[Deployment], now: float | None = None) -> list[Panel]:
    """Panels for several deployments, with the request-log window and the gateway's requests in flight read once
    and the replicas in two queries for all of them."""
    now = time.time() if now is None else now
    rows = mapping_rows()
    prices = list(PriceSetting.objects.all())
    ready = [d for d in deps if d.state == DeploymentState.READY]
    since = datetime.fromtimestamp(now - LATENCY_WINDOW, UTC)
    stats = window_stats(ready, since, flights=in_flight(d.pk for d in ready)) if ready else {}
    health = replica_health(ready, now) if ready else {}
    out = []
    moment = datetime.fromtimestamp(now, UTC)
    for dep in deps:
        panel = Panel(dep, cost=hourly_cost(dep, prices), charged=charged_price(dep, prices), swaps=swaps(dep, moment))
        if dep.state == DeploymentState.READY:
            woke = dep.events.filter(kind=DeploymentEvent.Kind.WAKE, at__gte=dep.state_since).exists()
            panel.ready_seconds = now - dep.state_since.timestamp()
            panel.woke_seconds = panel.ready_seconds if woke else None
            panel.requests = stats.get(dep.pk, RequestStats())
            panel.replicas = health[dep.pk]
            _fill(panel, now, rows)
        else:
            why = (
                "the deployment has not been launched yet"
                if dep.never_launched
                else f"the deployment is {dep.state_words}"
            )
            panel.reasons = dict.fromkeys((*GAUGES, *COUNTERS_SHOWN), why)
        out.append(panel)
    return out


def live_panel(dep: Deployment, now: float | None = None) -> Panel:
    return panels([dep], now)[0]


def _fill(panel: Panel, now: float, rows: list[MappingRow]) -> None:
    fresh = {r.replica_id for r in panel.replicas if r.fresh}
    points = engine_points(panel.dep.pk, now - LATENCY_WINDOW, now, Resolution.SCRAPE, _interval())
    mine = {rid: pts for rid, pts in points.items() if rid in fresh and pts}
    if mine:
        panel.age_seconds = max(now - pts[-1].at for pts in mine.values())
    else:  # stale: how old the newest good scrape of any replica is
        ages = [r.age_seconds for r in panel.replicas if r.age_seconds is not None]
        panel.age_seconds = min(ages) if ages else None
    _gauges(panel, mine)
    _rates(panel, mine, now)
    _latencies(panel, mine)
    flavor = next((r.flavor for r in panel.replicas if r.flavor), "")
    if not mine:
        errors = sorted({r.error for r in panel.replicas if r.error})  # e.g. an Ollama endpoint: no /metrics at all
        why = NO_ANSWER if panel.replicas else "no replica is running"
        why += f" ({errors[0]})" if errors and panel.replicas else ""
        why = "its first scrape has not come yet (it has just become ready)" if panel.first_scrape_due else why
        panel.reasons = {k: why for k in (*GAUGES, *COUNTERS_SHOWN, "ttft", "itl")}
        return
    for name in (*GAUGES, *COUNTERS_SHOWN):
        if name not in panel.values:
            panel.reasons[name] = no_data_reason(name, flavor, rows)
    for name in ("ttft_seconds", "itl_seconds"):
        if not any(name in p.hists for pts in mine.values() for p in pts):
            panel.reasons[name.split("_")[0]] = no_data_reason(name, flavor, rows)


def _gauges(panel: Panel, mine: dict[int, list[Point]]) -> None:
    latest = [pts[-1] for pts in mine.values()]
    for name in (*GAUGES, *COUNTERS_SHOWN):
        found = [p.gauges[name] for p in latest if name in p.gauges]
        if found:
            panel.values[name] = sum(found) / len(found) if name in RATIO_METRICS else sum(found)


def _window_sum(points: list[Point], name: str, since: float) -> tuple[float, float] | None:
    """(delta, seconds) of a counter over the points ending after ``since``; None if the counter is absent."""
    inside = [p for p in points if p.at > since and p.dt > 0]
    if not inside or not any(name in p.deltas for p in inside):
        return None
    return sum(p.deltas.get(name, 0.0) for p in inside), sum(p.dt for p in inside)


def _rates(panel: Panel, mine: dict[int, list[Point]], now: float) -> None:
    for counter, rate in (
        ("prompt_tokens_total", "prompt_tokens_per_second"),
        ("generation_tokens_total", "generation_tokens_per_second"),
    ):
        parts = [_window_sum(pts, counter, now - THROUGHPUT_WINDOW) for pts in mine.values()]
        if parts and all(p is not None and p[1] > 0 for p in parts):
            panel.values[rate] = sum(p[0] / p[1] for p in parts if p is not None)
        else:
            panel.reasons[rate] = "needs two scrapes of a token counter"
    recent = [
        [s for name in COUNTERS_SHOWN if (s := _window_sum(pts, name, now - LATENCY_WINDOW)) is not None]
        for pts in mine.values()
    ]
    if recent and all(parts and parts[0][1] > 0 for parts in recent):  # every replica's prompt + generation rate
        panel.values["tokens_per_second_5m"] = sum(sum(d for d, _ in parts) / parts[0][1] for parts in recent)
    sums: dict[str, float] = {}
    for name in (
        "prefix_cache_hits_total",
        "prefix_cache_queries_total",
        "preemptions_total",
        "spec_accepted_tokens_total",
        "spec_draft_tokens_total",
    ):
        found = [s for pts in mine.values() if (s := _window_sum(pts, name, now - LATENCY_WINDOW)) is not None]
        if found:
            sums[name] = sum(s[0] for s in found)
    if sums.get("prefix_cache_queries_total"):
        panel.values["prefix_hit_ratio"] = sums.get("prefix_cache_hits_total", 0.0) / sums["prefix_cache_queries_total"]
    elif "prefix_cache_hit_rate" in panel.values:
        panel.values["prefix_hit_ratio"] = panel.values["prefix_cache_hit_rate"]
    if sums.get("spec_draft_tokens_total"):
        panel.values["spec_acceptance"] = sums.get("spec_accepted_tokens_total", 0.0) / sums["spec_draft_tokens_total"]
    if "preemptions_total" in sums:
        panel.values["preemptions"] = sums["preemptions_total"]


def _latencies(panel: Panel, mine: dict[int, list[Point]]) -> None:
    for name, target in (("ttft_seconds", panel.engine_ttft), ("itl_seconds", panel.engine_itl)):
        merged = add_histograms([p.hists[name] for pts in mine.values() for p in pts if name in p.hists])
        for q in (0.5, 0.9, 0.99):
            target[f"p{round(q * 100)}"] = quantile(q, merged)
