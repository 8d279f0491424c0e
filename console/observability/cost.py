"""What a deployment costs: $/hour from its GPUs' prices, $ per million tokens from measured throughput, the
cost of hours nobody used it, each API key's share, and the price per token the gateway charges.

- $/hour = GPUs the deployment holds (its plan's ``gpu_indices``) × the PriceSetting of their GPU model (USD per
  GPU-hour; defaults in migration 0005 cite their sources; an admin edits them on the Costs page). A deployment
  on CPU, or on a GPU model without a price, has no $/hour: the panels say so, never $0.
- $ per million tokens = $/h ÷ (tokens/s × 3600) × 10⁶ (DESIGN.md "Observe"), tokens/s = prompt + generation
  tokens/s over the last ``THROUGHPUT_WINDOW`` seconds, the same number the throughput panel shows.
- Idle cost: $/h × the 5-minute periods of the last 24 h in which the deployment was up but generated nothing.
- GPU time by state over the last 24 h (``gpu_time``): serving (up, with tokens), idle awake (up, none) and asleep
  (console.observability.swaps, from its sleeps and wakes). Up means ready and scraped; an engine asleep is not
  scraped, so its sleeping time is never counted as serving or idle time, and is not charged (its GPUs are free
  for others but the 1.4 GiB it keeps a GPU).
- A key's cost on a day = the deployment's cost that day ($/h × hours it was up, from the history) × the key's
  share of that deployment's tokens that day (prompt + completion, from the request log).

Contract with the gateway (wave 2): after each scrape, for every ready deployment with a $/hour and measured
tokens, Redis key ``price_per_token(deployment_id)`` = ``hearth:<HEARTH_INSTANCE>:price_per_token:<id>`` holds the
current USD per token as a decimal string (e.g. ``"0.00000083"``), with a TTL of ``PRICE_TTL_SCRAPES`` scrape
intervals. The rate comes from the last THROUGHPUT_WINDOW; when that window carried no tokens, from the last
hour, then the last 24 h of history; with no tokens in 24 h (nothing to measure) no key is written, and the
gateway finds none: it must then charge nothing and say so, rather than guess.
"""

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import redis
from django.conf import settings
from django.db.models import Sum
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce

from appliance.redis_keys import redis_key
from console.deployments.models import Deployment
from console.observability.models import MetricSample, PriceSetting, RequestLog, Resolution
from console.observability.swaps import swaps

THROUGHPUT_WINDOW = 60  # seconds of counter deltas behind tokens/s and $ per million tokens
PRICE_TTL_SCRAPES = 4
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
    """$/h ÷ (tokens/s × 3600) × 10⁶; None without a price or without tokens (an idle deployment)."""
    if usd_per_hour is None or not tokens_per_second or tokens_per_second <= 0:
        return None
    return usd_per_hour / (Decimal(repr(tokens_per_second)) * 3600) * MILLION


def price_per_token(deployment_id: int) -> str:
    """The Redis key of a deployment's current USD per token (one function: the namespacing switch)."""
    return f"{price_key_prefix()}{deployment_id}"


def price_key_prefix() -> str:
    """What every deployment's price key starts with (the gateway watches it: gateway.prices)."""
    return redis_key("price_per_token:")


def publish_price(dep: Deployment, usd_per_hour: Decimal | None, tokens_per_second: float | None) -> str | None:
    """Write the deployment's USD per token for the gateway (module docstring); returns what was written."""
    if usd_per_hour is None:
        return None
    rate = tokens_per_second if tokens_per_second else _longer_rate(dep)
    per_million = usd_per_million(usd_per_hour, rate)
    if per_million is None:
        return None
    value = format((per_million / MILLION).normalize(), "f")
    ttl = max(1, round(PRICE_TTL_SCRAPES * settings.HEARTH_SCRAPE_INTERVAL))
    redis.Redis.from_url(settings.REDIS_URL).set(price_per_token(dep.pk), value, ex=ttl)
    return value


