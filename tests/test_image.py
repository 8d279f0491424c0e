"""The image and compose.yaml: what goes into the build context, and that compose.yaml reads with the documented .env.

The build context is listed the way Docker's Python client computes it (the ``docker`` SDK's
``docker.utils.build.exclude_paths`` and ``tar`` over the .dockerignore patterns, read as
``APIClient.build`` reads them), and once more by the real Docker CLI (``docker build`` of a scratch image
that copies the whole context). ``docker-compose config`` is Debian's docker-compose 1.29, which
scripts/test-services.sh installs.
"""

import os
import re
import shutil
import subprocess
import tarfile
import uuid
from pathlib import Path

import docker
import pytest
import yaml
from docker.utils.build import exclude_paths
from docker.utils.build import tar as build_tar

from tests.conftest import ROOT
from tests.docs import section

# What a checkout holds after `make up` and a first `docker compose` setup, none of which may reach the image.
PLANTED = {
    ".env": "SECRET_KEY=planted-secret\n",
    ".env.production": "SECRET_KEY=planted-secret\n",
    "hf_token": "planted-secret\n",
    "data/secret_key": "planted-secret\n",
    "data/hearth.sqlite3": "SQLite format 3\0",
    "data/logs/web.log": "log\n",
    "data/engines/hearth-replica-1.pid": "123\n",
    "data/celerybeat-schedule": "x",
    ".venv/bin/python": "#!/bin/sh\n",
    ".venv/lib/python3.12/site-packages/django/__init__.py": "",
    ".git/config": "[core]\n",
    ".git/HEAD": "ref: refs/heads/main\n",
    "console/__pycache__/urls.cpython-312.pyc": "\0",
    ".pytest_cache/v/cache/lastfailed": "{}",
    ".mypy_cache/3.12/x.json": "{}",
    ".ruff_cache/0.17.6/x": "",
    "hearth.egg-info/PKG-INFO": "",
    "build/lib.linux-x86_64-cpython-312/hearth_fast_forward.cpython-312-x86_64-linux-gnu.so": "\0",
}
# What the image needs: the code, the migrations, templates, static files and the demo catalog.
NEEDED = [
    "Dockerfile",
    "manage.py",
    "pyproject.toml",
    "setup.py",
    "gateway/native/fast_forward.c",
    "README.md",
    "appliance/settings.py",
    "console/catalog/migrations/0001_initial.py",
    "console/catalog/demo/llama-3.1-70b.json",
    "engines/simulator/__main__.py",
    "gateway/app.py",
    "templates/base.html",
]
FORBIDDEN = re.compile(r"(^|/)(\.env(\..*)?|secret_key|hf_token|.*\.sqlite3|\.venv|\.git|__pycache__|data)(/|$)")


