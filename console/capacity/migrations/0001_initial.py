# Capacity runs, their results per level, and tuning sessions (console.capacity.models).

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("access", "0002_rename_table"),
        ("deployments", "0005_deployment_slo"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="CapacityRun",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("deployment_name", models.CharField(help_text="Kept when the deployment is deleted.", max_length=100)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "label",
                    models.CharField(blank=True, help_text="What this run is for, e.g. 'FP8 KV'.", max_length=200),
                ),
                ("profile", models.CharField(max_length=20)),
                ("mode", models.CharField(help_text="concurrency (users) or rate (requests/s).", max_length=20)),
                ("levels", models.JSONField(help_text="Users, or requests/s, per level, in the order run.")),
                ("shared_prefix", models.BooleanField(default=False)),
                ("requests_per_level", models.PositiveIntegerField()),
                ("max_seconds", models.PositiveIntegerField(help_text="The whole run's bound, seconds.")),
                (
                    "shape",
                    models.JSONField(
                        default=dict, help_text="prompt_tokens, output_tokens, prefix_tokens per request."
                    ),
                ),
                (
                    "provenance",
                    models.JSONField(
                        default=dict, help_text="What ran: model revision, image, version, GPUs, settings."
                    ),
                ),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("queued", "Queued"),
                            ("running", "Running"),
                            ("cancelling", "Cancelling"),
                            ("cancelled", "Cancelled"),
                            ("done", "Done"),
                            ("failed", "Failed"),
                        ],
                        default="queued",
                        max_length=12,
                    ),
                ),
                ("state_reason", models.TextField(blank=True)),
                ("progress", models.FloatField(default=0.0, help_text="0–1.")),
                ("progress_text", models.CharField(blank=True, max_length=300)),
                (
                    "heartbeat_at",
                    models.DateTimeField(blank=True, help_text="Last sign of life of its worker.", null=True),
                ),
                ("summary", models.TextField(blank=True, help_text="The run held against the plan, in words.")),
                (
                    "tuning_value",
                    models.JSONField(blank=True, help_text="The knob's value this run measured.", null=True),
                ),
                (
                    "api_key",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="access.apikey",
                    ),
                ),
                (
                    "created_by",
                    models.ForeignKey(
                        null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL
                    ),
                ),
                (
                    "deployment",
                    models.ForeignKey(
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="capacity_runs",
                        to="deployments.deployment",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="CapacityResult",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("level", models.FloatField()),
                ("requests", models.PositiveIntegerField()),
                ("succeeded", models.PositiveIntegerField()),
                ("failures", models.JSONField(default=dict, help_text="Failure kind → count.")),
                ("duration_s", models.FloatField()),
                ("ttft_p50", models.FloatField(null=True)),
                ("ttft_p90", models.FloatField(null=True)),
                ("ttft_p99", models.FloatField(null=True)),
                ("itl_p50", models.FloatField(null=True)),
                ("itl_p90", models.FloatField(null=True)),
                ("itl_p99", models.FloatField(null=True)),
                ("tpot_p50", models.FloatField(null=True)),
                ("per_user_tokens_per_s", models.FloatField(null=True)),
                ("output_tokens_per_s", models.FloatField()),
                ("prompt_tokens_per_s", models.FloatField()),
                ("goodput_rps", models.FloatField()),
                ("goodput_ratio", models.FloatField()),
                ("cache_hit_ratio", models.FloatField(null=True)),
                ("mean_prompt_tokens", models.FloatField(null=True)),
                ("mean_output_tokens", models.FloatField(null=True)),
                (
                    "engine",
                    models.JSONField(
                        default=dict, help_text="kv_cache_peak, preemptions, running_peak, waiting_peak, …."
                    ),
                ),
                (
                    "run",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="results", to="capacity.capacityrun"
                    ),
                ),
            ],
            options={
                "ordering": ("run", "id"),
            },
        ),
        migrations.CreateModel(
            name="Tuning",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("deployment_name", models.CharField(max_length=100)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("knob", models.CharField(max_length=40)),
                ("values", models.JSONField(help_text="The values to try, in order; the first is the setting before.")),
                (
                    "check_settings",
                    models.JSONField(help_text="The check each value runs: profile, mode, levels, bounds."),
                ),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("queued", "Queued"),
                            ("running", "Running"),
                            ("cancelling", "Cancelling"),
                            ("cancelled", "Cancelled"),
                            ("done", "Done"),
                            ("failed", "Failed"),
                        ],
                        default="queued",
                        max_length=12,
                    ),
                ),
                ("state_reason", models.TextField(blank=True)),
                ("step", models.PositiveSmallIntegerField(default=0, help_text="Values done so far.")),
                (
                    "downtime_seconds",
                    models.FloatField(help_text="Expected per relaunch, from the change preview.", null=True),
                ),
                ("best_value", models.JSONField(blank=True, null=True)),
                ("applied", models.BooleanField(default=False, help_text="The best value was applied at the end.")),
                (
                    "created_by",
                    models.ForeignKey(
                        null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL
                    ),
                ),
                (
                    "deployment",
                    models.ForeignKey(
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="tunings",
                        to="deployments.deployment",
                    ),
                ),
            ],
        ),
        migrations.AddField(
            model_name="capacityrun",
            name="tuning",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="runs",
                to="capacity.tuning",
            ),
        ),
        migrations.AddConstraint(
            model_name="capacityrun",
            constraint=models.UniqueConstraint(
                condition=models.Q(("state__in", ["queued", "running", "cancelling"])),
                fields=("deployment",),
                name="one_active_capacity_run_per_deployment",
            ),
        ),
    ]
