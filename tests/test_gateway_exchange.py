"""One exchange of the relay (gateway.relay.Relay) against scripted engines on loopback: how each way an engine
can fail reaches the client, and the gateway's half of fitting max_tokens to the context left."""

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pytest

from gateway.app import Gateway
from gateway.errors import GatewayError, Surface
from gateway.registry import KeyEntry, Route, Upstream
from gateway.relay import Relay
from gateway.relay_plan import RelayPlan
from gateway.rewrite import Translation
from gateway.routing import Router
from gateway.sse import StreamKind
from gateway.upstream import Engines
from tests.test_gateway_upstream import SSE, Server, chunk, request

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
CHAT = "/v1/chat/completions"


class Client:
    """What the gateway sent the client: status, headers and body."""

    def __init__(self) -> None:
        self.status, self.headers, self.body = 0, {}, b""

    async def __call__(self, message: Mapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status, self.headers = message["status"], dict(message["headers"])
        else:
            self.body += message.get("body", b"")


def route(*urls: str, **fields: Any) -> Route:
    upstreams = tuple(Upstream(i, url, "k") for i, url in enumerate(urls))
    return Route("m", upstreams, fields.pop("max_model_len", 8192), 0, **fields)


def exchange(
    engines: Engines,
    target: Route,
    surface: Surface = Surface.OPENAI,
    kind: StreamKind = StreamKind.CHAT,
    translation: Translation = Translation.NONE,
    engine_path: str = CHAT,
) -> Relay:
    """A relay of an empty request to ``engine_path`` on ``target``'s replicas, answered to a client of
    ``surface`` (translated as ``translation`` says)."""
    plan = RelayPlan(
        key=KeyEntry(1, "hk-x", "", frozenset(), None, None),
        route=target,
        endpoint=CHAT,
        surface=surface,
        stream=True,
        arrived=time.monotonic(),
        engine_path=engine_path,
        body=b"{}",
        prefix=b"",
        kind=kind,
        request={"model": "m", "input": "hi"},
        keepalive_every=15.0,
        idle_timeout=engines.read_timeout,
        retry_after=1,
        translation=translation,
    )
    return Relay(plan, engines, Router())


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 15))


def silent_after_request(counter: list[int]) -> Script:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        counter.append(1)
        await request(reader)
        await reader.read()

    return script


def test_an_engine_silent_on_a_whole_answer_is_a_504_and_never_sent_to_another_replica() -> None:
    """A long non-streamed request sends its head only at the end: the idle timeout must not make the gateway
    run it again on the next replica (the engine would run it twice) or answer 502."""
    first: list[int] = []
    second: list[int] = []

    async def test() -> None:
        async with Server(silent_after_request(first)) as one, Server(silent_after_request(second)) as two:
            engines = Engines(connect_timeout=1, read_timeout=0.3)
            relay = exchange(engines, route(one.url, two.url))
            with pytest.raises(GatewayError) as caught:
                await relay.run(Client())
            assert caught.value.status == 504 and caught.value.code == "upstream_timeout"
            assert len(first) + len(second) == 1  # sent once, to one replica

    run(test)


