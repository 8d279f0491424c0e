"""Requests a client sent to a wrong base URL, answered with the fix instead of a dead end.

Two mistakes are common (issue 32, with the real clients): ``/v1`` twice (Claude Code with ``/v1`` in
ANTHROPIC_BASE_URL sends ``/v1/v1/messages``: Anthropic's SDKs add ``/v1`` themselves), and ``/v1`` missing (Codex
with a ``base_url`` without it sends ``/responses``, which the console would answer with its HTML 404, five times
over). Such a request for one of the gateway's endpoints gets a JSON error in that endpoint's API's shape
(Anthropic's under /v1/messages, OpenAI's elsewhere) that says what to change, code ``wrong_base_url``, once its key
authenticates (as any /v1 request: a request without a key gets the gateway's 401): a 404 for OpenAI's, a 400 for
Anthropic's, since Claude Code shows its user a 400's message but turns any 404 into "There's an issue with the
selected model" (a trial). It is counted in the gateway's metrics and leaves a request-log row under its key, with no
model, the path as it was sent, that status and the message, so the Requests page shows whose tool is set wrong and
what it was told.

Outside /v1 the console serves its pages: of the paths without ``/v1``, ``/models``, ``/files`` and ``/batches``
(and below) are the console's pages or near them (its Batches page is ``/batch-jobs/``), so those are the gateway's
only when the request offers an API key (a browser never sends one; the openai SDK always does).
"""

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import redis.asyncio as aioredis

from gateway.accounting import count
from gateway.errors import GatewayError, Surface
from gateway.refusals import refused, spool
from gateway.request_ids import RequestIds
from gateway.snapshot import KeyEntry

V1 = "/v1"
NEAR_CONSOLE = ("/models", "/files", "/batches")  # the gateway's without /v1 only with an API key offered
HOST = re.compile(r"[A-Za-z0-9.\-]{1,253}(:\d{1,5})?|\[[0-9A-Fa-f:.]{2,45}\](:\d{1,5})?")


def intended(path: str, known: Callable[[str], bool]) -> str | None:
    """The gateway's endpoint (``known`` says which paths are) that a wrong base URL made ``path`` of (trailing "/"
    removed): ``/v1/v1/X`` and ``/X`` for ``/v1/X``; None when it is no such path."""
    if path.startswith(V1 + V1 + "/"):
        candidate = path.removeprefix(V1)
    elif path.startswith("/") and not path.startswith(V1 + "/"):
        candidate = V1 + path
    else:
        return None
    return candidate if known(candidate) else None


def outside_v1(path: str, headers: Iterable[tuple[bytes, bytes]], known: Callable[[str], bool]) -> bool:
    """Whether a request outside /v1 is the gateway's (module docstring): a path of one of its endpoints without
    ``/v1``, those NEAR_CONSOLE only with an API key offered."""
    if intended(path.rstrip("/"), known) is None:
        return False
    return not path.startswith(NEAR_CONSOLE) or any(
        name == b"x-api-key" or (name == b"authorization" and value[:7].lower() == b"bearer ")
        for name, value in headers
    )


def surface_of(path: str) -> Surface:
    return Surface.ANTHROPIC if path.startswith("/v1/messages") else Surface.OPENAI


def base_url(scheme: str, headers: Iterable[tuple[bytes, bytes]]) -> str:
    """The base URL the client reached, from its ``Host`` header ("http://HOST:PORT" when it sent none that is a
    host and port)."""
    host = dict(headers).get(b"host", b"").decode("latin-1")
    return f"{'https' if scheme == 'https' else 'http'}://{host if HOST.fullmatch(host) else 'HOST:PORT'}"


def wrong_base_url(sent: str, endpoint: str, base: str) -> GatewayError:
    """The 404 (400 for an Anthropic endpoint: module docstring) for ``sent``, a wrong spelling of ``endpoint``,
    reached at ``base``: what to change, in words."""
    shown = sent[:100]
    if sent.startswith(V1 + V1):
        if surface_of(endpoint) == Surface.ANTHROPIC:
            fix = (
                f"The path {shown} has /v1 twice: remove /v1 from ANTHROPIC_BASE_URL (set it to {base}; Anthropic's "
                "SDKs and Claude Code add /v1 themselves)."
            )
        else:
            fix = f"The path {shown} has /v1 twice: remove the extra /v1: use {base}/v1 as the base URL."
    elif surface_of(endpoint) == Surface.ANTHROPIC:
        fix = (
            f"The path {shown} lacks /v1: add /v1 to the base URL: {base}/v1 (Anthropic's SDKs and Claude Code add "
            f"it themselves: give them {base})."
        )
    else:
        fix = (
            f"The path {shown} lacks /v1: add /v1 to the base URL: use {base}/v1 (OPENAI_BASE_URL, or base_url in "
            "Codex's config.toml)."
        )
    status = 400 if surface_of(endpoint) == Surface.ANTHROPIC else 404
    return GatewayError(status, fix, code="wrong_base_url", recorded=True)


async def refusal(
    redis: aioredis.Redis, key: KeyEntry, scope: Mapping[str, Any], endpoint: str, arrived: float, ids: RequestIds
) -> GatewayError:
    """The answer (``wrong_base_url``'s) to ``scope``'s request, a wrong spelling of ``endpoint``, once it is counted
    and its request-log row spooled (gateway.refusals): ``key``'s, no model, the path as sent as its endpoint, the
    answer's status and message, under ``ids``. Never raises."""
    sent = scope["path"]
    error = wrong_base_url(sent, endpoint, base_url(scope["scheme"], scope["headers"]))
    outcome = refused(key, "", surface_of(endpoint), sent, error.status, arrived, ids, error=error.message)
    count(outcome)
    await spool(redis, outcome)
    return error
