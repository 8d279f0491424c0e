"""A small OpenAI-compatible engine for the accounting tests: vLLM-shaped chat streams whose pace and length the
request sets, and that can stop short and hold the stream open.

Usage: ``python tests/held_engine.py PORT`` (127.0.0.1 only). ``POST /v1/chat/completions`` with ``"stream":
true`` answers ``max_tokens`` content chunks (default 8), one every ``[[every=SECONDS]]`` of the last message
(default 0.01), then the finish chunk, the usage chunk when ``stream_options.include_usage`` asks for it, and
``[DONE]``; with ``[[hold-after=N]]`` it sends N chunks and then nothing more, holding the stream open until
the client leaves. Without ``"stream"`` it answers the whole text with its usage. Prompts count 9 tokens.
"""

import asyncio
import json
import re
import sys
import time
from typing import Any

from aiohttp import web

PROMPT_TOKENS = 9
EVERY = re.compile(r"\[\[every=([0-9.]+)\]\]")
HOLD = re.compile(r"\[\[hold-after=([0-9]+)\]\]")


def _event(delta: dict[str, str] | None, finish: str | None = None, usage: dict[str, int] | None = None) -> bytes:
    chunk: dict[str, Any] = {"id": "chatcmpl-held", "object": "chat.completion.chunk", "created": int(time.time())}
    chunk |= {
        "model": "held",
        "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        chunk["usage"] = usage
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def _usage(completion: int) -> dict[str, int]:
    return {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": completion, "total_tokens": PROMPT_TOKENS + completion}


async def chat(request: web.Request) -> web.StreamResponse:
    body: dict[str, Any] = await request.json()
    said = json.dumps(body.get("messages"))
    count = body.get("max_tokens") or 8
    if not body.get("stream"):
        message = {"role": "assistant", "content": " ".join(f"t{i}" for i in range(count))}
        choice = {"index": 0, "message": message, "finish_reason": "length"}
        answer = {"id": "chatcmpl-held", "object": "chat.completion", "model": "held", "choices": [choice]}
        return web.json_response(answer | {"usage": _usage(count)})
    every = float(m.group(1)) if (m := EVERY.search(said)) else 0.01
    hold = int(m.group(1)) if (m := HOLD.search(said)) else None
    resp = web.StreamResponse(headers={"Cache-Control": "no-cache"})
    resp.content_type = "text/event-stream"
    await resp.prepare(request)
    await resp.write(_event({"role": "assistant", "content": ""}))
    for i in range(count if hold is None else hold):
        await asyncio.sleep(every)
        await resp.write(_event({"content": f"t{i} "}))
    if hold is not None:
        await asyncio.Event().wait()  # until the client leaves (the handler is cancelled)
    tail = _event({"content": ""}, finish="length")
    if (body.get("stream_options") or {}).get("include_usage"):
        tail += _event(None, usage=_usage(count))
    await resp.write(tail + b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def health(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def main() -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/health", health)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)


if __name__ == "__main__":
    main()
