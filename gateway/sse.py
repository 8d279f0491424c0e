"""A side-copy reader of an OpenAI event stream, for accounting and for spotting truncated streams.

The relay forwards bytes untouched; this reader only watches them. It tolerates events split across
reads, ``data:`` with or without a space, and CRLF line ends (the SSE spec,
https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation).
"""

import json


class OpenAIStreamWatcher:
    """Feed it the stream's bytes; it records ``finish_reason``, ``usage`` and whether ``[DONE]`` came."""

    def __init__(self) -> None:
        self._pending = b""
        self.done = False
        self.finish_reason: str | None = None
        self.usage: dict[str, int] | None = None
        self.error: str | None = None

    def feed(self, chunk: bytes) -> None:
        lines = (self._pending + chunk).split(b"\n")
        self._pending = lines.pop()
        for line in lines:
            self._line(line.rstrip(b"\r"))

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        data = line[5:].strip()
        if data == b"[DONE]":
            self.done = True
            return
        try:
            event = json.loads(data)
        except ValueError:
            return
        if "error" in event:
            self.error = str(event["error"])
        for choice in event.get("choices") or []:
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        if event.get("usage"):
            self.usage = event["usage"]

    @property
    def complete(self) -> bool:
        """True when the stream ended as OpenAI's protocol says: a finish_reason, then ``[DONE]``."""
        return self.done and self.finish_reason is not None
