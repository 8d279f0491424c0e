"""README.md opens, in one screen, with what Hearth is, its two commands and a first request; the rest lives in
docs/, every file of which README links, and every link between them lands on a file and a heading that exist.
Issue 33, point 7."""

import re

from tests.conftest import ROOT
from tests.docs import doc_files, headings, section

SCREEN = 45  # lines: a terminal or an editor's first screen
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces to ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_the_readme_opens_with_the_two_commands_and_a_first_request_in_one_screen() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert lines[0] == "# Hearth" and lines[2].startswith("Hearth is a self-hosted LLM inference appliance")
    first_block = lines.index("```sh")
    assert lines[first_block + 1].startswith("make up ") and lines[first_block + 2].startswith("make test ")
    assert lines[first_block + 3] == "```"
    request = lines.index("## A first request")
    code_end = next(i for i in range(request, len(lines)) if lines[i] == "```" and "/v1" in "".join(lines[request:i]))
    assert code_end < SCREEN, f"the first request ends on line {code_end + 1}"
    assert 'base_url="http://127.0.0.1:8000/v1"' in "\n".join(lines[request:code_end])


def test_the_readme_links_every_file_in_docs() -> None:
    linked = set(LINK.findall((ROOT / "README.md").read_text()))
    assert {f"docs/{path.name}" for path in (ROOT / "docs").glob("*.md")} <= linked


def test_every_link_between_the_documentation_files_lands_on_a_file_and_heading() -> None:
    broken = []
    for path in doc_files():
        for target in LINK.findall(path.read_text()):
            if target.startswith(("http://", "https://")):
                continue
            file, _, anchor = target.partition("#")
            landing = (path.parent / file).resolve() if file else path
            if not landing.exists():
                broken.append(f"{path.name}: {target}")
            elif anchor and landing.suffix == ".md":
                if anchor not in {slug(title) for _, _, title in headings(landing.read_text())}:
                    broken.append(f"{path.name}: {target} (no such heading)")
    assert broken == []


def test_a_section_is_found_wherever_it_lives_and_only_up_to_its_end() -> None:
    gpu_server = section("On a GPU server")
    assert gpu_server.startswith(": `docker compose up -d`\n") and "## HTTPS" in gpu_server
    assert "cp .env.example .env  # every variable" in gpu_server  # a shell comment is no heading
    assert "## Benchmark" not in section("`make test`")
