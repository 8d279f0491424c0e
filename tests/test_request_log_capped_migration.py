"""RequestLog gains max_tokens_capped and max_tokens_capped_by (observability 0017) keeping every row: one written
before reads as no cap applied, and going back keeps it too."""

from collections.abc import Iterator

import pytest
from django.apps.registry import Apps
from django.utils import timezone

from tests.migrating import migrate, schema_at

pytestmark = pytest.mark.django_db(transaction=True)
BEFORE = [("observability", "0016_request_log_max_tokens_fitted")]
AFTER = [("observability", "0017_request_log_max_tokens_capped")]


@pytest.fixture
def before() -> Iterator[Apps]:
    with schema_at(BEFORE) as apps:
        yield apps


def test_rows_written_before_are_kept_as_no_cap_applied_and_kept_again_going_back(before: Apps) -> None:
    fields = {"model": "m", "surface": "openai", "endpoint": "/v1/chat/completions", "status": 200}
    log = before.get_model("observability", "RequestLog")
    log.objects.create(
        created_at=timezone.now(), duration_seconds=1.5, request_id="a" * 32, error="", max_tokens_fitted=900, **fields
    )
    after = migrate(AFTER)
    [row] = after.get_model("observability", "RequestLog").objects.all()
    assert (row.request_id, row.max_tokens_fitted, row.max_tokens_capped, row.max_tokens_capped_by) == (
        "a" * 32,
        900,
        None,
        "",
    )
    row.max_tokens_capped, row.max_tokens_capped_by = 200, "key"
    row.save()
    [back] = migrate(BEFORE).get_model("observability", "RequestLog").objects.all()
    assert (back.request_id, back.duration_seconds, back.max_tokens_fitted) == ("a" * 32, 1.5, 900)
