"""Sign-in throttling (django-axes) against the real web process: wrong passwords in a row lock that username
out from that address with a plain 429 page; the right password is refused until the pause ends; nobody
else is locked out by it; a success before the limit starts the count again."""

from typing import Any

import httpx
import pytest
from django.conf import settings

pytestmark = pytest.mark.django_db(transaction=True)
PASSWORD = "a-long-password-1"


def attempt(base: str, username: str, password: str) -> httpx.Response:
    client = httpx.Client(base_url=base, timeout=30)
    client.get("/login/")
    data = {"username": username, "password": password, "csrfmiddlewaretoken": client.cookies["csrftoken"]}
    return client.post("/login/", data=data)


def test_twenty_wrong_passwords_are_throttled_with_a_plain_message(web: str, django_user_model: Any) -> None:
    django_user_model.objects.create_superuser("root", "", PASSWORD)
    django_user_model.objects.create_user("other", "", PASSWORD)
    limit = settings.AXES_FAILURE_LIMIT
    answers = [attempt(web, "root", f"wrong-{i}").status_code for i in range(20)]
    assert answers == [200] * (limit - 1) + [429] * (20 - limit + 1)
    locked = attempt(web, "root", PASSWORD)
    assert locked.status_code == 429
    assert (
        f"Too many failed sign-ins for “root” from your address ({limit} in a row). Try again in "
        f"{settings.AXES_COOLOFF_TIME.total_seconds() / 60:.0f} minutes"
    ) in locked.text
    assert attempt(web, "other", PASSWORD).status_code == 302  # another username is not locked out


def test_a_success_before_the_limit_starts_the_count_again(web: str, django_user_model: Any) -> None:
    django_user_model.objects.create_user("mia", "", PASSWORD)
    limit = settings.AXES_FAILURE_LIMIT
    for _ in range(2):
        assert [attempt(web, "mia", "wrong").status_code for _ in range(limit - 1)] == [200] * (limit - 1)
        assert attempt(web, "mia", PASSWORD).status_code == 302
