"""Seeds the editable metric mappings from engines.metric_mappings.DEFAULT_MAPPINGS (each row citing its source) and
default GPU prices, each with its source. Rows an admin already has are left as they are; reversing removes
only rows still equal to a default."""

from decimal import Decimal
from typing import Any

from django.db import migrations

# USD per GPU-hour, on-demand. Sources as read on 2026-12-01; edit them on the Costs page.
_MERCATUS = "mercatus-ai.com/blog/cloud-gpu-pricing (May 2026): specialty-cloud on-demand range, midpoint"
DEFAULT_PRICES = [
    ("NVIDIA H100 80GB HBM3", Decimal("3.00"), _MERCATUS + " of $2.50–3.50"),
    ("NVIDIA H200", Decimal("4.00"), _MERCATUS + " of $3.50–4.50"),
    ("NVIDIA A100-SXM4-80GB", Decimal("1.30"), _MERCATUS + " of $1.10–1.50 (A100 80GB)"),
    ("NVIDIA L40S", Decimal("0.86"), "modal.com/blog/nvidia-l40s-price-article (Aug 2025): RunPod on-demand"),
    ("NVIDIA GeForce RTX 4090", Decimal("0.34"), "deploybase.ai/articles/nvidia-l40s-price (Mar 2026): RunPod hourly"),
]


def seed(apps: Any, schema_editor: Any) -> None:
    from engines.metric_mappings import DEFAULT_MAPPINGS

    MetricMapping = apps.get_model("observability", "MetricMapping")
    PriceSetting = apps.get_model("observability", "PriceSetting")
    for row in DEFAULT_MAPPINGS:
        MetricMapping.objects.get_or_create(
            flavor=row.flavor,
            canonical=row.canonical,
            defaults={
                "engine": row.engine,
                "metric": row.metric,
                "label": row.label,
                "min_version": row.min_version,
                "max_version": row.max_version,
                "source": row.source,
            },
        )
    for gpu, price, source in DEFAULT_PRICES:
        PriceSetting.objects.get_or_create(gpu_model=gpu, defaults={"usd_per_gpu_hour": price, "source": source})


def unseed(apps: Any, schema_editor: Any) -> None:
    from engines.metric_mappings import DEFAULT_MAPPINGS

    MetricMapping = apps.get_model("observability", "MetricMapping")
    PriceSetting = apps.get_model("observability", "PriceSetting")
    for row in DEFAULT_MAPPINGS:
        MetricMapping.objects.filter(flavor=row.flavor, canonical=row.canonical, metric=row.metric).delete()
    for gpu, price, _ in DEFAULT_PRICES:
        PriceSetting.objects.filter(gpu_model=gpu, usd_per_gpu_hour=price).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("observability", "0004_history_health_mappings_prices"),
    ]

    operations = [
        migrations.RunPython(seed, unseed),
    ]
