"""A lean fake OpenAI-compatible engine for ``gateway_overhead.py``: vLLM-shaped SSE at a fixed pace.

Usage: ``python bench/fake_upstream.py PORT`` (listens on 127.0.0.1 only; SIGTERM stops it).

``POST /v1/chat/completions`` with ``"stream": true`` waits FIRST_CHUNK_DELAY, then sends CHUNKS content
chunks CHUNK_INTERVAL apart (10 ms, or BENCH_CHUNK_INTERVAL seconds; on an absolute schedule, so a late wake-up
does not push back the rest), a ``finish_reason`` chunk, a usage chunk when ``stream_options.include_usage`` asks
for one, and ``data: [DONE]``, as vLLM's OpenAI server does. Any Bearer key is accepted. The pacing is the one
FACTS.md's relay measurements used. ``max_tokens`` (up to MAX_CHUNKS) sets the number of chunks, and a
``[[sim:stall-between=SECONDS]]`` marker in the body (the simulator's) spaces them that far apart instead.
"""

import asyncio
import json
import os
import re
import sys
import time
from typing import Any

import uvloop
from aiohttp import web

FIRST_CHUNK_DELAY = 0.050  # seconds to the first chunk
CHUNKS = 64  # content chunks per answer without max_tokens
MAX_CHUNKS = 4 * CHUNKS  # the most content chunks an answer can have
CHUNK_INTERVAL = float(os.environ.get("BENCH_CHUNK_INTERVAL", "0.010"))  # seconds between content chunks
CREATED = int(time.time())
STALL_RE = re.compile(r"\[\[sim:stall-between=([0-9.]+)\]\]")


def _event(delta: dict[str, str], finish: str | None = None) -> bytes:
    chunk = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": "bench",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


ROLE = _event({"role": "assistant", "content": ""})
CONTENT = [_event({"content": f"tok{i} "}) for i in range(MAX_CHUNKS)]
FINISH = _event({"content": ""}, finish="length")
DONE = b"data: [DONE]\n\n"


def _usage(completion: int) -> bytes:
    """vLLM's last chunk when the request's ``stream_options.include_usage`` is true (the gateway asks)."""
    usage = {"prompt_tokens": 9, "total_tokens": 9 + completion, "completion_tokens": completion}
    chunk = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": "bench",
        "choices": [],
        "usage": usage,
    }
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


async def chat(request: web.Request) -> web.StreamResponse:
    if not request.headers.get("Authorization", "").startswith("Bearer "):
        return web.json_response({"error": {"message": "missing key", "type": "auth"}}, status=401)
    body: dict[str, Any] = await request.json()
    if not body.get("stream"):
        text = "".join(f"tok{i} " for i in range(CHUNKS))
        message = {"role": "assistant", "content": text}
        choice = {"index": 0, "message": message, "finish_reason": "length"}
        return web.json_response({"id": "chatcmpl-bench", "object": "chat.completion", "choices": [choice]})
    resp = web.StreamResponse(headers={"Cache-Control": "no-cache"})
    resp.content_type = "text/event-stream"
    await resp.prepare(request)
    stall = STALL_RE.search(json.dumps(body.get("messages")))
    interval = float(stall.group(1)) if stall else CHUNK_INTERVAL
    limit = body.get("max_tokens")
    count = min(MAX_CHUNKS, limit) if isinstance(limit, int) and limit > 0 else CHUNKS
    loop = asyncio.get_running_loop()
    start = loop.time()
    for i, chunk in enumerate(CONTENT[:count]):
        await asyncio.sleep(max(0.0, start + FIRST_CHUNK_DELAY + i * interval - loop.time()))
        await resp.write(ROLE + chunk if i == 0 else chunk)
    include_usage = (body.get("stream_options") or {}).get("include_usage")
    await resp.write(FINISH + (_usage(count) if include_usage else b"") + DONE)
    await resp.write_eof()
    return resp


async def health(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def main() -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/health", health)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None, loop=uvloop.new_event_loop())


if __name__ == "__main__":
    main()
