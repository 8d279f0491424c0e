"""Parts of a deployment's page that the console domains above deployments supply: observability's live panel
and charts, capacity's link to the capacity check. Each registers its template here when its app starts
(its AppConfig.ready), so the page shows them while deployments imports, links to and includes nothing of
the layers above it (pyproject.toml's contracts; tests/test_layers_stated.py).

A part's template is rendered in place with the page's context (``dep``, ``is_admin``, ...) and may use its
own domain's URLs and templates.
"""

from typing import Literal

# live: the first screen, beside the state (what an operator checks first); links: the line of links under the
# state; history, engine, usage: inside the page's tabs of those names (each tab shows only when a part fills it)
type Slot = Literal["live", "links", "history", "engine", "usage"]
_PARTS: dict[Slot, list[str]] = {"live": [], "links": [], "history": [], "engine": [], "usage": []}


def add(slot: Slot, template: str) -> None:
    """Show ``template`` (a template name) in ``slot`` of every deployment's page, once however often added."""
    if template not in _PARTS[slot]:
        _PARTS[slot].append(template)


def templates() -> dict[Slot, list[str]]:
    """Each slot's templates, in the order they were added."""
    return {slot: list(names) for slot, names in _PARTS.items()}
