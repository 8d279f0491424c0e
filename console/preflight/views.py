"""The Pre-flight page: the worker's checks of the box, loaded into the page once the worker answers."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console.preflight.worker_report import NoAnswer, worker_report


@login_required
def doctor_page(request: HttpRequest) -> HttpResponse:
    """Pre-flight: the page shell; its table comes from doctor_checks once the worker has answered."""
    return render(request, "preflight/doctor.html")


@login_required
def doctor_checks(request: HttpRequest) -> HttpResponse:
    """The pre-flight table as the worker sees it (htmx; waits up to HEARTH_DOCTOR_WAIT seconds)."""
    try:
        context: dict[str, object] = {"report": worker_report()}
    except NoAnswer as exc:
        context = {"error": str(exc)}
    return render(request, "preflight/doctor.html#checks", context)
