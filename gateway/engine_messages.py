"""What of an engine's error text reaches a client: its message, at most MAX_CHARS characters, with whatever looks
like a secret or a traceback replaced by a reference the admin finds in the web log, where the whole text is
logged with it (``clean``). An engine's error body (gateway.errors.engine_error), its in-stream error event
(``StreamScrubber``) and a translated stream's engine error (gateway.stream_errors.stream_cut_message) all go through
it: an endpoint Hearth did not launch may answer with a traceback holding its own configuration.

Looks like a secret: a ``Bearer`` token; an ``Authorization`` header's value; Hearth's keys (``hk-…``, engine
keys ``hek-…``) and ``sk-…`` keys; a URL's ``user:password@``; a value after a name ending in key, token,
secret, password, passwd, pwd, credential(s) or auth (``api_key=…``, ``"password": "…"``); a run of 32 or more
base64, base64url or hex characters with a digit and a letter in it (a token, a hash, a key in hex). A
traceback: from Python's ``Traceback (most recent call last):`` or its first ``File "…", line N`` to the end of
the text. A long path or a long model id may look like a secret too: hidden the same way, it is one look-up
away in the log.
"""

import ast
import json
import logging
import re
import secrets

log = logging.getLogger(__name__)
MAX_CHARS = 500  # characters of an engine's message a client is given
LOGGED_CHARS = 20_000  # characters of it read and logged at most (a 10 MB error page is not copied to the log)

SECRETS = re.compile(
    r"\bbearer\s+[A-Za-z0-9._~+/-]+=*"
    r"|\bauthorization[\"']?\s*[=:]\s*[\"']?(?:[A-Za-z]+\s+)?[^\s,;&\"'}\])]+"
    r"|\b(?:hk|hek|sk)-[A-Za-z0-9][A-Za-z0-9._-]{5,}"
    r"|[A-Za-z][A-Za-z0-9+.-]*://[^\s/:@]+:[^\s/@]+@"
    r"|\b(?:[A-Za-z0-9]+[_.-])*(?:api[_-]?key|key|token|secret|password|passwd|pwd|credentials?|auth)\b"
    r"[\"']?\s*[=:]\s*[\"']?[^\s,;&\"'}\])]+"
    r"|(?P<run>[A-Za-z0-9+/_-]{32,}=*)",
    re.IGNORECASE,
)
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|\bFile \"[^\"\n]*\", line \d+")
DIGIT, LETTER = re.compile(r"\d"), re.compile(r"[A-Za-z]")


def clean(text: str, what: str) -> str:
    """``text`` (an engine's error message, ``what`` names it for the log) as a client may see it: ``reworded``,
    secrets and a traceback replaced by ``[removed: ref R in the web log]``, then cut to MAX_CHARS characters (``…
    [cut: ref R in the web log]``). When anything was removed or cut the text as the engine sent it is logged with
    R (its first LOGGED_CHARS characters); else nothing is logged."""
    text = text[:LOGGED_CHARS]
    ref = ""

    def removed() -> str:
        nonlocal ref
        ref = ref or secrets.token_hex(4)
        return f"[removed: ref {ref} in the web log]"

    def secret(match: re.Match[str]) -> str:
        run = match.group("run")
        if run and not (DIGIT.search(run) and LETTER.search(run)):
            return run  # letters only, or digits only: a word or a number, not a token
        return removed()

    shown = SECRETS.sub(secret, reworded(text))
    if traceback := TRACEBACK.search(shown):
        shown = shown[: traceback.start()] + removed()
    if len(shown) > MAX_CHARS:
        end = removed().replace("[removed:", "[cut:")
        shown = shown[: MAX_CHARS - len(end) - 2].rstrip() + " …" + end
    if ref:
        log.warning("%s (ref %s), as the engine sent it: %r", what, ref, text)
    return shown


