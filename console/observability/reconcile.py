"""A day's reconciliation of one deployment, to the cent: what its keys were charged, plus what batch-class requests
were let off (the batch discount), plus the GPU time no key's tokens paid for (idle), equals its GPU cost for the day.

GPU cost = $/hour × the hours of the day (UTC) it was up (console.observability.cost.hours_up). Each key's charge
is the sum of its requests' ``cost_usd`` that day (console.observability.cost's one definition of a key's cost).
Each is rounded to the cent (half up); idle is the GPU cost less the keys' charges as shown, so the table's rows
add up to its total exactly. At the price from capacity a key pays for the GPU time its tokens take at full load,
so idle is the rest; a negative one (an admin's price above the GPU cost, or more load than the check held) reads
"charged beyond the GPU cost". Batch-class requests (gateway.prices.price_factor) are charged
HEARTH_BATCH_PRICE_FACTOR of the price: their tokens took GPU time worth charge ÷ factor, so the rest of it is the
batch discount, not idle time (at the factor set now: a factor changed during the day makes it approximate).
Requests with no price are counted apart, charged nothing.
"""

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.db.models import Count, Q, Sum

from console.access.models import Priority
from console.deployments.models import Deployment
from console.observability.cost import hourly_cost, hours_up
from console.observability.models import PriceSetting, RequestLog

CENT = Decimal("0.01")
OTHER_KEYS = "other keys"


@dataclass(frozen=True)
class Reconciliation:
    """One deployment's day: ``keys`` (name, USD charged, to the cent), ``batch_discount_usd`` (the GPU time batch
    requests took beyond what they were charged; ``batch_charged``: there were any), ``idle_usd`` (the GPU cost no
    key paid for), ``gpu_usd`` (their sum), ``idle_hours`` (idle_usd at its $/hour), ``unpriced`` requests that ran
    (tokens counted) and were charged nothing, having no price; a refusal ran nothing and is not one."""

    deployment: Deployment
    day: date
    usd_per_hour: Decimal
    hours_up: float
    gpu_usd: Decimal
    keys: list[tuple[str, Decimal]] = field(default_factory=list)
    idle_usd: Decimal = Decimal(0)
    unpriced: int = 0
    batch_discount_usd: Decimal = Decimal(0)
    batch_charged: bool = False  # batch-class requests were charged that day (their discount may round to $0.00)
    below_a_cent: frozenset[str] = frozenset()  # the keys charged something that rounds to $0.00
    batch_below_a_cent: bool = False  # a batch discount above $0 that rounds to $0.00

    @property
    def charged_usd(self) -> Decimal:
        return sum((usd for _, usd in self.keys), Decimal(0))

    @property
    def idle_hours(self) -> float:
        return float(self.idle_usd / self.usd_per_hour) if self.usd_per_hour else 0.0


def cents(value: Decimal) -> Decimal:
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


def reconcile(dep: Deployment, day: date, own: set[int] | None = None) -> Reconciliation | None:
    """``dep``'s reconciliation of ``day`` (UTC); None when it has no $/hour (CPU, external, no GPU price) or was
    not up that day. ``own``: the keys the reader holds (None: sees every key by name); the others are one row."""
    hourly = hourly_cost(dep, list(PriceSetting.objects.all())).usd_per_hour
    hours = hours_up(dep, day)
    if hourly is None or not hours:
        return None
    gpu = cents(hourly * Decimal(round(hours * 3600)) / 3600)
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    logs = RequestLog.objects.filter(
        model=dep.served_model_name, created_at__gte=start, created_at__lt=start + timedelta(days=1)
    )
    by_key = (
        logs.values("api_key_id", "api_key__name")
        .annotate(
            usd=Sum("cost_usd"),
            batch_usd=Sum("cost_usd", filter=Q(priority=Priority.BATCH)),
            unpriced=Count(
                "id", filter=Q(cost_usd__isnull=True) & (Q(prompt_tokens__gt=0) | Q(completion_tokens__gt=0))
            ),
        )
        .order_by("api_key__name")
    )
    keys: dict[str, Decimal] = {}
    unpriced, batch_usd = 0, Decimal(0)
    for row in by_key:
        unpriced += row["unpriced"]
        batch_usd += row["batch_usd"] or 0
        if row["usd"] is None:
            continue
        mine = own is None or row["api_key_id"] in own
        name = (row["api_key__name"] or "(deleted key)") if mine else OTHER_KEYS
        keys[name] = keys.get(name, Decimal(0)) + row["usd"]
    shown = sorted(((name, cents(usd)) for name, usd in keys.items()), key=lambda k: (k[0] == OTHER_KEYS, k[0]))
    factor = Decimal(str(settings.HEARTH_BATCH_PRICE_FACTOR))
    discount = cents(batch_usd / factor - batch_usd)
    idle = gpu - sum((usd for _, usd in shown), Decimal(0)) - discount
    below = frozenset(name for name, usd in keys.items() if usd > 0 and not cents(usd))
    return Reconciliation(
        dep, day, hourly, hours, gpu, shown, idle, unpriced, discount, batch_usd > 0, below,
        batch_below_a_cent=batch_usd / factor > batch_usd and not discount,
    )  # fmt: skip


def reconcile_all(day: date, own: set[int] | None = None) -> list[Reconciliation]:
    """Every deployment's reconciliation of ``day`` that has one (``reconcile``), by name."""
    found = (reconcile(dep, day, own) for dep in Deployment.objects.order_by("name"))
    return [r for r in found if r is not None]