def test_replicas_that_cannot_be_reached_are_a_503_with_retry_after() -> None:
    async def closes(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request(reader)  # an engine dying with the request: closed without an answer

    async def test() -> None:
        async with Server(closes) as dying:
            async with Server(closes) as gone:
                url = gone.url
            relay = exchange(Engines(1, 5), route(dying.url, url))
            with pytest.raises(GatewayError) as caught:
                await relay.run(Client())
        error = caught.value
        assert (error.status, error.code) == (503, "upstream_unreachable")
        assert error.retry_after and error.retry_after >= 1
        assert json.loads(error.body(Surface.ANTHROPIC))["error"]["type"] == "overloaded_error"

    run(test)


def answer(status: int, content_type: bytes, body: bytes) -> Script:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request(reader)
        writer.write(
            b"HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s"
            % (status, content_type, len(body), body)
        )
        await reader.read()

    return script


@pytest.mark.parametrize("content_type", [b"text/plain; charset=utf-8", b"text/html", b"application/problem+json"])
@pytest.mark.parametrize("surface", [Surface.OPENAI, Surface.ANTHROPIC])
def test_a_rewritten_error_is_json_whatever_the_engine_called_it(content_type: bytes, surface: Surface) -> None:
    async def test() -> None:
        async with Server(answer(500, content_type, b"Internal Server Error")) as engine:
            client = Client()
            await exchange(Engines(1, 5), route(engine.url), surface).run(client)
        assert client.status == 500 and client.headers[b"content-type"] == b"application/json"
        assert json.loads(client.body)  # in the API's own shape

    run(test)


@pytest.mark.parametrize("body", [b'{"tokens": [1, 2]}', b'{"count": null}', b'{"count": "3"}', b"[]", b"not json"])
def test_a_translated_count_tokens_is_never_a_silent_zero(body: bytes) -> None:
    async def test() -> None:
        async with Server(answer(200, b"application/json", body)) as engine:
            target = route(engine.url)
            relay = exchange(
                Engines(1, 5), target, Surface.ANTHROPIC, StreamKind.MESSAGES, Translation.COUNT_TOKENS, "/tokenize"
            )
            with pytest.raises(GatewayError) as caught:
                await relay.run(Client())
        assert caught.value.status == 502

    run(test)


def stream(*events: bytes, end: str = "close", gap: float = 0.0) -> Script:
    """An engine that streams ``events`` (``gap`` seconds apart) then closes, stays silent (``end="silent"``),
    or ends its answer properly and keeps the connection (``end="whole"``)."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request(reader)
        writer.write(SSE)
        for event in events:
            writer.write(chunk(event))
            if gap:
                await writer.drain()
                await asyncio.sleep(gap)
        if end == "whole":
            writer.write(b"0\r\n\r\n")
        await writer.drain()
        if end in ("silent", "whole"):
            await reader.read()

    return script


TEXT = b'data: {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": null}]}\n\n'
ENGINE_ERROR = b'data: {"error": {"message": "CUDA error: an illegal memory access", "code": 500}}\n\n'
TRANSLATIONS = [
    (Surface.OPENAI, Translation.NONE),
    (Surface.ANTHROPIC, Translation.MESSAGES),
    (Surface.OPENAI, Translation.RESPONSES),
]


def relayed(script: Script, surface: Surface, translation: Translation, read_timeout: float = 5) -> tuple[Relay, str]:
    client = Client()

    async def test() -> None:
        async with Server(script) as engine:
            relay = exchange(Engines(1, read_timeout), route(engine.url), surface, translation=translation)
            await relay.run(client)
            nonlocal done
            done = relay

    done: Relay | None = None
    run(test)
    assert done is not None
    return done, client.body.decode()


@pytest.mark.parametrize(("surface", "translation"), TRANSLATIONS, ids=["chat", "messages", "responses"])
def test_an_idle_stall_is_labelled_a_timeout_not_a_truncation(surface: Surface, translation: Translation) -> None:
    relay, body = relayed(stream(TEXT, end="silent"), surface, translation, read_timeout=0.3)
    assert relay.state.truncated
    assert "HEARTH_STREAM_IDLE_TIMEOUT" in body and "upstream_truncated" not in body
    assert "upstream_timeout" in body or "timeout_error" in body


@pytest.mark.parametrize(("surface", "translation"), TRANSLATIONS[1:], ids=["messages", "responses"])
def test_a_translated_stream_passes_on_the_engines_own_error_text(surface: Surface, translation: Translation) -> None:
    relay, body = relayed(stream(TEXT, ENGINE_ERROR), surface, translation)
    assert relay.state.truncated and "CUDA error: an illegal memory access" in body
    assert "ended the stream before it finished" not in body


@pytest.mark.parametrize(("surface", "translation"), TRANSLATIONS, ids=["chat", "messages", "responses"])
def test_a_stream_the_engine_closed_says_so(surface: Surface, translation: Translation) -> None:
    relay, body = relayed(stream(TEXT), surface, translation)
    assert relay.state.truncated and "ended the stream before it finished" in body
    assert relay.state.token_chunks == 1  # what went out is counted, for a stream without the engine's usage


def tokenizer(count: int, seen: list[bytes]) -> Script:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await request(reader))
        body = json.dumps({"count": count, "max_model_len": 32768, "tokens": []}).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        await reader.read()

    return script


PROMPT = {"messages": [{"role": "user", "content": "x " * 1000}]}
SPARE = 12308 // 100 + 16  # context_fit.RENDER_MARGIN: the engine renders its own API's request, not /tokenize
ASKED = [  # (path, its output-limit field, the prompt, the engine speaks that API, the limit fitted)
    ("/v1/messages", "max_tokens", PROMPT, True, 32768 - 12308 - SPARE),
    ("/v1/messages", "max_tokens", PROMPT, False, 32768 - 12308),  # the gateway's translation is what was counted
    (CHAT, "max_completion_tokens", PROMPT, True, 32768 - 12308),
    ("/v1/responses", "max_output_tokens", {"input": "x " * 1000}, True, 32768 - 12308 - SPARE),
]


@pytest.mark.parametrize(
    ("path", "field", "prompt", "native", "fitted"), ASKED, ids=["messages", "messages-translated", "chat", "responses"]
)
def test_fit_lowers_an_over_long_limit_to_the_context_left_counted_by_the_engine(
    path: str, field: str, prompt: dict[str, Any], native: bool, fitted: int
) -> None:
    """Claude Code's first request: 12,308 prompt tokens and 32,000 output tokens asked of a 32K context."""
    seen: list[bytes] = []
    request_ = {"model": "m", field: 32000, **prompt}

    async def test() -> None:
        async with Server(tokenizer(12308, seen)) as engine:
            gateway = Gateway()
            target = route(engine.url, max_model_len=32768, fit_max_tokens=True, speaks_anthropic=native)
            fit = gateway.planner.fit
            fields, headers = await fit(path, request_, {}, len(json.dumps(request_)), target, b"", Surface.OPENAI)
            assert fields == {field: fitted}
            ((name, value),) = headers
            spare = b"; spare=%d" % SPARE if fitted < 32768 - 12308 else b""  # said where kept
            assert (name, value) == (
                b"x-hearth-max-tokens-fitted",
                b"%d; requested=32000; prompt=12308; max_model_len=32768%s" % (fitted, spare),
            )
            small = {**request_, field: 100}
            assert await fit(path, small, {}, len(json.dumps(small)), target, b"", Surface.OPENAI) == ({}, [])
            gateway.engines.close()

    run(test)
    assert len(seen) == 1 and b"POST /tokenize" in seen[0]  # the small one was not counted: it surely fits


def numbered(count: int) -> list[bytes]:
    text = [
        b'data: {"choices": [{"index": 0, "delta": {"content": "%d "}, "finish_reason": null}]}\n\n' % i
        for i in range(count)
    ]
    return [*text, b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n']


class Watching(Client):
    """A client that notes which task each body was sent from, and whose send waits ``wait`` seconds on
    every ``every``-th body (a client reading slower than it is sent to, as a server's flow control makes
    it), or fails there with ``fail``."""

    def __init__(self, every: int = 0, wait: float = 0.0, fail: Exception | None = None) -> None:
        super().__init__()
        self.every, self.wait, self.fail, self.bodies, self.from_task = every, wait, fail, 0, 0

    async def __call__(self, message: Mapping[str, Any]) -> None:
        if message["type"] == "http.response.body" and message.get("more_body"):
            self.bodies += 1
            self.from_task += asyncio.current_task() is not None
            if self.every and self.bodies % self.every == 0:
                if self.fail is not None:
                    raise self.fail
                await asyncio.sleep(self.wait)
        await super().__call__(message)


def relayed_to(client: Client, script: Script) -> Relay:
    async def test() -> Relay:
        async with Server(script) as engine:
            relay = exchange(Engines(1, 5), route(engine.url))
            await relay.run(client)
            return relay

    return asyncio.run(asyncio.wait_for(test(), 15))


def test_pieces_that_arrive_while_the_relay_waits_are_sent_from_the_engines_read_without_a_task_switch() -> None:
    client = Watching()
    relay = relayed_to(client, stream(*numbered(20), end="whole", gap=0.005))
    assert client.body == b"".join(numbered(20)) and not relay.state.truncated
    assert client.bodies >= 20 and client.from_task <= 2  # the first piece may come with the head


def test_a_client_slower_than_the_engine_gets_the_whole_stream_in_order() -> None:
    client = Watching(every=3, wait=0.03)  # waits 30 ms on every third piece while the engine sends every 2 ms
    relay = relayed_to(client, stream(*numbered(60), end="whole", gap=0.002))
    assert client.body == b"".join(numbered(60)) and not relay.state.truncated
    assert relay.state.finish_reason == "stop" and client.from_task > 0  # what push left, sent by the task


def test_a_send_that_fails_in_the_engines_read_is_raised_in_the_relays_task() -> None:
    client = Watching(every=4, fail=RuntimeError("Invalid HTTP header value."))
    with pytest.raises(RuntimeError, match="Invalid HTTP"):
        relayed_to(client, stream(*numbered(10), end="whole", gap=0.005))
    assert client.bodies == 4


def test_a_client_leaving_while_a_pushed_send_waits_cancels_the_stream() -> None:
    stuck = asyncio.Event()

    class Stuck(Watching):
        async def __call__(self, message: Mapping[str, Any]) -> None:
            if message["type"] == "http.response.body" and message.get("more_body") and self.bodies == 2:
                try:
                    await asyncio.Event().wait()  # never set: the client stopped reading
                finally:
                    stuck.set()
            await super().__call__(message)

    async def test() -> None:
        async with Server(stream(*numbered(50), end="whole", gap=0.005)) as engine:
            relay = exchange(Engines(1, 5), route(engine.url))
            running = asyncio.ensure_future(relay.run(Stuck()))
            await asyncio.sleep(0.1)
            relay.state.client_gone = True
            running.cancel()
            with pytest.raises(asyncio.CancelledError):
                await running
            assert stuck.is_set()  # the waiting send was ended, not left behind

    run(test)


def test_the_engines_last_piece_goes_out_with_the_streams_end_in_one_send() -> None:
    events = numbered(4)

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request(reader)
        writer.write(SSE)
        for event in events[:-1]:
            writer.write(chunk(event))
            await writer.drain()
            await asyncio.sleep(0.005)
        writer.write(chunk(events[-1]) + b"0\r\n\r\n")  # the last event and the end of the answer in one read
        await writer.drain()
        await reader.read()

    class Sends(Client):
        def __init__(self) -> None:
            super().__init__()
            self.sends: list[tuple[bytes, bool]] = []

        async def __call__(self, message: Mapping[str, Any]) -> None:
            if message["type"] == "http.response.body":
                self.sends.append((message["body"], message.get("more_body", False)))
            await super().__call__(message)

    client = Sends()
    relay = relayed_to(client, script)
    assert client.body == b"".join(events) and not relay.state.truncated
    assert client.sends[-1] == (events[-1], False) and len(client.sends) == len(events)
    assert relay.state.streamed == len(b"".join(events))  # counted as streamed: its usage is estimated if none came


def test_a_request_held_when_the_web_process_stops_is_told_the_gateway_restarts() -> None:
    """uvicorn cancels what is still open HEARTH_DRAIN_SECONDS after a stop; a request held for a wake or in a lane
    then gets gateway_restarting (gateway.app sends it as the in-stream error of a held stream whose head went out),
    where it ended in an unhandled CancelledError and a silent cut (a full run's web restart test)."""

    async def test() -> None:
        relay = exchange(Engines(1, 5), route("http://127.0.0.1:1"))
        held = asyncio.Event()

        async def before() -> None:
            held.set()
            await asyncio.Event().wait()  # held until the stop

        async def receive() -> dict[str, Any]:
            await asyncio.Event().wait()  # the client stays
            return {}

        serving = asyncio.ensure_future(relay.serve(receive, Client(), before))
        await held.wait()
        serving.cancel()
        with pytest.raises(GatewayError) as stopped:
            await serving
        assert (stopped.value.status, stopped.value.code, stopped.value.retry_after) == (503, "gateway_restarting", 1)

    run(test)
