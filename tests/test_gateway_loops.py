"""Requests that go round, and where the relay may connect (gateway.loops, appliance.hop_marker, gateway.upstream,
gateway.connect_policy), without processes: a request that names this Hearth in its hop header is a 508, one
through other Hearths is sent on naming them and this one, every request to an engine carries the header, and a
new connection to an external endpoint goes only where the address policy allows now."""

import asyncio
import ipaddress
import json

import pytest

from appliance import address_policy
from appliance.hop_marker import MAX_HOPS, marker, markers_in, onward
from gateway.connect_policy import AddressGate
from gateway.errors import GatewayError, Surface
from gateway.loops import hops_onward
from gateway.registry import Route, Upstream
from gateway.upstream import Engines
from gateway.upstream_errors import UpstreamRefused
from tests.test_gateway_exchange import Client, Script, exchange, run
from tests.test_gateway_upstream import Server, request

OTHER, THIRD = "0123456789abcdef", "fedcba9876543210"  # markers of two other Hearths


def test_a_marker_names_this_appliance_and_tells_nothing_of_its_settings() -> None:
    from django.conf import settings

    assert len(marker()) == 16 and int(marker(), 16) >= 0
    assert settings.HEARTH_INSTANCE not in marker() and marker() != settings.HEARTH_INSTANCE[:16]


def test_a_request_without_the_header_or_through_other_hearths_is_sent_on_naming_this_one_last() -> None:
    assert hops_onward([(b"content-type", b"application/json")]) == marker()
    assert hops_onward([(b"x-hearth-hop", f"{OTHER}, {THIRD}".encode())]) == f"{OTHER}, {THIRD}, {marker()}"
    assert hops_onward([(b"x-hearth-hop", OTHER.encode()), (b"x-hearth-hop", THIRD.encode())]).endswith(marker())
    # what is not a marker is left out: a client cannot put words into the header sent on
    assert hops_onward([(b"x-hearth-hop", b"junk\xff, " + OTHER.encode())]) == f"{OTHER}, {marker()}"
    assert markers_in("a, , 0123456789ABCDEF") == [] and onward("") == marker()


@pytest.mark.parametrize("surface", [Surface.OPENAI, Surface.ANTHROPIC])
@pytest.mark.parametrize("where", ["alone", "last", "first"])
def test_a_request_that_names_this_hearth_is_a_508_not_to_be_retried(surface: Surface, where: str) -> None:
    value = {"alone": marker(), "last": f"{OTHER}, {marker()}", "first": f"{marker()}, {OTHER}"}[where]
    with pytest.raises(GatewayError) as caught:
        hops_onward([(b"x-hearth-hop", value.encode())])
    error = caught.value
    assert (error.status, error.code) == (508, "loop_detected") and "came back to the Hearth" in error.message
    assert (b"x-should-retry", b"false") in error.headers  # the SDKs would retry a 5xx twice
    assert json.loads(error.body(surface))["error"]["message"] == error.message


def test_a_chain_of_max_hops_other_hearths_goes_no_further() -> None:
    chain = ", ".join(f"{i:016x}" for i in range(1, MAX_HOPS))
    assert hops_onward([(b"x-hearth-hop", chain.encode())]).endswith(marker())
    longer = ", ".join(f"{i:016x}" for i in range(1, MAX_HOPS + 1))
    with pytest.raises(GatewayError) as caught:
        hops_onward([(b"x-hearth-hop", longer.encode())])
    assert (caught.value.status, caught.value.code) == (508, "too_many_hops")


def heard(seen: list[bytes]) -> Script:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while asked := await request(reader):  # every request on the connection, until it closes
            seen.append(asked)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")

    return script


def test_every_request_to_an_engine_carries_the_hop_header() -> None:
    seen: list[bytes] = []

    async def test() -> None:
        async with Server(heard(seen)) as engine:
            engines = Engines(1, 5, hop=marker())
            async with await engines.post(engine.url, "/tokenize", "", b"{}"):
                pass
            async with await engines.post(engine.url, "/v1/chat/completions", "k", b"{}", f"{OTHER}, {marker()}"):
                pass
            engines.close()

    run(test)
    assert f"\r\nx-hearth-hop: {marker()}\r\n".encode() in seen[0]
    assert f"\r\nx-hearth-hop: {OTHER}, {marker()}\r\n".encode() in seen[1]


def fixed_policy(allow: tuple[str, ...] = ()) -> address_policy.Policy:
    return address_policy.Policy(tuple(ipaddress.ip_network(n) for n in allow), is_local=lambda a: False)


def test_a_new_connection_to_an_external_endpoint_goes_only_where_the_policy_allows_now(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A name admitted once that resolves to this box later (DNS rebinding) is refused at the next connection
    the gate's TTL allows, with nothing sent there; an endpoint Hearth launched on loopback is never asked."""
    answers = {"engine.example": ["10.1.2.3"]}
    resolved = {host: [address_policy.ip_of(a) for a in found] for host, found in answers.items()}
    monkeypatch.setattr(
        address_policy, "resolve", lambda host, port: resolved.get(host) or [address_policy.ip_of(host)]
    )
    now = [0.0]
    gate = AddressGate(fixed_policy, ttl=5.0, clock=lambda: now[0])

    async def test() -> None:
        assert await gate("engine.example", 8000) == ("10.1.2.3",)
        resolved["engine.example"] = [address_policy.ip_of("127.0.0.1")]
        assert await gate("engine.example", 8000) == ("10.1.2.3",)  # kept for the TTL: no resolution per request
        now[0] = 5.0
        with pytest.raises(UpstreamRefused, match="loopback"):
            await gate("engine.example", 8000)
        async with Server(heard([])) as listener:
            engines = Engines(1, 5, admit=AddressGate(fixed_policy))
            with pytest.raises(UpstreamRefused, match="loopback"):
                await engines.post(listener.url, "/v1/chat/completions", "", b"{}", external=True)
            assert listener.connections == 0  # nothing was sent to the refused address
            async with await engines.post(listener.url, "/v1/chat/completions", "", b"{}"):
                pass  # a replica Hearth launched listens on loopback: not the policy's business
            assert listener.connections == 1
            allowing = Engines(1, 5, admit=AddressGate(lambda: fixed_policy(("127.0.0.0/8",))))
            async with await allowing.post(listener.url, "/v1/chat/completions", "", b"{}", external=True):
                pass  # HEARTH_EXTERNAL_ALLOW's networks are connected to
            assert listener.connections == 2
            engines.close()
            allowing.close()

    run(test)


@pytest.mark.parametrize("surface", [Surface.OPENAI, Surface.ANTHROPIC])
def test_a_route_whose_every_endpoint_is_refused_now_is_a_502_saying_so(surface: Surface) -> None:
    async def test() -> None:
        async with Server(heard([])) as listener:
            engines = Engines(1, 5, admit=AddressGate(fixed_policy))
            external = Route("m", (Upstream(1, listener.url, "", external=True),), 8192, 0)
            with pytest.raises(GatewayError) as caught:
                await exchange(engines, external, surface).run(Client())
            assert listener.connections == 0
        error = caught.value
        assert (error.status, error.code) == (502, "upstream_address_refused")
        assert "address policy refuses" in json.loads(error.body(surface))["error"]["message"]

    run(test)
