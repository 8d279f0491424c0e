"""Which of the tools a client sent does a file step, and the arguments its JSON schema asks for.

A tool is read as the client sent it (name and JSON-schema parameters, in OpenAI's, Anthropic's or the Responses
API's shape), never looked up in a table of known clients. Each parameter plays a role, by its name with case and
underscores ignored (``file_path``, ``filePath`` and ``filepath`` are one): the file's path, the text to write,
the text to replace and its replacement, a shell command, a patch. A tool is usable only when every parameter
its schema requires has a role; its name's words then say what it does:

- a shell (a required ``command``/``cmd``, a string or, as older Codex's ``shell``, an array of strings run as
  ``["bash", "-lc", COMMAND]``) reads with ``cat``, writes with ``printf``, edits by writing the edited text;
- a patch tool (``apply_patch`` with an ``input``: Codex's, freeform or a function) adds or updates files in
  Codex's patch format (codex-rs/apply-patch/apply_patch_tool_instructions.md);
- a file tool with a path: an edit (``edit``, ``replace``) with the old and new text, a write (``write``,
  ``create``, ``save``) with the text, a read (``read``, ``view``, ``cat``, ``open``, ``load``) with the path
  alone; names that speak of images, folders, searches or URLs are not file tools.

Seen in captured requests (tests/data/agent-tools/): Claude Code's ``Read``/``Write``/``Edit`` ``file_path``,
OpenCode's ``read``/``write``/``edit`` ``filePath``/``oldString``, Continue's ``Read``/``Write`` ``filepath`` and
``Edit`` ``file_path``, Codex's ``exec_command`` ``cmd`` and ``apply_patch``, llm's Python functions.
"""

import re
import shlex
from dataclasses import dataclass
from typing import Any

ROLES = {
    "path": ("filepath", "path", "filename", "file", "targetfile", "absolutepath", "targetpath"),
    "content": ("content", "contents", "text", "filetext", "data", "newcontent"),
    "old": ("oldstring", "oldstr", "oldtext"),
    "new": ("newstring", "newstr", "newtext"),
    "command": ("command", "cmd"),
    "patch": ("input", "patch"),
}
READ_WORDS = {"read", "view", "cat", "open", "load"}
WRITE_WORDS = {"write", "create", "save"}
EDIT_WORDS = {"edit", "replace"}
SHELL_WORDS = {"bash", "shell", "exec", "command", "run", "terminal", "sh"}
NOT_FILES = {"image", "dir", "directory", "list", "glob", "grep", "search", "url", "web", "notebook", "resource"}
# What each step's kind may be done with, best first: a file tool of its own kind, then the others.
WAYS = {
    "read": ("read", "shell"),
    "write": ("write", "patch", "shell"),
    "edit": ("edit", "write", "patch", "shell"),
}


@dataclass(frozen=True)
class Tool:
    """A tool as the client offered it: its name and the JSON schema of its parameters ({} when none)."""

    name: str
    parameters: dict[str, Any]

    def properties(self) -> dict[str, Any]:
        props = self.parameters.get("properties")
        return props if isinstance(props, dict) else {}

    def required(self) -> list[str]:
        required = self.parameters.get("required")
        return [str(r) for r in required] if isinstance(required, list) else []


@dataclass(frozen=True)
class Edit:
    """What a step asks of a tool: its ``kind`` ("read", "write" or "edit"), the path as the task gave it, the
    path made absolute (``full_path``, the same when no working directory is known), the text to write (for an
    edit: the whole edited text, for tools that rewrite the file), and an edit's ``old`` and ``new`` text and the
    file's text ``before`` it (as the read before it returned it)."""

    kind: str
    path: str
    full_path: str
    text: str = ""
    old: str = ""
    new: str = ""
    before: str = ""


