"""Backup on one appliance, restore on a fresh one (console.backup): each instance is its own database and data
folder, driven by `manage.py` processes; the restored one's real web server then takes the same API key
(GET /v1/models lists the deployment) and its console lists the same deployments. On PostgreSQL and on SQLite,
from today's schema and from an older one (whose rows the newer migrations then upgrade), through a file and
through stdout and stdin. A restore refuses, changing nothing, a database that holds data (unless --force), a
damaged archive and one from a newer schema; the archive is 0600."""

import io
import json
import os
import stat
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from unittest.mock import ANY
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pytest

from tests.conftest import ROOT, login, start_web

pytestmark = pytest.mark.process
SECRET_A = "backup-test-key-a-0123456789abcdefghijklmnopqrstuvwxyz"
SECRET_B = "backup-test-key-b-0123456789abcdefghijklmnopqrstuvwxyz"
H100, H100_PRICE = "NVIDIA H100 80GB HBM3", "3.2100"  # USD per GPU-hour set on the source (seeded: 3.00)
# Instance A's world: an admin, a ready deployment "held" whose replica holds a sealed engine key, an API key
# for it, a GPU price of its own and a seeded one deleted. Printed as JSON: the API key, the engine key and the
# deployment's id.
POPULATE = f"""
import json
from django.contrib.auth.models import User
from console.access.keys import create_key
from console.observability.models import PriceSetting
from tests.ledgerworld import serve_model
admin = User.objects.create_superuser("admin", "", "admin-password-1")
deployment = serve_model(9, "held")
type(deployment).objects.filter(pk=deployment.pk).update(desired="serving")  # as a launched deployment wants
PriceSetting.objects.filter(gpu_model="{H100}").update(usd_per_gpu_hour="{H100_PRICE}")
PriceSetting.objects.exclude(gpu_model="{H100}").order_by("gpu_model").first().delete()  # a seeded price
engine_key = deployment.replicas.get().engine_api_key
print(json.dumps({{"key": create_key("laptop", admin)[1], "engine_key": engine_key, "deployment": deployment.pk}}))
"""
# A deployment an admin left stopped though wanted serving, before deployments 0010 (which makes such a row's
# desired state "stopped"): the older schema's row the newer migration must upgrade once restored.
PARKED = """
from console.deployments.models import Deployment
Deployment.objects.create(
    name="parked", engine="simulator", served_model_name="parked", max_model_len=0, kv_space_gib=0, plan={},
    state="stopped", desired="serving",
)
print("{}")
"""
# The older schema is made by migrating back, and read by today's code (the backup reads every table): the columns
# today's models have that it lacks are added, empty, for the backup to read (none of their rows exists). Today that
# is capacity 0003's Tuning.heartbeat_at, gone with deployments 0010's dependents.
COLUMNS_TODAY_READS = """
from django.apps import apps
from django.db import connection
with connection.cursor() as cursor:
    tables = set(connection.introspection.table_names(cursor))
    missing = []
    for model in apps.get_models():
        if model._meta.managed and model._meta.db_table in tables:
            have = {c.name for c in connection.introspection.get_table_description(cursor, model._meta.db_table)}
            missing += [(model, f) for f in model._meta.local_concrete_fields if f.column not in have]
with connection.schema_editor() as editor:
    for model, field in missing:
        editor.add_field(model, field)
print("{}")
"""
# What an instance holds that the round trip must keep, as JSON.
HOLDINGS = """
import json
from console.deployments.models import Deployment, Replica
from console.observability.models import PriceSetting
print(json.dumps({
    "engine_keys": [r.engine_api_key for r in Replica.objects.all()],
    "prices": {p.gpu_model: str(p.usd_per_gpu_hour) for p in PriceSetting.objects.all()},
    "desired": dict(Deployment.objects.values_list("name", "desired")),
    "state": dict(Deployment.objects.values_list("name", "state")),
    "running": [r.running for r in Replica.objects.all()],
    "updated": {d.name: d.updated_at.isoformat() for d in Deployment.objects.all()},
}))
"""


