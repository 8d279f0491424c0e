"""What holds now, per kind of alert: each function takes its rule and the moment (epoch seconds) and returns
subject → the condition in words, for every subject it holds for. The evaluator (console.alerts.evaluate) turns
these into alerts; the rule's ``for_minutes`` is its job, except where a kind measures over a window."""

import functools
import operator
import shutil
import time
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal

import redis
from django.conf import settings
from django.db.models import Count, Q

from appliance import celery_heartbeats
from console.access.key_activity import FEWER_OUTPUT_TOKENS, REFUSED_FOR, REFUSED_WITHIN
from console.access.models import ApiKey, Member
from console.alerts.models import THRESHOLD, AlertRule
from console.deployments.models import Deployment, DeploymentState, DesiredState, Replica
from console.deployments.watching import STABLE_AFTER
from console.observability.models import MetricSample, RequestLog, Resolution, ScrapeHealth
from console.observability.outcomes import ERRORS, REFUSALS
from console.observability.queue_depth import queue_depth
from console.observability.request_stats_sql import OUTCOME_WHERE
from console.observability.spent import key_counters, owner_counters, periods
from engines.room import duration_words

S = DeploymentState
Holding = dict[str, str]
MIN_REQUESTS = 10  # requests in a window before a rate over it is taken for a condition (one request is no trend)
FRESH_SCRAPES = 3  # intervals a replica's last sample may be old and still be read for saturation
NANO = Decimal(10) ** 9  # the spending counters hold nano-USD (console.observability.spent)
GIB = 1024**3


def deployment_failed(rule: AlertRule, now: float) -> Holding:
    """Failed deployments (their reason), replicas restarted ``threshold`` times in a row, and OOM-killed ones, but
    a replica that has served since its last restart for STABLE_AFTER seconds (its next crash starts a new count,
    console.deployments.watching): a trial's crash-loop alert went on firing for an hour of good answers."""
    out = {
        f"deployment {d.name}": f"{d.name} failed: {d.state_reason or 'no reason given'}"
        for d in Deployment.objects.filter(state=S.FAILED).exclude(desired=DesiredState.STOPPED)
    }
    stable = Q(running=True, ready_at__lt=datetime.fromtimestamp(now - STABLE_AFTER, UTC))
    replicas = Replica.objects.launched().filter(stopped_at=None).exclude(stable).select_related("deployment")
    for r in replicas.filter(Q(restarts__gte=max(1, int(rule.threshold))) | Q(oom_killed=True)):
        subject = f"deployment {r.deployment.name}"
        if r.oom_killed:
            out.setdefault(subject, f"{r.deployment.name}: replica {r.runtime_name} was OOM-killed ({_exit(r)})")
        else:
            out.setdefault(
                subject,
                f"{r.deployment.name}: replica {r.runtime_name} is crash-looping "
                f"({r.restarts} restarts in a row, last {_exit(r)})",
            )
    return out


def replica_not_ready(rule: AlertRule, now: float) -> Holding:
    """Replicas of deployments meant to serve (and awake) that are not serving: stopped, crashed or loading."""
    awake = (S.STARTING, S.LOADING, S.READY, S.FAILED)
    replicas = (
        Replica.objects.launched()
        .filter(stopped_at=None, deployment__desired=DesiredState.SERVING, deployment__state__in=awake)
        .filter(Q(running=False) | Q(ready_at=None))
        .select_related("deployment")
    )
    out = {}
    for r in replicas:
        if not r.running:
            why = f"not running ({_exit(r)}, restart due {_clock(r.restart_at)})"
        else:  # how long, for a repeat (a trial's "STILL FIRING: … is not ready: loading")
            took = f" for {duration_words(max(now - r.started_at.timestamp(), 0))}" if r.started_at else ""
            # relaunched after a crash before the alert's first look: the crash is still the news
            why = f"loading again{took} after its engine ended ({_exit(r)})" if r.restarts else f"loading{took}"
        out[f"replica {r.runtime_name}"] = f"{r.deployment.name}: replica {r.runtime_name} is not ready: {why}"
    return out


def _exit(r: Replica) -> str:
    """How its engine last ended, in words: a crashed one's exit is kept as the previous run's until it restarts."""
    code = r.exit_code if r.exit_code is not None else r.previous_exit_code
    return "exit code not known" if code is None else f"exit {code}"


LONG_WORKER_GRACE = 60.0  # seconds after the upkeep worker's start before a stopped long-task worker is told of


