"""The capacity check's SLO fields go: observability 0009 moved what was set into ServiceLevel, the deployment's
one SLO (console.observability.service_level)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0006_external_endpoints"),
        ("observability", "0009_one_slo_per_deployment"),
    ]

    operations = [
        migrations.RemoveField(model_name="deployment", name="slo_itl_seconds"),
        migrations.RemoveField(model_name="deployment", name="slo_ttft_seconds"),
    ]
