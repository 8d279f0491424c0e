"""The Pre-flight page: the worker's checks of the box, loaded into the page once the worker answers; and the
Settings page (admins, console.access.policy): the effective configuration, versions, services, the GPU inventory's
source, and the support bundle."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console.preflight import about
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


@login_required
def settings_page(request: HttpRequest) -> HttpResponse:
    """Settings and about: every documented setting (secrets as set or unset), versions, the database and Redis in
    use, the GPU inventory's source and age, and the support bundle in a copyable block."""
    found = about.read_all()
    context = {
        "versions": found.versions,
        "services": found.services,
        "gpus": found.gpus,  # not "inventory": that is the header's (console.context)
        "configured": found.configured,
        "bundle": about.bundle(found),
        "log_lines": about.LOG_LINES,
    }
    return render(request, "preflight/settings.html", context)


@login_required
def support_bundle(request: HttpRequest) -> HttpResponse:
    """The support bundle as a text file download (no secrets: console.preflight.about.bundle)."""
    found = about.read_all()
    resp = HttpResponse(about.bundle(found), content_type="text/plain; charset=utf-8")
    resp["Content-Disposition"] = f'attachment; filename="hearth-support-{found.read_at:%Y%m%d-%H%M%S}.txt"'
    return resp
