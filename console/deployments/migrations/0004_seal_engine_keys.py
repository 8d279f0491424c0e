"""Engine keys are stored sealed (console.sealed: Fernet under a key derived from SECRET_KEY), so a database
dump holds none: the column widens to hold the sealed text, then every existing key is sealed in place
(the running engines keep the key they were started with; the gateway reads it back unsealed). Backwards,
the keys are unsealed again with the same SECRET_KEY."""

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

import console.sealed


def seal_keys(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    Replica = apps.get_model("deployments", "Replica")
    for replica in Replica.objects.all():
        replica.save(update_fields=["engine_api_key"])  # the field seals a plaintext value as it writes it


def unseal_keys(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    Replica = apps.get_model("deployments", "Replica")
    update = "UPDATE deployments_replica SET engine_api_key = %s WHERE id = %s"  # past the field, which would seal
    with schema_editor.connection.cursor() as cursor:
        for pk, plain in [(r.pk, r.engine_api_key) for r in Replica.objects.all()]:  # read back unsealed
            cursor.execute(update, [plain, pk])


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0003_agent_support"),
    ]

    operations = [
        migrations.AlterField(
            model_name="replica",
            name="engine_api_key",
            field=console.sealed.SealedCharField(
                help_text="Per-launch secret; only the gateway uses it. Sealed.", max_length=255
            ),
        ),
        migrations.RunPython(seal_keys, unseal_keys),
    ]
