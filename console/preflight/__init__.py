"""Pre-flight: the checks of the box engines are launched from (appliance.doctor runs them), as the worker
sees them, for the Pre-flight page, ``GET /api/doctor`` and ``manage.py doctor``.

May import: appliance, engines, console.deployments and console.catalog (the weights the disk check sizes),
console's shared modules. Nothing of the other console domains.
"""
