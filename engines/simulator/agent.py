"""Agent mode: the simulated model does a small file task with the tools a coding agent offers it.

When a request offers tools and has a task (the last user message whose last text part holds steps: Claude
Code puts its reminders in text parts before the task, and beside tool results), the model calls one tool
per turn, in the steps' order, and once every step has its tool result it answers ``Done: ...`` (finish
``stop``). Requests without such steps are answered as before (``textgen.pick_tool``). Deterministic: the
same conversation gets the same call. Steps (case-insensitive, anywhere in the task, in order):

- ``read PATH`` — read the file;
- ``write "TEXT" to PATH`` (or single quotes) — write TEXT to the file;
- ``copy SRC to DST`` — read SRC, then write to DST what the read's result holds between ``<<`` and
  ``>>`` (its whole text, line numbers stripped, when it has no such marks).

Which tool does a step, by name, first match wins (the schemas of Claude Code 2.1 and Codex 0.169, as they
sent them to the simulator; ../shared/FACTS.md "Real coding-agent clients"):

- ``Read`` ``{"file_path": ABSOLUTE}`` and ``Write`` ``{"file_path": ABSOLUTE, "content"}`` (Claude Code);
- ``read_file`` ``{"path"}`` and ``write_file`` ``{"path", "content"}``;
- a shell: ``exec_command`` ``{"cmd": COMMAND}`` (Codex), ``shell_command`` and ``Bash``
  ``{"command": COMMAND}``, ``shell`` ``{"command": ["bash", "-lc", COMMAND]}`` (older Codex), the command
  ``cat PATH`` to read and ``printf '%s' TEXT > PATH`` to write, shell-quoted.

A relative PATH is made absolute for ``Read``/``Write`` against the working directory the agent's prompt
names (Codex's ``<cwd>DIR</cwd>``, Claude Code's "Primary working directory: DIR"); shell tools run in it.
A step no offered tool can do is answered in words ("I have no tool to ..."). Tool results are counted,
not judged: a failed write still counts as done.
"""

import json
import posixpath
import re
import shlex
from dataclasses import dataclass
from typing import Any

STEP = re.compile(
    r"""\bcopy\s+(?P<src>[^\s"',;]+)\s+to\s+(?P<dst>[^\s"',;]+)"""
    r"""|\bwrite\s+(?P<q>["'])(?P<text>.*?)(?P=q)\s+(?:in)?to\s+(?P<wpath>[^\s"',;]+)"""
    r"""|\bread\s+(?P<rpath>[^\s"',;]*[./][^\s"',;]*)""",
    re.IGNORECASE | re.DOTALL,
)
CWD = re.compile(r"<cwd>\s*([^<\s]+)\s*</cwd>|(?:Primary working directory|Working directory):\s*(\S+)")
MARKED = re.compile(r"<<(.*?)>>", re.DOTALL)
LINE_NUMBER = re.compile(r"^\s*\d+(?:\t|→)", re.MULTILINE)
SHELL_TOOLS = ("exec_command", "shell_command", "Bash", "shell")


@dataclass(frozen=True)
class Step:
    """One thing to do: ``kind`` "read" or "write"; ``text`` None for a write whose text is the last read's."""

    kind: str
    path: str
    text: str | None = None


@dataclass(frozen=True)
class Conversation:
    """What agent mode reads of a request, in any dialect: the task, the rest of the prompt's text (for the
    working directory), the tool results since the task, oldest first, and the offered tool names."""

    task: str
    context: str
    results: list[str]
    tools: list[str]


@dataclass(frozen=True)
class Action:
    """The model's next move: a call (``tool`` and its ``arguments``) or, with ``tool`` None, ``text``."""

    tool: str | None = None
    arguments: dict[str, Any] | None = None
    text: str = ""


def steps(task: str) -> list[Step]:
    """The steps in ``task``, in order (a copy is a read then a write of what was read)."""
    found: list[Step] = []
    for match in STEP.finditer(task):
        if match["src"]:
            found += [Step("read", _path(match["src"])), Step("write", _path(match["dst"]))]
        elif match["wpath"]:
            found.append(Step("write", _path(match["wpath"]), match["text"]))
        else:
            found.append(Step("read", _path(match["rpath"])))
    return found


def _path(raw: str) -> str:
    return raw.rstrip(".:)")


