"""Engine errors reshaped into each API's error body."""

import json

import pytest

from gateway.errors import Surface, engine_error, not_ready, upstream_timeout
from tests.conftest import ROOT


def test_a_fastapi_detail_becomes_the_message() -> None:
    body = json.loads(engine_error(404, b'{"detail":"Not Found"}').body(Surface.OPENAI))
    assert body["error"]["message"] == "The engine serving this model does not offer this endpoint."
    assert body["error"]["type"] == "invalid_request_error"
    named = engine_error(404, b'{"detail":"Not Found"}', "smol", "/v1/embeddings").message
    assert named.startswith("The engine serving 'smol' does not offer /v1/embeddings: its model is not of that kind")


def test_vllms_error_keeps_its_message_and_param() -> None:
    raw = b'{"error": {"message": "maximum context length is 2048 tokens", "type": "BadRequestError", "code": 400}}'
    error = json.loads(engine_error(400, raw).body(Surface.OPENAI))["error"]
    assert error == {
        "message": "maximum context length is 2048 tokens",
        "type": "invalid_request_error",
        "param": None,
        "code": "context_length_exceeded",
    }


# Each engine's words for a prompt over its context (sources in gateway.errors.CONTEXT_LENGTH), in each of
# the body shapes an engine answers with.
CONTEXT_REFUSALS = [
    "This model's maximum context length is 8192 tokens. However, you requested 44308 tokens (12308 in the "
    "messages, 32000 in the completion). Please reduce the length of the messages or completion.",
    "This model's maximum context length is 4096 tokens. However, your request has 5000 input tokens.",
    "The decoder prompt (length 9000) is longer than the maximum model length of 8192.",
    "The input (9000 tokens) is longer than the model's context length (8192 tokens).",
    "the request exceeds the available context size, try increasing it",
]


@pytest.mark.parametrize("message", CONTEXT_REFUSALS)
@pytest.mark.parametrize("shape", ["openai", "fastapi", "plain"])
def test_every_context_length_refusal_gets_context_length_exceeded(message: str, shape: str) -> None:
    raw = {
        "openai": json.dumps({"error": {"message": message, "type": "BadRequestError", "code": 400}}),
        "fastapi": json.dumps({"detail": message}),
        "plain": message,
    }[shape].encode()
    error = json.loads(engine_error(400, raw).body(Surface.OPENAI))["error"]
    assert error["code"] == "context_length_exceeded" and error["message"] == message
    anthropic = json.loads(engine_error(400, raw).body(Surface.ANTHROPIC))["error"]
    assert anthropic == {"type": "invalid_request_error", "message": message}


@pytest.mark.parametrize("message", ["max_tokens must be at least 1, got 0.", "Unknown tool choice", "bad stop"])
def test_other_refusals_carry_no_context_length_code(message: str) -> None:
    raw = json.dumps({"error": {"message": message}}).encode()
    assert json.loads(engine_error(400, raw).body(Surface.OPENAI))["error"]["code"] is None
    assert (
        json.loads(engine_error(500, json.dumps({"detail": CONTEXT_REFUSALS[0]}).encode()).body(Surface.OPENAI))[
            "error"
        ]["code"]
        is None
    )  # a server error is not the client's context


def test_a_body_that_is_not_json_is_quoted_and_an_empty_one_explained() -> None:
    assert json.loads(engine_error(502, b"Bad Gateway").body(Surface.ANTHROPIC)) == {
        "type": "error",
        "error": {"type": "api_error", "message": "Bad Gateway"},
    }
    assert (
        json.loads(engine_error(500, b"").body(Surface.OPENAI))["error"]["message"] == "The engine answered HTTP 500."
    )


# vLLM 0.32's own answers to malformed requests (tests/data: each request and what it answered)
VLLM_REFUSALS = json.loads((ROOT / "tests/data/vllm-0.32.0-cpu-validation-errors.json").read_text())["cases"]
NOT_A_NUMBER = "Input should be a valid number, unable to parse string as a number"
NOT_AN_INTEGER = "Input should be a valid integer, unable to parse string as an integer"


@pytest.mark.parametrize(
    ("case", "message", "param"),
    [
        ("temperature_not_a_number", f"temperature: {NOT_A_NUMBER}", "temperature"),
        ("messages_missing", "messages: Field required", "messages"),
        ("messages_not_a_list", "messages: Input should be a valid list", "messages"),
        ("max_tokens_not_a_number", f"max_tokens: {NOT_AN_INTEGER}", "max_tokens"),
        ("two_errors", f"messages: Field required; temperature: {NOT_A_NUMBER}", "messages"),
        ("temperature_negative", "temperature must be non-negative, got -1.0.", "temperature"),
        ("top_p_zero", "top_p must be in (0, 1], got 0.0.", "top_p"),
        ("presence_penalty_3", "presence_penalty must be in [-2, 2], got 3.0.", None),
        ("n_zero", "n must be at least 1, got 0.", None),
    ],
)  # fmt: skip
def test_vllms_validation_errors_read_as_one_sentence_a_field_named_as_the_client_wrote_it(
    case: str, message: str, param: str | None
) -> None:
    answered = VLLM_REFUSALS[case]
    error = json.loads(engine_error(answered["status"], json.dumps(answered["body"]).encode()).body(Surface.OPENAI))
    assert (error["error"]["message"], error["error"]["param"]) == (message, param)


