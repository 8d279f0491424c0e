"""Engine /metrics text → canonical samples, through name mappings kept as data.

The canonical vocabulary (``CANONICAL``) is what the console charts and Hearth's own /metrics re-exports;
``DEFAULT_MAPPINGS`` says, per engine flavor and version range, which engine series gives each canonical name,
with its source. The console seeds its editable mapping table from these rows (console.observability) and
passes the rows in force to ``parse_metrics``; this module holds no state.

The names each engine flavor exposes, and their sources, are engines.metric_mappings'.

A row's ``metric`` may end in a label selector, ``name{label="value",...}``: only those samples count.
Parsing uses prometheus_client's text parser. Values of several label sets add up (ratios average). A canonical
name absent from a scrape is absent from the result: the console shows "no data" with a reason, never 0.
"""

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from engines.metric_mappings import (
    CANONICAL,
    DEFAULT_MAPPINGS,
    ENGINE_FAMILIES,
    GAUGE,
    HISTOGRAM,
    RATIO_METRICS,
    Canonical,
    MappingRow,
)


@dataclass(frozen=True)
class Histogram:
    """A cumulative histogram: ``bounds`` are the finite upper bounds (seconds), ``counts`` the cumulative
    counts at each bound and one more for +Inf (so ``len(counts) == len(bounds) + 1``); ``total`` the sum."""

    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    total: float = 0.0

    @property
    def count(self) -> float:
        return self.counts[-1] if self.counts else 0.0


@dataclass(frozen=True)
class Scrape:
    """One scrape: canonical name → value (tokens, requests, or a 0–1 ratio) and histograms, at ``time``
    (Unix seconds); ``flavor`` the mapping used, ``series`` how many samples the engine exposed."""

    time: float
    values: dict[str, float]
    histograms: dict[str, Histogram] = field(default_factory=dict)
    flavor: str = ""
    series: int = 0


def version_tuple(version: str) -> tuple[int, ...] | None:
    """``"0.32.0"`` → (0, 32, 0); a local part (``+sim``) or suffix (``rc1``) ignored; None if unreadable."""
    parts = []
    for piece in version.lstrip("v").split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) or None