def tool_of(raw: Any) -> Tool | None:
    """A tool in any of the three shapes: OpenAI chat (``{"type": "function", "function": {"name", "parameters"}}``),
    Anthropic (``{"name", "input_schema"}``) or Responses (``{"name", "parameters"}``); None when it has no name."""
    if not isinstance(raw, dict):
        return None
    spec = raw["function"] if isinstance(raw.get("function"), dict) else raw
    name = spec.get("name")
    if not name:
        return None
    schema = spec.get("parameters", spec.get("input_schema"))
    return Tool(str(name), schema if isinstance(schema, dict) else {})


def _key(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


def roles(tool: Tool) -> dict[str, str] | None:
    """Role to parameter name for ``tool``; None when a required parameter has no role (the tool is not usable)."""
    found: dict[str, str] = {}
    for name in tool.properties():
        role = next((r for r, names in ROLES.items() if _key(name) in names), None)
        if role is not None and role not in found:
            found[role] = name
    if any(name not in found.values() for name in tool.required()):
        return None
    return found


def words(name: str) -> set[str]:
    """The words of a tool's name: ``apply_patch``, ``readFile`` and ``Read`` split and lowercased."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return {w.lower() for w in re.split(r"[^A-Za-z0-9]+", spaced) if w}


def ways(tool: Tool) -> set[str]:
    """How ``tool`` can serve a file step: any of "read", "write", "edit", "patch", "shell"."""
    found = roles(tool)
    if found is None:
        return set()
    named = words(tool.name)
    can: set[str] = set()
    if "command" in found and (named & SHELL_WORDS or _is_array(tool, found["command"])):
        can.add("shell")
    if "patch" in found and "patch" in named:
        can.add("patch")
    if "path" in found and not named & NOT_FILES:
        if named & EDIT_WORDS and {"old", "new"} <= found.keys():
            can.add("edit")
        if named & WRITE_WORDS and "content" in found:
            can.add("write")
        if named & READ_WORDS and "content" not in found:
            can.add("read")
    return can


def choose(kind: str, tools: list[Tool]) -> tuple[Tool, str] | None:
    """The offered tool for a step of ``kind`` and the way it serves it, best way first, then first offered."""
    offered = [(tool, ways(tool)) for tool in tools]
    for way in WAYS[kind]:
        found = next((tool for tool, can in offered if way in can), None)
        if found is not None:
            return found, way
    return None


def _is_array(tool: Tool, name: str) -> bool:
    spec = tool.properties().get(name)
    return isinstance(spec, dict) and spec.get("type") == "array"


def arguments(tool: Tool, way: str, edit: Edit) -> dict[str, Any]:
    """The call's arguments for ``edit`` done ``way`` with ``tool``, under the parameter names its schema uses.
    File tools get the absolute path; shells and patches the path as given (they run in the working directory)."""
    found = roles(tool) or {}
    if way == "shell":
        command = _command(edit)
        key = found["command"]
        return {key: ["bash", "-lc", command] if _is_array(tool, key) else command}
    if way == "patch":
        return {found["patch"]: patch(edit)}
    args: dict[str, Any] = {found["path"]: edit.full_path}
    if way == "edit":
        args |= {found["old"]: edit.old, found["new"]: edit.new}
    elif way == "write":
        args[found["content"]] = edit.text
    return args


def _command(edit: Edit) -> str:
    quoted = shlex.quote(edit.path)
    if edit.kind == "read":
        return f"cat {quoted}"
    return f"printf '%s' {shlex.quote(edit.text)} > {quoted}"


def patch(edit: Edit) -> str:
    """Codex's patch for a write (``*** Add File``, which replaces a file that exists) or an edit (``*** Update
    File`` with one hunk per line that holds the old text; the old text as a line when none does)."""
    if edit.kind == "write":
        body = "".join(f"+{line}\n" for line in edit.text.split("\n"))
        return f"*** Begin Patch\n*** Add File: {edit.path}\n{body}*** End Patch\n"
    lines = [line for line in edit.before.split("\n") if edit.old and edit.old in line] or [edit.old]
    hunks = "".join(f"@@\n-{line}\n+{line.replace(edit.old, edit.new)}\n" for line in lines)
    return f"*** Begin Patch\n*** Update File: {edit.path}\n{hunks}*** End Patch\n"
