"""The alert webhook's URL is stored sealed (console.sealed: Fernet under a key derived from SECRET_KEY), as engine
keys are: a Slack or Mattermost incoming webhook's path is its secret, and a database dump or a backup held it in
clear. The column widens to hold the sealed text (a 2,000-character URL seals to about 2,800), then the one row is
sealed in place. Backwards, it is unsealed again with the same SECRET_KEY and the column narrows back."""

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

import console.sealed


def seal_url(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    Destination = apps.get_model("alerts", "Destination")
    for destination in Destination.objects.exclude(webhook_url=""):
        destination.save(update_fields=["webhook_url"])  # the field seals a plaintext value as it writes it


def unseal_url(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    Destination = apps.get_model("alerts", "Destination")
    update = "UPDATE alerts_destination SET webhook_url = %s WHERE id = %s"  # past the field, which would seal
    with schema_editor.connection.cursor() as cursor:
        for pk, plain in [(d.pk, d.webhook_url) for d in Destination.objects.all()]:  # read back unsealed
            cursor.execute(update, [plain, pk])


class Migration(migrations.Migration):
    dependencies = [
        ("alerts", "0002_budget_subjects_by_id"),
    ]

    operations = [
        migrations.AlterField(
            model_name="destination",
            name="webhook_url",
            field=console.sealed.SealedCharField(blank=True, max_length=3000),
        ),
        migrations.RunPython(seal_url, unseal_url),
    ]
