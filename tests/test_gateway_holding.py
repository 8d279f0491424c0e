"""Requests held for a deployment put aside to share the GPUs (gateway.holding), in this process, against a route
table a test changes as the worker's wake would (a stand-in for gateway.registry.Registry with its generation and
its wake-ups) and a counted request_wake: one wake asked however many wait, all served at the same change, a
stream kept alive meanwhile, and each way of giving up answered 503 with its reason and a Retry-After."""

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from django.test import override_settings
from prometheus_client import REGISTRY

from console.deployments.wakeups import ADMIN_MUST_ACT
from gateway import errors, holding, stream_errors
from gateway.answers import for_request
from gateway.errors import GatewayError, Surface
from gateway.holding import Holding
from gateway.registry import Registry
from gateway.relay_plan import KEEPALIVE, RelayPlan
from gateway.relay_state import RelayState
from gateway.snapshot import KeyEntry, Route, Snapshot, Upstream
from gateway.sse import StreamKind

DEP = 41
ASLEEP = Route("napper", (), 8192, 0, deployment_id=DEP, asleep=True)
READY = Route("napper", (Upstream(7, "http://127.0.0.1:9", "k"),), 8192, 0, deployment_id=DEP)


def put_aside(state: str = "asleep") -> Snapshot:
    return Snapshot(states={"napper": state}, asleep={"napper": ASLEEP}, reasons={"napper": "Asleep at level 1."})


def woken() -> Snapshot:
    return Snapshot(routes={"napper": READY}, states={"napper": "ready"})


def failed(reason: str) -> Snapshot:
    return Snapshot(states={"napper": "failed"}, reasons={"napper": reason})


