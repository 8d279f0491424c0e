"""The simulator as a real subprocess, and helpers to read raw server-sent events."""

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
API_KEY = "sim-test-key"
MODEL = "sim-model"
# The flags Hearth adds for vLLM, plus one nobody knows: all must be accepted.
VLLM_FLAGS = ["--dtype", "bfloat16", "--enforce-eager", "--tensor-parallel-size", "1", "--kv-cache-dtype", "auto"]
VLLM_FLAGS += ["--gpu-memory-utilization", "0.92", "--bogus-flag", "7"]


class Sim:
    """One simulator process; its stdout and stderr go to ``log``."""

    key = API_KEY  # the key the shared simulator demands (tests/simulator/conftest.py)

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        """Start ``python -m engines.simulator --port FREE *args``; ``env`` adds to this process's environment."""
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = log
        argv = [sys.executable, "-m", "engines.simulator", "--port", str(self.port), *args]
        environ = {**os.environ, **(env or {})}
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=environ)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_listening(self, timeout: float = 30) -> httpx.Response:
        """The first answer /health gives, whatever its status."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                return httpx.get(self.base + "/health", timeout=2)
            except httpx.TransportError:
                assert self.proc.poll() is None, self.output()
                time.sleep(0.05)
        pytest.fail("simulator did not listen:\n" + self.output())

    def wait_healthy(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.wait_listening(timeout).status_code != 200:
            assert time.monotonic() < deadline, self.output()
            time.sleep(0.05)

    def scrape(self) -> str:
        return httpx.get(self.base + "/metrics", timeout=10).text

    def openai(self, api_key: str = API_KEY) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base + "/v1", api_key=api_key, max_retries=0, timeout=30)

    def anthropic(self, api_key: str = API_KEY) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.base, api_key=api_key, max_retries=0, timeout=30)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


SimFactory = Callable[..., Sim]


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {API_KEY}"}


def sse(resp: httpx.Response) -> list[tuple[str | None, str]]:
    """(event name, data) per server-sent event, read until the stream ends or breaks."""
    events: list[tuple[str | None, str]] = []
    name: str | None = None
    try:
        for line in resp.iter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((name, line.removeprefix("data: ")))
                name = None
    except httpx.HTTPError:
        pass  # a cut stream: what arrived is what the client saw
    return events


def stream_events(sim: Sim, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> list[Any]:
    """POST a streaming request; the raw events as (name, parsed data or the literal "[DONE]"). ``sim`` is a
    simulator or anything with its ``base`` and ``headers()`` (the gateway in front of one)."""
    with httpx.stream(
        "POST", sim.base + path, json=body, headers={**sim.headers(), **(headers or {})}, timeout=30
    ) as resp:
        assert resp.status_code == 200, resp.read()
        events = sse(resp)
    return [(name, data if data == "[DONE]" else json.loads(data)) for name, data in events]
