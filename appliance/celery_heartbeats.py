"""Whether Celery beat and the workers are running, for the console's header and a deployment's page: each notes
its signs of life in Redis through Celery's own signals, and any process reads them back in one round trip.

- The workers: Celery's worker heartbeat (``celery.worker.heartbeat.Heart``, every ``--heartbeat-interval``
  seconds, 2 by default, sent whether or not task events are on) fires ``heartbeat_sent`` in a worker's main
  process; ``note_worker`` writes the time and the queues it takes (appliance.celery_queues: the upkeep queue, the
  long one) to the hash ``celery-workers``, one field per worker process, which ``worker_shutdown`` marks stopped
  (``note_worker_stopped``) and the next worker's start drops (``forget_old_workers``). A worker killed outright
  just falls silent. The heartbeat comes from the main process, so a worker whose pool is busy still lives: the
  queues keep the upkeep from waiting behind long tasks.
- Beat: every task beat sends fires ``after_task_publish`` in beat's process, connected there alone when beat
  starts (``start_beat_heartbeat``, from ``beat_init``); ``note_beat`` writes the time and beat's shortest period
  to ``beat-heartbeat``.

Taken for stopped after ``limit_for(every)`` seconds of silence: twice the expected gap, as Celery's own event
state expires a worker after two missed heartbeats (``celery.events.state.HEARTBEAT_EXPIRE_WINDOW``, 200 %), and at
least the gap plus STARVED_SLACK seconds, so a sign of life late on a starved CPU is no alarm. Beat killed is said
within two of its periods (10 s with the default 5 s scrape interval); a worker killed within 7 s.

compose's health checks of the worker and beat read the same notes (``stopped_here``, appliance.healthcheck).

Celery 5.7's beat answers ``celery inspect ping`` too (``beat_enable_remote_control``), and workers always do; a
broadcast waits for its replies, so a page asking would wait up to its timeout: these notes are read instead.

Keys (appliance.redis_keys): ``beat-heartbeat`` JSON ``{"at": epoch s, "every": s}``; ``celery-workers`` hash of
``"<host> pid <pid>"`` → JSON ``{"at": epoch s, "every": s, "stopped": bool, "queues": [names]}`` (no
``queues``: a worker from before the two queues, which took every task).
"""

import functools
import json
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from celery import current_app
from celery.signals import after_task_publish
from django.conf import settings

from appliance.celery_queues import LONG_QUEUE, UPKEEP_QUEUE
from appliance.redis_keys import redis_key
from engines.room import duration_words

log = logging.getLogger(__name__)
STARVED_SLACK = 5.0  # seconds: a heartbeat this late is still no alarm (a 2-core box under load, README)
TIMEOUT = 1.0  # seconds a note or a read waits on Redis: a worker's heartbeat runs on its event loop
# seconds after Redis's start when a process never seen may only not have noted itself since: compose's Redis keeps
# nothing across a restart, and "never run here" showed for a few seconds with the worker and beat running
REDIS_FRESH = 15.0


@dataclass(frozen=True)
class Heartbeat:
    """One process's last sign of life: ``at`` (epoch seconds; None: never seen), ``every`` (seconds between signs
    of life expected), ``stopped`` (it said it stopped, at ``at``), ``queues`` (a worker's queues; empty: all)."""

    at: float | None
    every: float
    stopped: bool = False
    queues: tuple[str, ...] = ()

    def takes(self, queue: str) -> bool:
        """Whether this worker takes tasks from ``queue``."""
        return not self.queues or queue in self.queues

    def silent_for(self, now: float) -> float | None:
        """Seconds since its last sign of life, None if it never gave one."""
        return None if self.at is None else max(0.0, now - self.at)

    def running(self, now: float) -> bool:
        """Whether it gave a sign of life within ``limit_for(every)`` seconds and did not stop since."""
        silent = self.silent_for(now)
        return not self.stopped and silent is not None and silent <= limit_for(self.every)


