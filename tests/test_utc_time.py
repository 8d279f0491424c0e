"""console/templatetags/utc_time.py: every moment the console writes reads as 24-hour UTC with "UTC" after it."""

from datetime import UTC, datetime, timedelta, timezone

from console.templatetags.utc_time import utc


def test_a_moment_in_any_zone_or_an_iso_string_reads_as_utc() -> None:
    assert utc(datetime(2026, 12, 4, 10, 31, 2, tzinfo=UTC)) == "2026-12-04 10:31:02 UTC"
    assert utc(datetime(2026, 12, 4, 12, 0, tzinfo=timezone(timedelta(hours=2)))) == "2026-12-04 10:00:00 UTC"
    assert utc("2026-12-04T10:31:02+00:00") == "2026-12-04 10:31:02 UTC"  # a worker's pre-flight checked_at
    assert utc(datetime(2026, 12, 4, 10, 31, 2)) == "2026-12-04 10:31:02 UTC"  # naive: Django's UTC


def test_nothing_is_empty_and_a_string_that_is_no_time_is_left_as_it_was() -> None:
    assert utc(None) == "" and utc("") == ""
    assert utc("unknown") == "unknown"
