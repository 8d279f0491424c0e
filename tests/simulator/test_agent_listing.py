"""Aider's whole-file format (engines/simulator/agent_listing.py): aider's real request (tests/data/agent-tools/
aider-0.86.2-whole.json, no tools) is answered with file listings in the format its prompt asks for (the path alone
on a line, then the whole text fenced), which tests/test_agents_other_cli.py sees the real aider write."""

import copy
import json
import re
from pathlib import Path
from typing import Any

from engines.simulator.agent import Action, from_chat, next_action

REQUEST: dict[str, Any] = json.loads(
    (Path(__file__).parent.parent / "data/agent-tools/aider-0.86.2-whole.json").read_text()
)["request"]
LISTED = re.compile(r"^(\S+)\n```\n(.*?)```$", re.MULTILINE | re.DOTALL)


def asked(task: str) -> Action | None:
    body = copy.deepcopy(REQUEST)
    last = body["messages"][-1]
    last["content"] = last["content"].replace("copy source.txt to answer.txt", task)
    return next_action(from_chat(body))


def test_aiders_copy_is_answered_with_the_new_files_whole_listing() -> None:
    action = asked("copy source.txt to answer.txt")
    assert action is not None and action.tool is None
    assert LISTED.findall(action.text) == [("answer.txt", "forty two apples\n")]


def test_aiders_edit_lists_the_whole_file_with_the_change() -> None:
    action = asked("replace 'forty' with 'fifty' in source.txt")
    assert action is not None
    assert LISTED.findall(action.text) == [("source.txt", "The answer is <<fifty two apples>> today.\n")]


def test_a_file_not_in_the_chat_is_asked_for_and_nothing_is_listed() -> None:
    action = asked("copy notes.txt to answer.txt")
    assert action == Action(text="I cannot see notes.txt: please add it to the chat.")


def test_without_aiders_format_a_request_without_tools_is_not_an_agent_task() -> None:
    body = {"messages": [{"role": "user", "content": "copy source.txt to answer.txt"}]}
    assert next_action(from_chat(body)) is None
