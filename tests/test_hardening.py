"""Hardening: data on disk for Hearth's user only, engines without the worker's secrets in their
environment, TLS seen through a trusted proxy only (Secure cookies and HSTS then), the hosts the console
answers to, and compose publishing the console on loopback unless told otherwise."""

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.test import Client, override_settings

from appliance.runtimes.docker import container_config
from appliance.runtimes.process import ProcessRuntime
from engines.launch import EngineKind, LaunchSpec
from tests.conftest import ROOT

WORKER_SECRETS = {
    "SECRET_KEY_FILE": "/data/secret_key",
    "REDIS_URL": "redis://h/0",
    "DATABASE_URL": "postgres://x",
    "SECRET_KEY": "s" * 50,
    "HEARTH_OIDC_CLIENT_SECRET": "c",
}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.process
def test_a_fresh_data_folder_and_its_sqlite_database_are_private(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"} | {"HEARTH_DATA_DIR": str(data), "DEBUG": "1"}
    done = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        umask=0o022,
    )
    assert done.returncode == 0, done.stderr
    assert mode(data) == 0o700 and mode(data / "hearth.sqlite3") == 0o600


@pytest.mark.process
def test_an_existing_world_readable_data_folder_is_tightened_at_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "engines").mkdir(parents=True)
    for folder in (data, data / "engines"):
        folder.chmod(0o755)
    (data / "hearth.sqlite3").write_text("")
    (data / "engines" / "r.log").write_text("a prompt")
    for f in (data / "hearth.sqlite3", data / "engines" / "r.log"):
        f.chmod(0o644)
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"} | {"HEARTH_DATA_DIR": str(data), "DEBUG": "1"}
    imported = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert imported.returncode == 0, imported.stderr
    assert mode(data) == 0o755, "importing the settings changed the data folder"
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (mode(data), mode(data / "engines")) == (0o700, 0o700)
    assert (mode(data / "hearth.sqlite3"), mode(data / "engines" / "r.log")) == (0o600, 0o600)


def spec(code: str, env: dict[str, str]) -> LaunchSpec:
    return LaunchSpec(
        engine=EngineKind.SIMULATOR,
        program=[sys.executable, "-c", code],
        args=[],
        env=env,
        host="127.0.0.1",
        port=1,
        api_key="hek-k",
        served_model_name="m",
    )


@pytest.mark.process
def test_a_local_engine_gets_an_allow_listed_environment_and_private_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in WORKER_SECRETS.items() | {"SITE_SETTING": "x", "LC_ALL": "C.UTF-8"}.items():
        monkeypatch.setenv(name, value)
    runtime = ProcessRuntime(tmp_path / "engines", passed_env=["SITE_SETTING"])
    code = "import os, json; print(json.dumps(sorted(os.environ)), flush=True)"
    runtime.start("r1", spec(code, {"VLLM_API_KEY": "hek-k", "PYTHONPATH": "/x"}))
    deadline = time.monotonic() + 10
    while runtime.status("r1").running and time.monotonic() < deadline:
        time.sleep(0.05)
    names = set(json.loads(runtime.logs("r1").strip().splitlines()[-1]))
    assert not names & set(WORKER_SECRETS), names
    assert {"PATH", "HOME", "LC_ALL", "SITE_SETTING", "VLLM_API_KEY", "PYTHONPATH"} <= names
    assert mode(tmp_path / "engines") == 0o700 and mode(tmp_path / "engines" / "r1.log") == 0o600


def test_an_engine_container_gets_its_spec_environment_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in WORKER_SECRETS.items():
        monkeypatch.setenv(name, value)
    config = container_config("c", spec("", {"VLLM_API_KEY": "hek-k"}), {})
    assert config["environment"] == {"VLLM_API_KEY": "hek-k"}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("trusted", "peer", "secure"),
    [
        ([], "10.9.8.7", False),
        (["10.9.0.0/16"], "10.8.0.1", False),
        (["10.9.8.7"], "10.9.8.7", True),
        (["10.9.0.0/16", "fd00::/8"], "10.9.8.7", True),
    ],
)
def test_tls_behind_a_proxy_counts_only_when_the_proxy_is_trusted(
    client: Client, admin_user: object, trusted: list[str], peer: str, secure: bool
) -> None:
    with override_settings(HEARTH_TRUSTED_PROXIES=trusted):
        resp = client.get("/login/", REMOTE_ADDR=peer, HTTP_X_FORWARDED_PROTO="https")
    assert ("Strict-Transport-Security" in resp) is secure
    assert bool(resp.cookies["csrftoken"]["secure"]) is secure


