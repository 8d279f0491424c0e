"""Usage: what each API key, member and model used, day by day (UTC): requests, prompt, cached and
completion tokens, errors, and cost once prices exist; a page with CSV export and GET /api/usage. Read
from console.observability's request log.

May import: console.observability, console.deployments, console.access, console.catalog, console.audit
and the shared modules.
"""
