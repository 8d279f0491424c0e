"""Each gateway answer's request id: the ``x-request-id`` header on every response head (a relayed answer, a
stream, each API's errors, a wrong URL's 404, a 401, the probes).

The id answered is the client's own ``x-request-id`` when it sent a usable one, else the gateway's: a request's
row in the request log keeps the gateway's id as its unique ``request_id`` and the client's, when sent, as
``client_request_id`` (console.observability.models.RequestLog), so the log finds a request by either. A client's
id is usable when it is 1 to MAX_LENGTH printable ASCII characters (space to ``~``); anything else is ignored, as
Heroku's router does with ids outside 20–200 characters (devcenter.heroku.com, "HTTP Request IDs"), so that no
control character or unbounded value reaches a log line or a console page.
"""

from dataclasses import dataclass

from gateway.accounting import new_request_id

HEADER = b"x-request-id"
MAX_LENGTH = 128  # characters; RequestLog.client_request_id's max_length


@dataclass(frozen=True, slots=True)
class RequestIds:
    """A request's ids: ``own`` (32 hex digits, the request log row's unique id) and ``client`` (what the client
    sent in ``x-request-id``, None when it sent none or one not usable)."""

    own: str
    client: str | None

    @property
    def answered(self) -> str:
        """The id on the response head: the client's when it sent one, else the gateway's."""
        return self.client or self.own


def request_ids(headers: list[tuple[bytes, bytes]]) -> RequestIds:
    """A new request's ids from its ASGI ``headers`` (names in lower case, as uvicorn gives them)."""
    for name, value in headers:
        if name == HEADER:
            return RequestIds(new_request_id(), usable(value))
    return RequestIds(new_request_id(), None)


def usable(value: bytes) -> str | None:
    """``value`` as text when it is a usable client id (module docstring), else None."""
    text = value.decode("latin-1").strip()
    if 0 < len(text) <= MAX_LENGTH and text.isascii() and text.isprintable():
        return text
    return None
