"""What the Batches page shows of each batch beyond its row: the shares of its lines done and failed, the measured
rate (lines a minute), the ETA from that rate, and what its lines were charged so far (the request log's
``batch_id`` rows, priced at the batch factor by the gateway), all in words where a number would mislead.

The rate of a running batch counts the lines answered in the last RATE_WINDOW seconds (or since it started, when
later): it follows the batch as interactive traffic lets it through, where an average since the start would not. An
ended batch's rate is its lines over the time it ran. No line finished yet: no rate and "no estimate yet", never 0.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Q, Sum

from console.batches.models import Batch, BatchLine, LineState, Status
from console.observability.models import RequestLog
from console.observability.request_log import cost_text
from engines.room import duration_words

RATE_WINDOW = 600  # seconds of answered lines the rate of a running batch is measured over
RUNNING_LINES = (Status.IN_PROGRESS, Status.FINALIZING, Status.CANCELLING)
CANCELLABLE = (Status.VALIDATING, Status.IN_PROGRESS)
STATE_CLASS = {  # a status → the design system's state colour (static/hearth.css .state.*)
    Status.VALIDATING: "pending",
    Status.IN_PROGRESS: "running",
    Status.FINALIZING: "running",
    Status.CANCELLING: "cancelling",
    Status.COMPLETED: "done",
    Status.FAILED: "failed",
    Status.EXPIRED: "failed",
    Status.CANCELLED: "cancelled",
}


@dataclass(frozen=True)
class Progress:
    """One batch as the page shows it. ``done_pct``/``failed_pct``: 0–100 of its lines; ``rate``: lines a minute
    (None: nothing measured, ``rate_words`` says why); ``eta``: words; ``cost``: "$0.0123" or words."""

    batch: Batch
    done_pct: float
    failed_pct: float
    rate: float | None
    rate_words: str
    eta: str
    cost: str
    cost_title: str

    @property
    def finished(self) -> int:
        return self.batch.completed + self.batch.failed

    @property
    def not_run(self) -> int:
        """Lines a cancelled or expired batch left unsent (0 for any other)."""
        ended = self.batch.status in (Status.CANCELLED, Status.EXPIRED)
        return max(0, self.batch.total - self.finished) if ended else 0

    @property
    def estimated(self) -> bool:
        """Whether ``eta`` is an estimate or an ended batch's duration (not words for none)."""
        return not self.eta.startswith("no estimate")

    @property
    def priced(self) -> bool:
        """Whether ``cost`` is an amount (not words for none)."""
        return self.cost.startswith("$")

    @property
    def state_class(self) -> str:
        return STATE_CLASS.get(Status(self.batch.status), "")

    @property
    def cancellable(self) -> bool:
        return self.batch.status in CANCELLABLE


def _ended_at(batch: Batch) -> datetime | None:
    return batch.completed_at or batch.cancelled_at or batch.expired_at or batch.failed_at


def _ended_words(batch: Batch) -> str:
    """What the ETA column says of a batch that ended (its status is beside it): "done in 10 min", "ran 3 min",
    "done in 1 min 48 s" (seconds under 10 min), "never ran"."""
    end, start = _ended_at(batch), batch.in_progress_at
    if start is None or end is None:
        return "never ran"
    seconds = (end - start).total_seconds()
    took = duration_words(seconds) if seconds >= 1 else "under a second"
    if 60 <= seconds < 600 and int(seconds) % 60:  # "1 min 48 s", not "1 min" for 108 s (a trial's)
        took = f"{took} {int(seconds) % 60} s"
    return f"done in {took}" if batch.status == Status.COMPLETED else f"ran {took}"


def _rate(batch: Batch, recent: int, now: datetime) -> tuple[float | None, str]:
    """Lines a minute and, when there is none, why."""
    start = batch.in_progress_at
    if start is None:
        return None, "not started"
    if batch.status in RUNNING_LINES:
        since = max(start, now - timedelta(seconds=RATE_WINDOW))
        if not (batch.completed + batch.failed):
            return None, "no line finished yet"
        if not recent:
            return None, f"none finished in the last {RATE_WINDOW // 60} min"
        return recent / max((now - since).total_seconds(), 1.0) * 60, ""
    end = _ended_at(batch)
    finished = batch.completed + batch.failed
    if not finished or end is None:
        return None, "no line finished"
    if (end - start).total_seconds() < 1:
        return None, "too quick to measure"
    return finished / (end - start).total_seconds() * 60, ""


def _eta(batch: Batch, rate: float | None, rate_words: str) -> str:
    if batch.status == Status.VALIDATING:
        return "no estimate yet"
    if batch.status == Status.FINALIZING:
        return "writing its files"
    if batch.status == Status.CANCELLING:
        return "stopping"
    if batch.status != Status.IN_PROGRESS:
        return _ended_words(batch)
    if rate is None:
        return "no estimate yet" if rate_words == "no line finished yet" else f"no estimate: {rate_words}"
    left = batch.total - batch.completed - batch.failed
    seconds = left / rate * 60
    return "under a minute" if seconds < 60 else f"about {duration_words(seconds)}"


def recent_lines(batches: Iterable[Batch], now: datetime) -> dict[int, int]:
    """Batch pk → lines answered in the last RATE_WINDOW seconds, for the running ones (one query)."""
    running = [b.pk for b in batches if b.status in RUNNING_LINES]
    if not running:
        return {}
    since = now - timedelta(seconds=RATE_WINDOW)
    rows = (
        BatchLine.objects.filter(batch_id__in=running, answered_at__gte=since)
        .exclude(state=LineState.PENDING)
        .values("batch_id")
        .annotate(n=Count("id"))
    )
    return {row["batch_id"]: row["n"] for row in rows}


def costs(batches: Iterable[Batch]) -> dict[str, tuple[str, str]]:
    """Batch public id → (the cost its lines were charged so far, its title), from the request log (one query)."""
    ids = [b.public_id for b in batches]
    rows = (
        RequestLog.objects.filter(batch_id__in=ids)
        .values("batch_id")
        .annotate(usd=Sum("cost_usd"), n=Count("id"), priced=Count("id", filter=Q(cost_usd__isnull=False)))
    )
    out = {}
    for row in rows:
        n, priced = row["n"], row["priced"]
        if not priced:
            out[row["batch_id"]] = ("no price", f"{n} request{'s' if n != 1 else ''} logged, none priced")
        else:
            words = f"{priced} of {n} logged requests priced, at the batch factor"
            out[row["batch_id"]] = (cost_text(row["usd"]), words)
    return out


def progress(batches: list[Batch], now: datetime) -> list[Progress]:
    """Each batch's Progress, in order (two queries for all of them)."""
    recent, charged = recent_lines(batches, now), costs(batches)
    out = []
    for b in batches:
        rate, why = _rate(b, recent.get(b.pk, 0), now)
        total = b.total or 1
        nothing = ("none yet" if b.status in RUNNING_LINES else "none", "no request of this batch in the request log")
        cost, title = charged.get(b.public_id, nothing)
        out.append(
            Progress(
                batch=b,
                done_pct=100 * b.completed / total,
                failed_pct=100 * b.failed / total,
                rate=rate,
                rate_words=why,
                eta=_eta(b, rate, why),
                cost=cost,
                cost_title=title,
            )
        )
    return out
