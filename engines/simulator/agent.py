"""Agent mode: the simulated model does a small file task with the tools a coding agent offers it.

When a request offers tools and has a task (the last user message whose last text part holds steps: Claude
Code puts its reminders in text parts before the task, and beside tool results), the model calls one tool
per turn, in the steps' order, and once every step has its tool result it answers ``Done: ...`` (finish
``stop``). A tool result that says the tool failed ends the task at once with ``Failed to ...: REASON``, never a
``Done``. Requests without such steps are answered as before (``textgen.pick_tool``). Deterministic: the same
conversation gets the same call. Steps (case-insensitive, anywhere in the task, in order):

- ``read PATH`` — read the file;
- ``write "TEXT" to PATH`` (or single quotes) — write TEXT to the file;
- ``copy SRC to DST`` — read SRC, then write to DST what the read's result holds between ``<<`` and
  ``>>`` (its whole text, line numbers stripped, when it has no such marks);
- ``replace "OLD" with "NEW" in PATH`` — read the file (agents refuse an edit of a file not read), then edit it.

The tools are those the client sent, read by their names and JSON schemas (``agent_tools.py``): a dedicated
file tool first, then a patch tool, then a shell. A relative PATH is made absolute for file tools against the
working directory the agent's prompt names (Codex's ``<cwd>DIR</cwd>``, Claude Code's "Primary working
directory: DIR", OpenCode's and Continue's "Working directory: DIR"); shells and patches run in it. A step no
offered tool can do is answered in words ("I have no tool to ...").

A request without tools whose prompt asks for aider's whole-file format is answered in it (``agent_listing.py``).

A tool result failed when the client marked it so (Anthropic's ``is_error``) or when its head says so, in the
words the clients use: "Error: ...", Claude Code's ``<tool_use_error>``, Codex's "Process exited with code N"
(N > 0), Continue's "Required parameter ... missing", "No such file", "does not exist", "Permission denied".
"""

import json
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

from engines.simulator import agent_listing
from engines.simulator.agent_tools import Edit, Tool, arguments, choose, tool_of

STEP = re.compile(
    r"""\bcopy\s+(?P<src>[^\s"',;]+)\s+to\s+(?P<dst>[^\s"',;]+)"""
    r"""|\bwrite\s+(?P<q>["'])(?P<text>.*?)(?P=q)\s+(?:in)?to\s+(?P<wpath>[^\s"',;]+)"""
    r"""|\breplace\s+(?P<oq>["'])(?P<old>.*?)(?P=oq)\s+with\s+(?P<nq>["'])(?P<new>.*?)(?P=nq)\s+in\s+"""
    r"""(?P<epath>[^\s"',;]+)"""
    r"""|\bread\s+(?P<rpath>[^\s"',;]*[./][^\s"',;]*)""",
    re.IGNORECASE | re.DOTALL,
)
CWD = re.compile(r"<cwd>\s*([^<\s]+)\s*</cwd>|(?:Primary working directory|Working directory):\s*(\S+)")
MARKED = re.compile(r"<<(.*?)>>", re.DOTALL)
LINE_NUMBER = re.compile(r"^\s*\d+(?:\t|→|\| |: )", re.MULTILINE)
WRAPPER = re.compile(r"^\s*</?(?:file|content|path|type)>.*$\n?", re.MULTILINE)
# what agents put around a file's text in a read's result, as seen from their real CLIs: Codex's exec output head
# ("Chunk ID: …", "Process exited with code 0", "Output:"), OpenCode's end note ("(End of file - total 1 lines)"),
# Continue's head ("Content of /path/a.txt:")
EXEC_HEAD = re.compile(r"\AChunk ID:[^\n]*\n(?:[^\n]*\n)*?Output:\n")
END_NOTE = re.compile(r"\n*\(End of file - total \d+ lines?\)\s*\Z")
CONTENT_OF = re.compile(r"\AContent of [^\n]*:\n")
FAILED = re.compile(
    r"^\s*(?:error\b|failed\b|<tool_use_error>)|process exited with code [1-9]|exit code:? [1-9]"
    r"|required parameter .{0,80}missing|no such file|does not exist|permission denied|file not found",
    re.IGNORECASE | re.MULTILINE,
)
HEAD = 400  # characters of a result read for failure words: a file's own text further down is not judged
VERBS = {"read": "read", "write": "wrote", "edit": "edited"}


@dataclass(frozen=True)
class Step:
    """One thing to do: ``kind`` "read", "write" or "edit"; ``text`` the text to write (None for a copy's write,
    whose text is the last read's) or an edit's new text; ``old`` the text an edit replaces."""

    kind: str
    path: str
    text: str | None = None
    old: str = ""


@dataclass(frozen=True)
class Result:
    """A tool result's text and whether the tool failed (see the module's docstring)."""

    text: str
    failed: bool = False


@dataclass(frozen=True)
class Conversation:
    """What agent mode reads of a request, in any dialect: the task, the rest of the prompt's text (for the
    working directory and aider's file listings), the tool results since the task, oldest first, and the
    offered tools."""

    task: str
    context: str
    results: list[Result] = field(default_factory=list)
    tools: list[Tool] = field(default_factory=list)


@dataclass(frozen=True)
class Action:
    """The model's next move: a call (``tool`` and its ``arguments``) or, with ``tool`` None, ``text``."""

    tool: str | None = None
    arguments: dict[str, Any] | None = None
    text: str = ""


