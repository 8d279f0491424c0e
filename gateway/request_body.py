"""The client's request body: read whole within HEARTH_MAX_BODY_BYTES, decoded when it came compressed
(``Content-Encoding`` gzip or deflate, HTTP's content codings, RFC 9110 §8.4.1; its decoded size held to the same
limit, so a small body that inflates to gigabytes stops at the limit), and parsed as a JSON object whose fields
the gateway itself reads are checked (the engine checks the rest). Errors are GatewayError 400, 413 or 415, in
the API's shape (gateway.errors)."""

import json
import zlib
from collections.abc import Iterable
from typing import Any

from django.conf import settings

from gateway import errors
from gateway.asgi_io import Receive
from gateway.errors import GatewayError

CLIENT_LEFT = 499  # the logged status of a request whose client left before its body was whole (nginx's own)


class ClientLeft(Exception):
    """The client left before its request body was whole."""


# Fields the gateway itself reads or changes, checked before it does (the engine checks the rest).
FIELD_TYPES = (
    ("stream", bool, "true or false"),
    ("stream_options", dict, "an object"),
    ("max_tokens", int, "an integer"),
    ("max_completion_tokens", int, "an integer"),
    ("messages", list, "an array"),  # read to estimate and count the prompt, translated on the way
)
TOKEN_LIMITS = ("max_tokens", "max_completion_tokens")
# Choices one request may ask for: OpenAI's own bound on ``n`` (a trial's n=1000 put 550 sequences on a CPU engine
# for ten minutes); ``best_of`` (vLLM's completions) the same.
MAX_CHOICES = 128
CHOICE_FIELDS = ("n", "best_of")
# Fields an endpoint's API requires that the engine may not ask for: Anthropic's Messages API refuses a request
# without max_tokens, and vLLM's own /v1/messages answers one with its validator's dump.
REQUIRED = {"/v1/messages": ("max_tokens", "the most tokens the answer may have")}
# Numbers an endpoint's API holds to a range narrower than the engine's: Anthropic's temperature is 0-1, where vLLM's
# /v1/messages (and a chat engine it is translated for) takes OpenAI's 0-2 and samples wilder than any Claude would.
RANGES = {"/v1/messages": (("temperature", 0, 1, "Anthropic's range"),)}
# Another API's field an endpoint's engine would drop without a word (vLLM and SGLang take unknown fields): a system
# prompt sent as Anthropic's top-level ``system`` to an OpenAI endpoint was answered as if there were none. OpenAI's
# own API refuses it ("Unrecognized request argument supplied: system"). A chat's ``messages`` sent to an endpoint
# that reads none was refused as "'messages' must be an array" (a trial), naming a field the endpoint does not have.
FOREIGN: dict[str, tuple[tuple[str, str], ...]] = {
    "/v1/chat/completions": (
        (
            "system",
            "send the system prompt as the first message, with the role system (a top-level 'system' is Anthropic's "
            "/v1/messages)",
        ),
    ),
    "/v1/responses": (
        ("system", "send the system prompt as 'instructions'"),
        ("messages", "send the conversation as 'input' (/v1/chat/completions takes a 'messages' array)"),
    ),
    "/v1/completions": (
        ("system", "a completion continues its 'prompt' alone, so put the system prompt in it"),
        ("messages", "a completion continues its 'prompt' (/v1/chat/completions takes a 'messages' array)"),
    ),
}


def parse_body(body: bytes, endpoint: str = "") -> dict[str, Any]:
    """The body as a JSON object, its fields checked: ``decode_body`` then ``check_fields``, whose errors it
    raises."""
    request = decode_body(body)
    check_fields(request, endpoint)
    return request


def decode_body(body: bytes) -> dict[str, Any]:
    """The body as a JSON object. Raises GatewayError 400 for what is not one: invalid JSON or text, or JSON
    nested deeper than the parser's recursion limit (~1,000 levels in CPython)."""
    try:
        request = json.loads(body)
    except ValueError:
        raise GatewayError(400, "The request body is not valid JSON.") from None
    except RecursionError:
        raise errors.nested_too_deeply() from None
    if not isinstance(request, dict):
        raise GatewayError(400, "The request body must be a JSON object.")
    return request


