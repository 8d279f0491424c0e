"""The /v1 data path: a lean ASGI app (app; the body it reads and checks: request_body) that authenticates keys
against an in-process snapshot (registry), reserves and settles the key's limits and budgets in Redis (quotas,
reservations; a key without limits is charged in batches at a price the process keeps: charges, prices),
routes to a replica (routing), relays or translates the stream (relay, upstream, sse, translate,
translate_stream), and accounts for it (accounting: Prometheus metrics and console.observability's request
log); and the open probes /health and /ready (probes).

May import: engines, appliance.redis_keys, and of the console only its domain models and shared modules
(the models of console.access, console.deployments and console.observability, console.access.key_format,
console.fanout, and console.observability.cost for the Redis key of a deployment's price per token): never
a console page, form, API router or task.
"""