def monitoring_stale(rule: AlertRule, now: float) -> Holding:
    """Beat, the upkeep worker or the long-task worker not running (appliance.celery_heartbeats; the long-task worker
    evaluates while the upkeep one is stopped: console.alerts.tasks), and with beat and the upkeep worker running,
    ready replicas without a good scrape for ``threshold`` scrape intervals: since their last good one, since they or
    their deployment last became ready (a wake: nothing is scraped while a deployment sleeps, and its first scrape
    after the wake comes within an interval), or since the upkeep worker, which scrapes, last started."""
    liveness = celery_heartbeats.read()
    if liveness.unreadable:
        return {"celery beat": f"Cannot tell whether Celery beat runs: {liveness.unreadable}"}
    out: Holding = {}
    if stopped := liveness.beat_stopped():
        out["celery beat"] = f"{stopped}: nothing is scraped, reconciled or checked"
    if stopped := liveness.worker_stopped():  # a trial's kill -9 of the upkeep worker went unreported for minutes
        out["celery worker"] = (
            f"The upkeep worker is not running ({stopped}): nothing is scraped or reconciled, no crashed engine is "
            "restarted, and alerts come from the long-task worker"
        )
    if out:  # nothing is scraped: a replica's scrapes say nothing more
        return out
    started = celery_heartbeats.upkeep_started_at()  # a restart's silence is no stale scrape (a trial's every make up)
    # a trial's killed long-task worker got a banner and no alert; make up starts both workers together, so the long
    # one is told of once the upkeep one has run LONG_WORKER_GRACE seconds
    if (stopped := liveness.long_worker_stopped()) and (started is None or now - started >= LONG_WORKER_GRACE):
        out["celery worker-long"] = (
            f"The long-task worker is not running ({stopped}): launches, batches and capacity checks wait"
        )
    limit = rule.threshold * settings.HEARTH_SCRAPE_INTERVAL
    worker_start = datetime.fromtimestamp(started, UTC) if started else None
    replicas = Replica.objects.launched().filter(running=True, ready_at__isnull=False, deployment__state=S.READY)
    for r in replicas.select_related("deployment"):
        health = ScrapeHealth.objects.filter(replica=r).first()
        since = [r.ready_at, r.deployment.state_since, health.last_success_at if health else None, worker_start]
        last = max(at for at in since if at is not None)
        if now - last.timestamp() > limit:
            error = f" (last error: {health.last_error})" if health and health.last_error else ""
            out[f"scrapes of {r.runtime_name}"] = (
                f"No good scrape of replica {r.runtime_name}'s /metrics ({r.deployment.name}) for "
                f"{now - last.timestamp():.0f} s, over {rule.threshold:g} intervals of "
                f"{settings.HEARTH_SCRAPE_INTERVAL:g} s{error}"
            )
    return out


def _saturation(name: str, words: str, shown: Callable[[float], str]) -> Callable[[AlertRule, float], Holding]:
    def check(rule: AlertRule, now: float) -> Holding:
        fresh = datetime.fromtimestamp(now - FRESH_SCRAPES * settings.HEARTH_SCRAPE_INTERVAL, UTC)
        out = {}
        for r in Replica.objects.filter(running=True, deployment__state=S.READY).select_related("deployment"):
            row = (
                MetricSample.objects.filter(replica=r, resolution=Resolution.SCRAPE, at__gte=fresh)
                .order_by("-at")
                .first()
            )
            value = row.values.get("v", {}).get(name) if row else None
            if value is not None and value >= rule.threshold:
                out[f"{name} of {r.runtime_name}"] = (
                    f"{r.deployment.name}: {words} {shown(value)} on replica {r.runtime_name}, "
                    f"at or over {shown(rule.threshold)}"
                )
        return out

    return check


kv_cache_high = _saturation("kv_cache_usage", "KV-cache use", lambda v: f"{v:.0%}")
_engine_waiting = _saturation("requests_waiting", "requests waiting", lambda v: f"{v:g}")


def requests_waiting(rule: AlertRule, now: float) -> Holding:
    """Replicas with ``threshold`` requests or more waiting in their engine's queue, and deployments with that many
    held in the gateway's priority lanes (console.observability.queue_depth): a deployment at its capacity holds
    standard and batch requests in the gateway, not in the engine, so its engine's queue alone would never say so."""
    out = _engine_waiting(rule, now)
    ready = dict(Deployment.objects.filter(state=S.READY).values_list("pk", "name"))
    for pk, held in queue_depth(ready).items():
        if (waiting := held["standard"] + held["batch"]) >= rule.threshold:
            out[f"requests_held of {ready[pk]}"] = (
                f"{ready[pk]}: {waiting:g} requests waiting in the gateway's priority lanes ({held['standard']} "
                f"standard, {held['batch']} batch) while it runs all it can, at or over {rule.threshold:g}"
            )
    return out


