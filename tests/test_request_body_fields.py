"""The fields the gateway reads in a request body are checked before it reads them (gateway.request_body): a wrong
type, another API's field the engine would drop (a top-level system prompt sent to an OpenAI endpoint), a token limit
no API accepts (negative; 0 outside /v1/completions, where 0 with echo scores a prompt), more than 128 choices, an
Anthropic temperature out of 0-1, or Anthropic's max_tokens missing is the gateway's own 400 naming the field, where
the engine answered with its validator's dump (or, translated for a chat engine, ran to the context's end where
Anthropic's API refuses)."""

import pytest

from gateway.errors import GatewayError
from gateway.request_body import parse_body


@pytest.mark.parametrize(
    ("body", "endpoint", "message"),
    [
        (b'{"max_tokens": -1}', "/v1/messages", "'max_tokens' must be 1 or more; it is -1."),
        (b'{"max_tokens": 0}', "/v1/chat/completions", "'max_tokens' must be 1 or more; it is 0."),
        (b'{"max_completion_tokens": -5}', "/v1/chat/completions", "'max_completion_tokens' must be 1 or more"),
        (b'{"max_tokens": -1}', "/v1/completions", "'max_tokens' must be 0 or more; it is -1."),
        (b'{"max_tokens": "ten"}', "/v1/chat/completions", "'max_tokens' must be an integer."),
        (b'{"max_tokens": true}', "/v1/chat/completions", "'max_tokens' must be an integer."),
        (b'{"stream": "yes"}', "/v1/chat/completions", "'stream' must be true or false."),
        (b'{"messages": "hi"}', "/v1/chat/completions", "'messages' must be an array."),
        (b'{"messages": {"role": "user"}}', "/v1/messages", "'messages' must be an array."),
        (b"[1, 2]", "/v1/chat/completions", "must be a JSON object"),
        (b'{"messages": []}', "/v1/messages", "'max_tokens' is required: the most tokens the answer may have."),
        (b'{"max_tokens": null}', "/v1/messages", "'max_tokens' is required"),
        (b'{"system": "Be brief."}', "/v1/chat/completions", "'system' is not a field of /v1/chat/completions"),
        (b'{"system": "Be brief."}', "/v1/responses", "send the system prompt as 'instructions'."),
        (b'{"system": "Be brief.", "prompt": "Hi"}', "/v1/completions", "so put the system prompt in it."),
        (b'{"messages": "hi"}', "/v1/responses", "'messages' is not a field of /v1/responses, which would ignore it"),
        (b'{"messages": [], "input": "Hi"}', "/v1/responses", "send the conversation as 'input'"),
        (b'{"messages": "hi", "prompt": "Hi"}', "/v1/completions", "'messages' is not a field of /v1/completions"),
        (b'{"n": 1000}', "/v1/chat/completions", "'n' must be at most 128; it is 1,000."),  # a trial's CPU engine
        (b'{"best_of": 129}', "/v1/completions", "'best_of' must be at most 128; it is 129."),
        (b'{"max_tokens": 9, "temperature": 1.5}', "/v1/messages", "'temperature' must be from 0 to 1 (Anthropic's"),
        (b'{"max_tokens": 9, "temperature": -1}', "/v1/messages", "'temperature' must be from 0 to 1"),
    ],
)
def test_a_field_the_gateway_reads_is_refused_by_name(body: bytes, endpoint: str, message: str) -> None:
    with pytest.raises(GatewayError) as refused:
        parse_body(body, endpoint)
    assert refused.value.status == 400 and message in refused.value.message


@pytest.mark.parametrize(
    ("body", "endpoint"),
    [
        (b'{"max_tokens": 0, "echo": true}', "/v1/completions"),
        (b'{"max_tokens": 1}', "/v1/messages"),
        (b'{"messages": []}', "/v1/messages/count_tokens"),  # counting asks for no answer
        (b'{"messages": []}', "/v1/chat/completions"),  # OpenAI's APIs have no required limit
        (b"{}", ""),
        (b'{"system": "Be brief.", "max_tokens": 5}', "/v1/messages"),  # Anthropic's own field
        (b'{"system": null, "messages": []}', "/v1/chat/completions"),  # a client's unset field, sent as null
        (b'{"max_tokens": 9, "temperature": 1}', "/v1/messages"),
        (b'{"temperature": 1.5}', "/v1/chat/completions"),  # OpenAI's range is 0-2
    ],
)
def test_limits_the_apis_accept_pass(body: bytes, endpoint: str) -> None:
    assert isinstance(parse_body(body, endpoint), dict)
