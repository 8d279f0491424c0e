"""The price a deployment charges per million tokens: steady, from its capacity, never from its momentary traffic.

Where it comes from, first found wins:

1. an admin's price for the deployment (Costs page): USD per million input (prompt) and output tokens, which may
   differ;
2. its last capacity check: $/hour ÷ (tokens/s × 3600) × 10⁶ at the prompt + output tokens/s of the most load the
   check held its SLO at (no failures, TTFT p90 and ITL p90 within the targets); recorded when the check ends
   (``record_capacity``), kept in DeploymentPrice;
3. until a check has run, the plan's estimate, said so: one decode step per replica reads the weights and every
   session's KV cache at the GPUs' memory bandwidth (a roofline: ``sessions × tp × bandwidth ÷ (weights +
   sessions × typical context × KV bytes per token)`` generated tokens/s, sessions the plan's concurrency at its
   typical context). A bound the engine never beats, so the price it gives is the lowest a check could give.

Without a $/hour (CPU, no GPU price: console.observability.cost.hourly_cost) and no admin price there is no price;
the gateway then charges nothing and the request log's cost is None ("no price"), never $0.

Contract with the gateway: after each scrape (and when a price is set) Redis key
``console.observability.cost.price_per_token(id)`` holds the USD per token as a decimal string, while a request can
reach the deployment and it has a price; the scrape deletes it otherwise (``publish_price``, ``unpublish_prices``).
Its TTL, PRICE_TTL, is a backstop for a worker that stopped altogether: a worker kept busy for a while by other tasks
leaves the last price in place (with a TTL of a few scrape intervals, the requests of such a gap were charged
nothing). It is the input price; the output price when it differs follows a comma
(``"0.0000005,0.0000015"``): the gateway reserves at the higher and charges prompt tokens at the first, completion
tokens at the second (gateway.reservations, gateway.charges). A request's charge is known the moment it ends.
"""

import functools
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

import redis
from django.conf import settings
from django.db import transaction
from django.forms import ModelForm

from console.audit.recording import form_changes, record
from console.deployments.models import Deployment
from console.observability.cost import MILLION, hourly_cost, price_per_token
from console.observability.models import DeploymentPrice, PriceSetting
from engines.capacity.results import LevelResult, Slo

PRICE_TTL = 3600  # seconds a published price outlives the last scrape that wrote it (module docstring)
REDIS_TIMEOUT = 5.0  # seconds a write of prices may take: a Redis that hangs must not hold the scrape
# HBM bandwidth per GPU, bytes/s, from the vendors' data sheets; longest name matched first
BANDWIDTH = {
    "H100 80GB HBM3": 3.35e12,  # H100 SXM5
    "H100 PCIe": 2.0e12,
    "H100 NVL": 3.9e12,
    "H200": 4.8e12,
    "B200": 8.0e12,
    "A100-SXM4-80GB": 2.039e12,
    "A100 80GB PCIe": 1.935e12,
    "A100-SXM4-40GB": 1.555e12,
    "A100-PCIE-40GB": 1.555e12,
    "L40S": 0.864e12,
    "L4": 0.3e12,
    "A10": 0.6e12,
    "RTX 4090": 1.008e12,
}


@dataclass(frozen=True)
class ChargedPrice:
    """USD per million input and output tokens a deployment charges (None both: no price), where it comes from
    (``source``: admin, capacity, plan or "" none), in words, and the tokens/s it divides by (capacity, plan)."""

    input_per_million: Decimal | None
    output_per_million: Decimal | None
    source: str
    words: str
    tokens_per_second: float | None = None

    @property
    def per_token(self) -> str | None:
        """The Redis value (module docstring); None without a price."""
        if self.input_per_million is None or self.output_per_million is None:
            return None
        first = _decimal_text(self.input_per_million / MILLION)
        if self.output_per_million == self.input_per_million:
            return first
        return f"{first},{_decimal_text(self.output_per_million / MILLION)}"


def charged_price(dep: Deployment, prices: list[PriceSetting] | None = None) -> ChargedPrice:
    """What ``dep`` charges now (module docstring)."""
    row = DeploymentPrice.objects.filter(deployment=dep).first()
    if row is not None and row.usd_per_million_input is not None and row.usd_per_million_output is not None:
        return ChargedPrice(row.usd_per_million_input, row.usd_per_million_output, "admin", "set by an admin")
    found = hourly_cost(dep, prices)
    hourly = found.usd_per_hour
    if hourly is None:
        return ChargedPrice(None, None, "", found.reason)
    if row is not None and row.measured_tokens_per_second:
        per = _per_million(hourly, row.measured_tokens_per_second)
        rate = row.measured_tokens_per_second
        words = f"from capacity check {row.measured_run_id}: {rate:,.0f} tokens/s held the SLO"
        return ChargedPrice(per, per, "capacity", words, rate)
    estimate = plan_tokens_per_second(dep)
    if estimate is None:
        return ChargedPrice(None, None, "", "no capacity check has run and the plan gives no throughput to estimate")
    per = _per_million(hourly, estimate)
    words = f"estimated from the plan ({estimate:,.0f} tokens/s at the GPUs' bandwidth) until a capacity check runs"
    return ChargedPrice(per, per, "plan", words, estimate)


