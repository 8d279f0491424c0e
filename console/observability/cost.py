"""What a deployment costs: $/hour from its GPUs' prices, what it cost per million tokens at the use it had, the
cost of hours nobody used it, and each API key's cost.

- $/hour = GPUs the deployment holds (its plan's ``gpu_indices``) × the PriceSetting of their GPU model (USD per
  GPU-hour; defaults in migration 0005 cite their sources; an admin edits them on the Costs page). A deployment
  on CPU, or on a GPU model without a price, has no $/hour: the panels say so, never $0.
- Cost per million tokens at today's use (``use_cost``) = the GPU cost of a period ($/h × the hours it was up:
  the seconds between its scrapes, ``_periods``) ÷ the tokens it served in it (prompt + completion, from the
  request log) × 10⁶: what the box really cost per token, idle time included. The panel's live figure is the same
  division over the last 5 minutes (console.observability.panel). Neither is what a key is charged: that is the
  steady price per million tokens of console.observability.pricing.
- Idle cost: $/h × the time of the last 24 h the deployment was up in 5-minute periods in which it counted no
  token. Up time was once counted in whole 5-minute periods, which made a model that swaps in for two minutes look
  up for five (a trial's "20 min up" for ~6); rollups made before then still count whole.
- GPU time by state over the last 24 h (``gpu_time``): serving (up, with tokens), idle awake (up, none) and asleep
  or stopped to save (console.observability.swaps, from its sleeps, stops to save and wakes). Up means ready and
  scraped; an engine asleep is not scraped, so its sleeping time is never counted as serving or idle time, and is
  not charged (its GPUs are free for others but the 1.4 GiB it keeps a GPU).
- A key's cost (one definition, on every page and in every CSV) = the sum of what its requests were charged
  (RequestLog.cost_usd: tokens × the deployment's price per token when each ended); None where none was priced.

The Redis key the gateway reads a deployment's price per token from is ``price_per_token(deployment_id)`` =
``hearth:<HEARTH_INSTANCE>:price_per_token:<id>``; console.observability.pricing writes it.
"""

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import Sum
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce

from appliance.redis_keys import redis_key
from console.deployments.models import Deployment
from console.observability.history import GAP_STEPS, ROLLUP, RawSample, step, to_datetime
from console.observability.models import MetricSample, PriceSetting, RequestLog, Resolution
from console.observability.swaps import asleep_seconds, window_events

THROUGHPUT_WINDOW = 60  # seconds of counter deltas behind the panels' tokens/s
MILLION = Decimal(1_000_000)


@dataclass(frozen=True)
class HourlyCost:
    """A deployment's $/hour, or why it has none (``usd_per_hour`` None and ``reason`` set)."""

    usd_per_hour: Decimal | None
    gpus: int
    gpu_model: str
    usd_per_gpu_hour: Decimal | None
    reason: str = ""


def gpu_model_of(dep: Deployment, prices: list[PriceSetting]) -> PriceSetting | None:
    """The price row whose GPU name appears in the inventory the deployment was planned on (longest first)."""
    text = dep.stored_plan.inventory
    for row in sorted(prices, key=lambda p: -len(p.gpu_model)):
        if row.gpu_model and row.gpu_model in text:
            return row
    return None


def hourly_cost(dep: Deployment, prices: list[PriceSetting] | None = None) -> HourlyCost:
    """$/hour of a deployment's GPUs (see the module docstring)."""
    gpus = len(dep.stored_plan.gpu_indices)
    if dep.external:
        return HourlyCost(None, 0, "", None, "Hearth did not launch it, so it knows no GPUs to price")
    if not gpus:
        return HourlyCost(None, 0, "", None, "runs on CPU, where no GPU price applies")
    row = gpu_model_of(dep, list(PriceSetting.objects.all()) if prices is None else prices)
    if row is None:
        return HourlyCost(None, gpus, "", None, "no price is set for its GPU model (Costs page)")
    return HourlyCost(row.usd_per_gpu_hour * gpus, gpus, row.gpu_model, row.usd_per_gpu_hour)


def usd_per_million(usd_per_hour: Decimal | None, tokens_per_second: float | None) -> Decimal | None:
    """$/h ÷ (tokens/s × 3600) × 10⁶: the cost per million tokens at that use; None without a price or without
    tokens (an idle deployment)."""
    if usd_per_hour is None or not tokens_per_second or tokens_per_second <= 0:
        return None
    return usd_per_hour / (Decimal(repr(tokens_per_second)) * 3600) * MILLION


