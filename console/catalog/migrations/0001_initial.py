"""Takes over the table console_modelsource that console's migrations made before the console was split into domain
apps: state only, the table and its rows stay as they are (0002 renames it)."""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("console", "0002_docker_lifecycle"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ModelSource",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        (
                            "name",
                            models.CharField(help_text="Letters, digits, '.', '-', '_'.", max_length=100, unique=True),
                        ),
                        (
                            "kind",
                            models.CharField(
                                choices=[("local", "Local folder"), ("hf", "Hugging Face")], max_length=10
                            ),
                        ),
                        ("path", models.CharField(blank=True, help_text="Local folder (kind local).", max_length=500)),
                        ("repo_id", models.CharField(blank=True, max_length=200)),
                        (
                            "revision",
                            models.CharField(blank=True, help_text="Pinned commit sha (kind hf).", max_length=64),
                        ),
                        ("config", models.JSONField(help_text="config.json as read.")),
                        (
                            "weights_bytes",
                            models.BigIntegerField(help_text="Real tensor bytes from the safetensors headers."),
                        ),
                        (
                            "tensor_dtypes",
                            models.JSONField(default=list, help_text="Dtypes the checkpoint actually stores."),
                        ),
                        (
                            "license",
                            models.CharField(blank=True, help_text="From the model card, when known.", max_length=100),
                        ),
                        ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                    ],
                    options={
                        "db_table": "console_modelsource",
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
