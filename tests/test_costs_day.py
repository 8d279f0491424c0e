"""The Costs page given input at the edges. Its day (``?day=YYYY-MM-DD``, its reconciliation): the calendar's first
day has no day before it to link, so it is refused like a day to come, with the day shown instead; never a 500 (a
fresh user's trial: ``?day=0001-01-01``). Its deployment price: a refused input price is told why once."""

from datetime import UTC, datetime

import pytest
from django.test import Client

from tests.test_panels import deployment

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("asked", ["0001-01-01", "9999-12-31"])
def test_a_day_at_either_end_of_the_calendar_says_which_day_the_page_shows(admin: Client, asked: str) -> None:
    today = datetime.now(UTC).date()
    resp = admin.get("/costs/", {"day": asked})
    page = resp.content.decode()
    assert resp.status_code == 200
    assert f"&#x27;{asked}&#x27; is not a past day (YYYY-MM-DD, from 0001-01-02); showing {today}." in page
    assert f'href="?day={today}"' not in page  # no link to a next day after today


def test_the_calendars_second_day_is_shown_with_a_link_to_its_first(admin: Client) -> None:
    deployment("llama")  # a deployment to reconcile on that day
    page = admin.get("/costs/", {"day": "0001-01-02"}).content.decode()
    assert "is not a past day" not in page
    assert 'href="?day=0001-01-01"' in page and 'href="?day=0001-01-03"' in page


def test_a_negative_input_price_is_refused_for_what_it_is_not_as_missing(admin: Client) -> None:
    dep = deployment("llama")
    bad = admin.post(
        "/costs/", {"form": "deployment_price", "deployment": dep.pk, "input_usd": "-1", "output_usd": "2"}
    )
    assert bad.status_code == 400 and "greater than or equal to 0" in bad.text
    assert "Give the input price too" not in bad.text  # a trial was told to give the price it had given
