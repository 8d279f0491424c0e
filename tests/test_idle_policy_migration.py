"""Deployments 0009 (idle policies, issue 29) keeps every deployment: policy stay, desired "serving" for an active
one (an external deployment is ready) and "stopped" for the rest, in its state since its last change; and back."""

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from django.apps.registry import Apps

from tests.migrating import migrate, schema_at

pytestmark = pytest.mark.django_db(transaction=True)
BEFORE = [("deployments", "0008_versioned_plans")]
AFTER = [("deployments", "0009_idle_policy")]
CHANGED = datetime(2026, 11, 2, 9, 30, tzinfo=UTC)


@pytest.fixture
def before() -> Iterator[Apps]:
    with schema_at(BEFORE) as apps:
        yield apps


def test_existing_deployments_stay_up_as_they_were_and_want_what_they_run(before: Apps) -> None:
    deployment = before.get_model("deployments", "Deployment")
    for name, state in (("up", "ready"), ("loading", "loading"), ("down", "stopped"), ("broken", "failed")):
        deployment.objects.create(
            name=name, served_model_name=name, engine="simulator", max_model_len=0, kv_space_gib=1, plan={}, state=state
        )
    deployment.objects.update(updated_at=CHANGED)
    after = migrate(AFTER).get_model("deployments", "Deployment")
    rows = {d.name: (d.state, d.desired, d.idle_policy, d.always_on, d.state_since) for d in after.objects.all()}
    assert rows == {
        "up": ("ready", "serving", "stay", False, CHANGED),
        "loading": ("loading", "serving", "stay", False, CHANGED),
        "down": ("stopped", "stopped", "stay", False, CHANGED),
        "broken": ("failed", "stopped", "stay", False, CHANGED),
    }
    back = migrate(BEFORE).get_model("deployments", "Deployment")
    assert sorted(back.objects.values_list("name", "state")) == [
        ("broken", "failed"),
        ("down", "stopped"),
        ("loading", "loading"),
        ("up", "ready"),
    ]
