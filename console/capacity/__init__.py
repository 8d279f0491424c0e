"""Capacity checks: load a ready deployment through the gateway with a dedicated key, measure it (TTFT, ITL,
tokens/s, goodput at its SLO, the engine's KV-cache peak and preemptions), keep the run with what ran, hold it
against the plan, compare two runs, and tune one setting at a time through the change flow.

May import: console.deployments (models, changes, dispatch), console.access (keys), console.audit,
console.observability (the scrapes it keeps), console.catalog, engines, appliance (celery_heartbeats: the long
queue's waiting tasks), console's shared modules. Nothing imports it but the shell's urls and api.
"""