def check_fields(request: dict[str, Any], endpoint: str) -> None:
    """Raises GatewayError 400 for a field the gateway reads of the wrong type, another API's field ``endpoint``'s
    engine would ignore (FOREIGN), a field ``endpoint`` requires that is missing (REQUIRED), a number out of the
    API's range (RANGES), a token limit under 1 (under 0 on ``/v1/completions``, where 0 with ``echo`` scores a
    prompt), or more than MAX_CHOICES choices, as OpenAI's and Anthropic's APIs refuse them."""
    for name, instead in FOREIGN.get(endpoint, ()):
        if request.get(name) is not None:  # null: not sent, as elsewhere
            raise GatewayError(
                400, f"'{name}' is not a field of {endpoint}, which would ignore it: {instead}.", param=name
            )
    for name, kind, what in FIELD_TYPES:
        value = request.get(name)
        if value is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
            raise GatewayError(400, f"'{name}' must be {what}.", param=name)
    if endpoint in REQUIRED and request.get(REQUIRED[endpoint][0]) is None:
        name, meaning = REQUIRED[endpoint]
        raise GatewayError(400, f"'{name}' is required: {meaning}.", param=name)
    for name in CHOICE_FIELDS:
        if isinstance(request.get(name), int) and request[name] > MAX_CHOICES:
            raise GatewayError(400, f"'{name}' must be at most {MAX_CHOICES}; it is {request[name]:,}.", param=name)
    for name, low, high, whose in RANGES.get(endpoint, ()):
        value = request.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) and not low <= value <= high:
            raise GatewayError(400, f"'{name}' must be from {low} to {high} ({whose}); it is {value}.", param=name)
    least = 0 if endpoint == "/v1/completions" else 1
    for name in TOKEN_LIMITS:
        if isinstance(request.get(name), int) and request[name] < least:
            raise GatewayError(400, f"'{name}' must be {least} or more; it is {request[name]}.", param=name)


async def read_body(receive: Receive, headers: Iterable[tuple[bytes, bytes]] = ()) -> bytes:
    """The whole body, decoded as the request's ``headers`` say (``Content-Encoding``). Raises GatewayError 413
    past HEARTH_MAX_BODY_BYTES (as sent or decoded), 415 for a coding other than gzip or deflate, 400 for a body
    that is not what its coding says; ClientLeft when the client left before the body's end."""
    codings = content_codings(headers)
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientLeft
        body += message.get("body", b"")
        if len(body) > settings.HEARTH_MAX_BODY_BYTES:
            raise _too_large("")
        if not message.get("more_body"):
            break
    decoded = bytes(body)
    for coding in reversed(codings):  # the codings were applied in the order they are listed
        decoded = _decompressed(decoded, coding)
    return decoded


# A content coding → the zlib window bits that read it: gzip's header and trailer, or deflate's zlib wrapper
# (RFC 9110 §8.4.1.2-3; "x-gzip" is gzip's old name, which recipients should take as gzip).
WINDOW_BITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def content_codings(headers: Iterable[tuple[bytes, bytes]]) -> list[str]:
    """The request's content codings in the order they were applied ("identity" left out). Raises GatewayError 415
    for one the gateway does not decode, saying which it does."""
    codings = [
        coding.strip().lower()
        for name, value in headers
        if name == b"content-encoding"
        for coding in value.decode("latin-1").split(",")
    ]
    codings = [coding for coding in codings if coding and coding != "identity"]
    for coding in codings:
        if coding not in WINDOW_BITS:
            raise GatewayError(
                415,
                f"The request body's Content-Encoding {coding[:40]!r} is not supported: send it uncompressed, "
                "or compressed with gzip or deflate.",
                code="unsupported_content_encoding",
            )
    return codings


def _decompressed(body: bytes, coding: str) -> bytes:
    """``body`` decoded from ``coding`` (one of WINDOW_BITS; gzip members one after the other, as gzip allows),
    never more than HEARTH_MAX_BODY_BYTES + 1 bytes of it at once. Raises GatewayError 413 past the limit, 400 for
    a body that is not what ``coding`` says."""
    limit = settings.HEARTH_MAX_BODY_BYTES
    out, rest = bytearray(), body
    while True:
        inflate = zlib.decompressobj(WINDOW_BITS[coding])
        try:
            out += inflate.decompress(rest, limit + 1 - len(out))
        except zlib.error:
            raise GatewayError(400, f"The request body is not valid {coding} data.") from None
        if len(out) > limit:
            raise _too_large(" decompressed")
        if not inflate.eof:
            raise GatewayError(400, f"The request body's {coding} data is cut short.")
        rest = inflate.unused_data
        if not rest or coding == "deflate":
            return bytes(out)


def _too_large(how: str) -> GatewayError:
    return GatewayError(
        413, f"The request body is over {settings.HEARTH_MAX_BODY_BYTES:,} bytes{how}.", code="request_too_large"
    )