def price_per_token(deployment_id: int) -> str:
    """The Redis key of a deployment's current USD per token (one function: the namespacing switch)."""
    return f"{price_key_prefix()}{deployment_id}"


def price_key_prefix() -> str:
    """What every deployment's price key starts with (the gateway watches it: gateway.prices)."""
    return redis_key("price_per_token:")


@dataclass
class Period:
    """One 5-minute period of a deployment: ``up`` (seconds any replica was up: ready and scraped) and ``tokens``
    (prompt + completion the engines counted in it)."""

    up: float = 0.0
    tokens: float = 0.0


TOKEN_COUNTERS = ("generation_tokens_total", "prompt_tokens_total")


def _periods(dep: Deployment, start: datetime, end: datetime) -> dict[float, Period]:
    """5-minute period start (Unix s) → its Period, for every period in [start, end) with a sample: the rollups
    (their ``u``; a rollup made before it was kept counts whole), and the raw samples of the periods not rolled up
    yet, differenced as the panels difference them (console.observability.history.step: a step across a gap, an
    engine asleep or down, adds no time). A period's up time is its longest-up replica's."""
    engines = MetricSample.objects.filter(deployment=dep, replica__isnull=False, at__gte=start, at__lt=end)
    up: dict[tuple[float, int | None], float] = {}
    tokens: dict[float, float] = {}
    last = None
    rollups = engines.filter(resolution=Resolution.FIVE_MINUTES).values_list(  # only the numbers, not the rows
        "at", "replica_id", KT("values__u"), *(KT(f"values__d__{c}") for c in TOKEN_COUNTERS)
    )
    for at, replica_id, seconds, *counted in rollups:
        key = at.timestamp()
        up[key, replica_id] = float(ROLLUP if seconds is None else seconds)
        tokens[key] = tokens.get(key, 0.0) + sum(float(n or 0) for n in counted)
        last = key if last is None else max(last, key)
    first = start.timestamp() if last is None else last + ROLLUP
    interval = float(settings.HEARTH_SCRAPE_INTERVAL)
    since = to_datetime(first - GAP_STEPS * interval - 1)  # the sample each replica's first step differences from
    recent = MetricSample.objects.filter(
        deployment=dep, replica__isnull=False, resolution=Resolution.SCRAPE, at__gte=since, at__lt=end
    )
    counters = [KT(f"values__v__{c}") for c in TOKEN_COUNTERS]
    prev: dict[int | None, RawSample] = {}
    for replica_id, at, *counted in recent.order_by("replica_id", "at").values_list("replica_id", "at", *counters):
        values = {c: float(n) for c, n in zip(TOKEN_COUNTERS, counted, strict=True) if n is not None}
        cur: RawSample = (at.timestamp(), values, {})
        point = step(prev.get(replica_id), cur, interval)
        prev[replica_id] = cur
        if point.at < first:  # before the window: only what its first step differences from
            continue
        key = point.at // ROLLUP * ROLLUP
        up[key, replica_id] = up.get((key, replica_id), 0.0) + point.dt
        tokens[key] = tokens.get(key, 0.0) + sum(point.deltas.values())
    periods: dict[float, Period] = {}
    for (key, _), seconds in up.items():
        period = periods.setdefault(key, Period(tokens=tokens.get(key, 0.0)))
        period.up = max(period.up, seconds)
    return periods


def idle_hours(dep: Deployment, now: datetime) -> tuple[float, float]:
    """(hours up, hours up in 5-minute periods with no token counted) over the last 24 h."""
    periods = _periods(dep, now - timedelta(hours=24), now + timedelta(seconds=1)).values()
    return sum(p.up for p in periods) / 3600, sum(p.up for p in periods if not p.tokens) / 3600


@dataclass(frozen=True)
class GpuTime:
    """Hours of the last 24 h a deployment spent serving, idle awake and asleep, and the GPUs it holds awake
    (GPU-hours = hours × gpus)."""

    serving: float
    idle: float
    asleep: float
    gpus: int


def gpu_time(dep: Deployment, now: datetime) -> GpuTime:
    """``dep``'s GPU time by state over the 24 h before ``now`` (module docstring)."""
    up, idle = idle_hours(dep, now)
    start = now - timedelta(hours=24)  # its put-aside time alone: not swaps()'s counts and request-log query
    asleep = asleep_seconds(dep, start, now, window_events(dep, start)) / 3600
    return GpuTime(max(up - idle, 0.0), idle, asleep, len(dep.stored_plan.gpu_indices))


