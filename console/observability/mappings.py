"""The metric mappings in force: the MetricMapping rows an admin can edit (seeded from
engines.metric_mappings.DEFAULT_MAPPINGS by migration 0005), as engines.metric_mappings.MappingRow values, and the
reason a canonical metric has no data under a flavor."""

from console.observability.models import MetricMapping
from engines.metric_mappings import CANONICAL, DEFAULT_MAPPINGS, MappingRow


def mapping_rows() -> list[MappingRow]:
    """Every mapping row in the table (the defaults when an admin emptied it)."""
    rows = [
        MappingRow(m.flavor, m.engine, m.canonical, m.metric, m.label, m.min_version, m.max_version, m.source)
        for m in MetricMapping.objects.all()
    ]
    return rows or list(DEFAULT_MAPPINGS)


def no_data_reason(canonical: str, flavor: str, rows: list[MappingRow], present: bool = False) -> str:
    """Why ``canonical`` has no value under ``flavor``: the engine exposes no such metric, or its scrape lacks
    the mapped series (``present`` False), in words for the panel."""
    what = CANONICAL[canonical].what if canonical in CANONICAL else canonical
    mine = [r for r in rows if r.flavor == flavor and r.canonical == canonical]
    if not flavor:
        return "no metric mapping matches this engine's names"
    if not mine:
        return f"this engine ({flavor}) exposes no {what} metric"
    return f"the engine's scrape has no {mine[0].metric}"
