"""Observability: each ready replica's /metrics scraped, mapped to canonical names through editable mapping rows
(engines.metrics' defaults seeded as data), kept as history in the database (scraping, history; step_cache keeps
each web process's recent steps); the request log the gateway writes, through a spool in Redis (request_rows,
request_spool), the statistics drawn from it (request_stats, outcomes), and beat's check of the spending
counters against it (charge_check, spent); the panels, dashboard and charts made from both (panel, charts,
views); cost per hour and per million tokens, and the price per token the gateway charges (cost); the GPU strip
from the worker's published inventory (gpu_strip); Hearth's own /metrics, engine side (export).

May import: engines, appliance, console.deployments (its models), console.access (whose keys a member may see:
roles; the keys whose spending is checked), console.audit (recording price, SLO and mapping edits, and spending
counters mended), console's shared modules. Nothing of console.catalog beyond what deployments bring.
``outcomes`` imports nothing of Django: the gateway's accounting uses it.
"""
