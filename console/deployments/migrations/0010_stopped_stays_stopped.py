"""From now on a deployment stopped while its ``desired`` is "serving" is launched again by the worker
(console.deployments.restoring: ``make down`` keeps what was wanted). Before, ``make down`` and a failed recreate
left rows stopped with ``desired`` "serving" that only an admin's Launch brought back, and an admin may have left
them so on purpose: they keep that meaning, ``desired`` "stopped". No column changes; every row stays. Backwards
nothing needs undoing: the earlier Hearth reads ``desired`` of a stopped row only for "stopped_idle".
"""

from typing import Any

from django.db import migrations


def keep_stopped(apps: Any, schema_editor: Any) -> None:
    Deployment = apps.get_model("deployments", "Deployment")
    Deployment.objects.filter(state="stopped", desired="serving").update(desired="stopped")


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0009_idle_policy"),
    ]

    operations = [
        migrations.RunPython(keep_stopped, migrations.RunPython.noop),
    ]
