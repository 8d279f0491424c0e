"""A deployment's one SLO: the TTFT and ITL targets (seconds) goodput is measured at, on its panels and in its
capacity checks alike (ServiceLevel; a target left empty is not checked). It is set on the deployment page,
on its Capacity page or through ``POST /api/deployments/{id}/slo``, and every change is audited as
``deployment.slo``. With none set, the panels show no goodput and a capacity check measures at CHECK_DEFAULT,
saying so.
"""

from django.db import transaction

from console.audit.recording import changed, record
from console.deployments.models import Deployment
from console.observability.models import ServiceLevel
from console.observability.outcomes import Slo

# seconds: what a capacity check measures goodput at when no SLO is set (an interactive chat's targets, as
# Deployment's own fields held before the two SLOs became one, migration observability 0009)
CHECK_DEFAULT = Slo(2.0, 0.1)
MAX_SECONDS = {"ttft_seconds": 3600.0, "itl_seconds": 60.0}  # the longest target each may be, seconds


def out_of_range(ttft_seconds: float | None, itl_seconds: float | None) -> str:
    """Why these targets cannot be the SLO ("" when they can; None: not checked), in the words the pages show."""
    for value, most in ((ttft_seconds, MAX_SECONDS["ttft_seconds"]), (itl_seconds, MAX_SECONDS["itl_seconds"])):
        if value is not None and not 0 < value <= most:
            return "The SLO's TTFT is above 0 and at most 3,600 s, its ITL above 0 and at most 60 s."
    return ""


def slo_of(dep: Deployment) -> Slo | None:
    """The deployment's SLO, None when none is set."""
    row = ServiceLevel.objects.filter(deployment=dep).first()
    return Slo(row.ttft_seconds, row.itl_seconds) if row is not None else None


def check_slo(dep: Deployment) -> tuple[Slo, bool]:
    """The targets a capacity check measures at, and whether they are the deployment's own (else CHECK_DEFAULT)."""
    slo = slo_of(dep)
    return (slo, True) if slo is not None else (CHECK_DEFAULT, False)


def set_targets(dep: Deployment, ttft_seconds: float | None, itl_seconds: float | None) -> ServiceLevel:
    """Set the deployment's SLO (seconds; None: that target is not checked) and audit what changed."""
    with transaction.atomic():
        row, _ = ServiceLevel.objects.select_for_update().get_or_create(deployment=dep)
        before = {"ttft_seconds": row.ttft_seconds, "itl_seconds": row.itl_seconds}
        row.ttft_seconds, row.itl_seconds = ttft_seconds, itl_seconds
        row.save()
        record(None, "deployment.slo", dep, changed(before, {"ttft_seconds": ttft_seconds, "itl_seconds": itl_seconds}))
    return row
