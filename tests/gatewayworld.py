"""The world of the gateway's freshness, fault and security tests: several real gateway (web) processes,
a Redis server a test starts and stops itself, and bursts of concurrent requests sent at once."""

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import redis

from tests.conftest import Proc, free_port, start_web

Answer = tuple[int, Any]  # status, JSON body (None when the body is not JSON)


class RedisServer:
    """Debian's redis-server on a free port of its own, without persistence: stopped and started again, it
    comes back empty, as after a crash."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        argv = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(folder),
        ]
        self.proc = Proc(argv, env, folder / "redis.log")
        self._wait()

    def _wait(self) -> None:
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(self.url, socket_timeout=1).ping()
                return
            except redis.RedisError:
                assert self.proc.proc.poll() is None and time.monotonic() < deadline, self.proc.output()
                time.sleep(0.05)

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=2)

    def stop(self) -> None:
        self.proc.stop()

    def start(self) -> None:
        self.proc.restart()
        self._wait()


@contextmanager
def gateway_processes(count: int, env: dict[str, str], folder: Path) -> Iterator[list[str]]:
    """``count`` web processes (console and gateway) on ``env``; yields their base URLs."""
    started = [start_web(env, folder / f"web{i}.log") for i in range(count)]
    try:
        yield [base for _, base in started]
    finally:
        for proc, _ in started:
            proc.stop()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _burst(base: str, count: int, method: str, path: str, headers: dict[str, str], body: Any) -> list[Answer]:
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=count)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=120) as client:
        answers = await asyncio.gather(
            *(client.request(method, path, headers=headers, json=body) for _ in range(count))
        )
    return [(a.status_code, _json(a)) for a in answers]


def _json(answer: httpx.Response) -> Any:
    try:
        return answer.json()
    except ValueError:
        return None


def burst(
    bases: list[str], count: int, path: str = "/v1/models", *, key: str, method: str = "GET", body: Any = None
) -> dict[str, list[Answer]]:
    """``count`` requests sent at once to each gateway in ``bases`` (all gateways at once too); the answers
    per gateway."""

    async def all_of_them() -> list[list[Answer]]:
        return await asyncio.gather(*(_burst(b, count, method, path, bearer(key), body) for b in bases))

    return dict(zip(bases, asyncio.run(all_of_them()), strict=True))


def statuses(answers: dict[str, list[Answer]]) -> dict[str, dict[int, int]]:
    """How many answers of each status each gateway gave, for assertions that print well."""
    return {base: {s: [a[0] for a in got].count(s) for s in {a[0] for a in got}} for base, got in answers.items()}


def within(seconds: float, check: Callable[[], bool], every: float = 0.02) -> float:
    """Seconds until ``check()`` held; raises AssertionError when it did not within ``seconds``."""
    began = time.monotonic()
    while not check():
        waited = time.monotonic() - began
        assert waited < seconds, f"not so within {seconds} s"
        time.sleep(every)
    return time.monotonic() - began


def status_of(base: str, key: str, path: str = "/v1/models") -> int:
    return httpx.get(base + path, headers=bearer(key), timeout=10).status_code
