"""The console's models move to the domain apps (catalog, deployments, access), which took their tables
over in their own 0001 migrations. Here they leave console's state only: no table is dropped. Their
content types follow them, so permissions granted on them are kept."""

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

MOVED = {"modelsource": "catalog", "deployment": "deployments", "replica": "deployments", "apikey": "access"}


def move_content_types(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    content_type = apps.get_model("contenttypes", "ContentType")
    for model, label in MOVED.items():
        content_type.objects.filter(app_label="console", model=model).update(app_label=label)


def restore_content_types(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    content_type = apps.get_model("contenttypes", "ContentType")
    for model, label in MOVED.items():
        content_type.objects.filter(app_label=label, model=model).update(app_label="console")


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0002_docker_lifecycle"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("catalog", "0001_initial"),
        ("access", "0001_initial"),
        ("deployments", "0001_initial"),
        ("gateway", "0002_requestlog_key_in_access"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(model_name="deployment", name="model"),
                migrations.RemoveField(model_name="replica", name="deployment"),
                migrations.DeleteModel(name="ApiKey"),
                migrations.DeleteModel(name="ModelSource"),
                migrations.DeleteModel(name="Deployment"),
                migrations.DeleteModel(name="Replica"),
            ],
            database_operations=[],
        ),
        migrations.RunPython(move_content_types, restore_content_types),
    ]
