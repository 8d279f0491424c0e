"""RequestLog.api_key points at access.ApiKey, the model console.ApiKey became: state only, since the
table it references is the same one."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("access", "0001_initial"),
        ("gateway", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="requestlog",
                    name="api_key",
                    field=models.ForeignKey(
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="requests",
                        to="access.apikey",
                    ),
                ),
            ],
            database_operations=[],
        ),
    ]
