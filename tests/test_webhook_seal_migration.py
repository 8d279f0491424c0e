"""The alert webhook's URL is stored sealed (alerts 0003; console.sealed): a Slack webhook's path is its secret, and a
database dump or a backup held it in clear. The row of before is sealed in place and reads back the same; a URL of
the longest the form takes (2,000 characters) fits sealed; back, it is plaintext again."""

from collections.abc import Iterator

import pytest
from django.apps.registry import Apps
from django.db import connection

from console.alerts.forms import DestinationForm
from console.alerts.models import Destination
from console.sealed import MARK
from tests.migrating import migrate, schema_at

BEFORE = [("alerts", "0002_budget_subjects_by_id")]
AFTER = [("alerts", "0003_seal_webhook_url")]
URL = "https://hooks.slack.com/services/T000/B000/XXXXsecretXXXX"


def stored() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT webhook_url FROM alerts_destination WHERE id = 1")
        return str(cursor.fetchone()[0])


@pytest.fixture
def before() -> Iterator[Apps]:
    with schema_at(BEFORE) as apps:
        yield apps


@pytest.mark.django_db(transaction=True)
def test_the_webhook_of_before_is_sealed_in_place_and_unsealed_back(before: Apps) -> None:
    before.get_model("alerts", "Destination").objects.create(pk=1, webhook_url=URL, email_to="ops@example.com")
    assert stored() == URL
    after = migrate(AFTER).get_model("alerts", "Destination")
    assert stored().startswith(MARK) and "secret" not in stored()
    assert after.objects.get(pk=1).webhook_url == URL
    migrate(BEFORE)
    assert stored() == URL


@pytest.mark.django_db
def test_a_webhook_of_the_longest_the_form_takes_is_stored_sealed_and_one_longer_refused() -> None:
    longest = "https://hooks.example.com/" + "a" * (2000 - 26)
    form = DestinationForm({"webhook_url": longest, "email_to": ""}, instance=Destination.current())
    assert form.is_valid(), form.errors
    form.save()
    assert stored().startswith(MARK) and Destination.current().webhook_url == longest
    longer = DestinationForm({"webhook_url": longest + "a", "email_to": ""}, instance=Destination.current())
    assert not longer.is_valid() and "webhook_url" in longer.errors
