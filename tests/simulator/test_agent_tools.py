"""Agent mode with each real client's tools, as captured from its request (tests/data/agent-tools/, each file says
where it came from): every client's copy and edit tasks get calls whose names and arguments fit the schemas the
client sent, step by step, with the client's own tool results fed back."""

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from engines.simulator.agent import Action, Conversation, content, judged, next_action
from engines.simulator.agent_tools import Tool, tool_of
from engines.simulator.responses_api import agent_tools_of, offered

DATA = Path(__file__).parent.parent / "data/agent-tools"
CONTEXT = "Working directory: /w\n<cwd>/w</cwd>"
SOURCE = "The answer is <<forty two apples>> today."


def tools(name: str) -> list[Tool]:
    raw = json.loads((DATA / name).read_text())["tools"]
    if name.startswith("codex"):  # the Responses API's shape, custom tools and namespaces as the simulator serves them
        return agent_tools_of(offered({"tools": raw}))
    return [tool for tool in map(tool_of, raw) if tool is not None]


def run(task: str, offered_tools: list[Tool], results: list[str]) -> list[Action]:
    """The calls agent mode makes for ``task``, fed ``results`` one by one, and its last word."""
    actions: list[Action] = []
    for done in range(len(results) + 1):
        action = next_action(Conversation(task, CONTEXT, [judged(r) for r in results[:done]], offered_tools))
        assert action is not None
        actions.append(action)
        if action.tool is None:
            break
    return actions


def fits(tool: Tool, arguments: dict[str, Any]) -> None:
    jsonschema.validate(arguments, tool.parameters or {"type": "object"})


CASES: dict[str, dict[str, Any]] = {
    "claude-code-2.1.328.json": {
        "read": ("Read", {"file_path": "/w/source.txt"}),
        "write": ("Write", {"file_path": "/w/answer.txt", "content": "forty two apples"}),
        "edit": ("Edit", {"file_path": "/w/source.txt", "old_string": "forty", "new_string": "fifty"}),
    },
    "opencode-1.18.33.json": {
        "read": ("read", {"filePath": "/w/source.txt"}),
        "write": ("write", {"filePath": "/w/answer.txt", "content": "forty two apples"}),
        "edit": ("edit", {"filePath": "/w/source.txt", "oldString": "forty", "newString": "fifty"}),
    },
    "continue-cli-1.5.47.json": {
        "read": ("Read", {"filepath": "/w/source.txt"}),
        "write": ("Write", {"filepath": "/w/answer.txt", "content": "forty two apples"}),
        "edit": ("Edit", {"file_path": "/w/source.txt", "old_string": "forty", "new_string": "fifty"}),
    },
    "llm-0.36.json": {
        "read": ("read_text", {"filename": "/w/source.txt"}),
        "write": ("write_text", {"filename": "/w/answer.txt", "text": "forty two apples"}),
        "edit": ("write_text", {"filename": "/w/source.txt", "text": "The answer is <<fifty two apples>> today."}),
    },
    "codex-0.169.0.json": {
        "read": ("exec_command", {"cmd": "cat source.txt"}),
        "write": ("exec_command", {"cmd": "printf '%s' 'forty two apples' > answer.txt"}),
        "edit": ("exec_command", {"cmd": "printf '%s' 'The answer is <<fifty two apples>> today.' > source.txt"}),
    },
    "codex-0.169.0-gpt-5.5.json": {
        "read": ("exec_command", {"cmd": "cat source.txt"}),
        "write": (
            "apply_patch",
            {"input": "*** Begin Patch\n*** Add File: answer.txt\n+forty two apples\n*** End Patch\n"},
        ),
        "edit": (
            "apply_patch",
            {
                "input": "*** Begin Patch\n*** Update File: source.txt\n@@\n-The answer is <<forty two apples>> today."
                "\n+The answer is <<fifty two apples>> today.\n*** End Patch\n"
            },
        ),
    },
}


@pytest.mark.parametrize("client", CASES)
def test_each_clients_copy_uses_its_own_tools_with_arguments_that_fit_their_schemas(client: str) -> None:
    offered_tools = tools(client)
    by_name = {tool.name: tool for tool in offered_tools}
    actions = run("copy source.txt to answer.txt", offered_tools, [SOURCE + "\n", "ok"])
    expected = CASES[client]
    assert [(a.tool, a.arguments) for a in actions[:2]] == [expected["read"], expected["write"]]
    for action in actions[:2]:
        assert action.tool is not None and action.arguments is not None
        fits(by_name[action.tool], action.arguments)
    assert actions[2] == Action(text="Done: read source.txt; wrote answer.txt.")


@pytest.mark.parametrize("client", CASES)
def test_each_clients_edit_reads_first_then_edits_with_its_own_tools(client: str) -> None:
    offered_tools = tools(client)
    by_name = {tool.name: tool for tool in offered_tools}
    actions = run("replace 'forty' with 'fifty' in source.txt", offered_tools, [SOURCE, "ok"])
    expected = CASES[client]
    assert (actions[0].tool, actions[0].arguments) == expected["read"]
    assert (actions[1].tool, actions[1].arguments) == expected["edit"]
    assert actions[1].tool is not None and actions[1].arguments is not None
    fits(by_name[actions[1].tool], actions[1].arguments)
    assert actions[2] == Action(text="Done: read source.txt; edited source.txt.")


@pytest.mark.parametrize("client", CASES)
def test_each_clients_failed_read_is_reported_as_a_failure(client: str) -> None:
    actions = run("copy missing.txt to answer.txt", tools(client), ["Error: File not found: /w/missing.txt"])
    assert actions[-1] == Action(text="Failed to read missing.txt: Error: File not found: /w/missing.txt")


def test_tools_outside_the_file_task_are_never_chosen() -> None:
    """Codex's view_image takes a path, Claude Code's Agent a prompt, OpenCode's task a prompt: none is a file tool."""
    file_tools = {"Read", "Write", "Edit", "read", "write", "edit", "read_text", "write_text", "exec_command"}
    for client in CASES:
        for task in ("copy a.txt to b.txt", "replace 'x' with 'y' in a.txt", "read a.png"):
            for action in run(task, tools(client), ["<<x>>", "ok"]):
                assert action.tool in file_tools | {None, "apply_patch"}, (client, action)


def test_an_older_codex_shell_takes_its_command_as_an_argv() -> None:
    shell = Tool(
        "shell",
        {"properties": {"command": {"type": "array", "items": {"type": "string"}}}, "required": ["command"]},
    )
    assert run("read a.txt", [shell], [])[0] == Action("shell", {"command": ["bash", "-lc", "cat a.txt"]})


@pytest.mark.parametrize(
    "result",
    [
        # Codex 0.169's exec output, OpenCode's read, Continue's read (a fresh user's trial: each was written whole)
        "Chunk ID: 91ab3b\nWall time: 0.0000 seconds\nProcess exited with code 0\nOriginal token count: 2\n"
        "Output:\nhello\n",
        "hello\n\n(End of file - total 1 lines)",
        "Content of /tmp/proj/a.txt:\nhello",
        "<file>\n00001| hello\n</file>",
    ],
)
def test_a_read_result_is_the_files_text_without_what_each_agent_puts_around_it(result: str) -> None:
    assert content(result) == "hello"


def test_text_that_only_looks_like_a_head_is_kept() -> None:
    assert content("plain text\nOutput: not a head") == "plain text\nOutput: not a head"
