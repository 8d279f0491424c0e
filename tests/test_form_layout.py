"""Every console form (Django's as_p, through templates/django/forms/p.html) shows a field's errors after that
field's own input and before the next field's label, tied to the input by aria-describedby; Django's own p.html put
them above the label, right under the previous field's help, where they read as the previous field's. The API keys
and key pages say at their top that a post was refused, with a link down to the form."""

import re

import pytest
from django.test import Client

from console.access.models import ApiKey
from tests.test_console_replicas import _form, _running

pytestmark = pytest.mark.django_db


def assert_each_error_under_its_field(page: str, form_start: str, fields: list[str]) -> None:
    """In the form that starts at ``form_start``, each of ``fields`` has its error list (id_<name>_error) after its
    input and before the next field's label (or the form's end), and its input names that list."""
    form = page[page.index(form_start) :]
    form = form[: form.index("</form>")]
    labels = [m.start() for m in re.finditer(r'<label for="id_\w+"', form)]
    for name in fields:
        widget = re.search(rf'<(?:input|select|textarea)\b[^>]*\bname="{name}"[^>]*>', form)
        assert widget, f"no {name} input"
        assert f"id_{name}_error" in widget.group(0).split("aria-describedby=", 1)[1].split('"')[1], widget.group(0)
        error = form.index(f'<ul class="errorlist" id="id_{name}_error">')
        next_label = min([at for at in labels if at > widget.end()], default=len(form))
        assert widget.end() < error < next_label, f"{name}'s error is not between its input and the next label"


def test_it_shows_a_new_keys_errors_under_their_inputs_and_says_so_at_the_top(admin: Client) -> None:
    typed = {"name": "k", "max_tokens_cap": "0", "requests_per_minute": "x"}
    resp = admin.post("/keys/", typed)
    page = resp.content.decode()
    assert resp.status_code == 200 and not ApiKey.objects.exists()
    assert_each_error_under_its_field(
        page, '<form method="post" id="create-key">', ["max_tokens_cap", "requests_per_minute"]
    )
    notice = page.index("The key was not created")
    assert notice < page.index('data-table="keys"')  # above the keys table, in view after the post
    assert 'href="#create-key"' in page[notice : page.index("</p>", notice)]


def test_the_keys_page_says_nothing_of_a_refusal_when_nothing_was_posted(admin: Client) -> None:
    page = admin.get("/keys/").content.decode()
    assert 'id="create-key"' in page and "was not created" not in page and "errorlist" not in page


def test_it_shows_a_refused_limit_under_its_input_on_the_key_page(admin: Client, admin_user: object) -> None:
    admin.post("/keys/", {"name": "k"})
    key = ApiKey.objects.get()
    page = admin.post(f"/keys/{key.pk}/", {"max_concurrent": "0", "priority": ""}).content.decode()
    assert_each_error_under_its_field(page, '<form method="post" id="key-limits">', ["max_concurrent"])
    notice = page.index("The limits were not saved")
    assert notice < page.index('<table class="facts">') and 'href="#key-limits"' in page[notice:]


def test_it_shows_a_bad_replica_count_under_its_input_on_the_change_form(admin: Client) -> None:
    dep = _running("big", [0, 1])
    page = admin.post(f"/deployments/{dep.pk}/change/", _form(admin, dep) | {"replica_count": "0"}).content.decode()
    assert_each_error_under_its_field(page, '<div class="fields">', ["replica_count"])


def test_it_shows_a_new_members_errors_under_their_inputs(admin: Client) -> None:
    page = admin.post("/members/", {"username": "", "password": "short", "role": "member"}).content.decode()
    assert_each_error_under_its_field(page, "<h2>Add a member</h2>", ["username", "password"])