def plan_tokens_per_second(dep: Deployment) -> float | None:
    """The plan's roofline estimate of generated tokens/s over all replicas (module docstring); None when the
    plan is not a GPU plan or its GPUs' bandwidth is not known."""
    plan = dep.stored_plan
    gpu = plan.gpu
    if gpu is None or not plan.gpu_indices:
        return None
    text = plan.gpu_name or plan.inventory
    bandwidth = next((bw for name, bw in sorted(BANDWIDTH.items(), key=lambda i: -len(i[0])) if name in text), None)
    sessions = min(gpu.concurrency_at_typical_context, float(gpu.max_num_seqs))
    if bandwidth is None or sessions <= 0:
        return None
    step_bytes = gpu.weights_bytes + sessions * gpu.typical_context * gpu.kv_bytes_per_token
    if step_bytes <= 0:
        return None
    replicas = max(1, len(plan.gpu_indices) // max(gpu.tensor_parallel_size, 1))
    return replicas * sessions * gpu.tensor_parallel_size * bandwidth / step_bytes


def measured_at_slo(levels: list[LevelResult], slo: Slo) -> float | None:
    """Prompt + output tokens/s of the level with the most of them among those that held ``slo`` (no failure,
    TTFT p90 and ITL p90 within it); None when none held."""
    held = [
        lv.prompt_tokens_per_s + lv.output_tokens_per_s
        for lv in levels
        if lv.failed == 0
        and lv.ttft_p90 is not None
        and lv.ttft_p90 <= slo.ttft_seconds
        and (lv.itl_p90 is None or lv.itl_p90 <= slo.itl_seconds)
    ]
    return max(held) if held else None


def record_capacity(dep: Deployment, levels: list[LevelResult], slo: Slo, run_id: int) -> float | None:
    """Keep what a finished capacity check measured at its SLO as ``dep``'s capacity and publish the price it
    gives; the tokens/s kept (None: no level held, and the last measurement stays)."""
    rate = measured_at_slo(levels, slo)
    if rate is None:
        return None
    fields = {"measured_tokens_per_second": rate, "measured_run_id": run_id, "measured_at": datetime.now(UTC)}
    DeploymentPrice.objects.update_or_create(deployment=dep, defaults=fields)
    publish_price(dep)
    return rate


def save_gpu_price(form: "ModelForm[PriceSetting]") -> PriceSetting:
    """A valid PriceForm's GPU price saved (the Costs page's form, ``POST /api/gpu-prices``), with its audit entry
    (``price.set``) where it changed something: the same price saved again writes none. Typed as Django's ModelForm:
    the gateway reads this module, and console.observability.forms is not for it (lint-imports)."""
    with transaction.atomic():
        row: PriceSetting = form.save()
        if changes := form_changes(form):
            record(None, "price.set", row, changes)
    return row


def set_price(dep: Deployment, input_per_million: Decimal | None, output_per_million: Decimal | None) -> None:
    """An admin's price for ``dep`` (None both: back to the one from capacity), with its audit entry
    (``deployment.price``; none when it was that already), published at once."""
    fields = {"usd_per_million_input": input_per_million, "usd_per_million_output": output_per_million}
    with transaction.atomic():
        before = DeploymentPrice.objects.select_for_update().filter(deployment=dep).values(*fields).first()
        DeploymentPrice.objects.update_or_create(deployment=dep, defaults=fields)
        change = {"usd_per_million_input": str(input_per_million), "usd_per_million_output": str(output_per_million)}
        if (before or dict.fromkeys(fields)) != fields:  # the same price set again changes nothing to audit
            record(None, "deployment.price", dep, change if input_per_million is not None else {"from": "capacity"})
    publish_price(dep)


def publish_price(dep: Deployment, prices: list[PriceSetting] | None = None) -> str | None:
    """Write ``dep``'s USD per token for the gateway (module docstring); returns what was written. Without a price
    (its GPU price or its admin's was removed) the one published before is deleted: requests are charged nothing
    from then on, and logged with no price."""
    value = charged_price(dep, prices).per_token
    client = _client(settings.REDIS_URL)
    if value is None:
        client.delete(price_per_token(dep.pk))
        return None
    client.set(price_per_token(dep.pk), value, ex=PRICE_TTL)
    return value


def unpublish_prices(deployment_ids: list[int]) -> None:
    """Delete the published prices of deployments no request can reach (stopped by an admin, failed)."""
    if deployment_ids:
        _client(settings.REDIS_URL).delete(*(price_per_token(pk) for pk in deployment_ids))


@functools.lru_cache(maxsize=4)
def _client(url: str) -> redis.Redis:
    """One client (and its connection pool) per Redis URL and process: a scrape publishes each deployment's
    price, and a client made per price was a connection made per deployment per scrape."""
    return redis.Redis.from_url(url, socket_timeout=REDIS_TIMEOUT, socket_connect_timeout=REDIS_TIMEOUT)


def _per_million(usd_per_hour: Decimal, tokens_per_second: float) -> Decimal:
    return (usd_per_hour / (Decimal(repr(tokens_per_second)) * 3600) * MILLION).quantize(Decimal("0.0001"))


def _decimal_text(value: Decimal) -> str:
    return format(value.normalize(), "f")
