"""count_tokens over the context (gateway.count_tokens): vLLM's own count_tokens refuses a prompt longer than its
context ("This model's maximum context length is 8192 tokens. However, your prompt contains at least 8193 input
tokens", a trial's 18K-token conversation), where a client counts precisely to learn that it is over; the gateway
answers the estimate instead, at least max_model_len + 1. Any other refusal stays the client's."""

import asyncio
import json

from gateway import count_tokens
from gateway.errors import Surface, engine_error

OVER = json.dumps(
    {
        "error": {
            "message": "This model's maximum context length is 8192 tokens. However, your prompt contains at least "
            "8193 input tokens. Please reduce the length of the input prompt.",
            "type": "BadRequestError",
        }
    }
).encode()
REQUEST = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}


def held(status: int, body: bytes) -> count_tokens.HeldAnswer:
    answer = count_tokens.HeldAnswer(8192)

    async def send() -> None:
        await answer({"type": "http.response.start", "status": status, "headers": []})
        await answer({"type": "http.response.body", "body": body})

    asyncio.run(send())
    return answer


def test_an_engines_refusal_of_a_prompt_over_the_context_is_answered_over_it() -> None:
    told = engine_error(400, OVER).body(Surface.ANTHROPIC)  # as gateway.relay hands it to the held answer
    answer = held(400, told)
    assert answer.over_context and answer.at_least == 8193
    assert json.loads(count_tokens.estimated_body(REQUEST, answer.at_least)) == {"input_tokens": 8193}


def test_another_refusal_and_a_count_are_the_engines_own() -> None:
    bad = held(400, engine_error(400, b'{"error": {"message": "messages: Field required"}}').body(Surface.ANTHROPIC))
    counted = held(200, b'{"input_tokens": 12}')
    assert not bad.over_context and not counted.over_context and bad.at_least == counted.at_least == 1
    assert json.loads(count_tokens.estimated_body(REQUEST)) == {"input_tokens": count_tokens.estimate(REQUEST)}
