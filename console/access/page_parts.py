"""Parts of an API key's page that the console domains above access supply: observability's link to the key's rows
in the request log. Each registers its template here when its app starts (its AppConfig.ready), so the page shows
them while access imports, links to and includes nothing of the layers above it (pyproject.toml's contracts;
tests/test_layers_stated.py), as console.deployments.page_parts does for a deployment's page.

A part's template is rendered in place with the key page's context (``key``, annotated as
console.access.key_activity.with_activity does) and may use its own domain's URLs.
"""

_LINKS: list[str] = []  # the line of links under the key's facts


def add_link(template: str) -> None:
    """Show ``template`` (a template name) among the links of every key's page, once however often added."""
    if template not in _LINKS:
        _LINKS.append(template)


def links() -> list[str]:
    """The links' templates, in the order they were added."""
    return list(_LINKS)
