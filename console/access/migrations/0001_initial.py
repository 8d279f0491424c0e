"""Takes over the table console_apikey that console's migrations made before the console was split into domain
apps: state only, the table and its rows stay as they are (0002 renames it)."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("console", "0002_docker_lifecycle"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ApiKey",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("name", models.CharField(max_length=100)),
                        (
                            "prefix",
                            models.CharField(
                                help_text="Public part, shown in lists and logs.", max_length=20, unique=True
                            ),
                        ),
                        ("key_hash", models.CharField(max_length=64)),
                        ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        ("last_used_at", models.DateTimeField(blank=True, null=True)),
                        ("expires_at", models.DateTimeField(blank=True, help_text="None: never.", null=True)),
                        (
                            "allowed_models",
                            models.JSONField(blank=True, default=list, help_text="Served model names; empty: all."),
                        ),
                        (
                            "max_tokens_cap",
                            models.PositiveIntegerField(
                                blank=True,
                                help_text="Tokens; a request asking for more (or for no limit) is capped to this.",
                                null=True,
                            ),
                        ),
                        (
                            "requests_per_minute",
                            models.PositiveIntegerField(blank=True, help_text="None: unlimited.", null=True),
                        ),
                        (
                            "tokens_per_minute",
                            models.PositiveIntegerField(blank=True, help_text="Prompt + completion tokens.", null=True),
                        ),
                        (
                            "tokens_per_day",
                            models.PositiveIntegerField(
                                blank=True, help_text="Prompt + completion, UTC day.", null=True
                            ),
                        ),
                        (
                            "max_concurrent",
                            models.PositiveIntegerField(blank=True, help_text="Requests at once.", null=True),
                        ),
                        (
                            "created_by",
                            models.ForeignKey(
                                null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL
                            ),
                        ),
                    ],
                    options={
                        "db_table": "console_apikey",
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
