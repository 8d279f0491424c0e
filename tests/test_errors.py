"""Engine errors reshaped into each API's error body."""

import json

from gateway.errors import Surface, reshape


def test_a_fastapi_detail_becomes_the_message() -> None:
    body = json.loads(reshape(404, b'{"detail":"Not Found"}', Surface.OPENAI))
    assert body["error"]["message"] == "The engine serving this model does not offer this endpoint."
    assert body["error"]["type"] == "invalid_request_error"


def test_vllms_error_keeps_its_message_and_param() -> None:
    raw = b'{"error": {"message": "maximum context length is 2048 tokens", "type": "BadRequestError", "code": 400}}'
    error = json.loads(reshape(400, raw, Surface.OPENAI))["error"]
    assert error == {
        "message": "maximum context length is 2048 tokens",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }


def test_a_body_that_is_not_json_is_quoted_and_an_empty_one_explained() -> None:
    assert json.loads(reshape(502, b"Bad Gateway", Surface.ANTHROPIC)) == {
        "type": "error",
        "error": {"type": "api_error", "message": "Bad Gateway"},
    }
    assert json.loads(reshape(500, b"", Surface.OPENAI))["error"]["message"] == "The engine answered HTTP 500."