def dockerignore_patterns(root: Path) -> list[str]:
    """The .dockerignore patterns as docker.api.build.BuildApiMixin.build reads them (comments, blanks out)."""
    lines = [line.strip() for line in (root / ".dockerignore").read_text().splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def tracked_files() -> list[str]:
    """The checkout's files git keeps (committed or not yet), as a fresh clone would have them."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [name for name in out.split("\0") if name and (ROOT / name).is_file()]


@pytest.fixture
def lived_in_checkout(tmp_path: Path) -> Path:
    """A copy of the checkout with what running it leaves behind: secrets, a database, logs, a venv, caches."""
    root = tmp_path / "hearth"
    for name in tracked_files():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, root / name)
    for name, text in PLANTED.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.process
def test_the_build_context_holds_no_secret_database_venv_or_cache(lived_in_checkout: Path) -> None:
    context = exclude_paths(str(lived_in_checkout), dockerignore_patterns(lived_in_checkout))
    assert not [path for path in context if FORBIDDEN.search(path)]
    assert not set(PLANTED) & context
    assert set(NEEDED) <= context
    assert not [path for path in context if path.startswith(("tests/", "bench/"))]  # not part of the product


@pytest.mark.process
def test_the_context_tar_the_sdk_sends_has_no_planted_secret_in_any_file(lived_in_checkout: Path) -> None:
    archive = build_tar(str(lived_in_checkout), exclude=dockerignore_patterns(lived_in_checkout))
    with tarfile.open(fileobj=archive) as tar:
        members = tar.getmembers()
        texts = [tar.extractfile(m).read() for m in members if m.isfile()]  # type: ignore[union-attr]
    assert members and not [m.name for m in members if FORBIDDEN.search(m.name)]
    assert not [t for t in texts if b"planted-secret" in t]


def test_the_checkout_itself_sends_no_venv_data_or_secret() -> None:
    context = exclude_paths(str(ROOT), dockerignore_patterns(ROOT))
    assert not [path for path in context if FORBIDDEN.search(path)]
    assert {"manage.py", "console/catalog/demo/llama-3.1-70b.json"} <= context


@pytest.mark.process
def test_dotenv_is_ignored_by_git() -> None:
    names = [".env", "hf_token", "data/secret_key", "data/hearth.sqlite3"]
    check = subprocess.run(["git", "check-ignore", *names], cwd=ROOT, capture_output=True, text=True)
    assert check.stdout.split() == names


def test_the_image_runs_as_a_non_root_user_and_the_worker_joins_the_socket_s_group() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    users = re.findall(r"^USER (\S+)", dockerfile, re.M)
    assert users and users[-1] not in {"root", "0"}
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert all("user" not in service for service in compose["services"].values())
    assert compose["services"]["worker"]["group_add"] == [
        "${DOCKER_GID:?set DOCKER_GID in .env to the group id of /var/run/docker.sock}"
    ]


@pytest.mark.docker  # fails without a daemon: make test starts one
def test_the_docker_cli_sends_the_same_context(lived_in_checkout: Path) -> None:
    """The real client: a scratch image copying the whole context, built by the docker CLI, then exported."""
    image = f"hearth-test/context-{uuid.uuid4().hex[:8]}:local"
    (lived_in_checkout / "Dockerfile.context").write_text("FROM scratch\nCOPY . /context/\n")
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}  # the classic builder: no buildx plug-in on Debian's docker.io
    build = ["docker", "build", "-q", "-f", "Dockerfile.context", "-t", image, "."]
    subprocess.run(build, cwd=lived_in_checkout, env=env, check=True, capture_output=True)
    client = docker.from_env()
    try:
        container = client.containers.create(image, command=["none"])
        try:
            with open(lived_in_checkout.parent / "export.tar", "wb") as out:
                for chunk in container.export():
                    out.write(chunk)
        finally:
            container.remove()
    finally:
        client.images.remove(image, force=True)
        client.close()
    with tarfile.open(lived_in_checkout.parent / "export.tar") as tar:
        names = {m.name.removeprefix("context/") for m in tar.getmembers() if m.name.startswith("context/")}
    assert set(NEEDED) <= names and not [n for n in names if FORBIDDEN.search(n)]


# compose.yaml


def readme_dotenv(folder: Path) -> Path:
    """Run the documented setup lines (the block under "On a GPU server", all but ``docker compose``) in ``folder``,
    beside a copy of the checkout's .env.example; returns the .env made."""
    block = re.search(r"```sh\n(.*?)```", section("On a GPU server"), re.S)
    assert block, "docs/gpu-server.md's section has no shell block"
    lines = [line for line in block[1].splitlines() if not line.startswith("docker ")]
    assert any(".env" in line for line in lines), "docs/gpu-server.md's shell block writes no .env"
    shutil.copy(ROOT / ".env.example", folder / ".env.example")
    subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(lines)], cwd=folder, check=True)
    return folder / ".env"


def compose_config(env_file: Path | None) -> subprocess.CompletedProcess[str]:
    """``docker-compose config`` on compose.yaml with nothing of the test run's environment but PATH."""
    if shutil.which("docker-compose") is None:
        pytest.fail("Debian's docker-compose is not installed: scripts/test-services.sh (make test) installs it")
    argv = ["docker-compose", "-f", "compose.yaml", "--project-name", "hearth-config-test"]
    argv += ["--env-file", str(env_file)] if env_file else []
    env = {"PATH": os.environ["PATH"], "HOME": str(ROOT)}
    return subprocess.run([*argv, "config"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.process
def test_compose_config_passes_with_the_readme_s_env(tmp_path: Path) -> None:
    result = compose_config(readme_dotenv(tmp_path))
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    assert set(config["services"]) >= {"migrate", "web", "worker", "beat", "redis", "db"}
    web = config["services"]["web"]["environment"]
    secret = (tmp_path / ".env").read_text().split("SECRET_KEY=", 1)[1].split()[0]
    assert web["SECRET_KEY"] == secret and len(secret) >= 50
    assert re.fullmatch(r"\d+", str(config["services"]["worker"]["group_add"][0]))


@pytest.mark.process
def test_compose_config_without_an_env_names_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "empty.env").write_text("")
    result = compose_config(tmp_path / "empty.env")
    assert result.returncode != 0 and "set SECRET_KEY in .env" in result.stderr
