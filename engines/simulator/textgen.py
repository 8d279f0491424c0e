"""What the simulated model says: deterministic words, stop sequences and tool-call arguments.

An answer is planned whole before decoding starts (the scheduler then only paces it): its tokens are
drawn from a small vocabulary by a generator seeded with the server seed, the choice index and the
prompt, so the same request to the same server says the same thing. An unbounded answer is
``natural`` tokens ± 50 %; ``max_tokens`` cuts it ("length"); a stop string ends it early ("stop").
"""

import hashlib
import json
import random
import uuid
from dataclasses import dataclass
from typing import Any

from engines.simulator import tokenizer

VOCAB = (
    "the a model token cache engine request stream answer server light quiet river stone garden window "
    "kettle morning evening letter bridge lantern harbor meadow signal planet orchard thread paper "
    "simple careful patient bright steady gentle early warm clear small open and of to in with "
    "runs holds keeps finds brings turns waits sends reads writes grows"
).split()


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model makes: ``arguments`` is the complete JSON text of its input."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Output:
    """One planned answer.

    ``pieces`` are the token strings in order (their concatenation is the text, or the tool call's
    arguments); ``finish`` is "stop", "length" or "tool_calls" ("abort" once ``cut``); ``stop_sequence`` the stop string
    that ended it, if any; ``reasoning`` the reasoning tokens generated before them (with a reasoning
    parser on), which count in the output tokens as vLLM counts them.
    """

    pieces: list[str]
    finish: str
    stop_sequence: str | None = None
    tool: ToolCall | None = None
    reasoning: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def reasoning_text(self) -> str:
        return "".join(self.reasoning)

    @property
    def tokens(self) -> int:
        """Output tokens: reasoning, then the text or arguments."""
        return len(self.reasoning) + len(self.pieces)

    def cut(self, tokens: int) -> "Output":
        """This answer as an abort left it after ``tokens`` output tokens: finish "abort", vLLM's finish reason
        for a request its engine aborted (a sleep with mode=abort)."""
        pieces = self.pieces[: max(0, tokens - len(self.reasoning))]
        return Output(pieces, "abort", None, self.tool, self.reasoning[:tokens])

    def piece(self, position: int) -> tuple[str, str]:
        """("reasoning" or "answer", the token string) of output token ``position`` ("" past the end)."""
        if position < len(self.reasoning):
            return "reasoning", self.reasoning[position]
        index = position - len(self.reasoning)
        return "answer", self.pieces[index] if index < len(self.pieces) else ""


def _rng(seed: int, index: int, prompt: str) -> random.Random:
    digest = hashlib.sha256(f"{seed}\0{index}\0{prompt}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))  # noqa: S311 - reproducible text, not a secret


def _words(rng: random.Random, length: int) -> list[str]:
    out: list[str] = []
    left = 0
    while len(out) < length:
        if left == 0 and out:
            out.append(".")
            left = -1
            continue
        if left <= 0:
            left = rng.randint(5, 12)
            word = rng.choice(VOCAB).capitalize()
        else:
            word = rng.choice(VOCAB)
        out.append(word if not out else " " + word)
        left -= 1
    return out


def plan_text(
    prompt: str,
    *,
    seed: int,
    index: int,
    max_tokens: int,
    natural: int,
    stop: list[str] | None = None,
    ignore_eos: bool = False,
) -> Output:
    """Plan a text answer of at most ``max_tokens`` tokens (``ignore_eos``: exactly that many)."""
    rng = _rng(seed, index, prompt)
    wanted = max_tokens if ignore_eos else rng.randint(max(1, natural // 2), max(1, natural * 3 // 2))
    length = min(wanted, max_tokens)
    pieces = _words(rng, length)
    finish = "length" if ignore_eos or wanted > max_tokens else "stop"
    text = "".join(pieces)
    hits = [(text.find(s), s) for s in stop or [] if s and s in text]
    if hits:
        at, sequence = min(hits)
        return Output(tokenizer.pieces(text[:at]), "stop", stop_sequence=sequence)
    return Output(pieces, finish)


def example_value(schema: Any, name: str = "value") -> Any:
    """A deterministic value that satisfies a JSON schema's common cases (type, enum, const, default)."""
    if not isinstance(schema, dict):
        return f"sim {name}"
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return example_value(schema[key][0], name)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties") or {}
        return {key: example_value(sub, key) for key, sub in props.items()}
    if kind == "array":
        return [example_value(schema.get("items", {}), name)]
    simple = {"integer": 7, "number": 2.5, "boolean": True, "null": None}
    return simple.get(kind, f"sim {name}")


def plan_tool_call(name: str, schema: Any, *, max_tokens: int, id_prefix: str) -> Output:
    """Plan a call of tool ``name`` whose arguments are ``example_value(schema)`` as JSON.

    ``id_prefix`` is "chatcmpl-tool-" (vLLM) or "toolu_" (Anthropic). Arguments longer than
    ``max_tokens`` are cut, as a real model's would be ("length").
    """
    arguments = json.dumps(example_value(schema or {"type": "object"}, name))
    pieces = tokenizer.pieces(arguments)
    call = ToolCall(id=id_prefix + uuid.uuid4().hex, name=name, arguments=arguments)
    if len(pieces) > max_tokens:
        return Output(pieces[:max_tokens], "length", tool=call)
    return Output(pieces, "tool_calls", tool=call)


def plan_call(name: str, arguments: dict[str, Any], *, max_tokens: int, id_prefix: str) -> Output:
    """Plan a call of tool ``name`` with the given ``arguments`` (agent mode), cut as plan_tool_call cuts."""
    text = json.dumps(arguments)
    pieces = tokenizer.pieces(text)
    call = ToolCall(id=id_prefix + uuid.uuid4().hex, name=name, arguments=text)
    if len(pieces) > max_tokens:
        return Output(pieces[:max_tokens], "length", tool=call)
    return Output(pieces, "tool_calls", tool=call)


def plan_said(text: str, *, max_tokens: int) -> Output:
    """Plan the answer ``text`` (agent mode's last word), cut at ``max_tokens``."""
    pieces = tokenizer.pieces(text)
    return Output(pieces[:max_tokens], "length") if len(pieces) > max_tokens else Output(pieces, "stop")


def with_reasoning(out: Output, prompt: str, *, seed: int, tokens: int, max_tokens: int) -> Output:
    """``out`` preceded by ``tokens`` reasoning tokens (deterministic words), the whole within ``max_tokens``:
    reasoning first, so a tight limit cuts the answer ("length"), as a thinking model's is cut."""
    reasoning = tuple(_words(_rng(seed, -1, prompt), min(tokens, max_tokens)))
    room = max_tokens - len(reasoning)
    if len(out.pieces) <= room:
        return Output(out.pieces, out.finish, out.stop_sequence, out.tool, reasoning)
    return Output(out.pieces[:room], "length", None, out.tool, reasoning)


def pick_tool(tools: list[tuple[str, Any]], last_user_text: str, forced: str | None, required: bool) -> int | None:
    """Which of ``tools`` (name, schema) to call, by index, or None for a text answer.

    ``forced`` names a tool the request demands; ``required`` means some tool must be called.
    Otherwise the first tool whose name the last user message mentions (case-insensitive).
    """
    if not tools:
        return None
    if forced is not None:
        return next((i for i, (name, _) in enumerate(tools) if name == forced), None)
    lowered = last_user_text.lower()
    mentioned = next((i for i, (name, _) in enumerate(tools) if name.lower() in lowered), None)
    return 0 if mentioned is None and required else mentioned
