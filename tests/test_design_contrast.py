"""The design system's colours (static/hearth.css custom properties) keep WCAG AA in both themes: every text
colour on every background it is drawn on has a contrast ratio of at least 4.5:1 (WCAG 2.1's relative luminance),
and the white labels of the plan's memory bar on their fills too."""

import re
from pathlib import Path

import pytest

CSS = (Path(__file__).resolve().parent.parent / "static" / "hearth.css").read_text()
DARK = "@media (prefers-color-scheme: dark)"
TEXTS = ("text", "text-2", "accent", "ok", "err", "warn", "info", "idle", "sim")
BACKGROUNDS = ("bg", "surface", "surface-2")
BADGES = ("ok", "err", "warn", "info", "idle", "sim")  # a state's colour on its own tint (span.state.ready, ...)


def colours(text: str) -> dict[str, str]:
    """The ``--name: #rrggbb`` custom properties in ``text``."""
    return dict(re.findall(r"--([\w-]+):\s*(#[0-9a-fA-F]{6})\b", text))


def themes() -> dict[str, dict[str, str]]:
    """Each theme's colours: light is :root's; dark is light with the prefers-color-scheme block's over it."""
    light = colours(CSS[CSS.index(":root {") : CSS.index(DARK)])
    dark_block = CSS[CSS.index(DARK) :]
    dark_block = dark_block[: dark_block.index("\n}\n")]
    return {"light": light, "dark": light | colours(dark_block)}


def luminance(colour: str) -> float:
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def ratio(a: str, b: str) -> float:
    """WCAG contrast ratio of two #rrggbb colours, 1 to 21."""
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def pairs() -> list[tuple[str, str]]:
    return (
        [(t, b) for t in TEXTS for b in BACKGROUNDS]
        + [(name, f"{name}-bg") for name in BADGES]
        + [("accent-text", "accent"), ("header-text", "header-bg"), ("header-accent", "header-bg")]
    )


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_text_colour_has_aa_contrast_on_its_backgrounds(theme: str) -> None:
    values = themes()[theme]
    low = {f"{fg} on {bg}": round(ratio(values[fg], values[bg]), 2) for fg, bg in pairs()}
    assert {pair: r for pair, r in low.items() if r < 4.5} == {}


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_memory_bar_labels_read_on_their_fills(theme: str) -> None:
    values = themes()[theme]
    assert all(ratio("#ffffff", values[fill]) >= 4.5 for fill in ("mem-weights", "mem-kv")), values
