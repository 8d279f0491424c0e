"""Deployments: a model served by an engine. Its plan (planning, engine_flags), what an admin asks of it
(admin_actions: create, launch, stop, delete; changes; remedy), and how the worker makes it so (launching,
watching, stopping, reconciling, over lifecycle's steps), with the Celery entry points in tasks and the one
seam that enqueues them, dispatch. Also its pages, forms, API router and ``manage.py plan``; the domains above
it add parts to a deployment's page through page_parts.

May import: engines, appliance, console.weights (a model's weights downloaded before its engine starts),
console.catalog, console.audit (recording an admin's actions), console's shared
modules. Nothing of console.access, console.observability, console.capacity or console.preflight; only tasks
imports the modules it runs.
"""