# vLLM's words for a request its pydantic model refused ("2 validation errors:\n  {'type': 'missing', 'loc':
# 'body.messages', 'msg': 'Field required', 'input': ...}\n  {...}", param "body.messages": each error one Python dict
# on its line, ten at most and then "...and 9 more errors"; tests/data/vllm-0.32.0-cpu-validation-errors.json), or
# pydantic's own text for a part it validated inside ("7 validation errors for ValidatorIterator\n0.File.type\n  Input
# should be 'file' [type=literal_error, …]\n    For further information visit …"), and the suffix its own checks add
# to a message that names its parameter ("temperature must be non-negative, got -1.0. (parameter=temperature,
# value=-1.0)"). A field that takes one of several shapes (a union: a message is a developer, system, user …
# message) has its errors under each shape's class name in the location (``messages.0.ChatCompletionUserMessageParam
# .content``; tests/data/vllm-0.32.0-cpu-union-errors.json).
VALIDATION_ERRORS = re.compile(r"\d+ validation errors?:\n")
PYDANTIC_ERRORS = re.compile(r"\d+ validation errors? for (\w+)\n")
ANSWER_MODELS = re.compile(r"(?:Response|ContentBlock)$")  # vllm/entrypoints/anthropic/protocol.py, openai/…
MORE_ERRORS = re.compile(r"\.\.\.and \d+ more errors?$")
UNION_MEMBER = re.compile(r"[A-Z]\w*$")  # a shape's class name in a location; OpenAI's fields are snake_case
PARAMETER_SUFFIX = re.compile(r" \(parameter=[A-Za-z_][\w.]*(?:, value=[^()]*)?\)$")
Refusal = tuple[list[str], str, str]  # one error: its location's parts, its words, its pydantic type


def answer_model(message: str) -> str | None:
    """The class named by pydantic's text when it is one the engine builds its own answer from (ANSWER_MODELS: vLLM's
    ``…Response`` and ``…ContentBlock`` classes), which the model's output did not fit: a trial's tool call whose
    arguments were not a JSON object came back as a 400 "input: Input should be a valid dictionary", the client
    blamed for the engine's answer. None for any other message: a request's refusal names its ``…Request`` class,
    or a part of it (``ValidatorIterator`` for a message's content parts)."""
    found = PYDANTIC_ERRORS.match(message)
    return found.group(1) if found and ANSWER_MODELS.search(found.group(1)) else None


def readable(message: str, param: object) -> tuple[str, object]:
    """An engine's error ``message`` and ``param`` as a client reads them: vLLM's dump of pydantic errors as one
    sentence per field, named as the client wrote it ("messages: Field required; temperature: Input should be a
    valid number, unable to parse string as a number", param "messages"), its parameter suffix dropped (the
    param says it); any other message as it was. A param is named as the client wrote it ("body.x" → "x").

    A union's errors are condensed: the shapes that refused the field that tells them apart (a ``role`` or
    ``type`` of another value: a ``literal_error``) are left out, the shapes' class names dropped from the
    locations, and each location's words said once ("messages.0.content: Input should be a valid string, or Input
    should be iterable" for a user message with a null content, against vLLM's 19 errors)."""
    param = param.removeprefix("body.") if isinstance(param, str) else param
    if VALIDATION_ERRORS.match(message):
        refusals = _listed(message)
    elif PYDANTIC_ERRORS.match(message):
        refusals = _pydantic_text(message)
    else:
        return PARAMETER_SUFFIX.sub("", message), param
    if not refusals:
        return message, param
    fields = _condensed(refusals)
    return "; ".join(f"{where}: {words}" if where else words for where, words in fields), fields[0][0] or None


