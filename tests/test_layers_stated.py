"""Each console domain's docstring says what it may import ("May import: ..."), and its code imports nothing
more; and each domain's templates use only the URLs and template tags of the domains it may import."""

import ast
import re

import pytest

from tests.conftest import ROOT

CONSOLE = ROOT / "console"
SHARED = {"context", "fanout", "names", "errors", "error_pages", "sealed", "spreadsheet", "api_bodies", "templatetags"}
DOMAINS = sorted(p.parent.name for p in CONSOLE.glob("*/__init__.py") if p.parent.name not in SHARED | {"migrations"})
NAMED = re.compile(r"\b(console\.[a-z_]+|engines|appliance|gateway)\b")


def stated(domain: str) -> set[str]:
    """The packages a domain's docstring lets it import: the names between "May import:" and "Nothing"."""
    doc = ast.get_docstring(ast.parse((CONSOLE / domain / "__init__.py").read_text())) or ""
    assert "May import:" in doc, f"console.{domain}'s docstring says nothing of what it may import"
    allowed = doc.split("May import:", 1)[1].split("Nothing", 1)[0]
    return {name for name in NAMED.findall(allowed) if name.split(".")[-1] not in SHARED}


def imported(domain: str) -> dict[str, str]:
    """The other domains and top-level packages a domain's code imports, each with one file that does."""
    found: dict[str, str] = {}
    for path in (CONSOLE / domain).rglob("*.py"):
        if "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            for name in names:
                parts = name.split(".")
                if parts[0] == "console" and len(parts) > 1 and parts[1] not in SHARED | {domain}:
                    found.setdefault(f"console.{parts[1]}", str(path.relative_to(ROOT)))
                elif parts[0] in ("engines", "appliance", "gateway"):
                    found.setdefault(parts[0], str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("domain", DOMAINS)
def test_a_domain_imports_only_what_its_docstring_says(domain: str) -> None:
    beyond = {name: where for name, where in imported(domain).items() if name not in stated(domain)}
    assert not beyond, f"console.{domain} imports what its docstring does not allow: {beyond}"


URL_NAME = re.compile(r"{%\s*url\s+['\"]([a-z_]+):")
LOADED = re.compile(r"{%\s*load\s+([^%]+)%}")
INCLUDED = re.compile(r"{%\s*(?:include|extends)\s+['\"]([a-z_]+)/")  # a template of a domain's folder
# Each template tag library and the domain that owns it ("" for the shared ones and Django's own).
TAG_LIBRARIES = {"humanize": "", "static": ""} | {
    path.stem: "" if path.parent.parent == CONSOLE else path.parent.parent.name
    for path in CONSOLE.glob("**/templatetags/*.py")
    if path.stem != "__init__"
}


@pytest.mark.parametrize("domain", DOMAINS)
def test_a_domains_templates_use_only_the_urls_templates_and_tags_of_domains_it_may_import(domain: str) -> None:
    allowed = {name.split(".")[-1] for name in stated(domain) if name.startswith("console.")} | {domain}
    for template in (CONSOLE / domain / "templates").rglob("*.html"):
        text = template.read_text()
        linked = set(URL_NAME.findall(text)) - allowed
        assert not linked, f"{template.relative_to(ROOT)} links to {sorted(linked)}, beyond console.{domain}'s layer"
        included = set(INCLUDED.findall(text)) - allowed
        assert not included, f"{template.relative_to(ROOT)} includes templates of {sorted(included)}"
        loaded = {lib for found in LOADED.findall(text) for lib in found.split()}
        beyond = {lib for lib in loaded if TAG_LIBRARIES.get(lib, "?") not in allowed | {""}}
        assert not beyond, f"{template.relative_to(ROOT)} loads tag libraries {sorted(beyond)} beyond its layer"