def steps(task: str) -> list[Step]:
    """The steps in ``task``, in order (a copy is a read then a write of what was read, a replacement a read
    then an edit)."""
    found: list[Step] = []
    for match in STEP.finditer(task):
        if match["src"]:
            found += [Step("read", _path(match["src"])), Step("write", _path(match["dst"]))]
        elif match["wpath"]:
            found.append(Step("write", _path(match["wpath"]), match["text"]))
        elif match["epath"]:
            path = _path(match["epath"])
            found += [Step("read", path), Step("edit", path, match["new"], match["old"])]
        else:
            found.append(Step("read", _path(match["rpath"])))
    return found


def _path(raw: str) -> str:
    return raw.rstrip(".:)")


def judged(text: str, is_error: bool = False) -> Result:
    """A tool result, failed if the client said so or its head holds a failure's words."""
    return Result(text, is_error or bool(FAILED.search(text[:HEAD])))


def next_action(conversation: Conversation) -> Action | None:
    """The next call or the final answer; None when the task holds no steps (not an agent task), or when no tool
    is offered and the prompt does not ask for aider's whole-file format."""
    todo = steps(conversation.task)
    if not todo:
        return None
    if not conversation.tools:
        listed = agent_listing.answer(todo, conversation.context)
        return None if listed is None else Action(text=listed)
    for step, result in zip(todo, conversation.results, strict=False):
        if result.failed:
            return Action(text=f"Failed to {step.kind} {step.path}: {reason(result.text)}")
    done = len(conversation.results)
    if done >= len(todo):
        return Action(text="Done: " + "; ".join(f"{VERBS[s.kind]} {s.path}" for s in todo) + ".")
    step = todo[done]
    chosen = choose(step.kind, conversation.tools)
    if chosen is None:
        return Action(text=f"I have no tool to {step.kind} {step.path}.")
    tool, way = chosen
    edit = _edit(step, conversation)
    return Action(tool.name, arguments(tool, way, edit))


def _edit(step: Step, conversation: Conversation) -> Edit:
    """What ``step`` asks of a tool, with the text it needs from the read before it."""
    last = conversation.results[-1].text if conversation.results else ""
    path = step.path
    directory = cwd(conversation.context)
    full = posixpath.join(directory, path) if directory and not path.startswith("/") else path
    if step.kind == "edit":
        before = content(last)
        edited = before.replace(step.old, step.text or "")
        return Edit("edit", path, full, edited, step.old, step.text or "", before)
    text = step.text if step.text is not None else (carried(last) if step.kind == "write" else "")
    return Edit(step.kind, path, full, text)


def reason(text: str) -> str:
    """The line of a failed result that says why (the first line when none has a failure's words), shortened."""
    match = FAILED.search(text[:HEAD])
    start = text.rfind("\n", 0, match.start()) + 1 if match else 0
    line = text[start:].strip().split("\n", 1)[0] if text.strip() else "the tool failed"
    return line[:200]


def content(result: str) -> str:
    """A read's result as the file's text: line numbers (``cat -n``, ``00001|``, ``1: ``) and the wrappers
    some agents put around it (``<file>``, ``<content>``, EXEC_HEAD, END_NOTE, CONTENT_OF) stripped."""
    unwrapped = CONTENT_OF.sub("", END_NOTE.sub("", EXEC_HEAD.sub("", result)))
    return LINE_NUMBER.sub("", WRAPPER.sub("", unwrapped)).strip("\n")


def carried(result: str) -> str:
    """What a read's result carries for a copy: the text between ``<<`` and ``>>``, else the file's text."""
    marked = MARKED.search(result)
    return marked[1] if marked else content(result)


def cwd(context: str) -> str | None:
    """The working directory the agent's prompt names, if any."""
    match = CWD.search(context)
    return (match[1] or match[2]).rstrip(".") if match else None


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


def _tools(raw: Any) -> list[Tool]:
    return [tool for tool in map(tool_of, raw if isinstance(raw, list) else []) if tool is not None]


def from_anthropic(body: dict[str, Any]) -> Conversation:
    """The conversation of an Anthropic Messages request."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    task_at = _task_index(messages)
    results = [
        judged(text_of(b.get("content")), b.get("is_error") is True)
        for m in messages[task_at + 1 :]
        if m.get("role") == "user" and isinstance(m.get("content"), list)
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]
    context = [text_of(body.get("system"))] + [text_of(m.get("content")) for m in messages]
    return Conversation(_task(messages, task_at), "\n".join(context), results, _tools(body.get("tools")))


def from_chat(body: dict[str, Any]) -> Conversation:
    """The conversation of an OpenAI chat request."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    task_at = _task_index(messages)
    results = [judged(text_of(m.get("content"))) for m in messages[task_at + 1 :] if m.get("role") == "tool"]
    context = [text_of(m.get("content")) for m in messages]
    return Conversation(_task(messages, task_at), "\n".join(context), results, _tools(body.get("tools")))


def from_responses(items: list[dict[str, Any]], instructions: str, tools: list[Tool]) -> Conversation:
    """The conversation of a Responses request: its input items, instructions and flattened tools."""
    task_at = _task_index(items)
    results = [judged(text_of(i.get("output"))) for i in items[task_at + 1 :] if i.get("type") in RESULT_TYPES]
    context = [instructions] + [text_of(i.get("content")) for i in items]
    return Conversation(_task(items, task_at), "\n".join(context), results, tools)


def _task_index(items: list[dict[str, Any]]) -> int:
    return next((i for i in range(len(items) - 1, -1, -1) if _is_task(items[i])), -1)


def _task(items: list[dict[str, Any]], at: int) -> str:
    return _last_text(items[at].get("content")) if at >= 0 else ""
