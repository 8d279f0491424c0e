"""The world of the accounting tests: a gateway (web) process of its own Hearth instance in front of
tests/held_engine.py, a TCP proxy between it and PostgreSQL that a test cuts and restores, streams sent
through it, and what Redis and the request log then hold."""

import asyncio
import json
import secrets
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import redis
from django.test import override_settings

from console.access.keys import create_key
from console.catalog.models import ModelSource
from console.deployments.models import Deployment, DeploymentState, Replica
from console.observability.cost import price_per_token
from console.observability.models import RequestLog
from console.observability.request_spool import notes_key, processes_key
from console.observability.spent import usd_counters
from tests.conftest import ROOT, Proc, free_port, start_web

PRICE = "0.000001"  # USD per token: 1,000 nano-USD
NANO = Decimal(10) ** 9


class Engine:
    """tests/held_engine.py on a free port, once it answers."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        argv = [sys.executable, str(ROOT / "tests/held_engine.py"), str(self.port)]
        self.proc = Proc(argv, env, folder / "engine.log")
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1)
                return
            except httpx.TransportError:
                assert self.proc.proc.poll() is None and time.monotonic() < deadline, self.proc.output()
                time.sleep(0.1)


def serve_model(port: int, name: str = "held") -> Deployment:
    """A ready deployment ``name`` whose one replica is the engine on ``port``."""
    source = ModelSource.objects.create(name=name, kind="local", path="/nonexistent", config={}, weights_bytes=0)
    deployment = Deployment.objects.create(
        name=name,
        model=source,
        engine="vllm",
        served_model_name=name,
        max_model_len=4096,
        kv_space_gib=1.0,
        plan={},
        state=DeploymentState.READY,
    )
    Replica.objects.create(
        deployment=deployment,
        runtime="process",
        runtime_name=f"{name}-engine",
        host="127.0.0.1",
        port=port,
        engine_api_key=secrets.token_hex(16),
        running=True,
        ready_at=deployment.created_at,
    )
    return deployment


@dataclass
class World:
    """One gateway on a Redis server of its own (``redis_url``: no other test's keys, and no other test's
    FLUSHDB, which Redis announces to every gateway watching it and which makes them read the database again),
    its engine's deployment and two keys of one owner: ``limited`` (a daily budget: admitted and settled through
    Redis) and ``free`` (no limit: charged in batches)."""

    base: str
    web: Proc
    instance: str
    deployment: Deployment
    redis_url: str
    keys: dict[str, tuple[int, str]] = field(default_factory=dict)

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url)

    @contextmanager
    def names(self) -> Iterator[None]:
        """Redis key names as the gateway's instance makes them (appliance.redis_keys)."""
        with override_settings(HEARTH_INSTANCE=self.instance):
            yield

    def notes(self) -> dict[str, dict[str, Any]]:
        """Every note of every gateway process of the instance: request id → note, with ``process`` added."""
        r, found = self.redis(), {}
        with self.names():
            for process in r.smembers(processes_key()):
                for rid, note in r.hgetall(notes_key(process.decode())).items():
                    found[rid.decode()] = json.loads(note) | {"process": process.decode()}
        return found

    def rows(self) -> list[RequestLog]:
        ids = [k for k, _ in self.keys.values()]
        return list(RequestLog.objects.filter(api_key_id__in=ids).order_by("id"))


def open_world(
    env: dict[str, str], folder: Path, owner: object, engine: Engine, redis_url: str, **web_env: str
) -> World:
    """The gateway of a new instance on ``env`` (+ ``web_env``) and the Redis server at ``redis_url``, serving
    the engine, with a price published."""
    instance = f"ledger-{secrets.token_hex(4)}"
    deployment = serve_model(engine.port)
    keys = {}
    for name, limits in (("limited", {"daily_budget_usd": "100"}), ("free", {})):
        row, secret = create_key(name, owner, **limits)
        keys[name] = (row.pk, secret)
    world_env = {**env, "HEARTH_INSTANCE": instance, "REDIS_URL": redis_url, **web_env}
    proc, base = start_web(world_env, folder / "web.log")
    world = World(base, proc, instance, deployment, redis_url, keys)
    with world.names():
        world.redis().set(price_per_token(deployment.pk), PRICE, ex=3600)
    return world


