"""A deterministic toy tokenizer and a ChatML-style chat template.

One token is a word (with the whitespace before it), one punctuation mark, or a ChatML special token;
joining a text's tokens gives the text back exactly. Token ids are CRC-32 of the token text modulo
the vocabulary size, so they are stable across runs and machines. The same functions count prompts,
answer /tokenize and /v1/messages/count_tokens, so every count a client sees agrees.
"""

import json
import re
import zlib
from typing import Any

VOCAB_SIZE = 49152  # SmolLM2's vocabulary size, for plausible ids
SPECIAL_TOKENS = {"<|im_start|>": 1, "<|im_end|>": 2}
_TOKEN_RE = re.compile(r"\s*(?:<\|im_start\|>|<\|im_end\|>|\w+|[^\w\s])|\s+")


def pieces(text: str) -> list[str]:
    """Split ``text`` into token strings whose concatenation is ``text``."""
    return _TOKEN_RE.findall(text)


def token_id(piece: str) -> int:
    """The id of one token string; special tokens have fixed small ids."""
    stripped = piece.strip()
    if stripped in SPECIAL_TOKENS:
        return SPECIAL_TOKENS[stripped]
    return 3 + zlib.crc32(piece.encode()) % (VOCAB_SIZE - 3)


def encode(text: str) -> list[int]:
    """Token ids of ``text``."""
    return [token_id(p) for p in pieces(text)]


def count(text: str) -> int:
    """Number of tokens in ``text``."""
    return len(pieces(text))


def content_text(content: Any) -> str:
    """Flatten an OpenAI or Anthropic message ``content`` (a string or a list of parts) to text.

    Text parts keep their text; tool calls and tool results become their JSON or text; images become
    a placeholder token.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return json.dumps(content, sort_keys=True)
    out: list[str] = []
    for part in content:
        if not isinstance(part, dict):
            out.append(str(part))
            continue
        kind = part.get("type")
        if kind == "text":
            out.append(str(part.get("text", "")))
        elif kind == "tool_use":
            out.append(json.dumps({"name": part.get("name"), "input": part.get("input")}, sort_keys=True))
        elif kind == "tool_result":
            out.append(content_text(part.get("content")))
        elif kind in ("image", "image_url", "input_image"):
            out.append("<image>")
        else:
            out.append(json.dumps(part, sort_keys=True))
    return "\n".join(out)


def render_chat(messages: list[dict[str, Any]], tools: list[Any] | None = None, system: str | None = None) -> str:
    """Render a conversation with a ChatML template and the generation prompt.

    ``messages`` are dicts with ``role`` and ``content`` (OpenAI or Anthropic shapes); OpenAI
    ``tool_calls`` on assistant messages are rendered as JSON. ``tools`` are rendered into a system
    block so that they count as prompt tokens, as real chat templates do.
    """
    out: list[str] = []
    head = system or ""
    if tools:
        head = (head + "\n\n" if head else "") + "# Tools\n" + json.dumps(tools, sort_keys=True)
    if head:
        out.append(f"<|im_start|>system\n{head}<|im_end|>\n")
    for message in messages:
        text = content_text(message.get("content"))
        calls = message.get("tool_calls")
        if calls:
            text += json.dumps(calls, sort_keys=True)
        out.append(f"<|im_start|>{message.get('role', 'user')}\n{text}<|im_end|>\n")
    out.append("<|im_start|>assistant\n")
    return "".join(out)
