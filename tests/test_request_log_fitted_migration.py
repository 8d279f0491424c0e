"""RequestLog gains max_tokens_fitted (observability 0016) keeping every row: one written before reads as sent as
asked, and going back keeps it too."""

from collections.abc import Iterator

import pytest
from django.apps.registry import Apps
from django.utils import timezone

from tests.migrating import migrate, schema_at

pytestmark = pytest.mark.django_db(transaction=True)
BEFORE = [("observability", "0015_request_log_error")]
AFTER = [("observability", "0016_request_log_max_tokens_fitted")]


@pytest.fixture
def before() -> Iterator[Apps]:
    with schema_at(BEFORE) as apps:
        yield apps


def test_rows_written_before_are_kept_as_sent_as_asked_and_kept_again_going_back(before: Apps) -> None:
    fields = {"model": "m", "surface": "openai", "endpoint": "/v1/chat/completions", "status": 200}
    log = before.get_model("observability", "RequestLog")
    log.objects.create(created_at=timezone.now(), duration_seconds=1.5, request_id="a" * 32, error="", **fields)
    after = migrate(AFTER)
    [row] = after.get_model("observability", "RequestLog").objects.all()
    assert (row.request_id, row.duration_seconds, row.max_tokens_fitted) == ("a" * 32, 1.5, None)
    row.max_tokens_fitted = 1200
    row.save()
    [back] = migrate(BEFORE).get_model("observability", "RequestLog").objects.all()
    assert (back.request_id, back.duration_seconds) == ("a" * 32, 1.5)
