"""Agent mode's task grammar, conversation reading and verdicts (engines/simulator/agent.py), as plain data in and
out; the tools of each real client are tried in test_agent_tools.py."""

import json
from typing import Any

from engines.simulator.agent import (
    Action,
    Conversation,
    Result,
    Step,
    from_anthropic,
    from_chat,
    from_responses,
    judged,
    next_action,
    steps,
)
from engines.simulator.agent_tools import Tool

READ = Tool("Read", {"properties": {"file_path": {"type": "string"}}, "required": ["file_path"]})
WRITE = Tool(
    "Write",
    {"properties": {"file_path": {"type": "string"}, "content": {"type": "string"}}, "required": ["file_path"]},
)
SHELL = Tool("exec_command", {"properties": {"cmd": {"type": "string"}}, "required": ["cmd"]})


def test_steps_are_read_in_order_a_copy_is_a_read_then_a_write_and_a_replacement_a_read_then_an_edit() -> None:
    task = 'Please read notes.md, then write "two words" to out/a.txt and copy /src/x.txt to y.txt.'
    assert steps(task) == [
        Step("read", "notes.md"),
        Step("write", "out/a.txt", "two words"),
        Step("read", "/src/x.txt"),
        Step("write", "y.txt"),
    ]
    assert steps("Read the docs and write tests") == []  # no path, no step
    assert steps("WRITE 'x' INTO z.txt") == [Step("write", "z.txt", "x")]
    assert steps("replace 'forty' with \"fifty\" in a.txt") == [
        Step("read", "a.txt"),
        Step("edit", "a.txt", "fifty", "forty"),
    ]


def test_claude_codes_write_gets_an_absolute_path_and_the_copied_text() -> None:
    context = "<cwd>/repo</cwd>"
    action = next_action(
        Conversation("copy in.txt to out.txt", context, [Result("     1\tlead <<the payload>> tail")], [READ, WRITE])
    )
    assert action == Action("Write", {"file_path": "/repo/out.txt", "content": "the payload"})
    unmarked = next_action(
        Conversation("copy in.txt to out.txt", context, [Result("     1\tline one\n     2\tline two")], [WRITE])
    )
    assert unmarked and unmarked.arguments == {"file_path": "/repo/out.txt", "content": "line one\nline two"}


def test_it_answers_done_once_every_step_has_its_result_and_says_when_it_has_no_tool() -> None:
    done = next_action(Conversation("copy a.txt to b.txt", "", [Result("x"), Result("ok")], [READ, WRITE]))
    assert done == Action(text="Done: read a.txt; wrote b.txt.")
    weather = Tool("get_weather", {"properties": {"city": {"type": "string"}}, "required": ["city"]})
    assert next_action(Conversation("read a.txt", "", [], [weather])) == Action(text="I have no tool to read a.txt.")
    assert next_action(Conversation("Hello there", "", [], [READ])) is None  # not an agent task
    assert next_action(Conversation("read a.txt", "", [], [])) is None  # no tools, no whole-file format asked


def test_a_failed_tool_ends_the_task_with_its_reason_not_done() -> None:
    failed = judged("Chunk ID: 1\nWall time: 0.0 seconds\nProcess exited with code 1\nOutput:\ncat: a.txt: No such")
    answer = next_action(Conversation("copy a.txt to b.txt", "", [failed], [SHELL]))
    assert answer == Action(text="Failed to read a.txt: Process exited with code 1")
    written_wrong = next_action(
        Conversation("copy a.txt to b.txt", "", [Result("<<v>>"), judged("Error: EACCES")], [READ, WRITE])
    )
    assert written_wrong == Action(text="Failed to write b.txt: Error: EACCES")


def test_results_are_judged_by_their_head_and_by_the_clients_error_flag() -> None:
    # Each client's words for a failed read of a missing file, as they sent them (2026-12-04, versions in
    # tests/data/agent-tools/): OpenCode, Continue, llm, Codex, Claude Code (with is_error).
    for text in (
        "File not found: /w/missing.txt",
        "Error executing tool Read: File does not exist: /w/missing.txt",
        "Error: [Errno 2] No such file or directory: 'missing.txt'",
        "Chunk ID: 82d983\nWall time: 0.0000 seconds\nProcess exited with code 1\nOriginal token count: 11",
        'Required parameter "filepath" missing for tool "Read"',
    ):
        assert judged(text).failed, text
    assert judged("Something odd happened", is_error=True).failed
    for text in ("Wrote file successfully.", "Process exited with code 0\nOutput:\n", "     1\tThe answer is"):
        assert not judged(text).failed, text
    assert not judged("x" * 500 + "\nError: a file's own text, further down").failed


def test_conversations_are_read_from_each_dialect_with_reminders_beside_the_task() -> None:
    claude = {
        "system": [{"type": "text", "text": "x"}],
        "tools": [
            {"name": "Read", "input_schema": READ.parameters},
            {"name": "Write", "input_schema": WRITE.parameters},
        ],
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
    assert conversation.task == "copy a.txt to b.txt" and conversation.results == [Result("<<v>>")]
    assert conversation.tools == [READ, WRITE]
    assert next_action(conversation) == Action("Write", {"file_path": "/w/b.txt", "content": "v"})
    claude["messages"][-1]["content"][0]["is_error"] = True  # type: ignore[index]
    assert next_action(from_anthropic(claude)) == Action(text="Failed to read a.txt: <<v>>")
    chat = {
        "tools": [{"type": "function", "function": {"name": "Write", "parameters": WRITE.parameters}}],
        "messages": [
            {"role": "system", "content": "Working directory: /w"},
            {"role": "user", "content": [{"type": "text", "text": 'write "v" to b.txt'}]},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "function": {"name": "Write"}}]},
            {"role": "tool", "tool_call_id": "1", "content": "written"},
            {"role": "user", "content": "<system-reminder>note</system-reminder>"},  # a translated reminder
        ],
    }
    assert next_action(from_chat(chat)) == Action(text="Done: wrote b.txt.")
    items: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "input_text", "text": "read a.txt"}]},
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "Process exited with code 2\nOutput:\n"},
    ]
    answer = next_action(from_responses(items, "<cwd>/w</cwd>", [SHELL]))
    assert answer == Action(text="Failed to read a.txt: Process exited with code 2")


def test_the_same_conversation_gets_the_same_call() -> None:
    conversation = Conversation("write 'a\"b' to q.txt", "", [], [SHELL])
    first, second = next_action(conversation), next_action(conversation)
    assert first == second and first is not None and first.arguments
    assert json.loads(json.dumps(first.arguments)) == {"cmd": "printf '%s' 'a\"b' > q.txt"}
