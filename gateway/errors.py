"""Errors in each API's own shape.

- OpenAI: ``{"error": {"message", "type", "param", "code"}}`` (OpenAI API reference, "Error codes":
  401 invalid_api_key, 404 model_not_found, 400 invalid_request_error, 5xx server errors);
- Anthropic: ``{"type": "error", "error": {"type", "message"}}`` with the type named by status (Anthropic
  API reference, "Errors": 400 invalid_request_error, 401 authentication_error, 403 permission_error,
  404 not_found_error, 413 request_too_large, 429 rate_limit_error, 500 api_error, 529 overloaded_error).
"""

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from gateway.engine_messages import LOGGED_CHARS, answer_model, clean, readable


class Surface(StrEnum):
    OPENAI = "openai"
    ANTHROPIC = "anthropic"


ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    415: "invalid_request_error",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
}


@dataclass(frozen=True)
class GatewayError(Exception):
    """An error answered before any byte of a response was sent."""

    status: int
    message: str
    type: str = "invalid_request_error"
    code: str | None = None
    param: str | None = None
    retry_after: int | None = None  # seconds, sent as the Retry-After header
    allow: str | None = None  # the methods the path serves, sent as the Allow header of a 405
    headers: tuple[tuple[bytes, bytes], ...] = ()  # more response headers (name and value, as ASGI sends them)
    recorded: bool = False  # the request's outcome is already logged and counted (gateway.accounting)

    def body(self, surface: Surface = Surface.OPENAI) -> bytes:
        if surface == Surface.ANTHROPIC:
            kind = ANTHROPIC_TYPES.get(self.status, "api_error")
            if kind == "overloaded_error" and NO_RETRY[0] in self.headers:  # not a wait: only an admin ends it
                kind = "api_error"
            return json.dumps({"type": "error", "error": {"type": kind, "message": self.message}}).encode()
        return json.dumps(
            {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
        ).encode()


def nested_too_deeply() -> GatewayError:
    return GatewayError(400, "The request body is JSON nested too deeply.")


def unauthorized(message: str, code: str = "invalid_api_key") -> GatewayError:
    """401 with ``x-should-retry: false``: no retry of the same key can pass, and Claude Code retried a 401 without it
    for over a minute, silently, before saying anything (a trial)."""
    return GatewayError(401, message, code=code, headers=NO_RETRY)


def missing_key(unschemed: bool = False) -> GatewayError:
    """No key offered; ``unschemed``: an Authorization header came without its ``Bearer`` scheme (the key pasted
    alone), which the message says, without its value."""
    said = "An Authorization header came without 'Bearer ' before the key." if unschemed else "No API key given."
    return unauthorized(f"{said} Send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'.", "missing_api_key")


def invalid_key() -> GatewayError:
    return unauthorized("Incorrect API key provided.")


def expired_key(at: str) -> GatewayError:
    return unauthorized(f"This API key expired at {at}; ask for a new one.")


def revoked_key(at: str) -> GatewayError:
    return unauthorized(f"This API key was revoked at {at}; ask for a new one.")


def rotated_key(at: str) -> GatewayError:
    return unauthorized(f"This API key was rotated: this secret stopped working at {at}. Use its new secret.")


def registry_unavailable() -> GatewayError:
    """The database holding keys and routes cannot be read: 503 with Retry-After, never a guess from an old
    snapshot."""
    return GatewayError(
        503,
        "The gateway cannot read its keys and routes right now; retry in a few seconds.",
        type="server_error",
        code="service_unavailable",
        retry_after=2,
    )


def unknown_model(name: str, served: Sequence[str] = (), cased: str | None = None) -> GatewayError:
    """404 for the model ``name`` (shown cut to 100 characters), naming the models ``served`` to this key (at most
    10, the rest counted) so a client set up with a wrong name sees the right ones; ``cased``, a deployed model
    this key may use whose name differs from ``name`` only in case, is pointed at first."""
    shown = name if len(name) <= 100 else name[:100] + "…"
    listed = ", ".join(served[:10]) + (f" and {len(served) - 10} more" if len(served) > 10 else "")
    hint = f" Models this key can use: {listed}." if served else " No model this key may use is deployed now."
    if cased is not None:
        hint = f" Model names are case-sensitive: did you mean '{cased}'?{hint}"
    return GatewayError(
        404,
        f"The model '{shown}' does not exist or you do not have access to it.{hint}",
        code="model_not_found",
        param="model",
    )


def same_but_case(name: str, names: Iterable[str]) -> str | None:
    """The first of ``names`` that differs from ``name`` only in case (Hearth refuses two deployments so named)."""
    folded = name.casefold()
    return next((n for n in names if n.casefold() == folded), None)


def model_not_allowed(name: str, allowed: Iterable[str] = ()) -> GatewayError:
    """403 for a model outside the key's ``allowed`` models, which it names (the key's own list: nothing of the
    models it may not use, whether ``name`` is one or a typo), first the one named so but for case."""
    listed = ", ".join(sorted(allowed)[:10])
    hint = f" It may use: {listed}." if listed else ""
    if (cased := same_but_case(name, sorted(allowed))) is not None:
        hint = f" Model names are case-sensitive: did you mean '{cased}'?{hint}"
    message = f"This API key may not use the model '{name}'.{hint}"
    return GatewayError(403, message, code="model_not_allowed", param="model", headers=NO_RETRY)


def upstream_timeout(name: str) -> GatewayError:
    why = "an answer not streamed comes whole once done, so stream it or ask for fewer max_tokens"
    silent = f"The engine serving '{name}' sent nothing for longer than HEARTH_STREAM_IDLE_TIMEOUT ({why})."
    return GatewayError(504, silent, type="server_error", code="upstream_timeout")


COMING_STATES = frozenset({"pending", "pulling", "starting", "loading", "ready"})  # may serve without an admin


def not_ready(name: str, state: str, retry_after: int, reason: str = "") -> GatewayError:
    """503 for a model with no replica to route to. While its deployment may serve again by itself (launching, or ready
    with every replica down: a crash being restarted, an external endpoint being checked) with Retry-After,
    ``retry_after`` seconds (one reconcile), saying so when its state ``reason`` (its deployment's) is that its
    launch waits for room; stopped or failed, without, and with ``x-should-retry: false``, which the openai and
    anthropic SDKs obey (their _base_client ``_should_retry``) instead of retrying a 503 that only an admin can end."""
    if state not in COMING_STATES:
        return GatewayError(
            503,
            f"The model '{name}' has no ready replica: its deployment is {state}, and only an admin can launch it.",
            type="server_error",
            code="no_ready_replica",
            headers=NO_RETRY,
        )
    why = "every replica of it is down" if state == "ready" else f"its deployment is {state}"
    # the reason names other deployments (those put aside), which a key limited to some models may not learn of
    told = (
        " It waits for room on the GPUs: idle deployments are put aside for it first." if "for room" in reason else ""
    )
    return GatewayError(
        503,
        f"The model '{name}' has no ready replica ({why}).{told} Retry in {retry_after} s.",
        type="server_error",
        code="no_ready_replica",
        retry_after=retry_after,
    )


def wake_failed(name: str, reason: str, retry_after: int | None) -> GatewayError:
    """503 for a request held for a wake that failed (gateway.holding): the deployment's reason in the worker's
    words (the engine's own for a failed /wake_up). With Retry-After ``retry_after`` seconds where the deployment
    is still put aside (no room yet: room may come); None where the wake left it failed, which only an admin ends:
    then with ``x-should-retry: false`` (not_ready's docstring), and the message says so."""
    why = clean(reason, "A failed wake's reason") if reason else "its deployment failed"
    message = f"The model '{name}' was put aside to share the GPUs and could not be woken: {why}"
    if retry_after is None:
        return GatewayError(
            503,
            f"{message.rstrip('.')}. Its deployment failed, and only an admin can launch it.",
            type="server_error",
            code="wake_failed",
            headers=NO_RETRY,
        )
    return GatewayError(503, message, type="server_error", code="wake_failed", retry_after=retry_after)


def wake_blocked(name: str, reason: str) -> GatewayError:
    """503 for a request held for a wake that found no room an admin's action would not be needed for (a deployment
    whose idle policy is stay, or always on, holds it): with ``x-should-retry: false``, no Retry-After (a trial's
    SDK retried every 10 s what only an admin could end) and its own code."""
    why = clean(reason, "A failed wake's reason") if reason else "no room"
    return GatewayError(
        503,
        f"The model '{name}' was put aside to share the GPUs and cannot be woken until an admin makes room: {why}",
        type="server_error",
        code="wake_needs_admin",
        headers=NO_RETRY,
    )


def wake_timeout(name: str, seconds: float, retry_after: int) -> GatewayError:
    """503 for a request held longer than HEARTH_WAKE_TIMEOUT (``seconds``) for its deployment's wake."""
    return GatewayError(
        503,
        f"The model '{name}' was put aside to share the GPUs and was not awake within {seconds:.0f} s "
        f"(HEARTH_WAKE_TIMEOUT); it may still be waking. Retry in {retry_after} s.",
        type="server_error",
        code="wake_timeout",
        retry_after=retry_after,
    )


def wake_not_asked(name: str, why: str, retry_after: int) -> GatewayError:
    """503 for a request held for a wake Hearth could not ask the worker for (Redis or the broker away)."""
    return GatewayError(
        503,
        f"The model '{name}' was put aside to share the GPUs and Hearth could not ask for its wake ({why}). "
        f"Retry in {retry_after} s.",
        type="server_error",
        code="wake_unavailable",
        retry_after=retry_after,
    )


def engine_refused(name: str) -> GatewayError:
    return GatewayError(
        502,
        f"The engine serving '{name}' refused the gateway's credentials; relaunch the deployment.",
        type="server_error",
        code="engine_refused",
    )


def upstream_unreachable(name: str, retry_after: int) -> GatewayError:
    """Every replica refused the connection or closed it without an answer: an engine that just died, which
    the next reconcile restarts or takes out of the route. 503 with Retry-After (seconds), as for a
    deployment that is not ready, so clients wait and retry instead of giving up on a 502."""
    return GatewayError(
        503,
        f"No replica serving '{name}' could be reached (its engine may have just stopped; "
        f"it is being checked). Retry in {retry_after} s.",
        type="server_error",
        code="upstream_unreachable",
        retry_after=retry_after,
    )


NO_RETRY = ((b"x-should-retry", b"false"),)  # the openai and anthropic SDKs retry a 5xx unless told not to


def loop_detected() -> GatewayError:
    """A request that came back to this Hearth (its hop header names it, gateway.loops): 508 Loop Detected (RFC
    5842), a server's fault and not the client's request's, and not worth retrying."""
    return GatewayError(
        508,
        "This request came back to the Hearth that sent it: an endpoint of this model's deployment leads back "
        "to this Hearth (directly or through another one), so it would go round forever. An admin must point "
        "that endpoint at an engine.",
        type="server_error",
        code="loop_detected",
        headers=NO_RETRY,
    )


def too_many_hops(hops: int) -> GatewayError:
    """A request that went through ``hops`` Hearths already (gateway.loops): 508, as a loop is."""
    return GatewayError(
        508,
        f"This request has come through {hops} Hearths already (x-hearth-hop); a chain this long is most likely "
        "a loop, so it goes no further. An admin must point the endpoints of this model at an engine.",
        type="server_error",
        code="too_many_hops",
        headers=NO_RETRY,
    )


def upstream_redirected(name: str, status: int) -> GatewayError:
    """An engine that answered with a redirect: never followed, never relayed (its endpoint is misconfigured)."""
    return GatewayError(
        502,
        f"The engine serving '{name}' answered with a redirect (HTTP {status}), which Hearth does not follow: "
        "an admin must check its endpoint's URL.",
        type="server_error",
        code="upstream_redirect",
    )


def upstream_not_json(name: str) -> GatewayError:
    return GatewayError(
        502,
        f"The engine serving '{name}' answered with what is not a JSON object; an admin must check its endpoint.",
        type="server_error",
        code="upstream_not_json",
    )


def upstream_refused(name: str) -> GatewayError:
    """Every replica's address was refused by the address policy at connect time (gateway.connect_policy)."""
    return GatewayError(
        502,
        f"The endpoint serving '{name}' is at an address Hearth's address policy refuses now; nothing was sent "
        "there. An admin must check where its name resolves.",
        type="server_error",
        code="upstream_address_refused",
    )


def upstream_broke(name: str) -> GatewayError:
    return GatewayError(
        502, f"The engine serving '{name}' broke off its answer.", type="server_error", code="upstream_truncated"
    )


# An engine's refusal of a prompt longer than its context, in each engine's words: vLLM ("This model's maximum
# context length is N tokens. However, you requested M tokens ...", vllm/entrypoints/openai/engine/serving.py
# and the simulator), vLLM's newer wording ("... is longer than the maximum model length of N", vllm/v1/engine/
# processor.py), SGLang ("The input (N tokens) is longer than the model's context length (M tokens).",
# python/sglang/srt/managers/tokenizer_manager.py) and llama.cpp's server ("the request exceeds the
# available context size", tools/server/server.cpp). OpenAI's own code for it is context_length_exceeded.
CONTEXT_LENGTH = re.compile(
    r"maximum context length|maximum model length|longer than the model's context length|context length of"
    r"|exceeds the available context size|context_length_exceeded|prompt is too long",
    re.IGNORECASE,
)


def prompt_too_long(prompt: int, max_model_len: int, surface: "Surface", field: str = "messages") -> GatewayError:
    """400 for a prompt (``prompt`` tokens, as the engine counted it) that leaves no room in ``max_model_len`` for
    an answer, in the words each API's clients know it by: OpenAI's ``context_length_exceeded`` with its sentence
    naming the request's ``field`` (messages, prompt, input), Anthropic's "prompt is too long: N tokens > M maximum"
    (a trial's Claude Code was told to lower max_tokens instead, which could not help: its prompt alone filled the
    context)."""
    if surface == Surface.ANTHROPIC:
        message = f"prompt is too long: {prompt} tokens > {max_model_len} maximum"
    else:
        message = (
            f"This model's maximum context length is {max_model_len} tokens. However, your {field} resulted in "
            f"{prompt} tokens, with no room left for an answer. Please reduce the length of the {field}."
        )
    return GatewayError(400, message, code="context_length_exceeded")


PARAM = re.compile(r"[a-z_][a-z0-9_]{0,63}(?:\.[a-z0-9_]{1,64}|\[\d{1,6}\]){0,8}")  # messages[0].content


def engine_error(status: int, body: bytes, model: str = "", endpoint: str = "") -> GatewayError:
    """An engine's error answer (``status``, ``body``) as a GatewayError whose ``body(surface)`` is the API's own
    shape, keeping its status and its message (vLLM's has the real numbers of a context-length error) as
    gateway.engine_messages' readable and clean leave it: vLLM's dump of validation errors one "field: why" each,
    at most 500 characters, nothing like a secret or a traceback; its ``param`` only when it names a request field.
    A 400 whose message says the prompt does not fit the context gets OpenAI's code ``context_length_exceeded``; a
    bare 404 names the ``model`` and the ``endpoint`` asked for (a chat model asked for embeddings: a trial read the
    engine's "Not Found" as a wrong base URL)."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        data = None
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and error.get("message"):
        message, param = str(error["message"]), error.get("param")
    elif isinstance(data, dict) and (error or data.get("detail") or data.get("message")):
        message, param = str(error or data.get("detail") or data.get("message")), None  # FastAPI's {"detail": ...}
    else:
        text = body[: LOGGED_CHARS * 4].decode("utf-8", "replace")  # UTF-8: at most 4 bytes a character
        message, param = text or f"The engine answered HTTP {status}.", None
    if status == 404 and message == "Not Found" and model and endpoint:
        message = (
            f"The engine serving '{model}' does not offer {endpoint}: its model is not of that kind (a chat model "
            "serves /v1/chat/completions, an embedding model /v1/embeddings)."
        )
    elif status == 404 and message == "Not Found":
        message = "The engine serving this model does not offer this endpoint."
    built = answer_model(message) if status < 500 else None
    message, param = readable(message[:LOGGED_CHARS], param)
    message = clean(message, f"An engine's HTTP {status} answer")
    if built is not None:  # the engine's failure to build its own answer, not the client's request
        return GatewayError(
            502,
            f"The engine serving '{model or 'this model'}' could not build its answer from what the model wrote "
            f"({built}: {message}); the request was valid. Tool-call arguments that are not a JSON object do this: "
            "a streamed request relays them as the model wrote them.",
            type="server_error",
            code="engine_answer_invalid",
        )
    if not isinstance(param, str) or not PARAM.fullmatch(param):
        param = None  # a request field's name or nothing: the engine's own words go in the message only
    kind = "invalid_request_error" if status < 500 else "server_error"
    code = "context_length_exceeded" if status == 400 and CONTEXT_LENGTH.search(message) else None
    return GatewayError(status, message, type=kind, param=param, code=code)
