"""Capacity checks' part of the JSON API: start, follow, cancel, export and compare checks; the deployment's
SLO; tuning one knob."""

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Field, Router, Schema, Status
from pydantic import StrictBool, StrictFloat

from console.api_bodies import Body, Integer
from console.capacity import exports, runs, tuning
from console.capacity.models import CapacityRun, Tuning
from console.deployments.models import Deployment
from console.errors import ConsoleError

router = Router(tags=["capacity"])


class CheckIn(Body):
    """A check: ``levels`` users (concurrency) or requests/s (rate); empty: the profile's."""

    profile: str = "chat"
    mode: str = "concurrency"
    levels: list[StrictFloat] = Field(default_factory=list)
    shared_prefix: StrictBool = False
    requests_per_level: Integer = 0
    max_seconds: Integer = 300
    prompt_tokens: Integer = 0
    output_tokens: Integer = 0
    label: str = ""
    confirm_live_traffic: StrictBool = False

    def check(self) -> dict[str, Any]:
        return self.dict(exclude={"label", "confirm_live_traffic"})


class ResultOut(Schema):
    level: float
    requests: int
    succeeded: int
    failures: dict[str, int]
    duration_s: float
    ttft_p50: float | None
    ttft_p90: float | None
    ttft_p99: float | None
    itl_p50: float | None
    itl_p90: float | None
    itl_p99: float | None
    tpot_p50: float | None
    per_user_tokens_per_s: float | None
    output_tokens_per_s: float
    prompt_tokens_per_s: float
    goodput_rps: float
    goodput_ratio: float
    cache_hit_ratio: float | None
    mean_prompt_tokens: float | None
    mean_output_tokens: float | None
    engine: dict[str, float | None]


class RunOut(Schema):
    id: int
    deployment_name: str
    label: str
    state: str
    state_reason: str
    progress: float
    progress_text: str
    profile: str
    mode: str
    levels: list[float]
    shared_prefix: bool
    requests_per_level: int
    max_seconds: int
    shape: dict[str, int]
    provenance: dict[str, Any]
    summary: str
    created_at: datetime
    finished_at: datetime | None
    tuning_value: Any = None
    results: list[ResultOut]

    @staticmethod
    def resolve_results(obj: CapacityRun) -> list[Any]:
        return list(obj.results.all())


def _run(pk: int) -> CapacityRun:
    return runs.current(get_object_or_404(CapacityRun, pk=pk))


@router.post("/deployments/{pk}/capacity-checks", response={202: RunOut})
def start_check(request: HttpRequest, pk: int, data: CheckIn) -> Status[CapacityRun]:
    """Queue a check (400 with the reason when refused, e.g. live traffic without ``confirm_live_traffic``)."""
    dep = get_object_or_404(Deployment.objects.select_related("model"), pk=pk)
    run = runs.start_check(
        dep, request.user, label=data.label, confirm_live_traffic=data.confirm_live_traffic, **data.check()
    )
    return Status(202, run)


@router.get("/deployments/{pk}/capacity-checks", response=list[RunOut])
def list_checks(request: HttpRequest, pk: int) -> list[CapacityRun]:
    runs.fail_stale_runs(pk)
    return list(CapacityRun.objects.filter(deployment_id=pk).order_by("-pk"))


@router.get("/capacity-checks/compare", response=dict[str, Any])
def compare(request: HttpRequest, a: int, b: int) -> dict[str, Any]:
    """Two runs side by side: what differed between them, and each level's numbers with b / a − 1."""
    first, second = _run(a), _run(b)
    rows = [
        {"level": r.level, "name": r.name, "a": r.a, "b": r.b, "change": r.change}
        for r in exports.compare(first, second)
    ]
    differences = [{"name": n, "a": x, "b": y} for n, x, y in exports.setting_differences(first, second)]
    return {"a": a, "b": b, "differences": differences, "rows": rows}


@router.get("/capacity-checks/{pk}", response=RunOut)
def get_check(request: HttpRequest, pk: int) -> CapacityRun:
    return _run(pk)


@router.get("/capacity-checks/{pk}/export", response=dict[str, Any])
def export_check(request: HttpRequest, pk: int) -> dict[str, Any]:
    """The whole run as JSON (CSV: the page's /capacity/runs/{pk}/export.csv)."""
    return exports.run_dict(_run(pk))


@router.post("/capacity-checks/{pk}/cancel", response={202: RunOut})
def cancel_check(request: HttpRequest, pk: int) -> Status[CapacityRun]:
    run = get_object_or_404(CapacityRun, pk=pk)  # as it stands: one whose worker stopped answering is cancelled
    runs.cancel_check(run)
    return Status(202, run)


class SloIn(Body):
    """TTFT and ITL targets, seconds: JSON numbers, ints or floats (strict: ``true`` or ``"1.5"`` is refused with
    400 naming the field, not read as 1.0 or 1.5), in console.observability.service_level's range; ``null``: that
    target is not checked, as a blank one on the deployment page. Both are required."""

    ttft_seconds: StrictFloat | None
    itl_seconds: StrictFloat | None


@router.post("/deployments/{pk}/slo", response=SloIn)
def set_slo(request: HttpRequest, pk: int, data: SloIn) -> dict[str, float | None]:
    """The deployment's SLO, which goodput is measured at on its panels and in its capacity checks: TTFT and
    ITL targets, seconds (console.observability.service_level)."""
    dep = get_object_or_404(Deployment, pk=pk)
    runs.set_slo(dep, data.ttft_seconds, data.itl_seconds)
    return {"ttft_seconds": data.ttft_seconds, "itl_seconds": data.itl_seconds}


class TuningIn(Body):
    """A knob and its values ("64, 128" or a list), and the check each value runs."""

    knob: str
    values: str | list[Any]
    check: CheckIn = Field(default_factory=CheckIn)


class TuningOut(Schema):
    id: int
    deployment_name: str
    knob: str
    values: list[Any]
    state: str
    state_reason: str
    step: int
    downtime_seconds: float | None
    best_value: Any = None
    applied: bool
    runs: list[int]

    @staticmethod
    def resolve_runs(obj: Tuning) -> list[int]:
        return list(obj.runs.order_by("pk").values_list("pk", flat=True))


@router.post("/deployments/{pk}/tunings", response={202: TuningOut})
def start_tuning(request: HttpRequest, pk: int, data: TuningIn) -> Status[Tuning]:
    """Queue a tuning: each value relaunches the deployment (its downtime in ``downtime_seconds``)."""
    dep = get_object_or_404(Deployment.objects.select_related("model"), pk=pk)
    raw = data.values if isinstance(data.values, str) else ", ".join(str(v) for v in data.values)
    values = tuning.parse_values(data.knob, raw)
    return Status(202, tuning.start_tuning(dep, request.user, data.knob, values, data.check.check()))


@router.get("/tunings/{pk}", response=TuningOut)
def get_tuning(request: HttpRequest, pk: int) -> Tuning:
    return tuning.current(get_object_or_404(Tuning, pk=pk))


@router.post("/tunings/{pk}/{action}", response={202: TuningOut})
def tuning_action(request: HttpRequest, pk: int, action: str) -> Status[Tuning]:
    """``cancel`` (after the value being measured) or ``apply-best`` (through the change flow)."""
    row = get_object_or_404(Tuning, pk=pk)
    actions = {"cancel": tuning.cancel_tuning, "apply-best": tuning.apply_best}
    if action not in actions:
        raise ConsoleError(f"Unknown action {action!r}: cancel or apply-best.")
    actions[action](row)
    return Status(202, row)
