"""Idle policies and the sleep and wake of deployments (issue 29): the policy fields, the desired state, since when
a deployment is in its state, the wake under way, the new states, the events' history, and whether a replica's
engine can sleep (none could before). Existing deployments keep their rows: policy stay, desired "serving" if active
(pending to ready; an external deployment is ready) else "stopped", in their state since their last change
(``updated_at``). Backwards, the added columns go.
"""

from typing import Any

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

ACTIVE = ("pending", "pulling", "starting", "loading", "ready")


def fill_in(apps: Any, schema_editor: Any) -> None:
    Deployment = apps.get_model("deployments", "Deployment")
    Deployment.objects.filter(state__in=ACTIVE).update(desired="serving")
    Deployment.objects.exclude(state__in=ACTIVE).update(desired="stopped")
    Deployment.objects.update(state_since=models.F("updated_at"))


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0008_versioned_plans"),
    ]

    operations = [
        migrations.AddField(
            model_name="deployment",
            name="always_on",
            field=models.BooleanField(default=False, help_text="Never put to sleep or stopped to make room."),
        ),
        migrations.AddField(
            model_name="deployment",
            name="desired",
            field=models.CharField(
                choices=[
                    ("serving", "Serving"),
                    ("asleep", "Asleep"),
                    ("stopped_idle", "stopped to save"),
                    ("stopped", "Stopped"),
                ],
                default="stopped",
                max_length=12,
            ),
        ),
        migrations.AddField(
            model_name="deployment",
            name="idle_minutes",
            field=models.PositiveIntegerField(default=30, help_text="Minutes without a request before the policy."),
        ),
        migrations.AddField(
            model_name="deployment",
            name="idle_policy",
            field=models.CharField(
                choices=[("stay", "stay"), ("sleep", "sleep"), ("stop", "stop")],
                default="stay",
                help_text="What idle_minutes without a request bring (engines.sleep_support).",
                max_length=5,
            ),
        ),
        migrations.AddField(
            model_name="deployment",
            name="sleep_level",
            field=models.PositiveSmallIntegerField(default=1, help_text="1: weights kept in host RAM; 2: dropped."),
        ),
        migrations.AddField(
            model_name="deployment",
            name="state_since",
            field=models.DateTimeField(default=django.utils.timezone.now, help_text="When it entered its state."),
        ),
        migrations.AddField(
            model_name="deployment",
            name="wake_started_at",
            field=models.DateTimeField(blank=True, help_text="When the wake under way began.", null=True),
        ),
        migrations.AddField(
            model_name="replica",
            name="sleep_mode",
            field=models.BooleanField(default=False, help_text="Its engine was started able to sleep (its routes on)."),
        ),
        migrations.AlterField(
            model_name="deployment",
            name="state",
            field=models.CharField(
                choices=[
                    ("pending", "Pending"),
                    ("pulling", "Pulling"),
                    ("starting", "Starting"),
                    ("loading", "Loading"),
                    ("ready", "Ready"),
                    ("failed", "Failed"),
                    ("stopping", "Stopping"),
                    ("stopped", "Stopped"),
                    ("sleeping", "Sleeping"),
                    ("asleep", "Asleep"),
                    ("waking", "Waking"),
                ],
                default="pending",
                max_length=10,
            ),
        ),
        migrations.CreateModel(
            name="DeploymentEvent",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("sleep", "Sleep"),
                            ("wake", "Wake"),
                            ("stop_idle", "stopped to save"),
                            ("wake_failed", "wake failed"),
                        ],
                        max_length=12,
                    ),
                ),
                ("at", models.DateTimeField(default=django.utils.timezone.now)),
                ("seconds", models.FloatField(blank=True, help_text="How long it took.", null=True)),
                (
                    "level",
                    models.PositiveSmallIntegerField(blank=True, help_text="The sleep level, for a sleep.", null=True),
                ),
                ("reason", models.TextField(blank=True)),
                (
                    "deployment",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="events", to="deployments.deployment"
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["deployment", "-at"], name="deployments_deploym_aac824_idx")],
            },
        ),
        migrations.RunPython(fill_in, migrations.RunPython.noop),
    ]