class Table:
    """The route table as gateway.registry.Registry serves it to held requests: ``current``, ``generation`` and
    ``changed_since``; ``change`` is the worker's routing bump and the reload after it."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot, self.generation, self.reads = snapshot, 0, 0
        self._changed = asyncio.Event()

    async def current(self) -> Snapshot:
        self.reads += 1
        return self.snapshot

    async def changed_since(self, generation: int, timeout: float) -> None:
        if generation == self.generation:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)

    def change(self, snapshot: Snapshot) -> None:
        self.snapshot, self.generation = snapshot, self.generation + 1
        self._changed.set()
        self._changed = asyncio.Event()


class Asks:
    """request_wake as the gateway calls it, counted; ``gate`` holds each call until set; ``fails`` raises."""

    def __init__(self, fails: Exception | None = None) -> None:
        self.calls: list[int] = []
        self.done: list[int] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fails = fails

    def __call__(self, deployment_id: int, reason: str = "", audited: bool = False) -> bool:
        self.calls.append(deployment_id)
        self.gate.wait(10)
        if self.fails is not None:
            raise self.fails
        self.done.append(deployment_id)
        return len(self.done) == 1  # as wakeups' SET NX answers: only the first ask sends the task


class Client:
    """A client's end of the ASGI send: the head's status and the bodies, with when each came."""

    def __init__(self) -> None:
        self.status, self.bodies = 0, []  # type: ignore[var-annotated]

    async def __call__(self, message: Mapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        else:
            self.bodies.append(message["body"])


def plan(stream: bool = False, surface: Surface = Surface.OPENAI, keepalive: float = 15.0) -> RelayPlan:
    return RelayPlan(
        key=KeyEntry(1, "hk-x", "", frozenset(), None, None),
        route=ASLEEP,
        endpoint="/v1/chat/completions",
        surface=surface,
        stream=stream,
        arrived=time.monotonic(),
        engine_path="/v1/chat/completions",
        body=b"{}",
        prefix=b"",
        kind=StreamKind.CHAT,
        request={"model": "napper"},
        keepalive_every=keepalive,
        idle_timeout=600.0,
        retry_after=10,
    )


def state() -> RelayState:
    return RelayState(for_request("/v1/chat/completions", {}), quiet_since=time.monotonic())


def held(outcome: str) -> float:
    value = REGISTRY.get_sample_value("hearth_gateway_held_requests_total", {"model": "napper", "outcome": outcome})
    return value or 0.0


def asked() -> float:
    return REGISTRY.get_sample_value("hearth_gateway_wakes_asked_total", {"model": "napper"}) or 0.0


@pytest.fixture
def asks(monkeypatch: pytest.MonkeyPatch) -> Asks:
    counted = Asks()
    monkeypatch.setattr(holding.wakeups, "request_wake", counted)
    return counted


def run(test: Callable[[], Any]) -> Any:
    return asyncio.run(asyncio.wait_for(test(), 30))


def test_fifty_requests_held_for_one_deployment_ask_one_wake_and_are_all_served_at_the_same_change(
    asks: Asks,
) -> None:
    before, served = asked(), held("served")

    async def test() -> None:
        table = Table(put_aside())
        hold = Holding(table)  # type: ignore[arg-type]
        states = [state() for _ in range(50)]
        waits = [asyncio.ensure_future(hold.hold(plan(), s, Client())) for s in states]
        while len(asks.done) < 1 or table.reads < 50:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        assert not any(w.done() for w in waits)  # asleep still: nobody served, nobody refused
        table.change(put_aside("waking"))
        await asyncio.sleep(0.05)
        assert not any(w.done() for w in waits)
        table.change(woken())
        done, _ = await asyncio.wait(waits, timeout=1)  # the same change serves them all
        assert len(done) == 50 and {w.result() for w in waits} == {READY}
        assert all(s.woke_engine and s.wake_seconds is not None and s.wake_seconds > 0.1 for s in states)
        assert hold._asks == {}  # the next request put aside asks again

    run(test)
    assert asks.calls == [DEP]  # one ask from this process, whatever the number held
    assert asked() - before == 1 and held("served") - served == 50


def test_a_held_stream_gets_its_head_then_keep_alives_and_a_held_whole_answer_nothing(asks: Asks) -> None:
    async def test() -> None:
        table = Table(put_aside())
        hold = Holding(table)  # type: ignore[arg-type]
        stream, anthropic, whole = Client(), Client(), Client()
        states = [state(), state(), state()]
        waits = [
            asyncio.ensure_future(hold.hold(plan(True, keepalive=0.1), states[0], stream)),
            asyncio.ensure_future(hold.hold(plan(True, Surface.ANTHROPIC, keepalive=0.1), states[1], anthropic)),
            asyncio.ensure_future(hold.hold(plan(keepalive=0.1), states[2], whole)),
        ]
        await asyncio.sleep(0.05)
        assert stream.status == 0 and not stream.bodies  # a wake within a keep-alive interval: no head yet
        await asyncio.sleep(0.5)
        table.change(woken())
        await asyncio.gather(*waits)
        assert stream.status == 200 and states[0].head_sent and set(stream.bodies) == {KEEPALIVE[Surface.OPENAI]}
        assert states[0].status == 200 and states[2].status == 0  # what a client that left now is logged with
        assert 3 <= len(stream.bodies) <= 6
        assert anthropic.status == 200 and set(anthropic.bodies) == {KEEPALIVE[Surface.ANTHROPIC]}
        assert whole.status == 0 and whole.bodies == [] and not states[2].head_sent

    run(test)


def test_a_failed_wake_answers_503_with_the_reason_and_no_retry(asks: Asks) -> None:
    """The wake left its deployment failed: only an admin launches it again, so the SDKs are told not to retry (a
    trial's client waited the Retry-After of the first answer to be told so by the next)."""
    reason = "The wake failed: Call to wake_up method failed: CUDA Error: out of memory Its engine was stopped."
    failures = held("failed")

    async def test() -> GatewayError:
        table = Table(put_aside())
        wait = asyncio.ensure_future(Holding(table).hold(plan(), state(), Client()))  # type: ignore[arg-type]
        await asyncio.sleep(0.1)
        table.change(put_aside("waking"))
        await asyncio.sleep(0.05)
        table.change(failed(reason))
        with pytest.raises(GatewayError) as refused:
            await wait
        return refused.value

    error = run(test)
    assert (error.status, error.code, error.retry_after, error.headers) == (503, "wake_failed", None, errors.NO_RETRY)
    assert "could not be woken: The wake failed: Call to wake_up method failed: CUDA Error: out of memory" in (
        error.message
    )
    assert error.message.endswith("Its engine was stopped. Its deployment failed, and only an admin can launch it.")
    assert held("failed") - failures == 1


def test_a_wake_longer_than_hearth_wake_timeout_answers_503_and_the_wake_goes_on(asks: Asks) -> None:
    timeouts = held("timeout")

    async def test() -> tuple[GatewayError, RelayState]:
        table, held_state = Table(put_aside()), state()
        with override_settings(HEARTH_WAKE_TIMEOUT=0.3), pytest.raises(GatewayError) as refused:
            await Holding(table).hold(plan(), held_state, Client())  # type: ignore[arg-type]
        return refused.value, held_state

    began = time.monotonic()
    error, held_state = run(test)
    assert 0.3 <= time.monotonic() - began < 2
    assert (error.status, error.code, error.retry_after) == (503, "wake_timeout", 10)
    assert "was put aside to share the GPUs and was not awake within" in error.message
    assert "(HEARTH_WAKE_TIMEOUT); it may still be waking. Retry in 10 s." in error.message
    assert held_state.woke_engine and held_state.wake_seconds is not None and held_state.wake_seconds >= 0.3
    assert held("timeout") - timeouts == 1


def test_a_wake_that_cannot_be_asked_for_answers_503_and_the_next_request_asks_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broken = Asks(fails=ConnectionError("the broker does not answer"))
    monkeypatch.setattr(holding.wakeups, "request_wake", broken)

    async def test() -> GatewayError:
        table = Table(put_aside())
        hold = Holding(table)  # type: ignore[arg-type]
        wait = asyncio.ensure_future(hold.hold(plan(), state(), Client()))
        while not wait.done():
            table.change(put_aside())  # the registry's reloads, which wake the held request to look again
            await asyncio.sleep(0.05)
        with pytest.raises(GatewayError) as refused:
            await wait
        broken.fails = None
        again = asyncio.ensure_future(hold.hold(plan(), state(), Client()))
        while len(broken.done) < 1:
            await asyncio.sleep(0.01)
        table.change(woken())
        assert await again == READY
        return refused.value

    error = run(test)
    assert (error.status, error.code, error.retry_after) == (503, "wake_unavailable", 10)
    assert "the broker does not answer" in error.message
    assert broken.calls == [DEP, DEP]


def test_a_client_that_leaves_while_held_is_counted_cancelled_and_its_wake_goes_on(asks: Asks) -> None:
    cancelled, before = held("cancelled"), asked()
    asks.gate.clear()  # the ask is on its way (Redis, the broker) when the client leaves

    async def test() -> None:
        table = Table(put_aside())
        hold = Holding(table)  # type: ignore[arg-type]
        client, held_state = Client(), state()
        wait = asyncio.ensure_future(hold.hold(plan(True, keepalive=0.05), held_state, client))
        await asyncio.sleep(0.2)
        wait.cancel()
        with pytest.raises(asyncio.CancelledError):
            await wait
        assert held_state.wake_seconds is not None and hold._asks == {}
        asks.gate.set()
        while len(asks.done) < 1:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        sent = len(client.bodies)
        await asyncio.sleep(0.2)
        assert len(client.bodies) == sent  # no keep-alive after the client left

    run(test)
    assert asks.done == [DEP] and asked() - before == 1 and held("cancelled") - cancelled == 1


def test_a_wake_the_worker_could_not_make_room_for_answers_503_with_why_and_an_older_one_is_not_this_one(
    asks: Asks,
) -> None:
    why = "Not woken: to fit napper (15.0 GiB per GPU on GPU 0) nothing can be put aside: big is always on."

    def not_woken(at: float) -> Snapshot:
        return Snapshot(
            states={"napper": "asleep"}, asleep={"napper": ASLEEP}, reasons={}, not_woken={"napper": (at, why)}
        )

    async def test() -> GatewayError:
        table = Table(not_woken(time.time() - 60))  # a wake refused a minute ago: this request asks again
        wait = asyncio.ensure_future(Holding(table).hold(plan(), state(), Client()))  # type: ignore[arg-type]
        await asyncio.sleep(0.1)
        assert not wait.done()
        table.change(not_woken(time.time()))
        with pytest.raises(GatewayError) as refused:
            await wait
        return refused.value

    error = run(test)
    assert (error.status, error.code) == (503, "wake_failed")
    assert error.message.endswith(
        "could not be woken: to fit napper (15.0 GiB per GPU on GPU 0) nothing can be put aside: big is always on."
    )


def test_a_wake_only_an_admin_can_make_room_for_tells_clients_not_to_retry() -> None:
    """A trial's SDK retried every 10 s (Retry-After) a wake a deployment on the stay policy blocked."""
    blocked = "Not woken: To fit napper … only an admin's consent puts it aside." + ADMIN_MUST_ACT
    waited = "Not woken: No room within 600 s: waiting for big's residency to end."
    for why, code in ((blocked, "wake_needs_admin"), (waited, "wake_failed")):
        snapshot = Snapshot(states={"napper": "asleep"}, asleep={"napper": ASLEEP}, not_woken={"napper": (5.0, why)})
        with pytest.raises(GatewayError) as refused:
            holding._ready(snapshot, "napper", 10, 0.0)
        assert (refused.value.status, refused.value.code) == (503, code)
        if code == "wake_needs_admin":
            assert refused.value.retry_after is None and errors.NO_RETRY[0] in refused.value.headers
            assert refused.value.message == (
                "The model 'napper' was put aside to share the GPUs and cannot be woken until an admin makes room: "
                "To fit napper … only an admin's consent puts it aside."
            )
        else:
            assert refused.value.retry_after == 10 and not refused.value.headers


def test_a_deployment_stopped_by_an_admin_while_requests_wait_answers_them_503() -> None:
    snapshot = Snapshot(states={"napper": "stopped"}, reasons={"napper": "Stopped by admin."})
    with pytest.raises(GatewayError) as refused:
        holding._ready(snapshot, "napper", 10, 0.0)
    assert refused.value.status == 503 and refused.value.code == "no_ready_replica"
    assert holding._ready(Snapshot(states={"napper": "loading"}), "napper", 10, 0.0) is None  # a relaunch under way
    with pytest.raises(GatewayError) as gone:
        holding._ready(Snapshot(), "napper", 10, 0.0)
    assert gone.value.status == 404


def test_the_registry_wakes_its_waiters_at_each_reload_and_announcement() -> None:
    async def test() -> None:
        registry = Registry()
        generation = registry.generation
        waiter = asyncio.ensure_future(registry.changed_since(generation, 5))
        await asyncio.sleep(0.05)
        assert not waiter.done()
        registry._announced([b"hearth:x:routing-version"])
        await asyncio.wait_for(waiter, 1)
        began = time.monotonic()
        await registry.changed_since(generation, 5)  # a change came since: at once
        await registry.changed_since(registry.generation, 0.1)  # none since: after its timeout
        assert time.monotonic() - began >= 0.1
        registry._loads.close()

    run(test)


ERROR = errors.wake_failed("napper", "The wake failed: CUDA Error: out of memory", 10)


@pytest.mark.parametrize(
    ("surface", "responses", "event", "shape"),
    [
        (Surface.OPENAI, False, None, lambda d: d["error"]["code"] == "wake_failed"),
        (Surface.OPENAI, True, "response.failed", lambda d: d["response"]["error"]["code"] == "wake_failed"),
        (Surface.ANTHROPIC, False, "error", lambda d: d["error"]["type"] == "overloaded_error"),
    ],
    ids=["chat", "responses", "anthropic"],
)
def test_a_held_stream_s_error_is_an_in_stream_event_in_its_api_s_shape(
    surface: Surface, responses: bool, event: str | None, shape: Callable[[dict[str, Any]], bool]
) -> None:
    text = stream_errors.error_event(ERROR, surface, responses).decode()
    assert text.endswith("\n\n")
    lines = text.strip().split("\n")
    assert lines[0] == (f"event: {event}" if event else lines[0])
    data = json.loads(lines[-1].removeprefix("data: "))
    assert shape(data) and "CUDA Error: out of memory" in json.dumps(data)


@pytest.mark.django_db
def test_the_route_table_carries_the_deployments_put_aside_and_their_wakes_not_made() -> None:
    from console.deployments.models import Deployment, DeploymentEvent
    from gateway.snapshot import load_snapshot

    def made(name: str, state: str, desired: str) -> Deployment:
        fields = {"engine": "simulator", "max_model_len": 4096, "kv_space_gib": 0, "plan": {}}
        return Deployment.objects.create(name=name, served_model_name=name, state=state, desired=desired, **fields)

    asleep = made("asleep", "asleep", "asleep")
    made("sleeping", "sleeping", "asleep")
    made("saved", "stopped", "stopped_idle")
    made("stopped", "stopped", "stopped")
    made("failed", "failed", "serving")
    DeploymentEvent.note(asleep, DeploymentEvent.Kind.WAKE_FAILED, 0.1, reason="Not woken: no room.")
    snapshot = load_snapshot()
    assert sorted(snapshot.asleep) == ["asleep", "saved", "sleeping"]
    route = snapshot.asleep["asleep"]
    assert route.asleep and route.upstreams == () and route.deployment_id == asleep.pk and route.max_model_len == 4096
    assert snapshot.routes == {} and snapshot.states["stopped"] == "stopped"
    at, why = snapshot.not_woken["asleep"]
    assert why == "Not woken: no room." and abs(at - time.time()) < 60 and "saved" not in snapshot.not_woken
