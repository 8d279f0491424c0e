"""A key's concurrency slot held by a request whose client left is waited for, not refused: the server sees the
closed connection as the client's next request comes, and the slot is given back only once the relay's task is
told, a few turns of the event loop later (gateway.slot_waits; CI once refused the next request with 429).
Real Redis and database, in this process; the client's connection is a stand-in for uvicorn's request cycle, read
as gateway.asgi_io.client_left reads it."""

import asyncio
import secrets
from collections.abc import Iterator

import pytest
from django.test import override_settings

from gateway import slot_waits
from gateway.errors import GatewayError
from gateway.ledger import Ledger
from gateway.ledger_tickets import Ticket
from gateway.prices import Prices
from gateway.quotas import Quota, SlotsTaken
from gateway.relay_plan import RelayPlan
from gateway.request_ids import request_ids
from gateway.reservations import Reservation, Reservations
from tests.test_gateway_activity import idle_deployment, key_entry, plan, state

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def own_instance() -> Iterator[None]:
    with override_settings(HEARTH_INSTANCE=f"slots-test-{secrets.token_hex(4)}"):
        yield


class Transport:
    def is_closing(self) -> bool:
        return False


class Connection:
    """A client's connection as uvicorn's request cycle shows it: ``disconnected`` once the server saw it close."""

    def __init__(self) -> None:
        self.disconnected, self.transport = False, Transport()

    async def receive(self) -> dict[str, str]:
        return {"type": "http.disconnect"}


async def waits_for(ticket: Ticket) -> None:
    while ticket.slot_freed is None:
        await asyncio.sleep(0.01)


def test_a_slot_whose_client_left_is_waited_for_and_one_still_served_is_refused_at_once() -> None:
    dep = idle_deployment()
    key = key_entry(Quota(max_concurrent=1))

    async def check() -> None:
        ledger = Ledger(Reservations(Prices()))
        try:
            connection = Connection()
            first = ledger.ticket(plan(key, dep.pk), state(), request_ids([]), connection.receive)
            await ledger.admit(first, plan(key, dep.pk))
            assert first.holds_slot

            second = ledger.ticket(plan(key, dep.pk), state(), request_ids([]), Connection().receive)
            with pytest.raises(GatewayError) as refused:  # its client is still there: refused, nothing waited for
                await ledger.admit(second, plan(key, dep.pk))
            assert refused.value.status == 429 and first.slot_freed is None

            connection.disconnected = True  # the server saw it close; the relay's task is not told yet
            waiting = asyncio.ensure_future(ledger.admit(second, plan(key, dep.pk)))
            await asyncio.wait_for(waits_for(first), 10)  # Redis refused it; it waits for the slot the client left
            assert not waiting.done()
            await ledger.free_slot(first)  # the relay's task, told: the slot given back before its row
            await waiting
            assert second.holds_slot and not first.holds_slot
        finally:
            await ledger.reservations.close()

    asyncio.run(check())


def test_a_slot_held_by_another_relay_process_is_looked_at_briefly_before_the_refusal() -> None:
    """Two ledgers stand for two relay processes: the second cannot see the first's connections, so it looks at
    the first's slot for FOREIGN_GRACE seconds and is admitted once it is given back in that time."""
    dep = idle_deployment()
    key = key_entry(Quota(max_concurrent=1))

    async def check() -> None:
        here, there = Ledger(Reservations(Prices())), Ledger(Reservations(Prices()))
        try:
            first = there.ticket(plan(key, dep.pk), state(), request_ids([]), Connection().receive)
            await there.admit(first, plan(key, dep.pk))
            second = here.ticket(plan(key, dep.pk), state(), request_ids([]), Connection().receive)
            with pytest.raises(SlotsTaken):  # never given back: refused once the grace is over
                await here.admit(second, plan(key, dep.pk))

            waiting = asyncio.ensure_future(here.admit(second, plan(key, dep.pk)))
            await asyncio.sleep(slot_waits.FOREIGN_PAUSES[0] / 2)
            assert not waiting.done()
            await there.free_slot(first)  # the other process's relay task, told its client left
            await asyncio.wait_for(waiting, slot_waits.FOREIGN_GRACE * 10)
            assert second.holds_slot
        finally:
            await here.reservations.close()
            await there.reservations.close()

    asyncio.run(check())


def test_a_slot_given_back_between_the_refusal_and_its_answer_is_taken() -> None:
    """The holder's relay task frees its slot after Redis refused the next request and before the refusal reached
    it (a fresh user's raw-socket client hit this ~7 % of the time): the refused request is tried again at once."""
    dep = idle_deployment()
    key = key_entry(Quota(max_concurrent=1))

    async def check() -> None:
        ledger = Ledger(Reservations(Prices()))
        reserve = ledger._reserve

        async def refused_then_freed(ticket: Ticket, p: RelayPlan) -> Reservation:
            try:
                return await reserve(ticket, p)
            except SlotsTaken:
                await ledger.free_slot(first)  # the holder's task, told its client left, a moment too late
                raise

        try:
            first = ledger.ticket(plan(key, dep.pk), state(), request_ids([]), Connection().receive)
            await ledger.admit(first, plan(key, dep.pk))
            second = ledger.ticket(plan(key, dep.pk), state(), request_ids([]), Connection().receive)
            ledger._reserve = refused_then_freed  # type: ignore[method-assign]
            await ledger.admit(second, plan(key, dep.pk))
            assert second.holds_slot and not first.holds_slot
        finally:
            await ledger.reservations.close()

    asyncio.run(check())
