"""Agent mode's task grammar and tool table (engines/simulator/agent.py), as plain data in and out."""

import json

import pytest

from engines.simulator.agent import Action, Conversation, Step, from_anthropic, from_chat, next_action, steps


def test_steps_are_read_in_order_and_a_copy_is_a_read_then_a_write() -> None:
    task = 'Please read notes.md, then write "two words" to out/a.txt and copy /src/x.txt to y.txt.'
    assert steps(task) == [
        Step("read", "notes.md"),
        Step("write", "out/a.txt", "two words"),
        Step("read", "/src/x.txt"),
        Step("write", "y.txt"),
    ]
    assert steps("Read the docs and write tests") == []  # no path, no step
    assert steps("WRITE 'x' INTO z.txt") == [Step("write", "z.txt", "x")]


TOOLS = {
    "Read": ({"file_path": "/w/a.txt"}, None),
    "read_file": ({"path": "a.txt"}, None),
    "exec_command": ({"cmd": "cat a.txt"}, {"cmd": "printf '%s' 'hi you' > b.txt"}),
    "shell_command": ({"command": "cat a.txt"}, {"command": "printf '%s' 'hi you' > b.txt"}),
    "shell": ({"command": ["bash", "-lc", "cat a.txt"]}, {"command": ["bash", "-lc", "printf '%s' 'hi you' > b.txt"]}),
}


@pytest.mark.parametrize("tool", TOOLS)
def test_each_agents_tool_gets_arguments_in_its_own_schema(tool: str) -> None:
    read, write = TOOLS[tool]
    context = "Primary working directory: /w"
    assert next_action(Conversation("read a.txt", context, [], [tool, "Other"])) == Action(tool, read)
    if write is not None:
        assert next_action(Conversation('write "hi you" to b.txt', context, [], [tool])) == Action(tool, write)


def test_claude_codes_write_gets_an_absolute_path_and_the_copied_text() -> None:
    context = "<cwd>/repo</cwd>"
    action = next_action(
        Conversation("copy in.txt to out.txt", context, ["     1\tlead <<the payload>> tail"], ["Read", "Write"])
    )
    assert action == Action("Write", {"file_path": "/repo/out.txt", "content": "the payload"})
    unmarked = next_action(
        Conversation("copy in.txt to out.txt", context, ["     1\tline one\n     2\tline two"], ["Write"])
    )
    assert unmarked and unmarked.arguments == {"file_path": "/repo/out.txt", "content": "line one\nline two"}


def test_it_answers_once_every_step_has_its_result_and_says_when_it_has_no_tool() -> None:
    done = next_action(Conversation("copy a.txt to b.txt", "", ["x", "ok"], ["Read", "Write"]))
    assert done == Action(text="Done: read a.txt; wrote b.txt.")
    no_tool = next_action(Conversation("read a.txt", "", [], ["get_weather"]))
    assert no_tool == Action(text="I have no tool to read a.txt.")
    assert next_action(Conversation("Hello there", "", [], ["Read"])) is None  # not an agent task


def test_conversations_are_read_from_each_dialect_with_reminders_beside_the_task() -> None:
    claude = {
        "system": [{"type": "text", "text": "x"}],
        "tools": [{"name": "Read"}, {"name": "Write"}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>read me.txt</system-reminder>"},
                    {"type": "text", "text": "copy a.txt to b.txt"},
                ],
            },
            {"role": "system", "content": "Primary working directory: /w"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "<<v>>"},
                    {"type": "text", "text": "<system-reminder>note</system-reminder>"},
                ],
            },
        ],
    }
    conversation = from_anthropic(claude)
    assert conversation.task == "copy a.txt to b.txt" and conversation.results == ["<<v>>"]
    assert next_action(conversation) == Action("Write", {"file_path": "/w/b.txt", "content": "v"})
    chat = {
        "tools": [{"type": "function", "function": {"name": "Write"}}],
        "messages": [
            {"role": "system", "content": "Working directory: /w"},
            {"role": "user", "content": [{"type": "text", "text": 'write "v" to b.txt'}]},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "function": {"name": "Write"}}]},
            {"role": "tool", "tool_call_id": "1", "content": "written"},
            {"role": "user", "content": "<system-reminder>note</system-reminder>"},  # a translated reminder
        ],
    }
    assert next_action(from_chat(chat)) == Action(text="Done: wrote b.txt.")


def test_the_same_conversation_gets_the_same_call() -> None:
    conversation = Conversation("write 'a\"b' to q.txt", "", [], ["exec_command"])
    first, second = next_action(conversation), next_action(conversation)
    assert first == second and first is not None and first.arguments
    assert json.loads(json.dumps(first.arguments)) == {"cmd": "printf '%s' 'a\"b' > q.txt"}
