"""The first-run setup page's form (/setup/): each error under the field it is about, the password typed twice, the
username kept and the passwords never sent back on an error, and no account made until the form is right."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

pytestmark = pytest.mark.django_db
FIELDS = ("username", "password", "password2")


def under(page: str, name: str) -> str:
    """The page's HTML from field ``name``'s label to the next field's label (or the button): what reads as that
    field's, its widget, errors and help."""
    start = page.index(f'<label for="id_{name}"')
    ends = [page.find(f'<label for="id_{other}"', start + 1) for other in FIELDS] + [page.index("<button", start)]
    return page[start : min(end for end in ends if end > start)]


def post(client: Client, password: str, again: str, username: str = "new-admin") -> str:
    """The page that posting these answers shows (the form again: an error)."""
    resp = client.post("/setup/", {"username": username, "password": password, "password2": again})
    assert resp.status_code == 200, resp.status_code
    return resp.content.decode()


def test_it_shows_a_refused_password_under_the_password_field(client: Client) -> None:
    page = post(client, "short", "short")
    assert "at least 8 characters (it has 5)" in under(page, "password")  # the field's own length check
    assert "it has 5" not in under(page, "username") and "it has 5" not in page[: page.index("<label")]
    assert 'id="id_password_error"' in under(page, "password")  # what the input's aria-describedby names
    assert not get_user_model().objects.exists()


def test_it_shows_a_common_password_under_the_password_field(client: Client) -> None:
    page = post(client, "password123", "password123")
    assert "This password is too common." in under(page, "password")
    assert not get_user_model().objects.exists()


def test_it_shows_two_different_passwords_under_the_second(client: Client) -> None:
    page = post(client, "long-enough-pw", "long-enough-pq")
    assert "The two passwords differ" in under(page, "password2")
    assert "differ" not in under(page, "password") and "differ" not in under(page, "username")
    assert not get_user_model().objects.exists()


def test_it_asks_for_the_password_again(client: Client) -> None:
    page = post(client, "long-enough-pw", "")
    assert "This field is required." in under(page, "password2")
    assert 'type="password" name="password2"' in page and "Password (again)" in page
    assert not get_user_model().objects.exists()


def test_it_keeps_the_username_and_never_sends_a_password_back(client: Client) -> None:
    page = post(client, "long-enough-pw", "long-enough-pq")
    assert re.search(r'name="username" value="new-admin"', page)
    assert "long-enough-p" not in page
    page = post(client, "short", "short")
    assert 'value="short"' not in page and re.search(r'name="username" value="new-admin"', page)


def test_it_makes_the_admin_with_the_password_as_typed(client: Client) -> None:
    """A space at either end is part of the password, as sign-in (Django's AuthenticationForm) takes it."""
    resp = client.post("/setup/", {"username": "root", "password": " long-enough-pw ", "password2": " long-enough-pw "})
    assert resp.status_code == 302 and resp["Location"] == "/models/"
    client.logout()
    assert client.post("/login/", {"username": "root", "password": " long-enough-pw "}).status_code == 302
    assert "_auth_user_id" in client.session


def test_it_refuses_a_password_like_the_username_as_the_settings_promise(client: Client) -> None:
    page = post(client, "platform-admin-1", "platform-admin-1", username="platform-admin")
    assert "The password is too similar to the username." in under(page, "password")
    assert not get_user_model().objects.exists()


def test_the_password_rules_are_one_line_of_help_inside_the_fields_paragraph(client: Client) -> None:
    help_text = under(client.get("/setup/").content.decode(), "password")
    assert "must contain at least 8 characters." in help_text and "<ul" not in help_text and "<li" not in help_text


def test_the_password_page_gives_the_rules_as_one_line_too(admin: Client) -> None:
    page = admin.get("/password/").content.decode()
    assert "must contain at least 8 characters." in page and "<ul" not in page.split("<form")[1]