def hours_up(dep: Deployment, day: date) -> float:
    """Hours of ``day`` (UTC) the deployment was up (``_periods``)."""
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return sum(p.up for p in _periods(dep, start, start + timedelta(days=1)).values()) / 3600


@dataclass(frozen=True)
class KeyCost:
    """One API key's use of one deployment on one day."""

    day: date
    deployment: str
    key_id: int | None
    key_name: str
    tokens: int
    share: float
    usd: Decimal | None


def visible_to(costs: list[KeyCost], own: set[int] | None) -> list[KeyCost]:
    """``costs`` as someone who sees only the keys ``own`` holds (None: everyone's) may see them: the others
    summed into one "other keys" row per deployment and day, so the shares still add up to the whole."""
    if own is None:
        return costs
    mine = [k for k in costs if k.key_id in own]
    others: dict[tuple[date, str], list[KeyCost]] = {}
    for k in costs:
        if k.key_id not in own:
            others.setdefault((k.day, k.deployment), []).append(k)
    for (day, deployment), rows in others.items():
        priced = [k.usd for k in rows if k.usd is not None]
        usd = sum(priced, Decimal(0)) if len(priced) == len(rows) else None
        mine.append(
            KeyCost(day, deployment, None, "other keys", sum(k.tokens for k in rows), sum(k.share for k in rows), usd)
        )
    return sorted(mine, key=lambda k: -k.tokens)


def key_costs(day: date, only: Deployment | None = None) -> list[KeyCost]:
    """Every key's tokens and cost per deployment (or ``only`` that one) on ``day`` (UTC), largest first: the cost
    is what its requests were charged (module docstring), its share its part of the deployment's tokens. A key
    whose requests there used and were charged nothing (all refused, or for a model no deployment serves) has no
    row."""
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    logs = RequestLog.objects.filter(created_at__gte=start, created_at__lt=start + timedelta(days=1))
    if only is not None:
        logs = logs.filter(model=only.served_model_name)
    rows = logs.values("model", "api_key_id", "api_key__name").annotate(
        tokens=Coalesce(Sum("prompt_tokens"), 0) + Coalesce(Sum("completion_tokens"), 0), usd=Sum("cost_usd")
    )
    totals: dict[str, int] = {}
    for row in rows:
        totals[row["model"]] = totals.get(row["model"], 0) + row["tokens"]
    out = []
    for row in rows:
        if not row["tokens"] and not row["usd"]:  # refused (a model it does not serve too): nothing used or charged
            continue
        total = totals[row["model"]]
        name = row["api_key__name"] or "(deleted key)"
        share = row["tokens"] / total if total else 0.0
        out.append(KeyCost(day, row["model"], row["api_key_id"], name, row["tokens"], share, row["usd"]))
    return sorted(out, key=lambda k: -k.tokens)


@dataclass(frozen=True)
class UseCost:
    """A deployment's GPU cost over a period, the tokens it served in it and their quotient, USD per million
    tokens (None: no $/hour, or no token served)."""

    label: str
    usd: Decimal | None
    tokens: int
    usd_per_million: Decimal | None


USE_PERIODS = (("last 24 h", 1), ("last 7 days", 7), ("last 30 days", 30))


def use_cost(dep: Deployment, label: str, start: datetime, end: datetime, usd_per_hour: Decimal | None) -> UseCost:
    """Cost per million tokens at the use ``dep`` had from ``start`` to ``end`` (module docstring)."""
    logs = RequestLog.objects.filter(model=dep.served_model_name, created_at__gte=start, created_at__lt=end)
    used = logs.aggregate(t=Coalesce(Sum("prompt_tokens"), 0) + Coalesce(Sum("completion_tokens"), 0))["t"]
    if usd_per_hour is None:
        return UseCost(label, None, used, None)
    seconds = sum(p.up for p in _periods(dep, start, end).values())
    usd = usd_per_hour * Decimal(repr(round(seconds, 3))) / 3600
    return UseCost(label, usd, used, usd / used * MILLION if used else None)


def use_costs(dep: Deployment, now: datetime, usd_per_hour: Decimal | None) -> list[UseCost]:
    """``use_cost`` over each of USE_PERIODS ending at ``now`` that began after ``dep`` was made, and the first that
    began before, named "since made" (a review saw "24 h, 7 days, 30 days" with one figure three times for a
    deployment 40 s old)."""
    out: list[UseCost] = []
    for label, days in USE_PERIODS:
        start = now - timedelta(days=days)
        if start < dep.created_at:
            return [*out, use_cost(dep, "since made", dep.created_at, now, usd_per_hour)]
        out.append(use_cost(dep, label, start, now, usd_per_hour))
    return out
