"""Settings from the environment: production mode refuses an empty or placeholder SECRET_KEY."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parent.parent


def start_django(**env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "SECRET_KEY_FILE", "DEBUG"}}
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; print(settings.DEBUG)",
        ],
        cwd=ROOT,
        env={**base, "DJANGO_SETTINGS_MODULE": "appliance.settings", **env},
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize("secret", ["", "change-me", "django-insecure-abc"])
def test_production_refuses_an_empty_or_placeholder_secret(secret: str, tmp_path: Path) -> None:
    result = start_django(SECRET_KEY=secret, DEBUG="false", HEARTH_DATA_DIR=str(tmp_path))
    assert result.returncode != 0
    assert "SECRET_KEY is empty or a placeholder" in result.stderr
    assert f"same HEARTH_DATA_DIR (it reads the key `make up` keeps in {tmp_path / 'secret_key'})" in result.stderr


def test_a_command_given_make_ups_data_folder_reads_the_key_kept_there(tmp_path: Path) -> None:
    (tmp_path / "secret_key").write_text("made-by-make-up-" + "k" * 40 + "\n")  # as scripts/up.sh writes it
    script = "import django; django.setup(); from django.conf import settings; print(settings.SECRET_KEY)"
    base = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "SECRET_KEY_FILE", "DEBUG"}}
    env = {**base, "DJANGO_SETTINGS_MODULE": "appliance.settings", "HEARTH_DATA_DIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "made-by-make-up-" + "k" * 40, result.stderr


def test_it_reads_the_secret_from_a_file(tmp_path: Path) -> None:
    (tmp_path / "key").write_text("a-real-secret-" + "q" * 40 + "\n")
    result = start_django(SECRET_KEY_FILE=str(tmp_path / "key"), DEBUG="false")
    assert result.returncode == 0, result.stderr


def test_debug_mode_runs_without_a_secret() -> None:
    result = start_django(DEBUG="true")
    assert result.returncode == 0 and result.stdout.strip() == "True", result.stderr


def test_a_malformed_boolean_names_the_variable() -> None:
    result = start_django(DEBUG="maybe")
    assert "DEBUG='maybe' is not a boolean" in result.stderr


def test_an_empty_database_url_means_the_embedded_sqlite_default(tmp_path: Path) -> None:
    script = "import django; django.setup(); from django.db import connection; print(connection.vendor)"
    base = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env = {**base, "DJANGO_SETTINGS_MODULE": "appliance.settings", "DEBUG": "true", "DATABASE_URL": ""}
    env["HEARTH_DATA_DIR"] = str(tmp_path)
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "sqlite", result.stderr
