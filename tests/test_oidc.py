"""Single sign-on against a real OpenID provider on loopback (npm's oidc-provider 9.13.3, tests/oidc/provider.mjs)
and a real web process configured for it, driven through the whole redirect flow by a real HTTP client:
Hearth → the provider's login and consent pages → Hearth's callback, which trades the code for tokens,
checks the ID token's signature against the provider's JWKS and reads the claims. The groups claim
maps to the role; someone with no mapped group is refused; a local account of the same name is never
taken over. scripts/test-services.sh installs the provider under ~/.cache/hearth/npm."""

import os
import re
import secrets
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings

from console.access.models import ApiKey, Member
from console.audit.models import AuditEntry
from tests.conftest import Proc, free_port

pytestmark = pytest.mark.django_db(transaction=True)
PROVIDER = settings.HEARTH_CACHE_DIR / "npm/lib/node_modules/oidc-provider/lib/index.js"
SCRIPT = Path(__file__).parent / "oidc" / "provider.mjs"


def wait_for(url: str, proc: Proc) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            if proc.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{proc.argv[:3]} did not come up:\n{proc.output()}")
            time.sleep(0.2)


@pytest.fixture(scope="module")
def sso(live_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The provider and a web process that signs in through it; yields the web process's base URL."""
    if not PROVIDER.exists() or not shutil.which("node"):
        pytest.fail(f"oidc-provider is not installed at {PROVIDER}: run scripts/test-services.sh (make test does)")
    folder = tmp_path_factory.mktemp("sso")
    op_port, web_port = free_port(), free_port()
    web = f"http://127.0.0.1:{web_port}"
    secret = secrets.token_urlsafe(24)
    op_env = {
        **os.environ,
        "OIDC_PROVIDER_MODULE": str(PROVIDER),
        "PORT": str(op_port),
        "CLIENT_ID": "hearth",
        "CLIENT_SECRET": secret,
        "REDIRECT_URI": f"{web}/oidc/callback/",
    }
    provider = Proc(["node", str(SCRIPT)], op_env, folder / "provider.log")
    wait_for(f"http://127.0.0.1:{op_port}/.well-known/openid-configuration", provider)
    web_env = {
        **live_env,
        "HEARTH_OIDC_ISSUER": f"http://127.0.0.1:{op_port}",
        "HEARTH_OIDC_CLIENT_ID": "hearth",
        "HEARTH_OIDC_CLIENT_SECRET": secret,
        "HEARTH_OIDC_SCOPES": "openid email profile groups",
        "HEARTH_OIDC_ROLES": "hearth-admins=admin,hearth-devs=member",
        "HEARTH_OIDC_LABEL": "Sign in with Acme",
    }
    argv = [sys.executable, "-m", "uvicorn", "appliance.asgi:application", "--port", str(web_port), "--no-access-log"]
    server = Proc(argv, web_env, folder / "web.log")
    wait_for(web + "/login/", server)
    yield web
    server.stop()
    provider.stop()


def submit(client: httpx.Client, page: httpx.Response, **fields: str) -> httpx.Response:
    """Post the page's (first) form as a browser would: its action, its hidden inputs, and ``fields``."""
    form = re.search(r'<form[^>]*action="([^"]+)"[^>]*>(.*?)</form>', page.text, re.S)
    assert form, page.text[:2000]
    hidden = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form.group(2)))
    return client.post(form.group(1), data={**hidden, **fields})


def sign_in(web: str, login: str) -> tuple[httpx.Client, httpx.Response]:
    """The whole flow from Hearth's sign-in page as ``login``; returns the client and the last page."""
    client = httpx.Client(follow_redirects=True, timeout=30)
    start = client.get(web + "/login/")
    link = re.search(r'<a class="button" href="([^"]+)">Sign in with Acme</a>', start.text)
    assert link, start.text
    login_page = client.get(web + link.group(1))
    assert "Sign-in" in login_page.text and str(login_page.url).startswith("http://127.0.0.1:")
    consent = submit(client, login_page, login=login, password="anything")  # the provider's dev login
    return client, submit(client, consent)  # "Continue": the provider redirects back to Hearth's callback


def test_a_mapped_group_signs_in_with_its_role_matched_by_subject(sso: str, django_user_model: Any) -> None:
    django_user_model.objects.create_superuser("root", "", "a-long-password-1")
    django_user_model.objects.create_user("bob", "", "bobs-local-password")  # a local "bob" keeps his account
    _, page = sign_in(sso, "alice")
    assert str(page.url) == sso + "/" and "alice (admin)" in page.text, page.text[-2000:]
    alice = django_user_model.objects.get(member__oidc_subject="alice")
    assert (alice.username, alice.email, alice.is_superuser, alice.has_usable_password()) == (
        "alice",
        "alice@example.test",
        True,
        False,
    )
    _, page = sign_in(sso, "bob")
    assert "bob-2 (member)" in page.text
    assert Member.objects.get(oidc_subject="bob").role == "member"
    assert not Member.objects.filter(user__username="bob").exists()  # the local one untouched
    sign_in(sso, "alice")
    assert django_user_model.objects.filter(member__oidc_subject="alice").count() == 1
    methods = list(AuditEntry.objects.filter(action="signin").values_list("actor_name", "changes"))
    assert methods == [("alice", {"method": "oidc"}), ("bob-2", {"method": "oidc"}), ("alice", {"method": "oidc"})]


def test_an_unmapped_account_is_refused_and_told_why(sso: str, django_user_model: Any) -> None:
    django_user_model.objects.create_superuser("root", "", "a-long-password-1")
    _, page = sign_in(sso, "eve")
    assert str(page.url) == sso + "/login/"
    assert "Your account has no groups that Hearth maps to a role" in page.text
    assert not Member.objects.filter(oidc_subject="eve").exists()


def test_a_single_sign_on_session_issues_long_lived_api_keys(sso: str, django_user_model: Any) -> None:
    django_user_model.objects.create_superuser("root", "", "a-long-password-1")
    client, _ = sign_in(sso, "bob")
    created = client.post(
        sso + "/api/keys",
        json={"name": "bob's laptop"},
        headers={"X-CSRFToken": client.cookies["csrftoken"], "Referer": sso + "/"},
    )
    assert created.status_code == 201, created.text
    key = ApiKey.objects.get(pk=created.json()["id"])
    assert key.owner.username == "bob" and key.expires_at is None  # no token lifetime on the data path
