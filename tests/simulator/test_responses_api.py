"""/v1/responses through the official openai SDK, and the raw event order vLLM 0.32's simple stream sends."""

import json
from typing import Any

import httpx
import openai
import pytest

from tests.simulator.simproc import MODEL, Sim, SimFactory, stream_events

EXEC: Any = {
    "type": "function",
    "name": "exec_command",
    "description": "Runs a command.",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
}
WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
TEXT_EVENTS = ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
TEXT_DONE = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]


@pytest.fixture(scope="module")
def thinker(sim_factory: SimFactory) -> Sim:
    """A simulator serving as vLLM does with a reasoning parser: every answer starts with 8 reasoning tokens."""
    return sim_factory("--served-model-name", MODEL, "--reasoning-parser", "qwen3", "--max-model-len", "4096")


def collapse(names: list[Any]) -> list[Any]:
    return [n for i, n in enumerate(names) if i == 0 or names[i - 1] != n]


def test_a_response_has_text_status_and_usage(sim: Sim) -> None:
    client = sim.openai()
    whole = client.responses.create(model=MODEL, input="Say something.", max_output_tokens=5)
    assert whole.object == "response" and whole.id.startswith("resp_") and whole.status == "incomplete"
    assert whole.incomplete_details and whole.incomplete_details.reason == "max_output_tokens"
    assert whole.output_text and whole.usage and whole.usage.output_tokens == 5
    assert whole.usage.total_tokens == whole.usage.input_tokens + 5
    natural = client.responses.create(model=MODEL, input="Say something.", instructions="Be brief.")
    assert natural.status == "completed" and [o.type for o in natural.output] == ["message"]
    assert natural.usage and natural.usage.input_tokens > whole.usage.input_tokens  # the instructions count


def test_the_stream_follows_vllms_event_order_with_sequence_numbers(sim: Sim) -> None:
    events = stream_events(
        sim, "/v1/responses", {"model": MODEL, "input": "Stream please", "max_output_tokens": 6, "stream": True}
    )
    names = [name for name, _ in events]
    # cut at max_output_tokens: vLLM (and the simulator) end with response.completed; Hearth's gateway, in front of it
    # in tests/test_conformance_translated.py, says OpenAI's response.incomplete (gateway.responses_chat_stream)
    assert names[-1] in ("response.completed", "response.incomplete")
    assert collapse(names) == [*TEXT_EVENTS, "response.output_text.delta", *TEXT_DONE, names[-1]]
    assert names.count("response.output_text.delta") == 6
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert all(data["type"] == name for name, data in events)
    done = events[-1][1]["response"]
    assert done["status"] == "incomplete" and done["usage"]["output_tokens"] == 6
    assert done["output"][0]["content"][0]["text"] == "".join(d["delta"] for n, d in events if n.endswith("delta"))


def test_the_sdk_stream_helper_builds_the_same_response(sim: Sim) -> None:
    client = sim.openai()
    with client.responses.stream(model=MODEL, input="Tell me a story.") as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    whole = client.responses.create(model=MODEL, input="Tell me a story.")
    assert text == final.output_text == whole.output_text and final.status == "completed"


def test_a_mentioned_tool_is_called_streamed_and_not(sim: Sim) -> None:
    client = sim.openai()
    whole = client.responses.create(model=MODEL, input="Use get_weather for Oslo", tools=[WEATHER])
    call = whole.output[0]
    assert call.type == "function_call" and call.name == "get_weather" and call.call_id.startswith("chatcmpl-tool-")
    assert json.loads(call.arguments)["city"] and call.id.startswith("fc_")
    body = {"model": MODEL, "input": "Use get_weather for Oslo", "tools": [WEATHER], "stream": True}
    events = stream_events(sim, "/v1/responses", body)
    assert collapse([n for n, _ in events]) == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    added = events[2][1]["item"]
    assert added["type"] == "function_call" and added["arguments"] == "" and added["status"] == "in_progress"
    arguments = "".join(d["delta"] for n, d in events if n == "response.function_call_arguments.delta")
    assert json.loads(arguments)["city"] and events[-1][1]["response"]["output"][0]["arguments"] == arguments


def test_reasoning_comes_first_as_a_reasoning_item_and_is_counted(thinker: Sim) -> None:
    whole = thinker.openai().responses.create(model=MODEL, input="Think, then say.", max_output_tokens=20)
    assert [o.type for o in whole.output] == ["reasoning", "message"]
    assert whole.output[0].content and whole.output[0].content[0].text  # type: ignore[union-attr]
    assert whole.usage and whole.usage.output_tokens_details.reasoning_tokens == 8
    events = stream_events(
        thinker, "/v1/responses", {"model": MODEL, "input": "Think, then say.", "stream": True, "max_output_tokens": 20}
    )
    names = collapse([n for n, _ in events])
    assert names[2:6] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
    ]
    assert events[3][1]["part"] == {"text": "", "type": "reasoning_text"}
    assert [n for n, _ in events].count("response.reasoning_text.delta") == 8
    assert names[-2:] == ["response.output_item.done", "response.completed"]


def test_the_context_limit_and_unknown_items_are_refused_in_openais_shape(sim: Sim) -> None:
    with pytest.raises(openai.BadRequestError, match="maximum context length is 4096 tokens"):
        sim.openai().responses.create(model=MODEL, input="word " * 4090, max_output_tokens=100)
    with pytest.raises(openai.BadRequestError, match="Unsupported input item type"):
        sim.openai().responses.create(model=MODEL, input=[{"type": "mystery"}])  # type: ignore[list-item]


def test_without_the_responses_api_the_route_answers_404(sim_factory: SimFactory) -> None:
    plain = sim_factory("--served-model-name", MODEL, "--no-responses")
    resp = httpx.post(plain.base + "/v1/responses", json={"model": MODEL, "input": "Hi"}, timeout=10)
    assert (resp.status_code, resp.json()) == (404, {"detail": "Not Found"})
    assert (
        plain.openai()
        .chat.completions.create(model=MODEL, max_tokens=2, messages=[{"role": "user", "content": "Hi"}])
        .choices
    )


def test_agent_mode_runs_a_copy_task_with_codexs_shell_tool(sim: Sim) -> None:
    """The whole loop Codex runs: a read call, its output, a write call with the read's marked text, an answer."""
    client = sim.openai()
    task: Any = [
        {"role": "user", "content": [{"type": "input_text", "text": "<cwd>/w</cwd>"}]},
        {"role": "user", "content": [{"type": "input_text", "text": "copy a.txt to b.txt"}]},
    ]
    first = client.responses.create(model=MODEL, input=task, tools=[EXEC])
    read = first.output[0]
    assert read.type == "function_call" and json.loads(read.arguments) == {"cmd": "cat a.txt"}
    task += [
        {"type": "function_call", "call_id": read.call_id, "name": read.name, "arguments": read.arguments},
        {"type": "function_call_output", "call_id": read.call_id, "output": "Output:\nsay <<it's 7>> now"},
    ]
    second = client.responses.create(model=MODEL, input=task, tools=[EXEC])
    write = second.output[0]
    assert write.type == "function_call"
    assert json.loads(write.arguments) == {"cmd": "printf '%s' 'it'\"'\"'s 7' > b.txt"}
    task += [
        {"type": "function_call", "call_id": write.call_id, "name": write.name, "arguments": write.arguments},
        {"type": "function_call_output", "call_id": write.call_id, "output": ""},
    ]
    last = client.responses.create(model=MODEL, input=task, tools=[EXEC])
    assert last.output_text == "Done: read a.txt; wrote b.txt." and last.status == "completed"
