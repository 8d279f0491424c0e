"""Deployments get SLO targets (TTFT and ITL, seconds) for the capacity check's goodput; existing rows take 2 s and 0.1 s."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0004_seal_engine_keys"),
    ]

    operations = [
        migrations.AddField(
            model_name="deployment",
            name="slo_itl_seconds",
            field=models.FloatField(default=0.1, help_text="SLO: inter-token latency, seconds (goodput)."),
        ),
        migrations.AddField(
            model_name="deployment",
            name="slo_ttft_seconds",
            field=models.FloatField(default=2.0, help_text="SLO: time to first token, seconds (goodput)."),
        ),
    ]
