"""Each deployment's capacity for its price per million tokens (console.observability.pricing), from the last
capacity check it finished before prices came from capacity: the prompt + output tokens/s of the most load that
held the SLO the check ran at (no failure, TTFT p90 and ITL p90 within it). Deployments without one keep the
plan's estimate until their next check."""

import math
from typing import Any

from django.db import migrations


def measured(apps: Any, schema_editor: Any) -> None:
    run_model = apps.get_model("capacity", "CapacityRun")
    price_model = apps.get_model("observability", "DeploymentPrice")
    done = run_model.objects.filter(state="done", deployment__isnull=False).order_by("deployment_id", "-finished_at")
    seen: set[int] = set()
    for run in done:
        if run.deployment_id in seen:
            continue
        slo = run.provenance.get("slo") or {}
        ttft = slo.get("ttft_seconds") or math.inf
        itl = slo.get("itl_seconds") or math.inf
        held = [
            r.prompt_tokens_per_s + r.output_tokens_per_s
            for r in run.results.all()
            if r.requests == r.succeeded and r.ttft_p90 is not None and r.ttft_p90 <= ttft
            and (r.itl_p90 is None or r.itl_p90 <= itl)
        ]  # fmt: skip
        if not held:
            continue
        seen.add(run.deployment_id)
        price_model.objects.update_or_create(
            deployment_id=run.deployment_id,
            defaults={
                "measured_tokens_per_second": max(held),
                "measured_run_id": run.pk,
                "measured_at": run.finished_at,
            },
        )


class Migration(migrations.Migration):
    dependencies = [
        ("capacity", "0001_initial"),
        ("observability", "0013_deployment_price"),
        ("deployments", "0011_fit_max_tokens_on_by_default"),  # the SLO fields it reads
    ]

    operations = [migrations.RunPython(measured, migrations.RunPython.noop)]