def _window(rule: AlertRule, now: float) -> tuple[datetime, float]:
    """(start, minutes) of a windowed rule's window; its conditions count a deployment's requests from its start or
    from the deployment's creation, whichever is later: a deleted deployment's requests to the same served name are
    not a new one's."""
    minutes = max(rule.for_minutes, 1.0)
    return datetime.fromtimestamp(now - minutes * 60, UTC), minutes


def ttft_slo_burn(rule: AlertRule, now: float) -> Holding:
    """Deployments with a TTFT SLO whose share of requests over it, over the rule's minutes, is ``threshold``
    times the 1 % a p99 at the SLO allows."""
    start, minutes = _window(rule, now)
    out = {}
    for dep in Deployment.objects.filter(slo__ttft_seconds__isnull=False).select_related("slo"):
        slo = dep.slo.ttft_seconds
        found = RequestLog.objects.filter(
            model=dep.served_model_name, created_at__gte=max(start, dep.created_at), ttft_seconds__isnull=False
        ).aggregate(n=Count("id"), over=Count("id", filter=Q(ttft_seconds__gt=slo)))
        if found["n"] >= MIN_REQUESTS and found["over"] / found["n"] >= 0.01 * rule.threshold:
            out[f"deployment {dep.name}"] = (
                f"{dep.name}: {found['over']} of {found['n']} requests in {minutes:g} min had a TTFT over its SLO "
                f"of {slo:g} s ({found['over'] / found['n']:.1%}: {found['over'] / found['n'] / 0.01:.1f}× "
                f"the 1 % a p99 allows)"
            )
    return out


def error_rate(rule: AlertRule, now: float) -> Holding:
    """Deployments whose share of requests the service failed over the rule's minutes (a 5xx, or a stream the engine
    cut short: the panels' errors, console.observability.outcomes.ERRORS) is at or over ``threshold``: a share of
    the requests not refused (a 4xx is the client's to fix: a crash among many refusals fired late when they
    counted)."""
    start, minutes = _window(rule, now)
    failed = functools.reduce(operator.or_, (OUTCOME_WHERE[outcome] for outcome in ERRORS))
    refused = functools.reduce(operator.or_, (OUTCOME_WHERE[outcome] for outcome in REFUSALS))
    out = {}
    for dep in Deployment.objects.exclude(desired=DesiredState.STOPPED):
        mine = RequestLog.objects.filter(model=dep.served_model_name, created_at__gte=max(start, dep.created_at))
        found = mine.aggregate(n=Count("id", filter=~refused), bad=Count("id", filter=failed), all=Count("id"))
        if found["n"] >= MIN_REQUESTS and found["bad"] / found["n"] >= rule.threshold:
            left_out = found["all"] - found["n"]
            aside = f"; {left_out} refused with a 4xx, left out" if left_out else ""
            out[f"deployment {dep.name}"] = (
                f"{dep.name}: {found['bad']} of {found['n']} requests in {minutes:g} min failed, answered 5xx or cut "
                f"short ({found['bad'] / found['n']:.1%}, at or over {rule.threshold:.1%}{aside})"
            )
    return out


SPENT = "100 %"  # a budget alert's upper level as its subject names it; the lower one is models.THRESHOLD
# A budget's owner: its subject's part (``key <id>``, ``member <username>``), its words (a key's prefix and name, which
# a rotation changes), its spending counters' prefix, its daily and monthly budgets (USD), its requests' filter.
_Owner = tuple[str, str, str, Decimal | None, Decimal | None, Q]


