"""Every stored plan is rewritten in the versioned shape (engines.stored_plan, version 2): the keys it had, with
the same values, plus "version", "kind" and the keys of its kind a plan stored before them lacked (empty: "",
0, [], None); an external deployment's ``{}`` becomes ``{"version": 2, "kind": "none"}``.

Backwards, "version" and "kind" go and the rest stays: the shape main stored before versions, keys filled in
included (the code of then reads them as it reads a plan stored since).
"""

from typing import Any

from django.db import migrations, models

from engines.stored_plan import StoredPlan


def to_versioned(apps: Any, schema_editor: Any) -> None:
    Deployment = apps.get_model("deployments", "Deployment")
    for dep in Deployment.objects.only("pk", "name", "engine", "plan").iterator():
        try:
            plan = StoredPlan.from_json(dep.plan, dep.engine).to_json()
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"The plan of deployment {dep.name!r} (id {dep.pk}) cannot be read: {exc}") from exc
        Deployment.objects.filter(pk=dep.pk).update(plan=plan)


def to_unversioned(apps: Any, schema_editor: Any) -> None:
    Deployment = apps.get_model("deployments", "Deployment")
    for dep in Deployment.objects.only("pk", "plan").iterator():
        plan = {k: v for k, v in dep.plan.items() if k not in ("version", "kind")}
        Deployment.objects.filter(pk=dep.pk).update(plan=plan)


class Migration(migrations.Migration):
    dependencies = [("deployments", "0007_one_slo_per_deployment")]

    operations = [
        migrations.AlterField(
            model_name="deployment",
            name="plan",
            field=models.JSONField(
                help_text="The plan it was created or last changed with, as engines.stored_plan's JSON; read it as "
                "stored_plan."
            ),
        ),
        migrations.RunPython(to_versioned, to_unversioned),
    ]
