"""The request log moves to console.observability, which took its table over in its own 0001 migration:
here it leaves the gateway's state only, no table is dropped. Its content type follows it."""

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor


def move_content_type(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    content_type = apps.get_model("contenttypes", "ContentType")
    content_type.objects.filter(app_label="gateway", model="requestlog").update(app_label="observability")


def restore_content_type(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    content_type = apps.get_model("contenttypes", "ContentType")
    content_type.objects.filter(app_label="observability", model="requestlog").update(app_label="gateway")


class Migration(migrations.Migration):
    dependencies = [
        ("gateway", "0002_requestlog_key_in_access"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("observability", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="RequestLog")],
            database_operations=[],
        ),
        migrations.RunPython(move_content_type, restore_content_type),
    ]
