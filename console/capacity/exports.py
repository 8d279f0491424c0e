"""A run as JSON and CSV, and two runs side by side.

JSON: the run (what was asked, what ran, the sentence against the plan) with one object per level.
CSV: one row per level, the run's facts repeated on each row, so rows of several runs can be concatenated
and compared in a spreadsheet. Units in the column names: seconds (``_s``), tokens/s, requests/s, 0–1.
"""

import csv
import io
from dataclasses import dataclass
from typing import Any

from console.capacity.models import CapacityResult, CapacityRun

RESULT_FIELDS = (
    "level",
    "requests",
    "succeeded",
    "duration_s",
    "ttft_p50",
    "ttft_p90",
    "ttft_p99",
    "itl_p50",
    "itl_p90",
    "itl_p99",
    "tpot_p50",
    "per_user_tokens_per_s",
    "output_tokens_per_s",
    "prompt_tokens_per_s",
    "goodput_rps",
    "goodput_ratio",
    "cache_hit_ratio",
    "mean_prompt_tokens",
    "mean_output_tokens",
)
ENGINE_FIELDS = (
    "kv_cache_peak",
    "preemptions",
    "running_peak",
    "waiting_peak",
    "waiting_mean",
    "running_while_waiting",
)
CSV_UNITS = {k: f"{k}_s" for k in RESULT_FIELDS if k.startswith(("ttft", "itl_", "tpot"))}  # seconds


def result_dict(result: CapacityResult) -> dict[str, Any]:
    out: dict[str, Any] = {name: getattr(result, name) for name in RESULT_FIELDS}
    return out | {"failures": result.failures, "engine": result.engine}


def run_dict(run: CapacityRun) -> dict[str, Any]:
    """The whole run, JSON-able."""
    return {
        "id": run.pk,
        "deployment": run.deployment_name,
        "label": run.label,
        "state": run.state,
        "state_reason": run.state_reason,
        "created_at": run.created_at.isoformat(),
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "profile": run.profile,
        "mode": run.mode,
        "levels": run.levels,
        "shared_prefix": run.shared_prefix,
        "requests_per_level": run.requests_per_level,
        "max_seconds": run.max_seconds,
        "shape": run.shape,
        "provenance": run.provenance,
        "progress": run.progress,
        "summary": run.summary,
        "tuning": run.tuning_id,
        "tuning_value": run.tuning_value,
        "results": [result_dict(r) for r in run.results.all()],
    }


def run_csv(run: CapacityRun) -> str:
    """One row per level, with the run's id, label, profile, mode, prefix, engine, version, image,
    model revision and GPUs on each."""
    prov = run.provenance
    facts = {
        "run": run.pk,
        "label": run.label,
        "deployment": run.deployment_name,
        "profile": run.profile,
        "mode": run.mode,
        "shared_prefix": run.shared_prefix,
        "engine": prov.get("engine", ""),
        "engine_version": prov.get("engine_version", ""),
        "engine_image": prov.get("engine_image", ""),
        "model_revision": prov.get("model_revision", ""),
        "gpus": prov.get("gpus", ""),
    }
    columns = [*facts, *(CSV_UNITS.get(k, k) for k in RESULT_FIELDS), "failed", *ENGINE_FIELDS]
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(columns)
    for result in run.results.all():
        values = [getattr(result, k) for k in RESULT_FIELDS]
        engine = [result.engine.get(k) for k in ENGINE_FIELDS]
        writer.writerow([*facts.values(), *values, result.failed, *engine])
    return out.getvalue()


COMPARED = (
    ("TTFT p50", "ttft_p50", "s"),
    ("TTFT p90", "ttft_p90", "s"),
    ("ITL p50", "itl_p50", "s"),
    ("ITL p90", "itl_p90", "s"),
    ("per-user tokens/s", "per_user_tokens_per_s", ""),
    ("output tokens/s", "output_tokens_per_s", ""),
    ("goodput, requests/s", "goodput_rps", ""),
    ("failed", "failed", ""),
    ("prefix-cache hits", "cache_hit_ratio", "%"),
)


@dataclass(frozen=True)
class Row:
    """One number at one level in two runs; ``change`` is b / a − 1 (None when either is missing or a is 0)."""

    level: float
    name: str
    unit: str
    a: float | None
    b: float | None

    @property
    def change(self) -> float | None:
        if self.a is None or self.b is None or self.a == 0:
            return None
        return self.b / self.a - 1


def compare(a: CapacityRun, b: CapacityRun) -> list[Row]:
    """The numbers of the levels both runs measured, level by level."""
    mine = {r.level: r for r in a.results.all()}
    theirs = {r.level: r for r in b.results.all()}
    rows = []
    for level in sorted(set(mine) & set(theirs)):
        for name, field, unit in COMPARED:
            rows.append(Row(level, name, unit, getattr(mine[level], field), getattr(theirs[level], field)))
    return rows


def by_number(rows: list[Row]) -> list[tuple[str, str, list[Row]]]:
    """``compare``'s rows grouped by number (name, unit, one row per level), in COMPARED's order."""
    return [(name, unit, [r for r in rows if r.name == name]) for name, _, unit in COMPARED]


def setting_differences(a: CapacityRun, b: CapacityRun) -> list[tuple[str, Any, Any]]:
    """What differed between the two runs' deployments and checks: (name, a's, b's)."""

    def flat(run: CapacityRun) -> dict[str, Any]:
        prov = run.provenance
        out = {k: v for k, v in prov.items() if k not in ("settings", "plan", "slo")}
        out |= {f"setting {k}": v for k, v in (prov.get("settings") or {}).items()}
        out |= {f"SLO {k}": v for k, v in (prov.get("slo") or {}).items()}
        out |= {"profile": run.profile, "mode": run.mode, "shared prefix": run.shared_prefix, "levels": run.levels}
        return out

    left, right = flat(a), flat(b)
    return [(k, left.get(k), right.get(k)) for k in sorted(set(left) | set(right)) if left.get(k) != right.get(k)]
