"""uvicorn's httptools protocol, with two changes; appliance.web_server runs uvicorn with
``http="appliance.http_protocol:JsonErrorsHttpToolsProtocol"``.

- Its one answer of its own in JSON: a request its parser refuses (a bad or doubled Content-Length,
  Content-Length with chunked, a control character or a space in a header, a path that is not ASCII) gets
  uvicorn's 400, with the API's error body instead of ``text/plain`` "Invalid HTTP request received.". The app
  never sees such a request, so only the server can answer it.
- No chunked answer to an HTTP/1.0 request: uvicorn 0.54 frames every answer without a Content-Length as chunked,
  which an HTTP/1.0 client cannot read (RFC 9112 §6.1: a server must not send Transfer-Encoding to a request
  that does not indicate HTTP/1.1). A whole answer (one body message) gets its Content-Length; a streamed one is
  close-delimited (RFC 9112 §6.3: its body ends where the server closes the connection, which uvicorn does
  after every HTTP/1.0 answer).

The body is Anthropic's error shape when the request's path (as far as it was read) is under /v1/messages,
OpenAI's otherwise, the console's pages included (a browser never sends such a request).
"""

import json
from collections.abc import Mapping
from typing import Any, cast

from uvicorn._types import ASGI3Application, ASGISendEvent
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle

MESSAGE = "The request is not valid HTTP/1.1 (uvicorn's parser refused it: a malformed header, length or path)."


def bad_request_body(path: bytes) -> bytes:
    """The 400's JSON body for a request to ``path`` (what of it was read)."""
    if path.startswith(b"/v1/messages"):
        return json.dumps({"type": "error", "error": {"type": "invalid_request_error", "message": MESSAGE}}).encode()
    error = {"message": MESSAGE, "type": "invalid_request_error", "param": None, "code": "invalid_http"}
    return json.dumps({"error": error}).encode()


class Http10Cycle(RequestResponseCycle):
    """The request-response cycle of an HTTP/1.0 request: an answer without a Content-Length is never chunked
    (module docstring). Its head waits for the first body message: alone (``more_body`` false), the body's length
    is added to it; else the body goes out as it comes, the connection's end ending it."""

    held: Mapping[str, Any] | None = None  # the head, until the first body message
    close_delimited = False

    async def send(self, message: ASGISendEvent) -> None:
        if message["type"] == "http.response.start" and self._unframed(message):
            self.held = message
            return
        if self.held is not None and message["type"] == "http.response.body":
            head, self.held = self.held, None
            body = message.get("body", b"")
            if message.get("more_body", False):
                self.close_delimited = True
                self.chunked_encoding = False  # uvicorn then adds no Transfer-Encoding
            else:
                length = (b"content-length", str(len(body)).encode("ascii"))
                head = {**head, "headers": [*head.get("headers", []), length]}
            await super().send(cast(ASGISendEvent, head))
        if self.close_delimited and message["type"] == "http.response.body":
            self.expected_content_length = len(message.get("body", b""))  # uvicorn's count of what it writes
        await super().send(message)

    def _unframed(self, head: Mapping[str, Any]) -> bool:
        """Whether uvicorn would frame this answer as chunked: it has a body and neither length nor coding."""
        if self.scope["method"] == "HEAD" or head["status"] in (204, 304):
            return False
        names = {name.lower() for name, _ in head.get("headers", [])}
        return not names & {b"content-length", b"transfer-encoding"}


class JsonErrorsHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol whose 400 for a request it cannot parse is JSON (uvicorn 0.54's send_400_response,
    with its other headers kept), and whose HTTP/1.0 requests are answered without chunks (Http10Cycle)."""

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        if cycle.scope["http_version"] == "1.0":
            cycle.__class__ = Http10Cycle  # adds behaviour only: the same state, read and written as uvicorn does
        super()._start_asgi_task(cycle, app)

    def send_400_response(self, msg: str) -> None:
        body = bad_request_body(getattr(self, "url", b""))
        content = [STATUS_LINE[400]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend(
            [
                b"content-type: application/json\r\n",
                b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                b"connection: close\r\n",
                b"\r\n",
                body,
            ]
        )
        self.transport.write(b"".join(content))
        self.transport.close()
