"""Keys get an owner (created_by renamed: the rows keep who made them, now whose they are), USD budgets and
the fields a rotation needs; members get their role and limits. Existing keys keep every value; existing
superusers stay admins (a user without a Member row is an admin if a superuser, else a viewer)."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("access", "0002_rename_table"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RenameField(
            model_name="apikey",
            old_name="created_by",
            new_name="owner",
        ),
        migrations.AlterField(
            model_name="apikey",
            name="owner",
            field=models.ForeignKey(
                help_text="Whose key it is: their member limits and budgets apply to it.",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="api_keys",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddField(
            model_name="apikey",
            name="daily_budget_usd",
            field=models.DecimalField(
                blank=True, decimal_places=2, help_text="USD per UTC day; None: no budget.", max_digits=12, null=True
            ),
        ),
        migrations.AddField(
            model_name="apikey",
            name="monthly_budget_usd",
            field=models.DecimalField(
                blank=True,
                decimal_places=2,
                help_text="USD per UTC calendar month; None: no budget.",
                max_digits=12,
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="apikey",
            name="previous_key_hash",
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.AddField(
            model_name="apikey",
            name="previous_prefix",
            field=models.CharField(blank=True, db_index=True, help_text="The secret before.", max_length=20),
        ),
        migrations.AddField(
            model_name="apikey",
            name="previous_valid_until",
            field=models.DateTimeField(
                blank=True, help_text="The previous secret is accepted until then (the rotation's grace).", null=True
            ),
        ),
        migrations.AddField(
            model_name="apikey",
            name="rotated_at",
            field=models.DateTimeField(blank=True, help_text="When the secret last changed.", null=True),
        ),
        migrations.CreateModel(
            name="Member",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "role",
                    models.CharField(
                        choices=[("admin", "Admin"), ("member", "Member"), ("viewer", "Viewer")],
                        default="member",
                        max_length=10,
                    ),
                ),
                (
                    "allowed_models",
                    models.JSONField(blank=True, default=list, help_text="Served model names; empty: all."),
                ),
                (
                    "max_tokens_cap",
                    models.PositiveIntegerField(blank=True, help_text="Tokens per request, per key.", null=True),
                ),
                ("requests_per_minute", models.PositiveIntegerField(blank=True, help_text="Per key.", null=True)),
                ("tokens_per_minute", models.PositiveIntegerField(blank=True, help_text="Per key.", null=True)),
                ("tokens_per_day", models.PositiveIntegerField(blank=True, help_text="Per key, UTC day.", null=True)),
                (
                    "max_concurrent",
                    models.PositiveIntegerField(blank=True, help_text="Requests at once, per key.", null=True),
                ),
                (
                    "max_key_days",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="Expiry ceiling: each key expires within this many days; None: may never.",
                        null=True,
                    ),
                ),
                (
                    "max_keys",
                    models.PositiveIntegerField(
                        blank=True, help_text="Live keys at once; None: any number.", null=True
                    ),
                ),
                (
                    "daily_budget_usd",
                    models.DecimalField(
                        blank=True,
                        decimal_places=2,
                        help_text="USD per UTC day over all their keys.",
                        max_digits=12,
                        null=True,
                    ),
                ),
                (
                    "monthly_budget_usd",
                    models.DecimalField(
                        blank=True,
                        decimal_places=2,
                        help_text="USD per UTC calendar month over all their keys.",
                        max_digits=12,
                        null=True,
                    ),
                ),
                (
                    "oidc_subject",
                    models.CharField(
                        blank=True,
                        help_text="Their ``sub`` at the OpenID provider.",
                        max_length=255,
                        null=True,
                        unique=True,
                    ),
                ),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "user",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE, related_name="member", to=settings.AUTH_USER_MODEL
                    ),
                ),
            ],
        ),
    ]
