"""``manage.py create_key``: a key made from a shell prints itself alone on stdout, once, made as the console makes
one (limits within the owner's ceilings, audited); bad input is a CommandError that says what to change."""

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from console.access.key_format import key_prefix, matches
from console.access.models import ApiKey
from console.audit.models import AuditEntry
from tests.test_console_display import a_deployment

pytestmark = pytest.mark.django_db


def _run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("create_key", *args, stdout=out, stderr=err)
    return out.getvalue().strip(), err.getvalue().strip()


def test_the_key_alone_goes_to_stdout_with_its_limits_and_the_only_admin_as_owner(admin_user: object) -> None:
    a_deployment("smol")
    key, said = _run("ci", "--models", "smol", "--max-concurrent", "2", "--daily-budget-usd", "5.50")
    row = ApiKey.objects.get()
    assert key_prefix(key) == row.prefix and matches(key, row.key_hash) and "\n" not in key
    assert (row.name, row.owner, row.allowed_models, row.max_concurrent) == ("ci", admin_user, ["smol"], 2)
    assert str(row.daily_budget_usd) == "5.50" and row.expires_at is None
    assert said == f"API key ci ({row.prefix}…) of admin; it is not shown again." and key not in said
    assert AuditEntry.objects.filter(action="key.create").count() == 1


def test_bad_input_says_what_to_change_and_makes_no_key(admin_user: object) -> None:
    with pytest.raises(CommandError, match="No active member named 'nobody'"):
        _run("ci", "--owner", "nobody")
    with pytest.raises(CommandError, match="max_concurrent must be from 1"):
        _run("ci", "--max-concurrent", "0")
    with pytest.raises(CommandError, match="Not an amount of USD: 'five'"):
        _run("ci", "--daily-budget-usd", "five")
    get_user_model().objects.create_superuser("second", "", "second-password-1")
    with pytest.raises(CommandError, match=r"--owner USERNAME \(2 admins\)"):
        _run("ci")
    assert not ApiKey.objects.exists()
