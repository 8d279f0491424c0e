"""Takes over the request log table gateway_requestlog that the gateway app's migrations made before the
request log moved to observability: state only, the table and its rows stay as they are (0002 renames it)."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("access", "0002_rename_table"),
        ("gateway", "0002_requestlog_key_in_access"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="RequestLog",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("created_at", models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                        ("model", models.CharField(max_length=200)),
                        ("surface", models.CharField(help_text="openai or anthropic", max_length=10)),
                        ("endpoint", models.CharField(max_length=50)),
                        ("stream", models.BooleanField(default=False)),
                        ("status", models.PositiveSmallIntegerField()),
                        ("finish_reason", models.CharField(blank=True, max_length=50)),
                        ("prompt_tokens", models.IntegerField(null=True)),
                        ("completion_tokens", models.IntegerField(null=True)),
                        ("cached_tokens", models.IntegerField(null=True)),
                        (
                            "ttft_seconds",
                            models.FloatField(
                                help_text="Until the first generated token reached the client.", null=True
                            ),
                        ),
                        ("duration_seconds", models.FloatField()),
                        (
                            "truncated",
                            models.BooleanField(
                                default=False, help_text="The engine ended the stream without its terminal event."
                            ),
                        ),
                        ("client_cancelled", models.BooleanField(default=False)),
                        (
                            "api_key",
                            models.ForeignKey(
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="requests",
                                to="access.apikey",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "gateway_requestlog",
                        "indexes": [
                            models.Index(fields=["api_key", "created_at"], name="gateway_req_api_key_327713_idx")
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
