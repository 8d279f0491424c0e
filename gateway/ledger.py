"""One gateway process's accounting of its requests, from their start to their RequestLog row, kept through the
death of the process and through outages of Redis and the database.

Per request, one Redis round trip at its start and one at its end, each shared by the requests of a batch. At
its start the request is noted in the process's notes hash (console.observability.request_spool): by admission
itself for a key with limits (gateway.reservations.ADMIT, with what it reserved), otherwise by one script call
(``NOTE``) for all the requests started in the same turn of the event loop, or while the previous call was on its
way, which the request does not wait for (it cost 2.5 ms of TTFT at 64 streams when each request waited for its
own). Either also notes the request in its deployment's activity (console.deployments.activity: the idle policy
never puts aside a deployment with a request in flight), as FINISH ends it there. At its end its FINISH
(gateway.finishes, sent in batches the same way) removes the note, settles the reservation
and adds the row to the spool, which gateway.spool_writer and beat write to the database; a key without limits
is charged in batches (gateway.charges) and its row carries that cost.

A loop, every TICK seconds: renews the process's alive key and writes the notes of the requests whose progress
changed (output tokens sent, the engine's status, TTFT), only where the note is still there (``PROGRESS``), so a
request whose process dies is recorded with what it was sent (gateway.reaper, which the loop runs every
REAP_EVERY seconds for the other processes); and tries again, with a growing delay, the ends Redis did not
take (kept in this process's memory, ``unsent``), their rows written to the database directly meanwhile:
their FINISH, when Redis takes it, settles them and spools rows already written, which the request log skips
(one row per request id). A request that started while Redis was down is not noted; its end is recorded all
the same. What Redis has not taken by the process's stop is left to beat's accounting check.

A Redis server that restarts without persistence (compose's) loses what its spool held. So the process keeps
the rows it spooled in the last RECENT_SECONDS, and when Redis stops answering it writes them to the database
directly too (``unwritten``): those a spool writer had written already are skipped. It loses this process's
registration and notes too: the loop finds the process gone from the set of noting processes (``PROGRESS``) and
notes its requests in flight again.
"""

import asyncio
import json
import logging
import time
from collections import deque
from dataclasses import replace

from redis.exceptions import RedisError

from console.deployments import activity
from console.observability.request_rows import Row, encode
from console.observability.request_spool import ALIVE_SECONDS, alive_key, notes_key, processes_key
from gateway.accounting import Outcome, count, row_of
from gateway.asgi_io import Receive
from gateway.finishes import Finishes, finish_call
from gateway.ledger_scripts import NOTE, PROGRESS
from gateway.ledger_tickets import Ticket, Unsent
from gateway.prices import price_factor
from gateway.quotas import Refused, SlotsTaken
from gateway.ratelimit_headers import ratelimit_headers
from gateway.reaper import process_identity, reap
from gateway.relay_plan import RelayPlan
from gateway.relay_state import RelayState
from gateway.request_ids import RequestIds
from gateway.reservations import Reservation, Reservations, settlement
from gateway.slot_waits import left_slot_freed, slot_freed_since
from gateway.spool_writer import SpoolWriter

log = logging.getLogger(__name__)
TICK = 2.0  # seconds between the loop's rounds: notes renewed, ends Redis did not take tried again
REAP_EVERY = 5.0  # seconds between looks for gone processes
RETRY_MAX = 10.0  # seconds at most between tries of what Redis did not take
COMPLAIN_EVERY = 10.0  # seconds between two log lines about Redis not taking notes or ends
RECENT_SECONDS = 10.0  # seconds a spooled row is kept here, to be written directly should Redis go away


