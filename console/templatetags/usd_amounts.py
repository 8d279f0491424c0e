"""Template filter for amounts charged in USD, written one way on every page that shows one (the request log, usage,
costs, panels, keys, members): small amounts keep two significant digits, so a charge never reads as nothing."""

import math
from decimal import Decimal

from django import template

register = template.Library()


def usd_text(amount: Decimal | float) -> str:
    """``1234.5`` → "$1,234.50", ``0.0123`` → "$0.0123", ``0.000067`` → "$0.000067" (two significant digits below a
    cent, down to nano-USD, the request log's resolution), exactly 0 → "$0.00"."""
    value = float(amount)
    if value == 0 or abs(value) >= 1:
        return f"${value:,.2f}"
    if abs(value) >= 0.01:
        return f"${value:.4f}"
    digits = min(9, 1 - math.floor(math.log10(abs(value))))
    return f"${value:.{digits}f}"


@register.filter
def charged(value: Decimal | float | str | None) -> str:
    """An amount charged as ``usd_text`` writes it; None or "" → "no price" (no price applied)."""
    return "no price" if value is None or value == "" else usd_text(Decimal(str(value)))


@register.filter
def spent(value: Decimal | float | str | None) -> str:
    """A sum of charges as ``usd_text`` writes it; None (no request with a price in the period) → "nothing (no priced
    request)", never "$0.00", which would say priced requests cost nothing."""
    return "nothing (no priced request)" if value is None or value == "" else usd_text(Decimal(str(value)))