def next_action(conversation: Conversation) -> Action | None:
    """The next call or the final answer; None when the task holds no steps (not an agent task)."""
    todo = steps(conversation.task)
    if not todo:
        return None
    done = len(conversation.results)
    if done >= len(todo):
        said = "; ".join(f"{'read' if s.kind == 'read' else 'wrote'} {s.path}" for s in todo)
        return Action(text=f"Done: {said}.")
    step = todo[done]
    tool = next((name for name in _candidates(step.kind) if name in conversation.tools), None)
    if tool is None:
        return Action(text=f"I have no tool to {step.kind} {step.path}.")
    text = step.text
    if step.kind == "write" and text is None:
        text = carried(conversation.results[-1]) if conversation.results else ""
    return Action(tool, _arguments(tool, step, text or "", cwd(conversation.context)))


def _candidates(kind: str) -> tuple[str, ...]:
    own = ("Read", "read_file") if kind == "read" else ("Write", "write_file")
    return (*own, *SHELL_TOOLS)


def carried(result: str) -> str:
    """What a read's result carries for a copy: the text between ``<<`` and ``>>``, else the whole result
    with ``cat -n``-style line numbers stripped."""
    marked = MARKED.search(result)
    return marked[1] if marked else LINE_NUMBER.sub("", result).strip("\n")


def cwd(context: str) -> str | None:
    """The working directory the agent's prompt names, if any."""
    match = CWD.search(context)
    return (match[1] or match[2]).rstrip(".") if match else None


def _arguments(tool: str, step: Step, text: str, directory: str | None) -> dict[str, Any]:
    path = step.path
    if tool in ("Read", "Write") and not path.startswith("/") and directory:
        path = posixpath.join(directory, path)
    if tool == "Read":
        return {"file_path": path}
    if tool == "Write":
        return {"file_path": path, "content": text}
    if tool in ("read_file", "write_file"):
        return {"path": path} if step.kind == "read" else {"path": path, "content": text}
    quoted = shlex.quote(path)
    command = f"cat {quoted}" if step.kind == "read" else f"printf '%s' {shlex.quote(text)} > {quoted}"
    if tool == "exec_command":
        return {"cmd": command}
    if tool == "shell":
        return {"command": ["bash", "-lc", command]}
    return {"command": command}


def text_of(content: Any) -> str:
    """A tool result's or message's content as text: a string, or its text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(text_of(p.get("text", p.get("content"))) for p in content if isinstance(p, dict))
    return "" if content is None else json.dumps(content)


def _last_text(content: Any) -> str:
    """The last text the user typed in a message's content (Claude Code puts reminders before the task)."""
    if isinstance(content, str):
        return content
    texts = [str(p.get("text", "")) for p in content or [] if isinstance(p, dict) and p.get("type") in TEXT_TYPES]
    return texts[-1] if texts else ""


TEXT_TYPES = ("text", "input_text")
RESULT_TYPES = ("tool_result", "function_call_output", "custom_tool_call_output")


def _is_task(item: dict[str, Any]) -> bool:
    """A user message whose last text holds steps (reminders a client adds elsewhere are not tasks)."""
    return item.get("role") == "user" and bool(steps(_last_text(item.get("content"))))


def from_anthropic(body: dict[str, Any]) -> Conversation:
    """The conversation of an Anthropic Messages request."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    task_at = _task_index(messages)
    results = [
        text_of(b.get("content"))
        for m in messages[task_at + 1 :]
        if m.get("role") == "user"
        for b in m.get("content") or []
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]
    context = [text_of(body.get("system"))] + [text_of(m.get("content")) for m in messages]
    tools = [str(t.get("name")) for t in body.get("tools") or [] if isinstance(t, dict)]
    return Conversation(_task(messages, task_at), "\n".join(context), results, tools)


def from_chat(body: dict[str, Any]) -> Conversation:
    """The conversation of an OpenAI chat request."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    task_at = _task_index(messages)
    results = [text_of(m.get("content")) for m in messages[task_at + 1 :] if m.get("role") == "tool"]
    context = [text_of(m.get("content")) for m in messages]
    tools = [
        str(t["function"].get("name"))
        for t in body.get("tools") or []
        if isinstance(t, dict) and isinstance(t.get("function"), dict)
    ]
    return Conversation(_task(messages, task_at), "\n".join(context), results, tools)


def from_responses(items: list[dict[str, Any]], instructions: str, tools: list[str]) -> Conversation:
    """The conversation of a Responses request: its input items, instructions and flattened tool names."""
    task_at = _task_index(items)
    results = [text_of(i.get("output")) for i in items[task_at + 1 :] if i.get("type") in RESULT_TYPES]
    context = [instructions] + [text_of(i.get("content")) for i in items]
    return Conversation(_task(items, task_at), "\n".join(context), results, tools)


def _task_index(items: list[dict[str, Any]]) -> int:
    return next((i for i in range(len(items) - 1, -1, -1) if _is_task(items[i])), -1)


def _task(items: list[dict[str, Any]], at: int) -> str:
    return _last_text(items[at].get("content")) if at >= 0 else ""