class Ledger:
    """The accounting of this process's requests (module docstring), on ``reservations``' Redis client."""

    def __init__(self, reservations: Reservations) -> None:
        self.reservations, self.redis = reservations, reservations.redis
        self.process = process_identity()
        self.notes = notes_key(self.process)
        self.open: dict[str, Ticket] = {}
        self.unsent: list[Unsent] = []  # ends Redis did not take, in order
        self.recent: deque[tuple[float, Row]] = deque()  # (monotonic s, row with its cost) spooled lately
        self.unwritten: list[Row] = []  # rows spooled before Redis went away, owed a direct write
        self.writer = SpoolWriter(self.process)
        self.finishes = Finishes(self.redis)
        self._noting: dict[str, Ticket] = {}  # the requests the next NOTE call notes
        self._noted: asyncio.Future[None] | None = None  # done once that call answered
        self._notes: asyncio.Task[None] | None = None  # the task sending NOTE calls, while there are notes to send
        self._progress = self.redis.register_script(PROGRESS)
        self._note = self.redis.register_script(NOTE)
        self._loop: asyncio.Task[None] | None = None
        self._retry_at, self._retry_delay, self._complained = 0.0, 0.0, 0.0

    def start(self) -> None:
        """Start the loop and the spool's writer (at the process's start)."""
        self._loop = asyncio.ensure_future(self._keep())
        self.writer.start()

    def ticket(self, plan: RelayPlan, state: RelayState, ids: RequestIds, receive: Receive | None = None) -> Ticket:
        """A new request's ticket (not noted yet), under the gateway's id of ``ids``, its client's connection read
        by ``receive``; the client's id, when it sent one, goes in its note, so that the row of a request whose
        process died keeps it (gateway.reaper)."""
        key = plan.key
        fields = {
            "key_id": key.id,
            "prefix": key.prefix,
            "owner_id": key.quota.owner_id,
            "deployment_id": plan.route.deployment_id,
            "model": plan.model,
            "surface": plan.surface,
            "endpoint": plan.endpoint,
            "stream": plan.stream,
            "started": time.time() - (time.monotonic() - plan.arrived),
            "priority": plan.priority,  # its price factor (gateway.prices.price_factor) and its row's class
            "batch_id": plan.batch_id,
        }
        if ids.client is not None:
            fields["client_request_id"] = ids.client
        ticket = Ticket(ids.own, fields, state, key.quota.any, receive=receive)
        self.open[ticket.request_id] = ticket
        return ticket

    async def admit(self, ticket: Ticket, plan: RelayPlan) -> Reservation:
        """Admit a request of a key with limits (gateway.reservations.admit), noting it. Raises its refusals, a
        limit's or budget's 429 with the key's rate-limit headers (gateway.ratelimit_headers).

        A refusal for the key's limit of requests at once first waits for a slot whose client just left, in this
        process or another, or one given back since the refusal, and is tried once more when one is
        (gateway.slot_waits)."""
        try:
            try:
                held = await self._reserve(ticket, plan)
            except SlotsTaken:
                limit = plan.key.quota.max_concurrent or 0
                if not (
                    await left_slot_freed(self.open, ticket)
                    or await slot_freed_since(self.redis, self.open, ticket, limit)
                ):
                    raise
                held = await self._reserve(ticket, plan)
        except Refused as exc:  # the key's windows as admission left them, as on an admitted request's answer
            limits = ratelimit_headers(plan.key.quota, exc.counted, plan.surface, time.time())
            raise replace(exc, headers=(*exc.headers, *limits)) from None
        ticket.holds_slot = plan.key.quota.max_concurrent is not None
        return held

    async def _reserve(self, ticket: Ticket, plan: RelayPlan) -> Reservation:
        """One try at admission, noting the request with what it reserved."""
        key = plan.key
        held = await self.reservations.admit(
            key.id,
            key.quota,
            plan.route.deployment_id,
            plan.reserve,
            ticket.request_id,
            (self.notes, ticket.fields),
            price_factor(plan.priority),
            plan.reserve_prompt,
        )
        ticket.noted, ticket.held = True, held
        ticket.fields["held"] = [str(held.cost), held.price]
        return held

    async def free_slot(self, ticket: Ticket) -> None:
        """Give back the concurrency slot an admitted request holds, once its answer is complete and before the
        client sees its end, or once it ended otherwise (gateway.relay.Relay.before_end): a client that sends its
        next request at once finds the slot free (FINISH, which gives it back too, comes after the last bytes and
        the count of what a cancelled request was sent). Never raises: while Redis does not answer, the slot is
        given back with the request's end (logged)."""
        held = ticket.held
        if held is None:
            return
        try:
            await self.redis.zrem(held.keys[3], held.rid)  # gateway.reservations.counter_keys' running set
        except (RedisError, OSError) as exc:
            self._complain("concurrency slots are given back with the requests' ends", exc)
        ticket.holds_slot = False
        if ticket.slot_freed is not None and not ticket.slot_freed.done():
            ticket.slot_freed.set_result(None)

    def note(self, ticket: Ticket) -> None:
        """Note a request of a key without limits, with the others of this turn of the event loop (module
        docstring); while Redis does not answer they go unnoted (logged)."""
        self._noting[ticket.request_id] = ticket
        if self._noted is None:
            self._noted = asyncio.get_running_loop().create_future()
        ticket.noting = self._noted
        if self._notes is None:
            self._notes = asyncio.ensure_future(self._send_notes())

    async def _send_notes(self) -> None:
        """The notes waiting, one NOTE call at a time: those of the requests started in this turn of the event
        loop, then those started while that call was on its way (under load, fewer and larger calls)."""
        try:
            while self._noting:
                noting, noted, self._noting, self._noted = self._noting, self._noted, {}, None
                try:
                    await self._note_batch(noting)
                finally:
                    if noted is not None:
                        noted.set_result(None)
        finally:
            self._notes = None

    async def _note_batch(self, noting: dict[str, Ticket]) -> None:
        """The notes of ``noting``, and their deployments' activity: one NOTE call."""
        keys, pairs = [self.notes], dict[int, int]()
        args: list[str | int] = [repr(time.time()), activity.KEPT, activity.LAPSE, len(noting)]
        for rid, ticket in noting.items():
            deployment_id = ticket.fields["deployment_id"]
            if deployment_id not in pairs:
                pairs[deployment_id] = len(pairs) + 1
                keys += [activity.last_request_key(deployment_id), activity.in_flight_key(deployment_id)]
            args += [rid, json.dumps(ticket.fields), pairs[deployment_id]]
        try:
            await self._note(keys=keys, args=args)
        except (RedisError, OSError) as exc:
            self._complain("requests are not noted", exc)
            return
        for ticket in noting.values():
            ticket.noted = True

    async def close(self, ticket: Ticket, outcome: Outcome) -> None:
        """Count the request in the metrics and end it: settled or charged, its row spooled (module docstring).
        Never raises: what Redis does not take now is tried again later."""
        self.open.pop(ticket.request_id, None)
        if ticket.slot_freed is not None and not ticket.slot_freed.done():  # a waiter waits no longer than its end
            ticket.slot_freed.set_result(None)
        if ticket.noting is not None:  # whether it was noted decides how FINISH ends it
            await asyncio.shield(ticket.noting)  # shared with its batch: not cancelled with this request
        outcome.request_id = ticket.request_id
        outcome.client_request_id = ticket.fields.get("client_request_id")
        count(outcome)
        prompt, completion, _ = outcome.tokens()
        used = (prompt or 0) + (completion or 0)
        if not ticket.limited:
            f = ticket.fields
            charge = self.reservations.charge
            factor = price_factor(f["priority"])
            outcome.cost_usd = await charge(
                f["key_id"], f["owner_id"], f["deployment_id"], used, f["started"], prompt=prompt or 0, factor=factor
            )
        row = row_of(outcome)
        cost = row.pop("cost_usd")
        settle: tuple[list[str], list[str | int]] = ([], [])
        if ticket.held is not None:
            held = ticket.held
            settle = settlement(held.keys, held.rid, held.tokens, used, held.cost, held.price, held.owned, prompt or 0)
        keys, args = finish_call(
            self.notes,
            ticket.request_id,
            ticket.noted,
            encode(row),
            "" if cost is None else str(cost),
            settle,
            ticket.fields["deployment_id"],
            time.time(),
        )
        try:
            done = await self.finishes.finish(keys, args)
        except (RedisError, OSError) as exc:
            self._complain("request ends are kept in memory until it does", exc)
            self.unsent.append(Unsent(keys, args, {**row, "cost_usd": cost}))
            self._redis_away()
            return
        if done:
            self._keep_recent({**row, "cost_usd": int(done[1]) if done[1] else None})

    async def stop(self) -> None:
        """At the process's stop: the loop stopped, the ends Redis did not take tried once more (their rows written
        to the database directly when it still does not: their settlements are left to beat's accounting check),
        the writer stopped, the process forgotten in Redis when no note of it is left."""
        if self._loop is not None:
            self._loop.cancel()
        await self._retry()
        if lost := len([end for end in self.unsent if not end.written]) + len(self.unwritten):
            log.error("%d request log rows neither Redis nor the database took before the stop; lost", lost)
        await self.writer.stop()
        try:
            if not await self.redis.hlen(self.notes):
                await self.redis.srem(processes_key(), self.process)
                await self.redis.delete(alive_key(self.process), self.notes)
        except (RedisError, OSError):
            pass  # its alive key expires by itself

    async def _keep(self) -> None:
        reaped_at = 0.0
        await self._register()
        while True:
            try:
                await self._renew()
                if time.monotonic() - reaped_at >= REAP_EVERY:
                    reaped_at = time.monotonic()
                    await reap(self.redis, self.finishes.one, self.process)
            except (RedisError, OSError) as exc:
                self._complain("notes are not renewed", exc)
                self._redis_away()
            if (self.unsent or self.unwritten) and time.monotonic() >= self._retry_at:
                await self._retry()
            await asyncio.sleep(TICK)

    async def _register(self) -> None:
        """This process in the set of noting processes, alive (tried until Redis answers)."""
        while True:
            try:
                async with self.redis.pipeline(transaction=False) as pipe:
                    pipe.sadd(processes_key(), self.process)
                    pipe.set(alive_key(self.process), "1", ex=ALIVE_SECONDS)
                    await pipe.execute()
                return
            except (RedisError, OSError) as exc:
                self._complain("this process is not registered", exc)
                await asyncio.sleep(TICK)

    async def _renew(self) -> None:
        """The alive key renewed, this process in the set of noting processes, and the notes of requests whose
        progress changed rewritten; when Redis had lost this process, the requests in flight noted again."""
        now, changed = time.time(), []
        for ticket in self.open.values():
            state = ticket.state
            said = (state.live_token_chunks() if state.live_token_chunks else state.token_chunks, state.status)
            if ticket.noted and said != ticket.said:
                ticket.said = said
                progress = {"chunks": said[0], "status": said[1], "ttft": state.ttft_seconds, "updated": now}
                changed += [ticket.request_id, json.dumps({**ticket.fields, **progress})]
        keys = [self.notes, alive_key(self.process), processes_key()]
        if await self._progress(keys=keys, args=[ALIVE_SECONDS, self.process, *changed]):
            self._note_again()

    def _note_again(self) -> None:
        """Note again the requests in flight whose notes were written, with their deployments' activity: Redis
        lost them with this process's registration (a restart without persistence, as compose's Redis), and
        without them the panels read no request running, the idle policy could put a deployment with streams
        in flight aside, and the reaper would not know this process."""
        again = [ticket for ticket in self.open.values() if ticket.noted]
        log.warning(
            "Redis had lost this process and its notes (restarted?): %d requests in flight noted again", len(again)
        )
        for ticket in again:
            ticket.said = (0, 0)  # the next round rewrites its progress
            self.note(ticket)

    async def _retry(self) -> None:
        """Try again the ends Redis did not take, in order (while Redis still does not answer, wait longer before
        the next try, up to RETRY_MAX); write the rows owed a direct write."""
        while self.unsent:
            end = self.unsent[0]
            try:
                await self.finishes.one(keys=end.keys, args=end.args)
            except (RedisError, OSError):
                self._retry_delay = min(max(self._retry_delay * 2, TICK), RETRY_MAX)
                self._retry_at = time.monotonic() + self._retry_delay
                break
            self.unsent.pop(0)
        else:
            self._retry_delay = 0.0
        await self._write_directly()

    async def _write_directly(self) -> None:
        waiting = [end for end in self.unsent if not end.written]
        rows = [end.row for end in waiting] + self.unwritten
        if not rows:
            return
        try:
            await self.writer.write_directly(rows)
        except Exception as exc:  # the database's errors, whichever driver: kept, tried again
            log.warning("neither Redis nor the database takes request log rows; %d kept (%s)", len(rows), exc)
            return
        for end in waiting:
            end.written = True
        del self.unwritten[: len(rows) - len(waiting)]

    def _keep_recent(self, row: Row) -> None:
        now = time.monotonic()
        self.recent.append((now, row))
        while self.recent[0][0] < now - RECENT_SECONDS:
            self.recent.popleft()

    def _redis_away(self) -> None:
        """Redis did not answer: the rows spooled lately may be lost with it, so they are owed a direct write."""
        self.unwritten += [row for _, row in self.recent]
        self.recent.clear()

    def _complain(self, what: str, exc: BaseException) -> None:
        if time.monotonic() - self._complained >= COMPLAIN_EVERY:
            self._complained = time.monotonic()
            log.warning("Redis does not answer: %s (%s)", what, exc)
