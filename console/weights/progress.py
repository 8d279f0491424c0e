"""A weights download's progress: bytes done of the total, the rate and the time left, in numbers for the JSON API
and in words for the deployment page; kept in Django's cache (Redis) under the deployment's id while it runs."""

import time
from dataclasses import dataclass, field
from typing import Any

from django.core.cache import cache

from console.templatetags.byte_units import iec

KEY = "weights-progress:{}"  # Django's cache key (its KEY_PREFIX puts it under this appliance's instance)
KEPT_SECONDS = 3600  # a record outlives a stalled download long enough to be read; the launch clears it when done


@dataclass
class Progress:
    """Bytes of ``repo`` on disk (``done``) of ``total``; ``fetched`` the bytes this run received, over the seconds
    since ``started`` (time.monotonic) for the rate, so bytes already on disk from an earlier run (a resume) do not
    inflate it; ``file`` the file under way."""

    repo: str
    total: int
    done: int = 0
    fetched: int = 0
    file: str = ""
    retrying: str = ""  # why the download waits before its next try, "" while it runs
    started: float = field(default_factory=time.monotonic)

    def received(self, nbytes: int) -> None:
        """``nbytes`` more arrived from the hub."""
        self.done += nbytes
        self.fetched += nbytes

    def found(self, nbytes: int) -> None:
        """``nbytes`` were already on disk (a whole file in the cache, or a partial one resumed)."""
        self.done += nbytes

    @property
    def rate(self) -> float:
        """Bytes per second received by this run; 0.0 before the first byte."""
        elapsed = time.monotonic() - self.started
        return self.fetched / elapsed if elapsed > 0 and self.fetched else 0.0

    @property
    def eta(self) -> float | None:
        """Seconds left at the current rate; None while there is no rate yet."""
        return max(self.total - self.done, 0) / self.rate if self.rate else None

    def as_dict(self) -> dict[str, Any]:
        """What the console reads: ``repo``, ``file``, ``done_bytes``, ``total_bytes``, ``fraction`` (0–1),
        ``rate_bytes_per_s``, ``eta_seconds`` (None while unknown), ``retrying`` and ``words``."""
        return {
            "repo": self.repo,
            "file": self.file,
            "done_bytes": self.done,
            "total_bytes": self.total,
            "fraction": round(self.done / self.total, 4) if self.total else 0.0,
            "rate_bytes_per_s": round(self.rate),
            "eta_seconds": None if self.eta is None else round(self.eta),
            "retrying": self.retrying,
            "words": self.words(),
        }

    def words(self) -> str:
        """E.g. ``Downloading the weights of org/model: 1.2 GiB of 3.4 GiB (35%), 45.1 MiB/s, about 1 min left.``, with
        why it waits to try again after it when it does; ``Reading the files of org/model from the hub.`` before the
        sizes are known."""
        again = f" {self.retrying}" if self.retrying else ""
        if not self.total:
            return f"Reading the files of {self.repo} from the hub.{again}"
        share = f" ({self.done / self.total:.0%})" if self.total else ""
        speed = f", {iec(self.rate)}/s" if self.rate else ""
        left = f", about {_duration(self.eta)} left" if self.eta is not None else ""
        done = iec(self.done) or "0 bytes"
        return f"Downloading the weights of {self.repo}: {done} of {iec(self.total)}{share}{speed}{left}.{again}"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def record(deployment_id: int, progress: Progress) -> None:
    """Keep ``progress`` where the deployment's page and JSON read it."""
    cache.set(KEY.format(deployment_id), progress.as_dict(), timeout=KEPT_SECONDS)


def read(deployment_id: int) -> dict[str, Any] | None:
    """The deployment's download as Progress.as_dict wrote it, or None when none is under way."""
    value = cache.get(KEY.format(deployment_id))
    return value if isinstance(value, dict) else None


def clear(deployment_id: int) -> None:
    """The download ended (done or failed): the page shows it no more."""
    cache.delete(KEY.format(deployment_id))
