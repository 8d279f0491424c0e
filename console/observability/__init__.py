"""Observability: each ready replica's /metrics scraped into Redis and mapped to canonical names
(engines.metrics), the live panel made from them, and the request log the gateway writes (models).

May import: engines, appliance, console.deployments (its models), console's shared modules. Nothing of
console.access or console.catalog beyond what deployments bring.
"""
