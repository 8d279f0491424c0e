"""A database made by main before the console was split into domain apps (tests/data/legacy, commit
4849165) is migrated by today's code, on SQLite and on PostgreSQL, and the appliance then serves the same
keys and deployments: a real web process on the migrated database, the gateway relaying to a simulator
that listens where the migrated replica row says, with the engine key that row holds."""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.conftest import ROOT, Proc, free_port, login

pytestmark = pytest.mark.process

LEGACY = ROOT / "tests" / "data" / "legacy"
DB_FILE = LEGACY / "main-4849165.sqlite3"
KEYS = json.loads((LEGACY / "main-4849165.keys.json").read_text())
OLD_TABLES = [
    "auth_user",
    "console_modelsource",
    "console_deployment",
    "console_replica",
    "console_apikey",
    "gateway_requestlog",
]
PG = "postgres://postgres@127.0.0.1:5432"


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture
def sqlite_db(tmp_path: Path) -> str:
    """A copy of the legacy SQLite file, as a DATABASE_URL."""
    shutil.copy(DB_FILE, tmp_path / "hearth.sqlite3")
    return f"sqlite:///{tmp_path / 'hearth.sqlite3'}"


@pytest.fixture
def postgres_db(tmp_path: Path) -> Iterator[str]:
    """A PostgreSQL database brought to the legacy schema by the legacy migrations, holding the legacy
    file's rows copied table by table, as a DATABASE_URL."""
    name = f"hearth_legacy_{os.getpid()}"
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
    url = f"{PG}/{name}"
    env = {**os.environ, "DATABASE_URL": url}
    manage(env, "migrate", "auth", "--noinput")
    manage(env, "migrate", "console", "0002", "--noinput")
    manage(env, "migrate", "gateway", "0001", "--noinput")
    copy_rows(url)
    yield url
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def copy_rows(url: str) -> None:
    """Every row of the legacy file's tables into the same tables in PostgreSQL (SQLite's 0/1 become
    booleans where the column is one), then each id sequence moved past the copied ids."""
    source = sqlite3.connect(DB_FILE)
    with psycopg.connect(url) as target:
        for table in OLD_TABLES:
            cursor = source.execute(f"SELECT * FROM {table}")
            columns = [c[0] for c in cursor.description]
            kinds = dict(
                target.execute(
                    "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = %s", (table,)
                ).fetchall()
            )
            rows = [
                [bool(v) if kinds[c] == "boolean" and v is not None else v for c, v in zip(columns, row, strict=True)]
                for row in cursor
            ]
            marks = ", ".join(["%s"] * len(columns))
            with target.cursor() as cur:
                cur.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)
            target.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")


@contextmanager
def serve(url: str, tmp_path: Path) -> Iterator[str]:
    """Migrate the database at ``url``, then run the appliance's web process on it; yields its base URL."""
    env = {**os.environ, "DATABASE_URL": url, "HEARTH_DATA_DIR": str(tmp_path / "data"), "PYTHONUNBUFFERED": "1"}
    out = manage(env, "migrate", "--noinput")
    assert "Applying console.0003_hand_over_to_domain_apps... OK" in out, out
    assert "No changes detected" in manage(env, "makemigrations", "--check", "--dry-run")
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "appliance.asgi:application", "--port", str(port), "--no-access-log"]
    web = Proc(argv, env, tmp_path / "web.log")
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(base + "/login/", timeout=1)
            break
        except httpx.TransportError:
            if web.proc.poll() is not None or time.monotonic() > deadline:
                web.stop()
                pytest.fail("web process did not come up:\n" + web.output())
            time.sleep(0.2)
    try:
        yield base
    finally:
        web.stop()


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[None]:
    """The simulator where the legacy "smol" deployment's first replica row says its engine listens."""
    sim = Proc(
        [
            sys.executable,
            "-m",
            "engines.simulator",
            "--port",
            "18001",
            "--api-key",
            "engine-key-18001",
            "--served-model-name",
            "smol",
            "--max-model-len",
            "2048",
        ],
        os.environ.copy(),
        tmp_path / "sim.log",
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get("http://127.0.0.1:18001/health", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert sim.proc.poll() is None and time.monotonic() < deadline, sim.output()
        time.sleep(0.1)
    yield
    sim.stop()


def assert_serves_the_legacy_data(base: str) -> None:
    models = httpx.get(f"{base}/v1/models", headers={"Authorization": f"Bearer {KEYS['open']}"}, timeout=10)
    assert models.status_code == 200, models.text
    assert [m["id"] for m in models.json()["data"]] == ["smol"]
    assert httpx.get(f"{base}/v1/models", headers={"x-api-key": KEYS["revoked"]}).status_code == 401
    chat = httpx.post(
        f"{base}/v1/chat/completions",
        headers={"Authorization": f"Bearer {KEYS['limited']}"},
        timeout=30,
        json={"model": "smol", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
    )
    assert chat.status_code == 200, chat.text
    assert chat.json()["usage"]["completion_tokens"] >= 1
    client = login(base)
    deployments = {d["name"]: d for d in client.get("/api/deployments").json()}
    assert set(deployments) == {"smol", "smol-old"}
    assert deployments["smol"]["state"] == "ready" and len(deployments["smol"]["replicas"]) == 2
    assert deployments["smol-old"]["engine"] == "vllm-cpu" and deployments["smol-old"]["plan"]["fits"]
    keys = {k["name"]: k for k in client.get("/api/keys").json()}
    assert {n: k["revoked"] for n, k in keys.items()} == {"ci-bot": False, "alice": False, "old-laptop": True}
    assert keys["ci-bot"]["allowed_models"] == ["smol"] and keys["ci-bot"]["max_tokens_cap"] == 256
    assert [m["name"] for m in client.get("/api/models").json()] == ["smol"]


def request_logs(url: str) -> list[tuple[str, int]]:
    query = (
        "SELECT k.name, count(*) FROM observability_requestlog r JOIN access_apikey k ON k.id = r.api_key_id "
        "GROUP BY k.name ORDER BY k.name"
    )
    if url.startswith("sqlite:///"):
        return sqlite3.connect(url.removeprefix("sqlite:///")).execute(query).fetchall()
    with psycopg.connect(url) as conn:
        return [tuple(row) for row in conn.execute(query).fetchall()]  # type: ignore[misc]


@pytest.mark.parametrize("database", ["sqlite_db", "postgres_db"])
def test_a_database_made_by_main_before_the_split_is_migrated_and_served(
    database: str, request: pytest.FixtureRequest, engine: None, tmp_path: Path
) -> None:
    url = request.getfixturevalue(database)
    with serve(url, tmp_path) as base:
        assert_serves_the_legacy_data(base)
    # the three legacy request logs, plus the one the chat completion above added, and the revoked key's 401 (a
    # genuine key refused leaves its row: gateway.callers.authenticate)
    assert request_logs(url) == [("ci-bot", 4), ("old-laptop", 1)]
