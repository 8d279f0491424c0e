"""Template filters of the capacity pages: ratios as percentages, levels as people write them, and
"no data" for a number the engine did not give."""

from django import template

register = template.Library()


@register.filter
def percent(value: float | None, digits: int = 1) -> str:
    """0.334 → "33.4 %"; None → "no data"."""
    return "no data" if value is None else f"{value * 100:.{digits}f} %"


@register.filter
def number(value: float | None, digits: int = 3) -> str:
    """A number with at most ``digits`` significant decimals, thousands separated; None → "—"."""
    if value is None:
        return "—"
    if float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


@register.filter
def change(value: float | None) -> str:
    """b / a − 1 as a signed percentage: 0.26 → "+26 %"; None → "—"."""
    return "—" if value is None else f"{value * 100:+.0f} %"