def _listed(message: str) -> list[Refusal] | None:
    """vLLM's dump, one error a line; None when a line is not one (the message is then passed on as it came)."""
    found = []
    for line in message.splitlines()[1:]:
        if MORE_ERRORS.match(line.strip()):
            continue
        try:
            error = ast.literal_eval(line.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
        if not isinstance(error, dict) or not isinstance(error.get("msg"), str):
            return None
        where = str(error.get("loc", "")).removeprefix("body").lstrip(".")
        found.append((where.split(".") if where else [], error["msg"], str(error.get("type", ""))))
    return found


def _pydantic_text(message: str) -> list[Refusal] | None:
    """pydantic's text: a location's line, its error's words indented two spaces (``… [type=kind, …]``), a link
    indented four; None when the text is not that."""
    found: list[Refusal] = []
    where: list[str] | None = None
    for line in message.splitlines()[1:]:
        if not line.startswith(" "):
            where = line.strip().split(".")
        elif not line.startswith("   ") and where is not None:
            words, _, kind = line.strip().partition(" [type=")
            found.append((where, words, kind.partition(",")[0]))
    return found or None


def _condensed(refusals: list[Refusal]) -> list[tuple[str, str]]:
    """Each location (without the union's class names) with its words once, in order: the errors of a shape that
    refused the field telling the shapes apart are left out, unless every error is such a shape's."""

    def shapes(where: list[str]) -> list[tuple[str, ...]]:
        return [tuple(where[: at + 1]) for at, part in enumerate(where) if UNION_MEMBER.match(part)]

    refused = {shape for where, _, kind in refusals if kind == "literal_error" for shape in shapes(where)}
    kept = [error for error in refusals if not refused.intersection(shapes(error[0]))] or refusals
    said: dict[str, list[str]] = {}
    for where, words, _ in kept:
        listed = said.setdefault(".".join(part for part in where if not UNION_MEMBER.match(part)), [])
        if not any(words.startswith(other) for other in listed):
            listed.append(words)
    return [(where, ", or ".join(words)) for where, words in said.items()]


# Anthropic's error types (Anthropic API reference, "Errors"). An engine's other type in a Messages stream's error
# event is said as api_error, Anthropic's 500: vLLM 0.32's /v1/messages says "internal_error", which the anthropic
# SDK reads as no type it knows.
ANTHROPIC_ERROR_TYPES = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
        "rate_limit_error",
        "api_error",
        "timeout_error",
        "overloaded_error",
    }
)
ENGINE_LOG = "The engine's log has the cause (an admin sees it on the deployment's Log tab)."
# What the client of a stream cannot act on: vLLM's pointer at a stack trace printed "above" in its own log
# (vllm/v1/engine/exceptions.py EngineDeadError, its message when the engine core died mid-answer), and pydantic's
# text when vLLM's /v1/messages read its own chat stream's error event as a chunk (vllm/entrypoints/anthropic/
# serving.py, the stream converter's ``except``: "2 validation errors for ChatCompletionStreamResponse\nmodel\n
# Field required [type=missing, input_value={'error': {'message': 'En..., input_type=dict]…"), the engine's own
# words cut to a few characters there.
SEE_ABOVE = " See stack trace (above) for the root cause."
# vLLM 0.32.0 asked for a thinking budget without --reasoning-parser: "thinking_token_budget is set but
# reasoning_config is not configured. Please set --reasoning-parser…" (a trial's Anthropic client with ``thinking``)
NO_REASONING_PARSER = re.compile(r"reasoning_config is not configured")
UNREAD_ERROR = re.compile(r"\d+ validation errors? for ChatCompletionStreamResponse\n.*?input_value=\{'error'", re.S)


def reworded(message: str) -> str:
    """An engine's error ``message`` as the client can act on it: a pointer at a stack trace "above" becomes one at
    the engine's log (ENGINE_LOG); pydantic's text about an error event vLLM's /v1/messages could not read says the
    engine failed during the answer; vLLM's refusal of a thinking budget on an engine without a reasoning parser
    (its launch flag, which a client cannot set) says what the client can do; any other message as it was."""
    if UNREAD_ERROR.match(message):
        return f"The engine failed during the answer (vLLM's Messages API could not pass its error on). {ENGINE_LOG}"
    if NO_REASONING_PARSER.search(message):
        return (
            "This deployment's engine runs without a reasoning parser, so it takes no thinking budget (Anthropic's "
            "`thinking`): leave it out, or an admin sets the deployment's reasoning parser (its Change page)."
        )
    return message.replace(SEE_ABOVE, f" {ENGINE_LOG}")


