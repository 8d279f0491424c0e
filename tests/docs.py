"""Hearth's documentation, README.md and the topic files under docs/ it links, read as one: the tests that hold
the code to what the documentation says find a section by its heading, wherever it lives now."""

import re
from pathlib import Path

from tests.conftest import ROOT

HEADING = re.compile(r"^(#{1,6}) (.*)$")
FENCE = "```"


def doc_files() -> list[Path]:
    """README.md first, then docs/*.md by name."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def headings(text: str) -> list[tuple[int, int, str]]:
    """(line index, level, title) of each Markdown heading in ``text``, skipping lines inside fenced code blocks
    (a shell block's ``# comment`` is no heading)."""
    found, in_code = [], False
    for index, line in enumerate(text.splitlines()):
        if line.startswith(FENCE):
            in_code = not in_code
        elif not in_code and (match := HEADING.match(line)):
            found.append((index, len(match[1]), match[2]))
    return found


def section(title: str) -> str:
    """The text of the one section whose heading starts with ``title`` (any level, in any documentation file):
    the rest of its heading line and everything under it up to the next heading of the same or a higher level."""
    found = []
    for path in doc_files():
        text = path.read_text()
        lines, marks = text.splitlines(), headings(text)
        for n, (index, level, heading) in enumerate(marks):
            if heading.startswith(title):
                end = next((i for i, lvl, _ in marks[n + 1 :] if lvl <= level), len(lines))
                found.append("\n".join([heading[len(title) :], *lines[index + 1 : end]]) + "\n")
    assert len(found) == 1, f"{len(found)} sections headed {title!r} in README.md and docs/"
    return found[0]
