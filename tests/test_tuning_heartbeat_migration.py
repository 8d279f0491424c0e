"""capacity 0003 adds a tuning's heartbeat (console.capacity.tuning's stale tunings): every tuning made before keeps
its row, its heartbeat null, and back."""

from collections.abc import Iterator

import pytest
from django.apps.registry import Apps

from tests.migrating import migrate, schema_at

BEFORE = [("capacity", "0002_price_from_last_check")]
AFTER = [("capacity", "0003_tuning_heartbeat_at")]


@pytest.fixture
def before() -> Iterator[Apps]:
    with schema_at(BEFORE) as apps:
        yield apps


@pytest.mark.django_db(transaction=True)
def test_every_tuning_is_kept_with_no_heartbeat_and_back(before: Apps) -> None:
    old = before.get_model("capacity", "Tuning")
    fields = {"knob": "max_num_seqs", "values": [256, 64], "check_settings": {"profile": "chat"}}
    old.objects.create(deployment_name="done", state="done", step=2, best_value=64, **fields)
    old.objects.create(deployment_name="running", state="running", step=1, **fields)
    after = migrate(AFTER).get_model("capacity", "Tuning")
    rows = {t.deployment_name: (t.state, t.step, t.best_value, t.heartbeat_at) for t in after.objects.all()}
    assert rows == {"done": ("done", 2, 64, None), "running": ("running", 1, None, None)}
    back = migrate(BEFORE).get_model("capacity", "Tuning")
    assert dict(back.objects.values_list("deployment_name", "state")) == {"done": "done", "running": "running"}
