"""The /v1 data path: a lean ASGI app (app) that authenticates keys against an in-process snapshot
(registry), applies quotas (quotas), routes to a replica (routing), relays or translates the stream
(relay, upstream, sse, translate, translate_stream), and accounts for it (accounting, models).

May import: engines, and of the console only its domain models and shared modules (console.access's
models and key_format, console.deployments' models, console.fanout): never a console page, form, API
router or task.
"""