@dataclass
class Instance:
    """One appliance: its environment (database, data folder, SECRET_KEY) and what it writes in its folder."""

    env: dict[str, str]
    folder: Path

    def manage(
        self, *args: str, check: bool = True, stdin: IO[bytes] | None = None, stdout: IO[bytes] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`manage.py ARGS`, its output captured (``stdout``: written there instead)."""
        argv = [sys.executable, "manage.py", *args]
        out = stdout or subprocess.PIPE
        done = subprocess.run(
            argv, cwd=ROOT, env=self.env, stdin=stdin, stdout=out, stderr=subprocess.PIPE, text=True, timeout=300
        )
        assert not check or done.returncode == 0, f"{done.stdout}{done.stderr}"
        return done

    def run(self, script: str) -> dict[str, object]:
        """``script`` run by `manage.py shell`; the JSON of its last line."""
        return dict(json.loads(self.manage("shell", "-c", script).stdout.strip().splitlines()[-1]))

    def contents(self) -> str:
        """Everything the database holds, as `manage.py dumpdata` writes it (rows by primary key)."""
        return self.manage("dumpdata", "--natural-foreign", "-e", "contenttypes", "-e", "auth.permission").stdout


def instance(folder: Path, secret: str, database_url: str | None) -> Instance:
    """An appliance on ``database_url`` (None: SQLite in its data folder ``folder``), with SECRET_KEY ``secret``."""
    drop = ("DATABASE_URL", "HEARTH_INSTANCE", "HEARTH_DATA_DIR", "PYTEST_XDIST_WORKER", "HEARTH_TEST_WORKER")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env |= {"HEARTH_DATA_DIR": str(folder / "data"), "SECRET_KEY": secret, "PYTHONPATH": str(ROOT)}
    if database_url:
        env["DATABASE_URL"] = database_url
    return Instance(env, folder)


def fresh_postgres_database(name: str) -> str:
    """The database ``name`` on the run's PostgreSQL server, dropped and created empty; its URL."""
    url = urlsplit(os.environ["DATABASE_URL"])
    with psycopg.connect(urlunsplit(url._replace(path="/postgres")), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit(url._replace(path=f"/{name}"))


@dataclass
class Backup:
    """Instance A after its backup: the archive and what A held."""

    source: Instance
    archive: Path
    key: str
    deployment: int
    holdings: dict[str, object]
    upgraded: dict[str, str]  # deployment name → desired state, as the migrations since the archive make it


def backed_up(folder: Path, database_url: str | None, older: bool = False) -> Backup:
    """A populated instance A (POPULATE) and its backup, written over a world-readable file of the same name;
    ``older``: A's schema before deployments 0010, holding PARKED too."""
    source = instance(folder / "a", SECRET_A, database_url)
    source.manage("migrate", "--noinput", "-v0")
    if older:
        source.manage("migrate", "--noinput", "-v0", "deployments", "0009_idle_policy")
        source.run(COLUMNS_TODAY_READS)
        source.run(PARKED)
    made = source.run(POPULATE)
    archive = folder / "hearth-backup.tar.gz"
    archive.write_text("an older file, world-readable")
    archive.chmod(0o644)
    source.manage("backup", str(archive))
    holdings = source.run(HOLDINGS)
    assert holdings["engine_keys"] == [made["engine_key"]]
    upgraded = {"parked": "stopped"} if older else {}  # by deployments 0010
    return Backup(source, archive, str(made["key"]), int(str(made["deployment"])), holdings, upgraded)


@pytest.fixture(scope="module")
def postgres_backup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backup]:
    yield backed_up(tmp_path_factory.mktemp("pg"), fresh_postgres_database("backup_a"), older=True)
    url = urlsplit(os.environ["DATABASE_URL"])
    with psycopg.connect(urlunsplit(url._replace(path="/postgres")), autocommit=True) as admin:
        for name in ("backup_a", "backup_b"):
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def restored_serves_as_the_source(target: Instance, backup: Backup) -> None:
    """The restored ``target`` is at today's schema and holds what the source held (its engine key opens under the
    target's own SECRET_KEY, its prices, each deployment's desired state but those the newer migrations upgraded),
    but the ready deployment's engine, the source's: its replica ended, the deployment stopped (just now) for this
    appliance's worker to launch again (console.deployments.stopping.forget_restored_engines); its web server takes
    the source's API key and lists its deployment to the admin."""
    target.manage("migrate", "--check")
    held = backup.holdings
    desired = dict(held["desired"]) | backup.upgraded  # type: ignore[call-overload]
    assert held["state"]["held"] == "ready" and held["running"] == [True]  # type: ignore[index]
    state = dict(held["state"]) | {"held": "stopped"}  # type: ignore[call-overload]
    updated = dict(held["updated"]) | {"held": ANY}  # type: ignore[call-overload]
    expected = held | {"desired": desired, "state": state, "running": [False], "updated": updated}
    assert target.run(HOLDINGS) == expected
    prices = dict(backup.holdings["prices"])  # type: ignore[call-overload]
    assert prices[H100] == H100_PRICE and len(prices) == 4  # of the 5 seeded
    web, base = start_web(target.env, target.folder / "web.log")
    try:
        models = httpx.get(base + "/v1/models", headers={"Authorization": f"Bearer {backup.key}"}, timeout=30)
        assert models.status_code == 200, models.text
        assert [m["id"] for m in models.json()["data"]] == ["held"]
        wrong = httpx.get(base + "/v1/models", headers={"Authorization": f"Bearer {backup.key}x"}, timeout=30)
        assert wrong.status_code == 401
        page = login(base).get("/deployments/")
        link = f'<a href="/deployments/{backup.deployment}/">held</a>'  # the same deployment, by the same id
        assert page.status_code == 200 and link in page.text, page.text[-2000:]
    finally:
        web.stop()


def test_it_restores_a_postgresql_backup_into_a_fresh_instance(postgres_backup: Backup, tmp_path: Path) -> None:
    assert stat.S_IMODE(postgres_backup.archive.stat().st_mode) == 0o600
    target = instance(tmp_path, SECRET_B, fresh_postgres_database("backup_b"))
    target.manage("migrate", "--noinput", "-v0")  # as compose's one-shot migrate service leaves it: seeded rows
    piped = tmp_path / "piped.tar.gz"  # `docker compose exec -T web python manage.py backup - > FILE`, and back
    with piped.open("wb") as out:
        postgres_backup.source.manage("backup", "-", stdout=out)
    with piped.open("rb") as archive:
        done = target.manage("restore", "-", stdin=archive)
    assert "SECRET_KEY is not the archive's" in done.stdout
    restored_serves_as_the_source(target, postgres_backup)


@pytest.mark.parametrize("older", [False, True], ids=["same-schema", "older-schema"])
def test_it_restores_a_sqlite_backup_into_a_fresh_data_folder(tmp_path: Path, older: bool) -> None:
    backup = backed_up(tmp_path, None, older)
    assert stat.S_IMODE(backup.archive.stat().st_mode) == 0o600
    assert (tmp_path / "a" / "data" / "hearth.sqlite3").exists()
    assert backup.holdings["desired"] == {"held": "serving"} | ({"parked": "serving"} if older else {})
    target = instance(tmp_path / "b", SECRET_B, None)  # nothing there yet
    done = target.manage("restore", str(backup.archive))
    assert "a key revoked since works again (revoke it again)" in done.stdout  # a trial: nothing said so
    restored_serves_as_the_source(target, backup)
    assert target.run(AUDITED) == {"backup.restore": [str(backup.archive)]}  # the restore, in the log it restored
    assert backup.source.run(AUDITED)["backup.create"]  # the backup, in the source's log (after the archive)


AUDITED = """
import json
from console.audit.models import AuditEntry
entries = AuditEntry.objects.filter(action__startswith="backup.")
print(json.dumps({a: [e.target_name for e in entries if e.action == a] for a in {e.action for e in entries}}))
"""


def _rewritten(archive: Path, into: Path, manifest: dict[str, object] | None = None, data: bytes | None = None) -> Path:
    """A copy of ``archive`` with its manifest or data replaced."""
    with tarfile.open(archive, "r:gz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    members["manifest.json"] = json.dumps(manifest).encode() if manifest else members["manifest.json"]
    members["data.jsonl"] = data if data is not None else members["data.jsonl"]
    with tarfile.open(into, "w:gz") as tar:
        for name in ("manifest.json", "data.jsonl"):
            info = tarfile.TarInfo(name)
            info.size = len(members[name])
            tar.addfile(info, io.BytesIO(members[name]))
    return into


def test_it_refuses_a_database_holding_data_and_damaged_archives_changing_nothing(
    postgres_backup: Backup, tmp_path: Path
) -> None:
    target = instance(tmp_path, SECRET_B, None)
    target.manage("migrate", "--noinput", "-v0")
    target.manage("createsuperuser", "--noinput", "--username", "someone-else", "--email", "")
    before = target.contents()

    refused = target.manage("restore", str(postgres_backup.archive), check=False)
    assert refused.returncode == 1 and "already holds data (tables" in refused.stderr and "auth_user" in refused.stderr

    whole = postgres_backup.archive.read_bytes()
    truncated = tmp_path / "truncated.tar.gz"
    truncated.write_bytes(whole[: len(whole) // 2])
    with tarfile.open(postgres_backup.archive, "r:gz") as tar:
        data = tar.extractfile("data.jsonl").read()  # type: ignore[union-attr]
    altered = _rewritten(postgres_backup.archive, tmp_path / "altered.tar.gz", data=data.replace(b"held", b"hold"))
    for damaged, says in ((truncated, "is not a whole Hearth backup"), (altered, "is damaged")):
        refused = target.manage("restore", "--force", str(damaged), check=False)
        assert refused.returncode == 1 and says in refused.stderr, refused.stderr
    folder = target.manage("restore", "--force", str(tmp_path), check=False)
    assert folder.returncode == 1 and f"restore: {tmp_path} is a folder" in folder.stderr
    missing = target.manage("restore", "--force", str(tmp_path / "nowhere.tar.gz"), check=False)
    assert missing.returncode == 1 and f"restore: no such file: {tmp_path / 'nowhere.tar.gz'}" in missing.stderr
    with open(os.devnull, "rb") as nothing:
        empty = target.manage("restore", "--force", "-", check=False, stdin=nothing)
    assert empty.returncode == 1 and "restore: stdin was empty" in empty.stderr, empty.stderr
    assert target.contents() == before

    target.manage("restore", "--force", str(postgres_backup.archive))
    after = target.contents()
    assert '"username": "admin"' in after and "someone-else" not in after
    restored_serves_as_the_source(target, postgres_backup)


def test_it_refuses_an_archive_from_a_newer_schema_before_touching_the_database(
    postgres_backup: Backup, tmp_path: Path
) -> None:
    with tarfile.open(postgres_backup.archive, "r:gz") as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
    manifest["migrations"].append(["deployments", "9999_from_a_newer_hearth"])
    newer = _rewritten(postgres_backup.archive, tmp_path / "newer.tar.gz", manifest=manifest)
    target = instance(tmp_path, SECRET_B, None)
    refused = target.manage("restore", str(newer), check=False)
    assert refused.returncode == 1, refused.stdout
    assert "comes from a newer Hearth" in refused.stderr and "deployments.9999_from_a_newer_hearth" in refused.stderr
    assert not (tmp_path / "data" / "hearth.sqlite3").exists()
