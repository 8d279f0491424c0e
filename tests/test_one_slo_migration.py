"""The two SLOs become one (observability 0009, deployments 0007) without losing a target anyone set: a
capacity SLO set alone becomes the deployment's SLO, the panels' wins where both were set (the other kept in
an audit entry), defaults are dropped; and back again."""

from collections.abc import Iterator

import pytest
from django.apps.registry import Apps

from tests.migrating import migrate, schema_at

pytestmark = pytest.mark.django_db(transaction=True)
BEFORE = [("observability", "0008_request_log_key_prefix"), ("deployments", "0006_external_endpoints")]
AFTER = [("observability", "0009_one_slo_per_deployment"), ("deployments", "0007_one_slo_per_deployment")]


@pytest.fixture
def before() -> Iterator[Apps]:
    with schema_at(BEFORE) as apps:
        yield apps


def test_set_capacity_slos_become_the_deployments_and_a_conflict_is_kept_in_the_audit_log(before: Apps) -> None:
    deployment, slo = before.get_model("deployments", "Deployment"), before.get_model("observability", "ServiceLevel")

    def made(name: str, ttft: float, itl: float) -> int:
        dep = deployment.objects.create(
            name=name,
            served_model_name=name,
            engine="simulator",
            max_model_len=0,
            kv_space_gib=1,
            plan={},
            slo_ttft_seconds=ttft,
            slo_itl_seconds=itl,
        )
        return int(dep.pk)

    untouched, capacity_only = made("a", 2.0, 0.1), made("b", 1.5, 0.05)
    both, same = made("c", 3, 0.2), made("d", 4, 1)
    slo.objects.create(deployment_id=both, ttft_seconds=0.5, itl_seconds=None)
    slo.objects.create(deployment_id=same, ttft_seconds=4, itl_seconds=1)
    after = migrate(AFTER)
    rows = {
        s.deployment_id: (s.ttft_seconds, s.itl_seconds)
        for s in after.get_model("observability", "ServiceLevel").objects.all()
    }
    assert rows == {capacity_only: (1.5, 0.05), both: (0.5, None), same: (4, 1)} and untouched not in rows
    [merged] = after.get_model("audit", "AuditEntry").objects.filter(action="slo.merged")
    assert (merged.target_id, merged.target_name, merged.actor_name) == (str(both), "c", "system")
    assert merged.changes == {
        "kept": {"ttft_seconds": 0.5, "itl_seconds": None},
        "capacity_check_had": {"ttft_seconds": 3, "itl_seconds": 0.2},
    }
    back = migrate(BEFORE)
    restored = back.get_model("deployments", "Deployment").objects
    want = {(untouched, 2.0, 0.1), (capacity_only, 1.5, 0.05), (both, 0.5, 0.1), (same, 4, 1)}
    assert set(restored.values_list("pk", "slo_ttft_seconds", "slo_itl_seconds")) == want
