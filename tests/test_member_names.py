"""A member's username is checked as Django's own forms check one (letters, digits and @.+-_), and one that differs
from an existing name only in case is refused: a trial made "ADMIN" beside "admin" and "rob'; drop", which the audit
log then showed as look-alike actors."""

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

pytestmark = pytest.mark.django_db
PASSWORD = "a-long-password-1"


def add(client: Client, username: str) -> Any:
    body = {"username": username, "password": PASSWORD, "role": "member"}
    return client.post("/api/members", json.dumps(body), content_type="application/json")


def test_a_username_differing_only_in_case_or_with_odd_characters_is_refused(admin: Client) -> None:
    assert add(admin, "bob").status_code == 201
    for name in ("BOB", "Bob"):
        refused = add(admin, name)
        assert refused.status_code == 400
        assert refused.json()["detail"] == (
            "A user named 'bob' already exists; names that differ only in case would read as one person in the audit "
            "log."
        )
    assert add(admin, "ADMIN").status_code == 400  # the superuser "admin" too
    for odd in ("rob'; drop", "ädmin ü"):
        refused = add(admin, odd)
        assert refused.status_code == 400 and refused.json()["detail"].startswith("Enter a valid username.")
    assert add(admin, "bob.smith+ci@team").status_code == 201 and add(admin, "ädmin").status_code == 201
    assert sorted(User.objects.values_list("username", flat=True)) == ["admin", "bob", "bob.smith+ci@team", "ädmin"]
