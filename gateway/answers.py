"""What an answer held, for the counters the panels show: hidden reasoning tokens, tool-call parse failures,
length-cut answers and empty ones. Pure: fed parsed events or whole answers by gateway.sse and gateway.relay.

- Reasoning tokens: the engine's own count when it reports one (``completion_tokens_details.reasoning_tokens``
  in OpenAI chat usage, vLLM with a reasoning parser; ``output_tokens_details.reasoning_tokens`` in Responses
  usage), else the reasoning pieces seen (vLLM sends one per decode step, so a lower bound): ``reasoning``
  (vLLM ≥ 0.10) or ``reasoning_content`` (SGLang, older vLLM) deltas, Responses ``reasoning_text`` deltas,
  Anthropic ``thinking_delta``s. They are hidden: the client's answer text does not hold them.
- Tool-call parse failures: a call whose arguments are not a JSON object, and an answer that carries a tool
  call as text the engine's parser did not take (one of TOOL_CALL_MARKERS in the text while tools were
  offered), or no call at all when ``tool_choice`` demanded one. A length-cut answer's arguments are cut,
  not malformed: it counts as a length cut only.
- Length cut: finish_reason ``length`` (OpenAI), stop_reason ``max_tokens`` (Anthropic), an ``incomplete``
  response for ``max_output_tokens`` (Responses).
- Empty: a finished answer with neither text nor a tool call (reasoning alone is empty to the client).
"""

import json
from dataclasses import dataclass, field
from typing import Any

from console.observability.outcomes import LENGTH_CUTS

Json = dict[str, Any]

# How a tool call looks as text when a model wrote it but no (or the wrong) tool-call parser read it: the
# openings each parser looks for, read in vLLM's vllm/tool_parsers/*.py (0.32.0) and SGLang's
# python/sglang/srt/function_call/*_detector.py (0.5.x): hermes and qwen (``<tool_call>``), granite
# (``<|tool_call|>``), mistral (``[TOOL_CALLS]``), llama3_json (``<|python_tag|>``), qwen3_coder
# (``<function=``), deepseek_v3 (``<｜tool▁calls▁begin｜>``), kimi_k2 (``<|tool_calls_section_begin|>``),
# and the bare JSON call of llama3_json without its tag.
TOOL_CALL_MARKERS = (
    "<tool_call>",
    "<|tool_call|>",
    "[TOOL_CALLS]",
    "<|python_tag|>",
    "<function=",
    "<｜tool▁calls▁begin｜>",
    "<|tool_calls_section_begin|>",
    '{"name":',
)


@dataclass
class AnswerCounts:
    """The counters of one answer; reasoning_tokens is None when the answer showed no reasoning at all."""

    reasoning_tokens: int | None = None
    tool_call_failures: int = 0
    length_cut: bool = False
    empty: bool = False


