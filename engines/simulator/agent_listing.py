"""Aider's whole-file edit format: a request with no tools whose prompt asks for it gets the task done as aider's
*file listings* (aider/coders/wholefile_prompts.py: the file's name alone on a line, then its entire new content
between fences), which aider writes to the files. Aider 0.86 uses this format for a model it does not know.

The files' current text comes from the listings in the prompt (aider sends each file added to the chat as one,
the last listing of a path wins); a step on a file not listed is answered by asking for it, as a model would.
"""

import re
from collections.abc import Sequence
from typing import Protocol

ASKED = "*file listing*"  # aider's wholefile_prompts.py: "You MUST use this *file listing* format"
LISTING = re.compile(r"^([^\s`][^\n]*)\n```[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
MARKED = re.compile(r"<<(.*?)>>", re.DOTALL)


class Step(Protocol):
    """A step of the task, as agent.Step holds it."""

    @property
    def kind(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def text(self) -> str | None: ...
    @property
    def old(self) -> str: ...


def files(context: str) -> dict[str, str]:
    """Path to text of every file listed in ``context``, the last listing of a path winning."""
    return {match[1].strip(): match[2] for match in LISTING.finditer(context)}


def listing(path: str, text: str) -> str:
    """One file listing: the path, then the whole text fenced (a newline before the closing fence)."""
    body = text if not text or text.endswith("\n") else text + "\n"
    return f"{path}\n```\n{body}```\n"


def answer(todo: Sequence[Step], context: str) -> str | None:
    """The answer that does ``todo`` in listings, or None when the prompt does not ask for the format."""
    if ASKED not in context:
        return None
    known = files(context)
    said, last_read = [], ""
    for step in todo:
        if step.kind != "write" and step.path not in known:
            return f"I cannot see {step.path}: please add it to the chat."
        if step.kind == "read":
            text = known[step.path]
            marked = MARKED.search(text)
            last_read = marked[1] if marked else text
            continue
        if step.kind == "edit":
            new = known[step.path].replace(step.old, step.text or "")
        else:
            new = step.text if step.text is not None else last_read
        known[step.path] = new
        said.append(listing(step.path, new))
    if not said:
        return "I read " + ", ".join(s.path for s in todo) + "."
    return "Here is the updated content.\n\n" + "\n".join(said)