@pytest.mark.django_db
def test_tls_served_directly_gives_secure_cookies_and_hsts(client: Client, admin_user: object) -> None:
    resp = client.get("/login/", secure=True)
    assert resp["Strict-Transport-Security"] == "max-age=31536000"
    assert resp.cookies["csrftoken"]["secure"] is True
    assert not client.get("/login/").cookies["csrftoken"]["secure"]


def cookie_attributes(header: str) -> set[str]:
    """A Set-Cookie header's attributes, less its value and its expiry (``Max-Age``, ``expires``)."""
    _, *attributes = (part.strip() for part in header.split(";"))
    return {a for a in attributes if not a.lower().startswith(("max-age=", "expires="))}


@pytest.mark.django_db
@pytest.mark.parametrize("secure", [False, True])
def test_the_flash_message_cookie_is_deleted_with_the_attributes_it_was_set_with(
    admin: Client, admin_user: object, secure: bool
) -> None:
    from console.access.keys import create_key

    row, _ = create_key("k", admin_user)
    saved = admin.post(f"/keys/{row.pk}/", {"max_tokens_cap": "5"}, secure=secure)  # flashes "Limits of k saved."
    shown = admin.get(saved["Location"], secure=secure)
    assert "Limits of k saved." in shown.content.decode()
    set_header, deleted = saved.cookies["messages"].OutputString(), shown.cookies["messages"].OutputString()
    assert "Max-Age=0" in deleted and deleted.startswith('messages="";')
    assert cookie_attributes(set_header) == cookie_attributes(deleted), (set_header, deleted)
    assert {"HttpOnly", "Path=/", "SameSite=Lax"} <= cookie_attributes(deleted), deleted


@pytest.mark.django_db
def test_a_trusted_proxy_gives_the_clients_address_and_nobody_else_can(client: Client, admin_user: object) -> None:
    from console.audit.models import AuditEntry

    with override_settings(HEARTH_TRUSTED_PROXIES=["127.0.0.1"]):
        client.post(
            "/login/",
            {"username": "admin", "password": "admin-password-1"},
            HTTP_X_FORWARDED_FOR="198.51.100.1, 203.0.113.9",
        )
    client.post("/login/", {"username": "admin", "password": "admin-password-1"}, HTTP_X_FORWARDED_FOR="203.0.113.7")
    assert list(AuditEntry.objects.filter(action="signin").values_list("ip", flat=True)) == ["203.0.113.9", "127.0.0.1"]


@pytest.mark.django_db
def test_the_console_answers_only_to_its_own_host_names(client: Client, admin_user: object) -> None:
    assert client.get("/login/", HTTP_HOST="evil.example").status_code == 400
    assert client.get("/login/", HTTP_HOST="127.0.0.1:8000").status_code == 200


def test_compose_publishes_the_console_on_loopback_and_runs_beat_alone() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = compose["services"]
    assert services["web"]["ports"] == ["${HEARTH_BIND:-127.0.0.1}:${HEARTH_PORT:-8000}:8000"]
    assert "-B" not in services["worker"]["command"] and "beat" not in services["worker"]["command"]
    assert services["beat"]["command"][:6] == ["python", "-m", "celery", "-A", "appliance", "beat"]
    assert services["web"]["command"][:3] == ["python", "-m", "appliance.web_server"]  # proxy headers off there
    # (tests/test_web_workers.py checks what it runs uvicorn with)


@pytest.mark.django_db
@pytest.mark.parametrize("how", ["plain", "tls", "trusted proxy"])
def test_signing_in_over_tls_sets_every_cookie_secure(client: Client, admin_user: object, how: str) -> None:
    """The session cookie too, which the session middleware sets on the way out (after the views)."""
    extra: dict[str, Any] = {"secure": True} if how == "tls" else {}
    if how == "trusted proxy":
        extra = {"REMOTE_ADDR": "10.9.8.7", "HTTP_X_FORWARDED_PROTO": "https"}
    with override_settings(HEARTH_TRUSTED_PROXIES=["10.9.8.7"]):
        client.get("/login/", **extra)
        signed_in = client.post("/login/", {"username": "admin", "password": "admin-password-1"}, **extra)
    assert signed_in.status_code == 302 and {"sessionid", "csrftoken"} <= set(signed_in.cookies)
    assert {name: bool(c["secure"]) for name, c in signed_in.cookies.items()} == dict.fromkeys(
        signed_in.cookies, how != "plain"
    )
