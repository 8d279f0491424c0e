"""The gateway keeps each deployment's activity for its idle policy (console.deployments.activity) in the round trips
its accounting makes anyway (gateway.ledger, gateway.reservations): a request is in its deployment's requests in
flight from its start to its end, whatever its key, and its end is the deployment's last request; so reconcile's
idle policy (console.deployments.idling) never puts aside a deployment that is serving. Real Redis and database, in
this process; each test has a Hearth instance of its own."""

import asyncio
import secrets
import time
from collections.abc import Iterator
from decimal import Decimal

import pytest
import redis
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from console.access.keys import create_key
from console.deployments import activity, idling
from console.deployments.models import Deployment, DeploymentState
from console.observability.request_spool import notes_key, processes_key
from gateway.accounting import Outcome
from gateway.answers import for_request
from gateway.ledger import Ledger
from gateway.prices import Prices
from gateway.quotas import Quota
from gateway.reaper import reap
from gateway.registry import KeyEntry
from gateway.relay_plan import RelayPlan
from gateway.relay_state import RelayState
from gateway.request_ids import request_ids
from gateway.reservations import Reservations
from tests.test_gateway_ledger import plan as ledger_plan

pytestmark = pytest.mark.django_db(transaction=True)
HOUR = 3600.0


@pytest.fixture(autouse=True)
def own_instance() -> Iterator[redis.Redis]:
    with override_settings(HEARTH_INSTANCE=f"activity-test-{secrets.token_hex(4)}"):
        yield redis.Redis.from_url(settings.REDIS_URL)


def idle_deployment(policy: str = "stop") -> Deployment:
    """A ready deployment whose policy puts it aside after a minute, ready for an hour, no request known."""
    return Deployment.objects.create(
        name="dozer",
        engine="simulator",
        served_model_name="dozer",
        max_model_len=0,
        kv_space_gib=0,
        plan={},
        state=DeploymentState.READY,
        idle_policy=policy,
        idle_minutes=1,
        state_since=timezone.now() - timezone.timedelta(seconds=HOUR),
    )


def key_entry(quota: Quota) -> KeyEntry:
    key = create_key(f"k-{secrets.token_hex(3)}", None)[0]
    return KeyEntry(key.pk, key.prefix, "", frozenset(), None, None, quota)


def plan(key: KeyEntry, deployment_id: int) -> RelayPlan:
    return ledger_plan(key, reserve=10, model="dozer", deployment_id=deployment_id)


def ended(key: KeyEntry) -> Outcome:
    usage = {"prompt_tokens": 3, "completion_tokens": 4}
    return Outcome(key.id, key.prefix, "dozer", "openai", "/v1/chat/completions", True, 200, "stop", usage)


def put_aside(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the deployments reconcile's idle policy claims (the claim itself not made)."""
    claimed: list[str] = []
    monkeypatch.setattr(idling, "claim_stop_to_save", lambda dep, reason: claimed.append(dep.name))
    return claimed


def reconcile_idle_policy() -> None:
    """apply_idle_policies as reconcile runs it, on a thread of its own (it reads the database and Redis)."""
    idling.apply_idle_policies()


def test_a_deployment_serving_requests_is_not_idle_and_one_whose_last_request_is_old_is(
    own_instance: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = own_instance
    dep = idle_deployment()
    claimed = put_aside(monkeypatch)
    free, budget = key_entry(Quota()), key_entry(Quota(daily_usd=Decimal(10)))

    async def check() -> None:
        ledger = Ledger(Reservations(Prices()))
        try:
            started = time.time()
            tickets = [
                ledger.ticket(plan(free, dep.pk), state(), request_ids([])),
                ledger.ticket(plan(budget, dep.pk), state(), request_ids([])),
            ]
            ledger.note(tickets[0])  # a key without limits: noted with the others of this turn
            await ledger.admit(tickets[1], plan(budget, dep.pk))  # a key with a budget: noted by its admission
            await tickets[0].noting
            assert activity.in_flight(r, dep.pk) == 2
            assert started <= (activity.last_request(r, dep.pk) or 0) <= time.time()
            r.set(activity.last_request_key(dep.pk), repr(time.time() - HOUR))  # as if they started an hour ago
            await asyncio.to_thread(reconcile_idle_policy)
            assert claimed == []  # serving: not idle, however long ago its requests began
            await ledger.close(tickets[0], ended(free))
            assert activity.in_flight(r, dep.pk) == 1
            await asyncio.to_thread(reconcile_idle_policy)
            assert claimed == []
            await ledger.close(tickets[1], ended(budget))
            assert activity.in_flight(r, dep.pk) == 0
            assert (activity.last_request(r, dep.pk) or 0) >= time.time() - 5  # its last answer just ended
            await asyncio.to_thread(reconcile_idle_policy)
            assert claimed == []  # idle for seconds, not its minute
        finally:
            await ledger.reservations.close()

    asyncio.run(check())
    r.set(activity.last_request_key(dep.pk), repr(time.time() - HOUR))
    reconcile_idle_policy()
    assert claimed == ["dozer"]  # an hour without a request and none in flight: put aside


def test_the_requests_of_a_gone_process_leave_their_deployment_s_requests_in_flight(
    own_instance: redis.Redis,
) -> None:
    r = own_instance
    dep = idle_deployment()
    free = key_entry(Quota())

    async def check() -> None:
        ledger = Ledger(Reservations(Prices()))
        ledger.process = "another-host/ns/12/34"  # a process elsewhere whose alive key has expired
        ledger.notes = notes_key(ledger.process)
        try:
            ticket = ledger.ticket(plan(free, dep.pk), state(), request_ids([]))
            ledger.note(ticket)
            await ticket.noting
            assert activity.in_flight(r, dep.pk) == 1
            r.sadd(processes_key(), ledger.process)
            assert await reap(ledger.redis, ledger.finishes.one, "me") == 1
            assert activity.in_flight(r, dep.pk) == 0
        finally:
            await ledger.reservations.close()

    asyncio.run(check())


def state() -> RelayState:
    return RelayState(for_request("/v1/chat/completions", {}), quiet_since=time.monotonic())
