"""A whole (non-streamed) chat answer, or /tokenize count, in the API of a client whose API the engine does not
speak: Anthropic's messages (gateway.translate), its token count, or OpenAI's responses (gateway.responses_chat);
and the status of an error an engine answered with a 200 (``error_status``)."""

import json
from typing import Any

from gateway.errors import GatewayError
from gateway.relay_plan import RelayPlan
from gateway.responses_chat import chat_to_response
from gateway.rewrite import Translation
from gateway.translate import chat_to_message


def translated(plan: RelayPlan, answer: dict[str, Any] | None) -> bytes:
    """The engine's ``answer`` (None: it was not a JSON object) as the client's API has it, for ``plan``'s
    translation. Raises GatewayError 502 for an answer that is not what the engine should have sent (never a
    silent empty answer or a count of 0)."""
    if answer is None:
        raise _invalid(f"The engine serving '{plan.model}' answered something that is not JSON.")
    if plan.translation == Translation.COUNT_TOKENS:
        count = answer.get("count")
        if not isinstance(count, int) or isinstance(count, bool):
            raise _invalid(
                f"The engine serving '{plan.model}' did not count the tokens (its /tokenize answer has no count)."
            )
        return json.dumps({"input_tokens": count}).encode()
    if plan.translation == Translation.RESPONSES:
        return json.dumps(chat_to_response(answer, plan.request, plan.model)).encode()
    return json.dumps(chat_to_message(answer, plan.model)).encode()


def _invalid(message: str) -> GatewayError:
    return GatewayError(502, message, type="server_error", code="upstream_invalid", recorded=True)


def error_status(answer: dict[str, Any] | None) -> int | None:
    """The status of an error an engine answered with a 200: vLLM's flat ``{"object": "error", "message", "code"}``
    or a body whose only answer is ``{"error": ...}`` (no ``object``: not a response with an ``error`` field). Its
    ``code`` when that is an HTTP error status, else 502; None for an answer that is no error."""
    if answer is None:
        return None
    error = answer.get("error")
    if answer.get("object") != "error" and not (error and "object" not in answer):
        return None
    code = error.get("code") if isinstance(error, dict) else answer.get("code")
    return code if isinstance(code, int) and not isinstance(code, bool) and 400 <= code <= 599 else 502
