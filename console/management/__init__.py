"""The appliance's own management commands, beside the domains' (``manage.py backup`` and ``restore``: one archive
of the whole appliance, console.backup and console.restore; ``manage.py caddyfile``: the HTTPS proxy's configuration).

May import: console.backup and console.restore (the archive, over every domain's tables), console.audit (the
entry each backup and restore leaves), appliance (the Caddy configuration ``manage.py caddyfile`` writes), console's
shared modules.
Nothing else of the console domains.
"""
