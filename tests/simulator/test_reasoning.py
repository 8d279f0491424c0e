"""A simulator served with ``--reasoning-parser``: reasoning first, in each API's field, counted in the usage;
and Anthropic usage split as vLLM 0.32 reports it (input_tokens the uncached part, cache_read the rest)."""

import pytest

from tests.simulator.simproc import MODEL, Sim, SimFactory, stream_events

PROMPT = [{"role": "user", "content": "Think, then say something."}]


@pytest.fixture(scope="module")
def thinker(sim_factory: SimFactory) -> Sim:
    return sim_factory("--served-model-name", MODEL, "--reasoning-parser", "deepseek_r1")


def test_chat_answers_carry_reasoning_before_content_and_count_it(thinker: Sim) -> None:
    reply = thinker.openai().chat.completions.create(model=MODEL, messages=PROMPT, max_tokens=20)  # type: ignore[arg-type]
    message = reply.choices[0].message
    assert message.content and getattr(message, "reasoning", None)
    assert reply.usage and reply.usage.completion_tokens_details
    assert reply.usage.completion_tokens_details.reasoning_tokens == 8 and reply.usage.completion_tokens > 8
    body = {
        "model": MODEL,
        "messages": PROMPT,
        "max_tokens": 20,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    chunks = [data for _, data in stream_events(thinker, "/v1/chat/completions", body)[:-1]]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert [list(d) for d in deltas[1:9]] == [["reasoning"]] * 8 and "content" in deltas[9]
    assert chunks[0]["usage"]["prompt_tokens"] == reply.usage.prompt_tokens  # continuous usage from the start


def test_messages_start_with_a_signed_thinking_block_and_split_cached_usage(thinker: Sim) -> None:
    claude = thinker.anthropic()
    claude.messages.create(model=MODEL, max_tokens=20, system="x " * 40, messages=PROMPT)  # fills the prefix cache
    message = claude.messages.create(model=MODEL, max_tokens=20, system="x " * 40, messages=PROMPT)
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].signature  # type: ignore[union-attr]
    cached = message.usage.cache_read_input_tokens
    assert cached and cached > 0 and message.usage.input_tokens > 0
    body = {"model": MODEL, "max_tokens": 20, "stream": True, "system": "x " * 40, "messages": PROMPT}
    events = stream_events(thinker, "/v1/messages", body)
    assert events[1][1]["content_block"] == {"type": "thinking", "thinking": ""}
    deltas = [d["delta"]["type"] for n, d in events if n == "content_block_delta" and d["index"] == 0]
    assert deltas == ["thinking_delta"] * 8 + ["signature_delta"]
    start, final = events[0][1]["message"]["usage"], events[-2][1]["usage"]
    assert start["input_tokens"] == final["input_tokens"] + final["cache_read_input_tokens"]
    with claude.messages.stream(model=MODEL, max_tokens=20, messages=PROMPT) as stream:
        assert stream.get_final_message().content[0].type == "thinking"