@dataclass(frozen=True)
class Liveness:
    """Beat's and the workers' heartbeats as read at ``now`` (epoch seconds): ``worker`` the freshest of those taking
    the upkeep queue, ``long_worker`` of those taking the long one (appliance.celery_queues). ``unreadable`` says why
    they could not be read (Redis), and then all are unknown (None). ``redis_up_for``: seconds since the Redis server
    started (None: not known); under REDIS_FRESH, one never seen is not called stopped yet. ``long_waiting``: the
    tasks waiting in the long queue for a free process of its worker (a worker takes one only then: appliance.settings
    CELERY_WORKER_DISABLE_PREFETCH), None when not read."""

    now: float
    beat: Heartbeat | None
    worker: Heartbeat | None
    unreadable: str = ""
    redis_up_for: float | None = None
    long_worker: Heartbeat | None = None
    long_waiting: int | None = None

    def _too_soon(self, heartbeat: Heartbeat) -> bool:
        """Whether ``heartbeat`` was never seen on a Redis that started too recently to tell."""
        fresh = self.redis_up_for is not None and self.redis_up_for < REDIS_FRESH
        return heartbeat.at is None and fresh

    def beat_stopped(self) -> str:
        """Why beat is taken for stopped ("Celery beat has not run for 47 s, since 18:40:12 UTC"), "" while it runs
        or while that cannot be told."""
        if self.beat is None or self.beat.running(self.now) or self._too_soon(self.beat):
            return ""
        silence = _silence(self.beat, self.now)
        return f"Celery beat has not run {silence}" if silence else "Celery beat has never run here"

    def worker_stopped(self) -> str:
        """Why no worker taking the upkeep queue is taken for running ("no worker has answered for 47 s, since
        18:40:12 UTC"; "the last worker stopped 3 min ago, at …"), "" while one runs or while that cannot be told."""
        return self._stopped(self.worker, "worker")

    def long_worker_stopped(self) -> str:
        """The same for the long queue's worker ("no long-task worker has answered for 47 s, since …")."""
        return self._stopped(self.long_worker, "long-task worker")

    def _stopped(self, worker: Heartbeat | None, who: str) -> str:
        if worker is None or worker.running(self.now) or self._too_soon(worker):
            return ""
        if worker.stopped and worker.at is not None:
            ago = duration_words(self.now - worker.at)
            return f"the last {who} stopped {ago} ago, at {_clock(worker.at)}"
        silence = _silence(worker, self.now)
        return f"no {who} has answered {silence}" if silence else f"no {who} has ever run here"


def _silence(heartbeat: Heartbeat, now: float) -> str:
    """ "for 47 s, since 18:40:12 UTC", or "" for one never seen."""
    if heartbeat.at is None:
        return ""
    return f"for {duration_words(now - heartbeat.at)}, since {_clock(heartbeat.at)}"


def _clock(at: float) -> str:
    """Epoch seconds as "18:40:12 UTC" (today) or "2026-12-03 18:40 UTC"."""
    if time.time() - at < 86400:
        return time.strftime("%H:%M:%S UTC", time.gmtime(at))
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(at))


def limit_for(every: float) -> float:
    """Seconds of silence after which a process expected every ``every`` seconds is taken for stopped."""
    return max(2 * every, every + STARVED_SLACK)


def read(host: str = "") -> Liveness:
    """Beat's heartbeat and the freshest worker's of each queue (of host ``host`` only, when given), with how long
    Redis has run (INFO's ``uptime_in_seconds``) and the long queue's waiting tasks, in one round trip; never raises
    (``unreadable`` says why)."""
    now = time.time()
    try:
        with _client().pipeline(transaction=False) as pipe:
            pipe.get(redis_key("beat-heartbeat"))
            pipe.hgetall(redis_key("celery-workers"))
            pipe.info("server")
            pipe.llen(redis_key(LONG_QUEUE))  # kombu's list of the queue's messages, under the instance's prefix
            beat_raw, workers_raw, server, long_waiting = pipe.execute()
    except (redis.RedisError, OSError) as exc:
        return Liveness(now, None, None, f"Redis did not answer ({type(exc).__name__})")
    up_for = server.get("uptime_in_seconds")
    beat = _decode(beat_raw) if beat_raw else Heartbeat(None, 0.0)
    prefix = f"{host} pid ".encode()
    workers = [_decode(raw) for field, raw in workers_raw.items() if not host or field.startswith(prefix)]
    up = float(up_for) if isinstance(up_for, int | float) else None
    upkeep, long = (_freshest([w for w in workers if w.takes(queue)], now) for queue in (UPKEEP_QUEUE, LONG_QUEUE))
    return Liveness(now, beat, upkeep, redis_up_for=up, long_worker=long, long_waiting=int(long_waiting))


PROCESSES = ("worker", "worker-long", "beat")  # what stopped_here answers for: compose.yaml's service names


