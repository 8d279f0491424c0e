"""``--no-anthropic``: an engine with only the OpenAI chat API (SGLang), and Hearth's translation in front of it.

The translation tests relay as the gateway will: an Anthropic request through ``messages_to_chat`` to the
engine's /v1/chat/completions, its answer back through ``chat_to_message`` or ``ChatStreamToMessages``,
and the official anthropic SDK reading the result (a mock transport hands it the translated bytes).
"""

import json
from typing import Any

import anthropic
import httpx
import httpx2
import pytest

from gateway.translate import chat_to_message, messages_to_chat
from gateway.translate_stream import ChatStreamToMessages
from tests.simulator.simproc import MODEL, Sim, SimFactory

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture(scope="module")
def chat_only(sim_factory: SimFactory) -> Sim:
    return sim_factory("--served-model-name", MODEL, "--no-anthropic")


def test_without_the_anthropic_api_messages_routes_answer_404(chat_only: Sim) -> None:
    body = {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]}
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        resp = httpx.post(chat_only.base + path, json=body, timeout=10)
        assert (resp.status_code, resp.json()) == (404, {"detail": "Not Found"})
    with pytest.raises(anthropic.NotFoundError):
        chat_only.anthropic().messages.create(**body)
    assert chat_only.openai().chat.completions.create(model=MODEL, max_tokens=3, messages=body["messages"]).choices


def relay(sim: Sim, request: dict[str, Any]) -> anthropic.Anthropic:
    """Send ``request`` translated to the engine; an SDK client whose every call gets the translated answer."""
    chat = messages_to_chat(request)
    if request.get("stream"):
        translator = ChatStreamToMessages(request["model"])
        with httpx.stream("POST", sim.base + "/v1/chat/completions", json=chat, timeout=30) as resp:
            assert resp.status_code == 200, resp.read()
            body = b"".join(translator.feed(piece) for piece in resp.iter_raw()) + translator.finish()
        assert translator.complete
        content_type = "text/event-stream"
    else:
        resp = httpx.post(sim.base + "/v1/chat/completions", json=chat, timeout=30)
        assert resp.status_code == 200, resp.text
        body, content_type = json.dumps(chat_to_message(resp.json(), request["model"])).encode(), "application/json"

    def answer(_: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": content_type}, content=body)

    http = httpx2.Client(transport=httpx2.MockTransport(answer))
    return anthropic.Anthropic(api_key="k", base_url="http://gateway.invalid", http_client=http, max_retries=0)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_text_answer_relays_through_translation(chat_only: Sim, stream: bool) -> None:
    request: Any = {"model": MODEL, "max_tokens": 5, "system": [{"type": "text", "text": "Be terse."}]}
    request["messages"] = [{"role": "user", "content": "Say something."}]
    client = relay(chat_only, {**request, "stream": stream})
    if stream:
        with client.messages.stream(**request) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**request)
    assert message.content[0].type == "text" and message.content[0].text
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 5
    assert message.usage.input_tokens > 0 and message.id.startswith("msg_")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_tool_call_and_its_result_relay_through_translation(chat_only: Sim, stream: bool) -> None:
    request: Any = {"model": MODEL, "max_tokens": 200, "tools": [WEATHER_TOOL], "tool_choice": {"type": "any"}}
    request["messages"] = [{"role": "user", "content": "Weather in Paris?"}]
    client = relay(chat_only, {**request, "stream": stream})
    if stream:
        with client.messages.stream(**request) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**request)
    assert message.stop_reason == "tool_use"
    call = message.content[-1]
    assert call.type == "tool_use" and call.name == "get_weather" and isinstance(call.input, dict)
    assert "city" in call.input
    result = {"type": "tool_result", "tool_use_id": call.id, "content": [{"type": "text", "text": "Sunny, 21 °C"}]}
    request["messages"] += [{"role": "assistant", "content": [call.to_dict()]}, {"role": "user", "content": [result]}]
    request["tool_choice"] = {"type": "auto"}
    reply = relay(chat_only, request).messages.create(**request)
    assert reply.content[0].type == "text" and reply.stop_reason in ("end_turn", "max_tokens")