VLLM_UNION_REFUSALS = json.loads((ROOT / "tests/data/vllm-0.32.0-cpu-union-errors.json").read_text())["cases"]
NOT_A_STRING = "Input should be a valid string"


@pytest.mark.parametrize(
    ("case", "message", "param"),
    [
        ("content_null", f"messages.0.content: {NOT_A_STRING}, or Input should be iterable", "messages.0.content"),
        ("message_not_an_object", "messages.0: Input should be a valid dictionary", "messages.0"),
        ("content_part_without_text", "0.text: Field required", None),  # a part's place, not a request field
        ("completions_prompt_a_number", f"prompt: Input should be a valid list, or {NOT_A_STRING}", "prompt"),
        ("tool_choice_a_number", "When using `tool_choice`, `tools` must be set.", "tool_choice"),
        ("completions_prompt_missing", "Either prompt or prompt_embeds must be provided and non-empty.", "prompt"),
    ],
)  # fmt: skip
def test_vllms_errors_for_a_field_of_several_shapes_are_said_once_for_the_shape_the_client_meant(
    case: str, message: str, param: str | None
) -> None:
    """A user message with a null content: vLLM's 19 errors (each message shape's, ten shown and "...and 9 more
    errors") read as the one field's two; the shapes whose ``role`` or ``type`` differs are left out."""
    answered = VLLM_UNION_REFUSALS[case]
    error = json.loads(engine_error(answered["status"], json.dumps(answered["body"]).encode()).body(Surface.OPENAI))
    assert (error["error"]["message"], error["error"]["param"]) == (message, param)


def test_a_dump_that_is_not_vllms_shape_is_passed_on_as_it_came() -> None:
    raw = json.dumps({"error": {"message": "1 validation error:\n  not a dict at all", "param": "body.x"}})
    error = json.loads(engine_error(400, raw.encode()).body(Surface.OPENAI))["error"]
    assert error["message"] == "1 validation error:\n  not a dict at all" and error["param"] == "x"


def test_a_silent_engines_504_says_how_an_answer_not_streamed_can_come_sooner() -> None:
    """A fresh user's trial: a non-streamed answer of 8,161 tokens generating at 6 tokens/s was cut at 600 s as an
    engine that "went silent"; it was working, and sends nothing until the whole answer is done."""
    timeout = upstream_timeout("smol")
    assert timeout.status == 504 and timeout.code == "upstream_timeout"
    assert timeout.message.startswith(
        "The engine serving 'smol' sent nothing for longer than HEARTH_STREAM_IDLE_TIMEOUT"
    )
    assert timeout.message.endswith("so stream it or ask for fewer max_tokens).")


def test_a_launch_waiting_for_room_says_so_without_naming_the_deployments_put_aside() -> None:
    """A trial's request got "its deployment is pending" while it waited for room; the room's own words name other
    deployments, which a key limited to some models may not learn of."""
    waiting = not_ready("big", "pending", 10, "Waiting for room: To fit big (73.2 GiB …) put secret to sleep.")
    assert waiting.message == (
        "The model 'big' has no ready replica (its deployment is pending). It waits for room on the GPUs: idle "
        "deployments are put aside for it first. Retry in 10 s."
    )
    assert not_ready("big", "pending", 10, "Waiting for a worker.").message.endswith("is pending). Retry in 10 s.")


def test_an_engine_that_cannot_build_its_own_answer_is_its_502_not_the_clients_400() -> None:
    """vLLM 0.32.0's /v1/messages, not streamed, a tool call whose arguments the model wrote as a string (a trial's
    "gabenwelter"): its AnthropicContentBlock refuses them and the engine answers 400, which read "input: Input
    should be a valid dictionary" as the client's invalid request, logged as a refusal."""
    raw = {
        "error": {
            "message": "1 validation error for AnthropicContentBlock\ninput\n  Input should be a valid dictionary "
            "[type=dict_type, input_value='gabenwelter', input_type=str]\n    For further information visit "
            "https://errors.pydantic.dev/2.14/v/dict_type",
            "type": "BadRequestError",
            "code": 400,
        }
    }
    error = engine_error(400, json.dumps(raw).encode(), "smol")
    assert (error.status, error.code) == (502, "engine_answer_invalid")
    body = json.loads(error.body(Surface.ANTHROPIC))["error"]
    assert body["type"] == "api_error" and body["message"].startswith(
        "The engine serving 'smol' could not build its answer from what the model wrote (AnthropicContentBlock: "
        "input: Input should be a valid dictionary); the request was valid."
    )
    request_side = json.dumps({"error": {"message": raw["error"]["message"].replace("AnthropicContentBlock", "X")}})
    assert engine_error(400, request_side.encode()).status == 400  # a request's own refusal stays the client's


def test_a_thinking_budget_on_an_engine_without_a_reasoning_parser_says_what_the_client_can_do() -> None:
    """vLLM's words name its own launch flag, which a client cannot set (a trial's Anthropic client with thinking)."""
    raw = {
        "error": {
            "message": "thinking_token_budget is set but reasoning_config is not configured. Please set "
            "--reasoning-parser to use thinking_token_budget.",
            "type": "BadRequestError",
        }
    }
    error = json.loads(engine_error(400, json.dumps(raw).encode()).body(Surface.ANTHROPIC))["error"]
    assert error["type"] == "invalid_request_error" and error["message"].startswith(
        "This deployment's engine runs without a reasoning parser, so it takes no thinking budget"
    )