def budget(rule: AlertRule, now: float) -> Holding:
    """Keys and members whose spending today or this month (UTC) reached ``threshold`` percent of its budget, and
    100 %: subject ``key <id> today at the rule's threshold``, ``member <username> this month at 100 %`` (at 100 %
    both hold, so each level fires once; a username, as a key's name, is never changed in Hearth). A subject names
    neither the threshold's percent nor a key's prefix: a threshold tuned or a key rotated (same row, new prefix:
    console.access.keys.rotate_key) leaves its alert open, its message naming the prefix, name and percents of now
    (a trial's 80 → 50 and a rotation resolved and fired each again; migration 0002 renamed the subjects of before).

    The 100 % level also holds once spending reached the threshold and a request was refused for that budget in
    that period, within REFUSED_WITHIN seconds, by a refusal that no smaller output limit would pass (its prompt with
    one output token costs more than is left): spending alone may never reach 100 % (a trial's stalled at 93 %,
    every request refused). Below the threshold such a refusal is one long prompt's, and one that says fewer output
    tokens would pass (FEWER_OUTPUT_TOKENS: one large ``max_tokens``) is not the budget spent either (trials' keys
    at 9 % and 28 % were called spent at 100 %, resolved and fired again at each such request)."""
    r = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5)
    day, month = periods(now)
    today = datetime.fromtimestamp(now - now % 86_400, UTC)
    recent = datetime.fromtimestamp(now - REFUSED_WITHIN, UTC)
    since = {"today": max(today, recent), "this month": max(today.replace(day=1), recent)}
    out = {}
    for about, who, prefix, daily, monthly, theirs in _budget_owners():
        for period, limit, counter in (
            ("today", daily, f"{prefix}:usd:{day}"),
            ("this month", monthly, f"{prefix}:usd:{month}"),
        ):
            if not limit:
                continue
            spent = Decimal(int(r.get(counter) or 0)) / NANO
            share = spent / limit * 100
            for level in sorted({rule.threshold, 100.0}):
                if share >= Decimal(str(level)):
                    out[f"{about} {period} at {SPENT if level >= 100 else THRESHOLD}"] = (
                        f"{who} spent ${spent:.4f} {period}: {share:.0f} % of its ${limit} budget, at or over "
                        f"{level:g} %"
                    )
            refused = RequestLog.objects.filter(
                theirs,
                status=429,
                created_at__gte=since[period],
                error__startswith=REFUSED_FOR[(about.split()[0], period)],
            ).exclude(error__contains=FEWER_OUTPUT_TOKENS)
            if Decimal(str(rule.threshold)) <= share < 100 and refused.exists():
                out[f"{about} {period} at {SPENT}"] = (
                    f"{who} is refused for its budget {period}: ${spent:.4f} of its ${limit} spent ({share:.0f} %), "
                    f"and a request that may cost more than the ${limit - spent:.4f} left is refused, even with one "
                    "output token"
                )
    return out


def _budget_owners() -> list[_Owner]:
    """The live keys and the members with a budget (``_Owner``)."""
    budgeted = Q(daily_budget_usd__isnull=False) | Q(monthly_budget_usd__isnull=False)
    owners: list[_Owner] = [
        (
            f"key {k.pk}",
            f"key {k.prefix} ({k.name})",
            key_counters(k.pk),
            k.daily_budget_usd,
            k.monthly_budget_usd,
            Q(api_key=k),
        )
        for k in ApiKey.objects.filter(revoked_at=None).filter(budgeted)
    ]
    owners += [
        (
            f"member {m.user.username}",
            f"member {m.user.username}",
            owner_counters(m.user_id),
            m.daily_budget_usd,
            m.monthly_budget_usd,
            Q(api_key__owner_id=m.user_id),
        )
        for m in Member.objects.select_related("user").filter(budgeted)
    ]
    return owners


def weights_disk(rule: AlertRule, now: float) -> Holding:
    """The weights cache's disk (HEARTH_WEIGHTS_DIR, or the nearest folder above it that exists) with less than
    ``threshold`` GiB free."""
    folder = settings.HEARTH_WEIGHTS_DIR
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    free = shutil.disk_usage(folder).free / GIB
    if free < rule.threshold:
        return {
            "weights disk": f"The weights cache's disk ({folder}) has {free:.1f} GiB free, under {rule.threshold:g} GiB"
        }
    return {}


def _clock(at: datetime | None) -> str:
    return "not set" if at is None else time.strftime("%H:%M:%S UTC", time.gmtime(at.timestamp()))


CHECKS: dict[str, Callable[[AlertRule, float], Holding]] = {
    "deployment_failed": deployment_failed,
    "replica_not_ready": replica_not_ready,
    "monitoring_stale": monitoring_stale,
    "kv_cache_high": kv_cache_high,
    "requests_waiting": requests_waiting,
    "ttft_slo_burn": ttft_slo_burn,
    "error_rate": error_rate,
    "budget": budget,
    "weights_disk": weights_disk,
}
WINDOWED = frozenset({"ttft_slo_burn", "error_rate"})  # their minutes are the window measured, not a wait to fire
