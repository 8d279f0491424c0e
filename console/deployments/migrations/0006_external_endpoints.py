"""Engines Hearth did not launch: a deployment may have no model (an external one), a replica may be an external
endpoint (its URL, engine kind and version, health), and the sealed engine key holds longer keys. Existing rows
keep their values: the new fields are blank, the model stays set, the key column only widens."""

import django.db.models.deletion
from django.db import migrations, models

import console.sealed


class Migration(migrations.Migration):
    dependencies = [
        ("catalog", "0004_demo_catalog_kind"),
        ("deployments", "0005_deployment_slo"),
    ]

    operations = [
        migrations.AddField(
            model_name="replica",
            name="checked_at",
            field=models.DateTimeField(blank=True, help_text="An external endpoint's last health check.", null=True),
        ),
        migrations.AddField(
            model_name="replica",
            name="down_reason",
            field=models.TextField(blank=True, help_text="Why an external endpoint's last health check failed."),
        ),
        migrations.AddField(
            model_name="replica",
            name="engine_kind",
            field=models.CharField(blank=True, help_text="An external endpoint's engine.", max_length=20),
        ),
        migrations.AddField(
            model_name="replica",
            name="engine_version",
            field=models.CharField(blank=True, help_text="As an external endpoint reports it.", max_length=50),
        ),
        migrations.AddField(
            model_name="replica",
            name="url",
            field=models.CharField(blank=True, help_text="An external endpoint's base URL.", max_length=500),
        ),
        migrations.AlterField(
            model_name="deployment",
            name="model",
            field=models.ForeignKey(
                blank=True,
                help_text="None for an external deployment (engines Hearth did not launch).",
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="deployments",
                to="catalog.modelsource",
            ),
        ),
        migrations.AlterField(
            model_name="replica",
            name="engine_api_key",
            field=console.sealed.SealedCharField(
                blank=True,
                help_text="Per-launch secret, or an external endpoint's key; only the gateway uses it. Sealed (600 holds a key of up to 300 characters).",
                max_length=600,
            ),
        ),
    ]
