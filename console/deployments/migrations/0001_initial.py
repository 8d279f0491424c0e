"""Takes over the tables console_deployment and console_replica that console's migrations made before the console was split into domain
apps: state only, the tables and its rows stay as they are (0002 renames them)."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("console", "0002_docker_lifecycle"),
        ("catalog", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Deployment",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("name", models.CharField(help_text="Default served model name.", max_length=100, unique=True)),
                        ("engine", models.CharField(max_length=20)),
                        ("served_model_name", models.CharField(max_length=200, unique=True)),
                        (
                            "max_model_len",
                            models.PositiveIntegerField(help_text="Tokens; 0 = the model's own maximum."),
                        ),
                        ("kv_space_gib", models.FloatField(help_text="KV cache budget in GiB (vLLM CPU).")),
                        (
                            "extra_args",
                            models.JSONField(blank=True, default=list, help_text="Engine flags the admin added."),
                        ),
                        (
                            "engine_env",
                            models.JSONField(blank=True, default=dict, help_text="Environment added to the engine's."),
                        ),
                        (
                            "replica_count",
                            models.PositiveSmallIntegerField(
                                default=1, help_text="Engines serving this model at once."
                            ),
                        ),
                        (
                            "max_tokens_cap",
                            models.PositiveIntegerField(
                                blank=True,
                                help_text="Tokens a request may generate here, whatever it asks; None: no cap.",
                                null=True,
                            ),
                        ),
                        ("plan", models.JSONField(help_text="The SizingPlan this deployment was launched with.")),
                        (
                            "state",
                            models.CharField(
                                choices=[
                                    ("pending", "Pending"),
                                    ("pulling", "Pulling"),
                                    ("starting", "Starting"),
                                    ("loading", "Loading"),
                                    ("ready", "Ready"),
                                    ("failed", "Failed"),
                                    ("stopping", "Stopping"),
                                    ("stopped", "Stopped"),
                                ],
                                default="pending",
                                max_length=10,
                            ),
                        ),
                        ("state_reason", models.TextField(blank=True)),
                        (
                            "engine_version",
                            models.CharField(blank=True, help_text="As the running engine reports it.", max_length=50),
                        ),
                        (
                            "engine_image",
                            models.CharField(
                                blank=True, help_text="The image pinned by digest at launch.", max_length=300
                            ),
                        ),
                        (
                            "engine_image_ref",
                            models.CharField(
                                blank=True,
                                help_text="The configured image the pin came from; its tag names the version.",
                                max_length=300,
                            ),
                        ),
                        (
                            "gpu_model",
                            models.CharField(blank=True, help_text="The GPUs it was launched on.", max_length=100),
                        ),
                        ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                        (
                            "model",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="deployments",
                                to="catalog.modelsource",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "console_deployment",
                    },
                ),
                migrations.CreateModel(
                    name="Replica",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("runtime", models.CharField(max_length=10)),
                        (
                            "runtime_name",
                            models.CharField(blank=True, help_text="Process or container name.", max_length=100),
                        ),
                        ("handle", models.CharField(blank=True, help_text="pid or container id.", max_length=100)),
                        ("host", models.CharField(max_length=100)),
                        ("port", models.PositiveIntegerField()),
                        (
                            "engine_api_key",
                            models.CharField(help_text="Per-launch secret; only the gateway uses it.", max_length=100),
                        ),
                        ("running", models.BooleanField(default=False)),
                        ("exit_code", models.IntegerField(blank=True, null=True)),
                        ("oom_killed", models.BooleanField(default=False)),
                        ("log_tail", models.TextField(blank=True)),
                        (
                            "restarts",
                            models.PositiveIntegerField(
                                default=0, help_text="Crashes in a row it was restarted after."
                            ),
                        ),
                        (
                            "restart_at",
                            models.DateTimeField(
                                blank=True, help_text="When a crashed replica starts again.", null=True
                            ),
                        ),
                        (
                            "previous_log_tail",
                            models.TextField(blank=True, help_text="The last lines of the run before a restart."),
                        ),
                        ("previous_exit_code", models.IntegerField(blank=True, null=True)),
                        ("previous_oom_killed", models.BooleanField(default=False)),
                        ("started_at", models.DateTimeField(default=django.utils.timezone.now)),
                        ("ready_at", models.DateTimeField(blank=True, null=True)),
                        ("stopped_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "deployment",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="replicas",
                                to="deployments.deployment",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "console_replica",
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
