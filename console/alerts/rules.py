"""The kinds of alert, each with its default rule: what it watches, its threshold's unit and value, how long the
condition must hold (minutes) and how often a firing alert repeats (minutes). ``rules()`` gives the rules in
force, adding a missing kind's row with its default."""

from dataclasses import dataclass

from django.conf import settings

from console.alerts.models import AlertRule


@dataclass(frozen=True)
class Kind:
    """A kind of alert: its title, what its threshold means (``unit``; "" for none), its defaults, the lowest and
    highest thresholds that mean something (``least``; ``most``, None: no bound) and whether it counts whole things
    (``whole``: restarts, requests)."""

    title: str
    unit: str
    threshold: float
    for_minutes: float
    repeat_minutes: float
    what: str
    most: float | None = None
    least: float = 0
    whole: bool = False


KINDS: dict[str, Kind] = {
    "deployment_failed": Kind(
        "Deployment failed, crash-looping or OOM-killed",
        "restarts in a row",
        3,
        0,
        60,
        "A deployment failed; or a replica was restarted this many times in a row, or its engine was OOM-killed.",
        least=1,
        whole=True,
    ),
    "replica_not_ready": Kind(
        "Replica not ready",
        "",
        0,
        5,
        60,
        "A replica of a deployment meant to serve is not ready (stopped, crashed, waiting to restart).",
    ),
    "monitoring_stale": Kind(
        "Monitoring stale",
        "scrape intervals",
        3,
        0,
        60,
        "Celery beat or a worker (upkeep, long tasks) is not running, or a ready replica had no good scrape of its "
        "/metrics for this many intervals.",
        least=1,
    ),
    "kv_cache_high": Kind(
        "KV cache nearly full",
        "ratio 0–1",
        0.9,
        5,
        60,
        "A replica's KV-cache use at or over this share, at every scrape for the rule's minutes.",
        most=1,
    ),
    "requests_waiting": Kind(
        "Requests waiting",
        "requests",
        16,
        5,
        60,
        "Requests queued for a replica's batch, or held in the gateway's priority lanes for a deployment running all "
        "it can, at or over this many, for the rule's minutes.",
        least=1,
        whole=True,
    ),
    "ttft_slo_burn": Kind(
        "TTFT over the SLO",
        "× the 1 % a p99 allows",
        2,
        10,
        60,
        "Over the last rule's minutes, the share of a deployment's requests whose TTFT passed its SLO is this many "
        "times the 1 % a TTFT p99 at the SLO allows (a burn rate over the window, not one slow request).",
    ),
    "error_rate": Kind(
        "Error rate",
        "ratio 0–1",
        0.05,
        10,
        60,
        "Over the last rule's minutes, the share of a deployment's requests the service failed (answered with a 5xx, "
        "or a stream the engine cut short: the panels' errors) is at or over this; requests refused with a 4xx are "
        "left out of the share.",
        most=1,
    ),
    "budget": Kind(
        "Budget spent",
        "percent (and 100 %)",
        80,
        0,
        240,
        "A key's or member's spending today or this month reached this percent of its budget, and again at 100 %.",
        most=100,
        least=1,
    ),
    "weights_disk": Kind(
        "Weights disk nearly full",
        "GiB free",
        settings.HEARTH_DOCTOR_MIN_FREE_GIB,
        0,
        240,
        "The disk of the weights cache (HEARTH_WEIGHTS_DIR) has less than this free.",
    ),
}


def rules() -> dict[str, AlertRule]:
    """Every kind's rule, kind → row; the rows of kinds never tuned are made with their defaults."""
    found = {rule.kind: rule for rule in AlertRule.objects.all()}
    missing = [
        AlertRule(kind=k, threshold=d.threshold, for_minutes=d.for_minutes, repeat_minutes=d.repeat_minutes)
        for k, d in KINDS.items()
        if k not in found
    ]
    if missing:
        AlertRule.objects.bulk_create(missing, ignore_conflicts=True)
        found = {rule.kind: rule for rule in AlertRule.objects.all()}
    return {k: found[k] for k in KINDS}
