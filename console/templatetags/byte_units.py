"""Template filters for sizes: binary units (KiB, MiB, GiB, TiB of 2^10, 2^20, 2^30, 2^40 bytes) everywhere,
as vLLM and nvidia-smi report memory, so one page never mixes GB and GiB (Django's filesizeformat divides
by 1024 but writes "GB")."""

from django import template

register = template.Library()

UNITS = ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))


@register.filter
def iec(value: int | float | str | None) -> str:
    """``141107412992`` → ``"131.4 GiB"``; under 1 KiB, ``"512 bytes"``; None or "" → ``""``."""
    if value is None or value == "":
        return ""
    size = float(value)
    for factor, unit in UNITS:
        if abs(size) >= factor:
            return f"{size / factor:,.1f} {unit}"
    return f"{size:,.0f} bytes"
