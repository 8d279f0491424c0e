"""The web console and its JSON API, one Django app per domain:

- ``console.catalog``: model sources and the facts read from their checkpoints;
- ``console.deployments``: plans, deployments, their replicas and their lifecycle on the runtimes;
- ``console.access``: sign-in, the first admin, API keys;
- ``console.observability``: metric scrapes and the live panels;
- ``console.preflight``: the checks of the box engines are launched from;
- ``console.audit``: who did what, when and from where;
- ``console.usage``: what each key, member and model used, day by day.

Layers, top to bottom (import-linter checks them, see pyproject.toml): the shell's ``urls`` and ``api``
assemble every domain; ``usage`` may import those below it; ``observability`` and ``preflight`` may import
``deployments``; ``deployments`` may import ``catalog``; ``catalog`` and ``access`` are independent;
every domain may import ``audit`` and the shared modules here (``errors``, ``names``, ``fanout``,
``sealed``, ``spreadsheet``). The console never imports ``gateway``.
"""
