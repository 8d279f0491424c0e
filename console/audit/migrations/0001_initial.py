"""The audit log."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="AuditEntry",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("at", models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                (
                    "actor_name",
                    models.CharField(help_text="The username then; 'system' for the appliance.", max_length=150),
                ),
                ("action", models.CharField(db_index=True, max_length=40)),
                (
                    "target_type",
                    models.CharField(blank=True, help_text="app_label.model, e.g. access.apikey.", max_length=50),
                ),
                ("target_id", models.CharField(blank=True, max_length=50)),
                ("target_name", models.CharField(blank=True, max_length=200)),
                ("changes", models.JSONField(blank=True, default=dict)),
                ("ip", models.GenericIPAddressField(blank=True, null=True)),
                ("user_agent", models.CharField(blank=True, max_length=300)),
                (
                    "actor",
                    models.ForeignKey(
                        blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "audit entries",
                "indexes": [models.Index(fields=["target_type", "target_id"], name="audit_audit_target__e2abcf_idx")],
            },
        ),
    ]
