"""The /v1 data path: a lean ASGI app (app; the body it reads and checks: request_body) that authenticates keys
against an in-process snapshot (registry), reserves and settles the key's limits and budgets in Redis (quotas,
reservations; a key without limits is charged in batches at a price the process keeps: charges, prices),
routes to a replica (routing), relays or translates the stream (relay, upstream, sse, translate,
translate_stream), and accounts for it (accounting: Prometheus metrics and console.observability's request
log, each request noted at its start and recorded once at its end through a Redis spool: ledger, finishes,
spool_writer, and by another process when its own died: reaper); answers count_tokens where the engine cannot
count (count_tokens) and a request a wrong base URL sent with the fix (wrong_urls); and the open probes /health
and /ready (probes).

May import: engines, appliance.redis_keys, and of the console only its domain models and shared modules
(the models of console.access, console.deployments and console.observability, console.access.key_format,
console.fanout, console.observability.cost for the Redis key of a deployment's price per token, and
console.observability's request_rows, request_spool and spent for the request log's rows, its spool's keys and
the spending counters' names): never a console page, form, API router or task.
"""