def _longer_rate(dep: Deployment) -> float | None:
    """Tokens/s over the last hour, else the last 24 h, from the gateway's counts in the history."""
    now = datetime.now(UTC)
    for hours in (1, 24):
        since = now - timedelta(hours=hours)
        rows = MetricSample.objects.filter(deployment=dep, replica__isnull=True, at__gte=since)
        tokens = 0.0
        for values in rows.values_list("values", flat=True):
            d = values.get("d", {})
            tokens += d.get("prompt_tokens", 0) + d.get("completion_tokens", 0)
        if tokens:
            return tokens / (hours * 3600)
    return None


def _periods(dep: Deployment, start: datetime, end: datetime) -> dict[float, float]:
    """5-minute period start (Unix s) → tokens the engines counted in it, for every period in [start, end) with a
    sample: the rollups, and the raw samples of the periods not rolled up yet."""
    engines = MetricSample.objects.filter(deployment=dep, replica__isnull=False, at__gte=start, at__lt=end)
    periods: dict[float, float] = {}
    last = None
    rollups = engines.filter(resolution=Resolution.FIVE_MINUTES).values_list(  # only the two numbers, not the rows
        "at", KT("values__d__generation_tokens_total"), KT("values__d__prompt_tokens_total")
    )
    for at, generated, prompt in rollups:
        key = at.timestamp()
        periods[key] = periods.get(key, 0.0) + float(generated or 0) + float(prompt or 0)
        last = key if last is None else max(last, key)
    recent = engines.filter(resolution=Resolution.SCRAPE)
    if last is not None:
        recent = recent.filter(at__gte=datetime.fromtimestamp(last + 300, UTC))
    raw: dict[float, list[float]] = {}
    for at, generated in recent.values_list("at", KT("values__v__generation_tokens_total")):
        raw.setdefault(at.timestamp() // 300 * 300, []).append(float(generated or 0))
    for key, counts in raw.items():
        periods[key] = periods.get(key, 0.0) + (max(counts) - min(counts))
    return periods


def idle_hours(dep: Deployment, now: datetime) -> tuple[float, float]:
    """(hours up, hours up with no token counted) over the last 24 h, in whole 5-minute periods."""
    periods = _periods(dep, now - timedelta(hours=24), now + timedelta(seconds=1))
    period_hours = 300 / 3600
    return len(periods) * period_hours, sum(1 for t in periods.values() if not t) * period_hours


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
    asleep = swaps(dep, now, window=24 * 3600).asleep_seconds / 3600
    return GpuTime(max(up - idle, 0.0), idle, asleep, len(dep.stored_plan.gpu_indices))


def hours_up(dep: Deployment, day: date) -> float:
    """Hours of ``day`` (UTC) the deployment was up, in whole 5-minute periods with samples."""
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return len(_periods(dep, start, start + timedelta(days=1))) * 300 / 3600


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
    """Every key's tokens and cost per deployment (or ``only`` that one) on ``day`` (UTC), largest first (module
    docstring's method)."""
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    logs = RequestLog.objects.filter(created_at__gte=start, created_at__lt=start + timedelta(days=1))
    if only is not None:
        logs = logs.filter(model=only.served_model_name)
    rows = logs.values("model", "api_key_id", "api_key__name").annotate(
        tokens=Coalesce(Sum("prompt_tokens"), 0) + Coalesce(Sum("completion_tokens"), 0)
    )
    deployments = {d.served_model_name: d for d in ([only] if only else Deployment.objects.all())}
    prices = list(PriceSetting.objects.all())
    totals: dict[str, int] = {}
    for row in rows:
        totals[row["model"]] = totals.get(row["model"], 0) + row["tokens"]
    day_cost: dict[str, Decimal | None] = {}
    for name, dep in deployments.items():
        if name not in totals:
            continue
        hourly = hourly_cost(dep, prices).usd_per_hour
        day_cost[name] = None if hourly is None else hourly * Decimal(repr(hours_up(dep, day)))
    out = []
    for row in rows:
        total = totals[row["model"]]
        share = row["tokens"] / total if total else 0.0
        cost = day_cost.get(row["model"])
        usd = None if cost is None else cost * Decimal(repr(share))
        out.append(
            KeyCost(
                day, row["model"], row["api_key_id"], row["api_key__name"] or "(deleted key)", row["tokens"], share, usd
            )
        )
    return sorted(out, key=lambda k: -k.tokens)