@dataclass
class Stream:
    """One streamed chat as a client saw it: its status, content chunks received, whether [DONE] came, when it
    ended, and its error (the exception's name, or the body of an answer other than 200)."""

    status: int = 0
    chunks: int = 0
    done: bool = False
    ended: float = 0.0
    error: str = ""


async def stream(
    client: httpx.AsyncClient, key: str, content: str, max_tokens: int, seen: Stream, model: str = "held"
) -> Stream:
    """Send one streamed chat to ``model``, noting in ``seen`` what arrives as it arrives (``chunks``: the content
    chunks of tests/held_engine.py, "t0 ", "t1 ", ...)."""
    body = {
        "model": model,
        "stream": True,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": content}],
    }
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body, headers=_bearer(key)) as answer:
            seen.status = answer.status_code
            if answer.status_code != 200:  # the gateway's words, for the assertion that reads them
                seen.error = (await answer.aread()).decode(errors="replace")[:300]
            async for line in answer.aiter_lines():
                if line == "data: [DONE]":
                    seen.done = True
                elif line.startswith("data: ") and '"content": "t' in line:
                    seen.chunks += 1
    except httpx.HTTPError as exc:
        seen.error = type(exc).__name__
    seen.ended = time.time()
    return seen


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def paced(world: World, seconds: float, per_second: float, sent: list[Stream], max_tokens: int = 8) -> None:
    """``seconds`` × ``per_second`` streams, started on a schedule of ``per_second`` (one that falls behind on a
    loaded machine catches up rather than sends fewer), alternating the two keys, each appended to ``sent``."""
    keys = [secret for _, secret in world.keys.values()]
    async with httpx.AsyncClient(base_url=world.base, timeout=60) as client:
        tasks, began = [], time.monotonic()
        for started in range(round(seconds * per_second)):
            seen = Stream()
            sent.append(seen)
            tasks.append(asyncio.ensure_future(stream(client, keys[len(sent) % 2], "hi", max_tokens, seen)))
            await asyncio.sleep(max(0.0, began + (started + 1) / per_second - time.monotonic()))
        await asyncio.gather(*tasks)


def spent_agrees(world: World, owner_id: int) -> dict[str, tuple[int, int]]:
    """For each key and the owner: (Redis's day counter, the rows' costs), nano-USD."""
    r, found, by_key = world.redis(), {}, {}
    for name, (key_id, _) in world.keys.items():
        rows = RequestLog.objects.filter(api_key_id=key_id)
        by_key[name] = sum(int(row.cost_usd * NANO) for row in rows if row.cost_usd is not None)
        with world.names():
            counter = usd_counters(key_id, owner_id, time.time())[0]
        found[name] = (int(r.get(counter) or 0), by_key[name])
    with world.names():
        owner_counter = usd_counters(0, owner_id, time.time())[2]
    found["owner"] = (int(r.get(owner_counter) or 0), sum(by_key.values()))
    return found


class TcpProxy:
    """A TCP proxy on a free port to ``target`` that a test cuts (every connection closed, new ones closed at
    once: the database unreachable) and restores."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target, self.cut_off = target, False
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            self.cut_off = True
            for sock in self._open:
                _close(sock)
            self._open.clear()

    def restore(self) -> None:
        self.cut_off = False

    def close(self) -> None:
        self.cut()
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.cut_off:
                _close(client)
                continue
            try:
                server = socket.create_connection(self.target)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._open.update((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        _close(source)
        _close(sink)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def within(seconds: float, check: Any, every: float = 0.2) -> None:
    """Poll ``check()`` until it is true; fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"not so within {seconds} s"
        time.sleep(every)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def database_url_through(proxy: TcpProxy, env: dict[str, str]) -> str:
    """The test database's URL of ``env`` with its host and port the proxy's."""
    url = env["DATABASE_URL"]
    scheme, rest = url.split("://", 1)
    credentials, path = rest.split("@", 1)
    return f"{scheme}://{credentials}@127.0.0.1:{proxy.port}/{path.split('/', 1)[1]}"
