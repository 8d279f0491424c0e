"""Pre-flight's part of the JSON API: the worker's checks of the box."""

from django.http import HttpRequest
from ninja import Router, Schema, Status

from console.preflight.worker_report import NoAnswer, worker_report

router = Router(tags=["pre-flight"])


class CheckOut(Schema):
    name: str
    status: str  # "pass", "fail" or "not used"
    ok: bool  # not a failure
    detail: str
    fix: str


class DoctorOut(Schema):
    host: str
    checked_at: str
    ok: bool
    checks: list[CheckOut]


class Detail(Schema):
    detail: str


@router.get("/doctor", response={200: DoctorOut, 503: Detail})
def doctor(request: HttpRequest) -> Status[dict[str, object]]:
    """The pre-flight checks as the worker ran them (waits up to HEARTH_DOCTOR_WAIT s): 503 when none answered."""
    try:
        return Status(200, worker_report().as_dict())
    except NoAnswer as exc:
        return Status(503, {"detail": str(exc)})