@dataclass
class AnswerTally:
    """Collects one answer's pieces. ``tools`` says the request offered tools (then the text is kept, to look
    for calls written as text); ``call_required`` that its tool_choice demanded a call."""

    tools: bool = False
    call_required: bool = False
    text: list[str] = field(default_factory=list)
    content: bool = False
    arguments: dict[Any, str] = field(default_factory=dict)  # by call (index or block), its JSON text so far
    reasoning_pieces: int = 0
    reasoning_reported: int | None = None

    def chat_delta(self, delta: Json) -> None:
        """One OpenAI chat delta (or a whole message: same fields)."""
        if isinstance(content := delta.get("content"), str) and content:
            self.add_text(content)
        if delta.get("reasoning") or delta.get("reasoning_content"):
            self.reasoning_pieces += 1
        for call in delta.get("tool_calls") or []:
            if isinstance(call, dict):
                function = call.get("function") or {}
                self.add_arguments(call.get("index", call.get("id")), function.get("arguments"))

    def add_text(self, text: str) -> None:
        self.content = True
        if self.tools:
            self.text.append(text)

    def add_arguments(self, call: Any, piece: Any) -> None:
        self.content = True
        self.arguments[call] = self.arguments.get(call, "") + (piece if isinstance(piece, str) else "")

    def usage(self, usage: Any) -> None:
        """The reasoning count in a usage object of any of the three APIs, when there is one."""
        if not isinstance(usage, dict):
            return
        for details in ("completion_tokens_details", "output_tokens_details"):
            count = (usage.get(details) or {}).get("reasoning_tokens")
            if isinstance(count, int) and count > 0:
                self.reasoning_reported = count

    def result(self, finish_reason: str | None) -> AnswerCounts:
        """The counters, once the answer ended with ``finish_reason`` (any API's word for it)."""
        counts = AnswerCounts(length_cut=finish_reason in LENGTH_CUTS)
        counts.reasoning_tokens = self.reasoning_reported or self.reasoning_pieces or None
        counts.empty = not self.content and not counts.length_cut
        if counts.length_cut:
            return counts
        counts.tool_call_failures = sum(1 for text in self.arguments.values() if not _json_object(text))
        written = "".join(self.text)
        if not self.arguments and (self.call_required or any(m in written for m in TOOL_CALL_MARKERS)):
            counts.tool_call_failures += 1
        return counts


def _json_object(text: str) -> bool:
    """Whether ``text`` is a JSON object; empty arguments count as ``{}``, as vLLM and SGLang send them."""
    if not text.strip():
        return True
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def for_request(path: str, request: Json) -> AnswerTally:
    """An empty tally for ``request`` to ``path``: whether it offered tools and demanded a call."""
    tools = bool(request.get("tools"))
    choice = request.get("tool_choice")
    required = choice == "required" or (isinstance(choice, dict) and choice.get("type") in ("function", "any", "tool"))
    return AnswerTally(tools=tools, call_required=tools and required)


def tally_whole(tally: AnswerTally, answer: Json) -> str | None:
    """Feed a whole (non-streamed) answer of any of the three APIs; its finish reason as the tally reads it."""
    tally.usage(answer.get("usage"))
    if isinstance(answer.get("choices"), list):  # OpenAI chat or completions
        choice = answer["choices"][0] if answer["choices"] and isinstance(answer["choices"][0], dict) else {}
        tally.chat_delta(choice.get("message") or {})
        if isinstance(choice.get("text"), str) and choice["text"]:
            tally.add_text(choice["text"])
        return choice.get("finish_reason")
    if answer.get("object") == "response":
        for index, item in enumerate(answer.get("output") or []):
            responses_item(tally, index, item)
        return responses_finish(answer)
    for index, block in enumerate(answer.get("content") or []):  # Anthropic
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and block.get("text"):
            tally.add_text(str(block["text"]))
        elif block.get("type") == "tool_use":
            tally.add_arguments(index, json.dumps(block.get("input") if block.get("input") is not None else {}))
        elif block.get("type") == "thinking":
            tally.reasoning_pieces += 1
    return answer.get("stop_reason")


def responses_item(tally: AnswerTally, index: int, item: Any) -> None:
    """A finished Responses output item: a message's text, a function call's arguments, a reasoning item."""
    if not isinstance(item, dict):
        return
    if item.get("type") == "message":
        for part in item.get("content") or []:
            if isinstance(part, dict) and part.get("text"):
                tally.add_text(str(part["text"]))
    elif item.get("type") in ("function_call", "custom_tool_call"):
        tally.add_arguments(index, item.get("arguments") if item.get("type") == "function_call" else "{}")
    elif item.get("type") == "reasoning" and (item.get("content") or item.get("summary")):
        tally.reasoning_pieces += 1


def responses_finish(response: Json) -> str | None:
    """A response's finish as one word: its incomplete reason (``max_output_tokens``) or its status."""
    details = response.get("incomplete_details") or {}
    return details.get("reason") or response.get("status")
