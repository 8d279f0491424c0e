"""A chat-completions request's prompt as a model's chat template renders it, and its size in tokens.

The template is rendered as transformers' ``apply_chat_template`` renders it (transformers
src/transformers/utils/chat_template_utils.py, ``_compile_jinja_template`` and ``render_jinja_template``): jinja2's
ImmutableSandboxedEnvironment with ``trim_blocks`` and ``lstrip_blocks``, the loopcontrols extension, a ``tojson``
filter that keeps non-ASCII text, ``raise_exception`` and ``strftime_now``, and ``messages``, ``tools`` and
``add_generation_prompt=True`` as its variables. A message's list of text parts is joined with newlines first, as
vLLM does for a template that takes string content (vllm/entrypoints/chat_utils.py,
``_parse_chat_message_content_parts``). vLLM and SGLang render a chat request the same way before tokenizing it,
so a template that leaves tool schemas out (SmolLM2's) sends the model only what it renders.

Hearth holds no model's tokenizer, so tokens are estimated from characters: CHARS_PER_TOKEN is below what real
tokenizers give on these prompts (SmolLM2's 49K-token vocabulary: 3.96 to 4.40 characters a token on Claude
Code's and Codex's rendered first requests, measured 2026-12-04; larger vocabularies such as Llama 3's give more),
so the estimate errs on the side of more tokens.
"""

import datetime
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NoReturn

from jinja2 import Template, TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

CHARS_PER_TOKEN = 3.5  # characters of rendered prompt per token, on the low side of real tokenizers (docstring)
# Counted when the model has no chat template at hand (a demo catalog entry): every message's text and every tool's
# JSON schema, as the tool-calling templates of Qwen, Hermes and Llama 3.1 put them in the prompt.
FALLBACK_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n# Tools\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}<|im_end|>\n"
    "{% endif %}{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
Json = dict[str, Any]


@dataclass(frozen=True)
class Prompt:
    """A request's prompt as rendered: its ``text``, its estimated ``tokens``, whether the tool schemas are in it
    (``tools_rendered``), and ``how`` it was counted when not by the model's own chat template, in words ("" when
    by it)."""

    text: str
    tokens: int
    tools_rendered: bool
    how: str


def estimate_tokens(text: str) -> int:
    """Tokens in ``text`` at CHARS_PER_TOKEN characters each, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def render(chat_template: str, messages: list[Json], tools: list[Json]) -> str:
    """``messages`` and ``tools`` (chat-completions shapes) rendered by ``chat_template`` with the generation
    prompt, as transformers would (module docstring). Raises jinja2.TemplateError for a template that does not
    parse, or that refuses the conversation (its ``raise_exception``)."""
    flat = [{**m, "content": _text(m.get("content"))} for m in messages]
    return _compiled(chat_template).render(messages=flat, tools=tools or None, add_generation_prompt=True)


def rendered_prompt(chat_template: str, messages: list[Json], tools: list[Json]) -> Prompt:
    """The prompt ``chat_template`` makes of ``messages`` and ``tools``, and its size; FALLBACK_TEMPLATE's when
    the model has no template ("") or its template fails on them (then ``how`` says why)."""
    how = ""
    template = chat_template
    if not chat_template:
        how = "counted with every tool schema in the prompt, no chat template being at hand"
        template = FALLBACK_TEMPLATE
    try:
        text = render(template, messages, tools)
    except TemplateError as exc:
        how = f"counted with every tool schema in the prompt, the chat template failing on it ({exc})"
        template = FALLBACK_TEMPLATE
        text = render(template, messages, tools)
    tools_rendered = bool(tools) and text != render(template, messages, [])
    return Prompt(text, estimate_tokens(text), tools_rendered, how)


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return "" if content is None else str(content)


@lru_cache(maxsize=16)
def _compiled(chat_template: str) -> Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(chat_template)


def _tojson(
    value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False
) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message: str) -> NoReturn:
    raise TemplateError(message)


def _strftime_now(format: str) -> str:
    return datetime.datetime.now().strftime(format)
