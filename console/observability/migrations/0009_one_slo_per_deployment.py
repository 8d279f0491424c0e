"""The capacity check's SLO (Deployment.slo_ttft_seconds / slo_itl_seconds, 2 s and 0.1 s unless set on the
Capacity page) and the panels' (ServiceLevel) become one: ServiceLevel. A deployment whose capacity SLO was set
(not the defaults) and that had no ServiceLevel gets one with those targets. Where both were set and differ,
the panels' stays and the capacity one is kept in an audit entry (``slo.merged``, its targets under
``changes``), so no target anyone set is lost. The fields themselves go in deployments 0007."""

from typing import Any

from django.db import migrations

DEFAULTS = (2.0, 0.1)  # seconds: the fields' defaults, never set by anyone


def merge(apps: Any, schema_editor: Any) -> None:
    Deployment = apps.get_model("deployments", "Deployment")
    ServiceLevel = apps.get_model("observability", "ServiceLevel")
    AuditEntry = apps.get_model("audit", "AuditEntry")
    for dep in Deployment.objects.all():
        capacity = (dep.slo_ttft_seconds, dep.slo_itl_seconds)
        if capacity == DEFAULTS:
            continue
        panels = ServiceLevel.objects.filter(deployment=dep).first()
        if panels is None:
            ServiceLevel.objects.create(deployment=dep, ttft_seconds=capacity[0], itl_seconds=capacity[1])
        elif (panels.ttft_seconds, panels.itl_seconds) != capacity:
            AuditEntry.objects.create(
                actor_name="system",
                action="slo.merged",
                target_type="deployments.deployment",
                target_id=str(dep.pk),
                target_name=dep.name,
                changes={
                    "kept": {"ttft_seconds": panels.ttft_seconds, "itl_seconds": panels.itl_seconds},
                    "capacity_check_had": {"ttft_seconds": capacity[0], "itl_seconds": capacity[1]},
                },
            )


def split(apps: Any, schema_editor: Any) -> None:
    """Back: the capacity fields (restored by deployments 0007's reverse at their defaults) take the SLO."""
    Deployment = apps.get_model("deployments", "Deployment")
    ServiceLevel = apps.get_model("observability", "ServiceLevel")
    for slo in ServiceLevel.objects.all():
        Deployment.objects.filter(pk=slo.deployment_id).update(
            slo_ttft_seconds=slo.ttft_seconds or DEFAULTS[0], slo_itl_seconds=slo.itl_seconds or DEFAULTS[1]
        )


class Migration(migrations.Migration):
    dependencies = [
        ("observability", "0008_request_log_key_prefix"),
        ("deployments", "0006_external_endpoints"),
        ("audit", "0001_initial"),
    ]

    operations = [migrations.RunPython(merge, split)]