def split_selector(metric: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A row's metric → (sample name, the label pairs a sample must carry): ``a{m="d"}`` → ("a", (("m", "d"),)).
    Raises ValueError for a selector that is not ``label="value"`` pairs."""
    name, brace, rest = metric.partition("{")
    if not brace:
        return metric, ()
    if not rest.endswith("}"):
        raise ValueError(f"unclosed label selector in {metric!r}")
    pairs = []
    for part in filter(None, (p.strip() for p in rest[:-1].split(","))):
        label, eq, value = part.partition("=")
        if not eq or len(value) < 2 or value[0] != '"' or value[-1] != '"':
            raise ValueError(f'label selector {part!r} in {metric!r} is not label="value"')
        pairs.append((label.strip(), value[1:-1]))
    return name, tuple(pairs)


def _in_range(version: tuple[int, ...], row: MappingRow) -> bool:
    lo, hi = version_tuple(row.min_version), version_tuple(row.max_version)
    return (lo is None or version >= lo) and (hi is None or version < hi)


def sample_names(text: str) -> set[str]:
    """Every sample name in exposition text (histograms also by their base name). Raises ValueError."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(s.name for s in family.samples)
    return names


def choose_flavor(engine: str, version: str, present: set[str], rows: Sequence[MappingRow]) -> str:
    """The mapping flavor for a scrape: of the flavors of the engine's family (ENGINE_FAMILIES; an unknown engine
    may use any), the one whose names are most present in the scrape, the engine version Hearth read back
    breaking ties (vLLM 0.10 exposes both spellings); when none of them matches any name (an engine relabelled),
    the flavor of any family matching the most names. "" when nothing matches at all."""
    families = ENGINE_FAMILIES.get(engine)
    parsed = version_tuple(version) if engine != "simulator" else None  # the simulator imitates every flavor
    for pool in ([r for r in rows if families is None or r.engine in families], list(rows)):
        score: dict[str, list[int]] = {}
        for row in pool:
            entry = score.setdefault(row.flavor, [0, 0])
            entry[0] += split_selector(row.metric)[0] in present
            entry[1] = int(parsed is not None and _in_range(parsed, row))
        best = max(score.items(), key=lambda kv: (kv[1][0], kv[1][1]), default=("", [0, 0]))
        if best[1][0] > 0:
            return best[0]
    return ""


def parse_metrics(text: str, rows: Iterable[MappingRow] | str, time: float, flavor: str = "") -> Scrape:
    """Parse Prometheus exposition text with the mapping rows of one flavor.

    ``rows`` may be a flavor name, meaning DEFAULT_MAPPINGS' rows of it. Raises KeyError for an unknown flavor
    name and ValueError for text that is not Prometheus format.
    """
    if isinstance(rows, str):
        flavor = rows
        rows = [r for r in DEFAULT_MAPPINGS if r.flavor == rows]
        if not rows:
            raise KeyError(f"no metric mapping named {flavor!r}")
    scalars: dict[str, list[tuple[str, str, tuple[tuple[str, str], ...]]]] = {}
    histos: dict[str, str] = {}
    for row in rows:
        if CANONICAL.get(row.canonical, Canonical(GAUGE, "", "")).kind == HISTOGRAM:
            histos[row.metric] = row.canonical
        else:
            name, where = split_selector(row.metric)
            scalars.setdefault(name, []).append((row.canonical, row.label, where))
    found: dict[str, list[float]] = {}
    buckets: dict[str, dict[float, float]] = {}
    sums: dict[str, float] = {}
    series = 0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            series += 1
            for canonical, label, where in scalars.get(sample.name, ()):
                if any(sample.labels.get(k) != v for k, v in where):
                    continue
                raw = sample.value if not label else sample.labels.get(label)
                try:
                    found.setdefault(canonical, []).append(float(raw))  # type: ignore[arg-type]
                except (TypeError, ValueError):
                    continue  # a label such as "None": no data
            _histogram_sample(sample.name, sample.labels, sample.value, histos, buckets, sums)
    values = {name: (sum(vs) / len(vs) if name in RATIO_METRICS else sum(vs)) for name, vs in found.items()}
    histograms = {name: _histogram(les, sums.get(name, 0.0)) for name, les in buckets.items()}
    return Scrape(time=time, values=values, histograms=histograms, flavor=flavor, series=series)


def _histogram_sample(
    name: str,
    labels: dict[str, str],
    value: float,
    histos: dict[str, str],
    buckets: dict[str, dict[float, float]],
    sums: dict[str, float],
) -> None:
    base, _, suffix = name.rpartition("_")
    canonical = histos.get(base)
    if canonical is None:
        return
    if suffix == "bucket" and "le" in labels:
        le = float(labels["le"])
        acc = buckets.setdefault(canonical, {})
        acc[le] = acc.get(le, 0.0) + value
    elif suffix == "sum":
        sums[canonical] = sums.get(canonical, 0.0) + value


def _histogram(les: dict[float, float], total: float) -> Histogram:
    bounds = sorted(le for le in les if math.isfinite(le))
    counts = [les[b] for b in bounds] + [les.get(math.inf, les[bounds[-1]] if bounds else 0.0)]
    return Histogram(tuple(bounds), tuple(counts), total)


def counter_delta(older: float, newer: float) -> float:
    """How much a counter grew; a counter that went down means the engine restarted (a reset, as Prometheus's
    ``rate()`` treats it), so all of ``newer`` is new."""
    return newer if newer < older else newer - older


def histogram_delta(older: Histogram | None, newer: Histogram) -> Histogram:
    """The observations between two cumulative histograms; a reset (any count down) or a change of bounds
    keeps all of ``newer``."""
    if older is None or older.bounds != newer.bounds:
        return newer
    if any(n < o for n, o in zip(newer.counts, older.counts, strict=True)):
        return newer
    counts = tuple(n - o for n, o in zip(newer.counts, older.counts, strict=True))
    return Histogram(newer.bounds, counts, max(newer.total - older.total, 0.0))


def add_histograms(parts: Sequence[Histogram]) -> Histogram | None:
    """Observations of several histograms with the same bounds added up (others are left out); None if none."""
    if not parts:
        return None
    first = parts[0]
    same = [p for p in parts if p.bounds == first.bounds]
    counts = tuple(sum(c) for c in zip(*(p.counts for p in same), strict=True))
    return Histogram(first.bounds, counts, sum(p.total for p in same))


@dataclass(frozen=True)
class Quantile:
    """A percentile in seconds; ``beyond`` when it lies past the last finite bucket, so it is only known to be
    above ``seconds`` (shown "> X s")."""

    seconds: float
    beyond: bool = False


def quantile(q: float, hist: Histogram | None) -> Quantile | None:
    """The q-quantile (0–1) of a histogram's observations, interpolated linearly within its bucket as
    Prometheus's ``histogram_quantile`` does (the first bucket starts at 0). None when it holds none."""
    if hist is None or hist.count <= 0:
        return None
    rank = q * hist.count
    lower, below = 0.0, 0.0
    for bound, cumulative in zip(hist.bounds, hist.counts, strict=False):  # counts has +Inf's too
        if cumulative >= rank:
            inside = cumulative - below
            share = (rank - below) / inside if inside > 0 else 1.0
            return Quantile(lower + (bound - lower) * share)
        lower, below = bound, cumulative
    return Quantile(hist.bounds[-1] if hist.bounds else 0.0, beyond=True)


def tokens_per_second(older: Scrape, newer: Scrape, counter: str = "generation_tokens_total") -> float | None:
    """Rate of a token counter between two scrapes, tokens/s; None when either lacks it or no time passed.

    A counter that went down (engine restarted) gives None rather than a guess across the restart.
    """
    if counter not in older.values or counter not in newer.values or newer.time <= older.time:
        return None
    delta = newer.values[counter] - older.values[counter]
    return None if delta < 0 else delta / (newer.time - older.time)
