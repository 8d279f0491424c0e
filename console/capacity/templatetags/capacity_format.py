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


@register.filter
def setting(value: object) -> str:
    """A deployment setting as the run recorded it, in words: True/False → "on"/"off", an empty list or text →
    "none", None → "—", 0 (gpu_memory_utilization, tensor parallel size: the planner's choice) → "auto"."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "—"
    if value in ("", [], {}):
        return "none"
    if isinstance(value, int | float) and value == 0:
        return "auto"
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return str(value)
