"""Template filters of the capacity pages: ratios as percentages, levels as people write them, and
"no data" for a number the engine did not give."""

from django import template

register = template.Library()


@register.filter
def percent(value: object, digits: int = 1) -> str:
    """0.334 → "33.4 %"; None, or what is not a number (a key missing from a result's engine numbers, which a
    template reads as ""), → "no data"."""
    return f"{value * 100:.{digits}f} %" if isinstance(value, int | float) else "no data"


@register.filter
def number(value: object, digits: int = 3) -> str:
    """A number with at most ``digits`` significant decimals, thousands separated; None or not a number → "—"."""
    if not isinstance(value, int | float):
        return "—"
    if float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


@register.filter
def change(value: float | None) -> str:
    """b / a − 1 as a signed percentage: 0.26 → "+26 %"; None → "—"."""
    return "—" if value is None else f"{value * 100:+.0f} %"