def stopped_here(process: str) -> str:
    """Why ``process`` is not taken for running, "" while it runs: for its container's health check
    (appliance.healthcheck). "beat": the appliance's beat; "worker" and "worker-long": a worker on this host (its
    container) taking the upkeep queue or the long one, so each of several workers answers for itself. Redis not
    answering is a reason too. Raises ValueError for another name."""
    if process not in PROCESSES:
        raise ValueError(f"No heartbeat for {process!r}: {', '.join(PROCESSES)}.")
    liveness = read() if process == "beat" else read(socket.gethostname())
    if liveness.unreadable:
        return liveness.unreadable
    if process == "worker-long":
        return liveness.long_worker_stopped()
    return liveness.worker_stopped() if process == "worker" else liveness.beat_stopped()


def _freshest(workers: list[Heartbeat], now: float) -> Heartbeat:
    """A running worker's heartbeat if one runs, else the last one seen (stopped if it stopped cleanly)."""
    running = [w for w in workers if w.running(now)]
    if running:
        return max(running, key=lambda w: w.at or 0.0)
    seen = [w for w in workers if w.at is not None]
    return max(seen, key=lambda w: w.at or 0.0) if seen else Heartbeat(None, 0.0)


def _decode(raw: bytes | str) -> Heartbeat:
    body = json.loads(raw)
    queues = tuple(str(q) for q in body.get("queues", ()))
    return Heartbeat(float(body["at"]), float(body["every"]), bool(body.get("stopped", False)), queues)


def note_worker(sender: Any = None, **kwargs: object) -> None:
    """``heartbeat_sent`` receiver (the worker's main process): this worker lives, as of now."""
    every = float(getattr(sender, "interval", 2.0))
    _write(lambda r: r.hset(redis_key("celery-workers"), _worker_field(), _encode(every, queues=_queues())))


def note_worker_stopped(**kwargs: object) -> None:
    """``worker_shutdown`` receiver: this worker stopped cleanly (no need to wait for its silence)."""
    note = _encode(2.0, stopped=True, queues=_queues())
    _write(lambda r: r.hset(redis_key("celery-workers"), _worker_field(), note))


def _queues() -> list[str]:
    """The queues this worker takes tasks from (its ``-Q``; Celery's default queue without one)."""
    return sorted(current_app.amqp.queues.consume_from or current_app.amqp.queues)


def forget_old_workers(**kwargs: object) -> None:
    """``worker_ready`` receiver: the entries of workers that stopped or fell silent are dropped (a worker starts),
    and a worker taking the upkeep queue notes when it started (``upkeep_started_at``)."""

    def prune(r: redis.Redis) -> None:
        key, now = redis_key("celery-workers"), time.time()
        gone = [field for field, raw in r.hgetall(key).items() if not _decode(raw).running(now)]
        if gone:
            r.hdel(key, *gone)
        if UPKEEP_QUEUE in _queues():
            r.set(redis_key("upkeep-started"), repr(now))

    _write(prune)


def upkeep_started_at() -> float | None:
    """When an upkeep worker last started (Unix s): nothing was scraped before it while the worker was down, as in
    a restart; None when not known (never noted, or Redis did not answer)."""
    try:
        raw = _client().get(redis_key("upkeep-started"))
    except (redis.RedisError, OSError):
        return None
    return float(raw) if raw else None


def start_beat_heartbeat(every: float) -> None:
    """Beat's process only (``beat_init``): note now, then each task beat sends; ``every`` is beat's shortest
    period in seconds."""
    note = functools.partial(note_beat, every)
    note()
    after_task_publish.connect(note, weak=False, dispatch_uid="hearth-beat-heartbeat")


def note_beat(every: float, **kwargs: object) -> None:
    """``after_task_publish`` receiver in beat's process (bound to beat's shortest period): beat runs, as of now."""
    _write(lambda r: r.set(redis_key("beat-heartbeat"), _encode(every)))


def _encode(every: float, stopped: bool = False, queues: list[str] | None = None) -> str:
    note: dict[str, object] = {"at": time.time(), "every": every, "stopped": stopped}
    if queues is not None:
        note["queues"] = queues
    return json.dumps(note)


def _worker_field() -> str:
    return f"{socket.gethostname()} pid {os.getpid()}"


def _write(write: Callable[[redis.Redis], object]) -> None:
    """Run ``write(client)``; a Redis that does not answer is logged, never raised into Celery's loop."""
    try:
        write(_client())
    except (redis.RedisError, OSError) as exc:
        log.warning("heartbeat not noted: Redis did not answer (%s)", exc)


@functools.cache
def _client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=TIMEOUT, socket_connect_timeout=TIMEOUT)