class StreamScrubber:
    """Passes an event stream on in whole events, each error event an engine sent (``{"error": …}``, Anthropic's
    and Responses' ``error`` event, a Responses ``response.failed``) with its text ``clean``; an
    event that is not complete yet is held until it is. Feed it bytes with LF line ends (gateway.sse.LineEnds).

    With ``chat`` (an OpenAI chat or completions stream), vLLM's flat error object (``{"object": "error",
    "message", "type", "param", "code"}``, its ``ErrorResponse`` before 0.10, sent whole mid-stream) is said again
    as the chat route's in-stream error, ``{"error": {"message", "type", "param", "code"}}`` with the engine's
    values, which the openai SDK raises as an APIError: passed on flat, it was a chunk without ``choices``. And the
    ``data: [DONE]`` vLLM sends after its error event is dropped: to a client that reads no error event, a stream
    ending in [DONE] looks finished. An error whose ``code`` is the engine's HTTP status (vLLM's ``{"type":
    "InternalServerError", "code": 500}``) gets the type and code the same failure has in a whole answer
    (gateway.errors.engine_error): ``server_error`` (``invalid_request_error`` below 500) and no code.

    With ``messages`` (an Anthropic Messages stream), an error event's type that is not Anthropic's
    (ANTHROPIC_ERROR_TYPES) is said as ``api_error``. With ``responses`` (an OpenAI Responses stream), a
    ``response.completed`` event whose response is ``incomplete`` (vLLM's, for an answer cut at max_output_tokens)
    is said as OpenAI's ``response.incomplete``: a client that reads the event's type (Codex, which then says
    "Incomplete response returned, reason: max_output_tokens") took the cut answer as whole."""

    def __init__(self, what: str, chat: bool = False, messages: bool = False, responses: bool = False) -> None:
        self.what = what  # the engine, for the log
        self.chat, self.messages, self.responses = chat, messages, responses
        self.errored = False  # an error event went by
        self._held = b""

    def feed(self, chunk: bytes) -> bytes:
        """The whole events in what has arrived so far; b"" when none is complete yet."""
        if (
            not self._held
            and not self.errored
            and chunk.endswith(b"\n\n")
            and chunk.find(b'"error"') < 0
            and (not self.responses or chunk.find(b"response.completed") < 0)
        ):
            return chunk  # whole events without an error or an end to say again: most reads, passed on as they came
        data = self._held + chunk
        end = data.rfind(b"\n\n")
        if end < 0:
            self._held = data
            return b""
        events, self._held = data[: end + 2], data[end + 2 :]
        return self._scrubbed(events)

    def flush(self) -> bytes:
        """What is held when the stream ends: an event its engine never finished."""
        held, self._held = self._held, b""
        return self._scrubbed(held)

    def _scrubbed(self, events: bytes) -> bytes:
        if events.find(b'"error"') >= 0:
            events = b"\n".join(self._line(x) for x in events.split(b"\n"))
        if self.errored and self.chat:
            events = events.replace(b"data: [DONE]\n\n", b"")
        if self.responses and events.find(b"response.completed") >= 0:
            events = b"\n\n".join(_incomplete_said_so(x) for x in events.split(b"\n\n"))
        return events

    def _line(self, line: bytes) -> bytes:
        if not line.startswith(b"data:") or line.find(b'"error"') < 0:
            return line
        try:
            event = json.loads(line[5:])
        except (ValueError, RecursionError):
            return line
        if not isinstance(event, dict):
            return line
        nested = self.chat and event.get("object") == "error" and "error" not in event
        if nested:
            event = {"error": {name: event.get(name) for name in ("message", "type", "param", "code")}}
        self.errored |= bool(event.get("error")) or event.get("type") == "error"
        changed = _cleaned(event, self.what) or nested
        error = event.get("error")
        if self.messages and isinstance(error, dict) and error.get("type") not in ANTHROPIC_ERROR_TYPES:
            error["type"], changed = "api_error", True
        if self.chat and isinstance(error, dict) and type(status := error.get("code")) is int:
            error["type"] = "invalid_request_error" if status < 500 else "server_error"
            error["code"], changed = None, True
        return b"data: " + json.dumps(event).encode() if changed else line


def _incomplete_said_so(block: bytes) -> bytes:
    """One event of a Responses stream, a ``response.completed`` whose response is ``incomplete`` said as the
    ``response.incomplete`` OpenAI sends for it (its ``event:`` line and its data's ``type``); any other as it was."""
    lines = block.split(b"\n")
    data = next((i for i, line in enumerate(lines) if line.startswith(b"data:")), None)
    if data is None:
        return block
    try:
        event = json.loads(lines[data][5:])
    except (ValueError, RecursionError):
        return block
    if not isinstance(event, dict) or event.get("type") != "response.completed":
        return block
    response = event.get("response")
    if not isinstance(response, dict):
        return block
    if response.get("status") != "incomplete":
        return block
    event["type"] = "response.incomplete"
    lines[data] = b"data: " + json.dumps(event).encode()
    return b"\n".join(b"event: response.incomplete" if x.startswith(b"event:") else x for x in lines)


def _cleaned(event: dict[str, object], what: str) -> bool:
    """Clean the error texts of ``event`` in place: its ``error`` (a string, or every string in the object), its
    ``response``'s (``response.failed``), and the ``message`` of an event of type ``error``. Whether any
    changed."""
    response = event.get("response")
    changed = False
    for holder in (event, response if isinstance(response, dict) else {}):
        error = holder.get("error")
        changed |= (
            _clean_in(error, list(error), what) if isinstance(error, dict) else _clean_in(holder, ["error"], what)
        )
    if event.get("type") == "error":
        changed |= _clean_in(event, ["message"], what)
    return changed


def _clean_in(holder: dict[str, object], names: list[str], what: str) -> bool:
    changed = False
    for name in names:
        value = holder.get(name)
        if isinstance(value, str) and (shown := clean(value, f"{what}'s error event")) != value:
            holder[name], changed = shown, True
    return changed
