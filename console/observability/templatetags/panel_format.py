"""Filters that put units on the panels' numbers, the same way everywhere: seconds as ms below 1 s, "> X s"
past a histogram's last bucket, ratios as %, bytes in GiB (as vLLM reports), money in USD."""

from typing import Any

from django import template

from console.templatetags.usd_amounts import usd_text
from engines.metrics import Quantile

register = template.Library()
GIB = 1024**3


def _missing(value: object) -> bool:
    """None, or "" (what a template gives for a key that is absent: no data)."""
    return value is None or value == ""


@register.filter
def seconds(value: Any) -> str:
    """0.084 → "84 ms", 1.234 → "1.23 s", a Quantile beyond the last bucket → "> 20 s"; None → "no data"."""
    if _missing(value):
        return "no data"
    beyond = isinstance(value, Quantile) and value.beyond
    s = value.seconds if isinstance(value, Quantile) else float(value)
    text = f"{s * 1000:.0f} ms" if s < 1 else f"{s:.2f} s" if s < 100 else f"{s:,.0f} s"
    return f"> {text}" if beyond else text


@register.filter
def hours(value: Any) -> str:
    """Hours of GPU time: 4.0 → "4.0 h", under an hour in minutes (0.083 → "5 min", not "0.1 h"), under a minute
    in seconds (0.0014 → "5 s", not "0 min" beside the dollars it cost), under half a second "under 1 s", 0 →
    "none"; None → "no data"."""
    if _missing(value):
        return "no data"
    h = float(value)
    if h == 0:
        return "none"
    if h * 3600 < 59.5:
        return "under 1 s" if h * 3600 < 0.5 else f"{h * 3600:.0f} s"
    return f"{h * 60:.0f} min" if h < 1 else f"{h:,.1f} h"


@register.filter
def pct(value: Any, digits: int = 0) -> str:
    """A 0–1 ratio as a percentage; None → "no data"."""
    return "no data" if _missing(value) else f"{value * 100:.{digits}f} %"


@register.filter
def gib(value: Any) -> str:
    return "no data" if _missing(value) else f"{value / GIB:,.1f} GiB"


@register.filter
def gib_number(value: Any) -> str:
    """Bytes as a GiB number without the unit (for "used / total GiB")."""
    return "no data" if _missing(value) else f"{value / GIB:,.1f}"


@register.filter
def usd(value: Any) -> str:
    """USD with two decimals, and below a cent two significant digits as ``usd_text`` writes them (so a price per
    token never reads $0.00 or $0.0000); None or "" → "no price"."""
    if _missing(value):
        return "no price"
    v = float(value)
    return usd_text(v) if 0 < abs(v) < 0.01 else f"${v:,.2f}"


@register.filter
def rate(value: Any) -> str:
    """Tokens or requests per second, 1 decimal below 100."""
    if _missing(value):
        return "no data"
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


@register.filter
def count(value: Any) -> str:
    return "no data" if _missing(value) else f"{value:,.0f}"


@register.filter
def age(value: Any) -> str:
    """Seconds since something, in words: "2 s ago", "3 min ago"; None → "never"."""
    if _missing(value):
        return "never"
    if value < 120:
        return f"{value:.0f} s ago"
    return f"{value / 60:.0f} min ago" if value < 7200 else f"{value / 3600:.0f} h ago"


@register.filter
def get(mapping: dict, key: str) -> object:  # type: ignore[type-arg]
    return mapping.get(key) if mapping else None
