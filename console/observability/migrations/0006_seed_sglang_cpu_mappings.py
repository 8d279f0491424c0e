"""Seeds the default metric mappings added with the SGLang CPU engine (flavor ``sglang-0.5.7``: generated
tokens from ``sglang:realtime_tokens_total{mode="decode"}``, KV capacity from ``sglang:max_total_num_tokens``)
into databases that ran 0005 before they existed. Every default row missing is added; rows an admin has are
left as they are. Reversing leaves the rows (0005's reverse removes the defaults)."""

from typing import Any

from django.db import migrations


def seed_missing(apps: Any, schema_editor: Any) -> None:
    from engines.metric_mappings import DEFAULT_MAPPINGS

    MetricMapping = apps.get_model("observability", "MetricMapping")
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


class Migration(migrations.Migration):
    dependencies = [
        ("observability", "0005_seed_mappings_and_prices"),
    ]

    operations = [
        migrations.RunPython(seed_missing, migrations.RunPython.noop),
    ]
