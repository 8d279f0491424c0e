"""An older backup restored in place over a running appliance (console.restore), driven by `manage.py` processes on
their own SQLite data folder and this run's Redis: budgets keep what was spent since the backup (beat's accounting
check lowers no counter of the restore's day and month to the restored log), the counters of a key made since are
gone; the archive holds no session; an archive whose data is not JSON, or whose sealed values its manifest's key
does not open, is refused in one line naming why, changing nothing, and so is any while Redis does not answer (it
keeps the restore's mark); a restore from stdin names stdin."""

import hashlib
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.test_backup_restore import SECRET_A, Instance, _rewritten, instance

pytestmark = pytest.mark.process
# The source's world: an admin owning "team-a" (a $5 day, 20,000 tokens a day) and a ready deployment whose replica
# holds a sealed engine key; a console session. NOW: the moment its requests are counted in, 15 minutes on in the
# first 15 minutes of a UTC day, so that rows ended 200 s before it are of its day (tests/test_charge_check.py).
WORLD = """
import json, time
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore
from console.access.keys import create_key
from console.access.models import ApiKey
from tests.ledgerworld import serve_model
admin = User.objects.create_superuser("admin", "", "admin-password-1")
serve_model(9, "held")
key = create_key("team-a", admin)[0]
ApiKey.objects.filter(pk=key.pk).update(daily_budget_usd=5, tokens_per_day=20000)
session = SessionStore()
session["_auth_user_id"] = str(admin.pk)
session.create()
now = time.time()
print(json.dumps({"key": key.pk, "owner": admin.pk, "now": now + 900 if now % 86400 < 900 else now}))
"""
# A request of KEY ended at AT (Unix s), charged NANO nano-USD for TOKENS prompt tokens; with COUNTED, the key's and
# its owner's counters set as the gateway leaves them after all its requests (nano-USD, tokens).
SPEND = """
import json, secrets
import redis
from django.conf import settings
from console.observability.request_rows import write_rows
from console.observability.spent import key_counters, periods, usd_counters
key, owner, nano, tokens, at, counted = {key}, {owner}, {nano}, {tokens}, {at}, {counted}
row = {{"request_id": secrets.token_hex(16), "created_at": at, "api_key_id": key, "model": "m", "status": 200}}
row |= {{"surface": "openai", "endpoint": "/v1/chat/completions", "cost_usd": nano, "duration_seconds": 1.0}}
write_rows([row | {{"prompt_tokens": tokens, "completion_tokens": 0}}])
if counted:
    r = redis.Redis.from_url(settings.REDIS_URL)
    for name in usd_counters(key, owner, at):
        r.set(name, counted[0])
    r.set(f"{{key_counters(key)}}:tpd:{{periods(at)[0]}}", counted[1])
print("{{}}")
"""
# A key made since the backup, which the restore takes away, with a counter of its spend; the name printed.
MADE_SINCE = """
import json
import redis
from django.conf import settings
from console.access.keys import create_key
from console.observability.spent import usd_counters
key = create_key("made-since", None)[0]
name = usd_counters(key.pk, None, {now})[0]
redis.Redis.from_url(settings.REDIS_URL).set(name, 123)
print(json.dumps({{"counter": name}}))
"""
# Beat's accounting check at NOW, the counters of KEY and its owner after it, whether the key made since kept its
# counter, and the sessions left.
CHECKED = """
import json
import redis
from django.conf import settings
from django.contrib.sessions.models import Session
from console.observability import charge_check
from console.observability.spent import key_counters, periods, usd_counters
now, key, owner = {now}, {key}, {owner}
mended = [m.counter for m in charge_check.check(now)]
r = redis.Redis.from_url(settings.REDIS_URL)
names = [*usd_counters(key, owner, now), f"{{key_counters(key)}}:tpd:{{periods(now)[0]}}"]
counters = [int(r.get(n) or 0) for n in names]
gone, sessions = not r.exists({made!r}), Session.objects.count()
print(json.dumps({{"mended": mended, "counters": counters, "gone": gone, "sessions": sessions}}))
"""


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Instance, dict[str, Any]]]:
    """The source appliance on SQLite, its world made (WORLD) and one request of team-a logged."""
    appliance = instance(tmp_path_factory.mktemp("inplace"), SECRET_A, None)
    appliance.manage("migrate", "--noinput", "-v0")
    made: dict[str, Any] = appliance.run(WORLD)
    appliance.run(SPEND.format(**made, nano=2737, tokens=1000, at=made["now"] - 200, counted=None))
    yield appliance, made


def archive_of(appliance: Instance, into: Path) -> tuple[Path, str]:
    """A backup of ``appliance`` written to ``into``; what the command said."""
    done = appliance.manage("backup", str(into))
    return into, done.stderr


def test_an_older_backup_restored_in_place_gives_back_no_spend_and_holds_no_session(
    source: tuple[Instance, dict[str, Any]], tmp_path: Path
) -> None:
    """A trial restored a backup taken before team-a spent $4.22 of its $5 day: within 20 s the accounting check
    lowered its counters to the $0.27 of the restored log."""
    appliance, made = source
    archive, said = archive_of(appliance, tmp_path / "older.tar.gz")
    assert "not in it: console sessions (everyone signs in again), Redis (" in said and "model weights" in said
    with tarfile.open(archive, "r:gz") as tar:
        data = tar.extractfile("data.jsonl").read()  # type: ignore[union-attr]
    assert b'"auth.user"' in data and b"sessions.session" not in data  # a session key is a signed-in cookie
    since = made["now"] - 100  # spent since the backup: the counters hold it, the restore takes its row away
    appliance.run(SPEND.format(**made, nano=39458, tokens=353, at=since, counted=(42195, 1353)))
    gone = appliance.run(MADE_SINCE.format(**made))["counter"]

    done = appliance.manage("restore", "--force", str(archive))
    assert "restore: budgets keep what was spent since the backup" in done.stdout
    assert "sessions are not in a backup: everyone signs in to the console again" in done.stdout
    checked = appliance.run(CHECKED.format(**made, made=gone))
    assert checked["mended"] == [] and checked["counters"] == [42195, 42195, 42195, 42195, 1353]
    assert checked["gone"] and checked["sessions"] == 0


def _altered(archive: Path, into: Path, data: bytes | None = None, secret_key: str | None = None) -> Path:
    """A copy of ``archive`` with its data or its manifest's secret_key replaced, the manifest's size and SHA-256
    made to match (so only what is changed is wrong)."""
    with tarfile.open(archive, "r:gz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    manifest, data = json.loads(members["manifest.json"]), members["data.jsonl"] if data is None else data
    manifest["data"] |= {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    manifest["secret_key"] = secret_key or manifest["secret_key"]
    return _rewritten(archive, into, manifest, data)


def test_an_archive_whose_data_is_not_json_or_not_sealed_under_its_key_is_refused_in_one_line(
    source: tuple[Instance, dict[str, Any]], tmp_path: Path
) -> None:
    """A trial's archive with a cut line ended in a bare JSONDecodeError traceback; one with another key said only
    "InvalidToken: "; one read from stdin was named by its temporary file."""
    appliance, _ = source
    archive, _ = archive_of(appliance, tmp_path / "whole.tar.gz")
    with tarfile.open(archive, "r:gz") as tar:
        data = tar.extractfile("data.jsonl").read()  # type: ignore[union-attr]
    lines = data.count(b"\n")
    cut = _altered(archive, tmp_path / "cut.tar.gz", data=data + b'{"model": "access.apikey", "pk": \n')
    other = _altered(archive, tmp_path / "other.tar.gz", secret_key="another-appliance-key-0123456789abcdefghijklmn")
    before = appliance.contents()
    refused = appliance.manage("restore", "--force", str(cut), check=False)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    said = f"nothing changed: data.jsonl line {lines + 1} is not JSON (Expecting value at the line's end)"
    assert said in refused.stderr
    refused = appliance.manage("restore", "--force", str(other), check=False)
    assert refused.returncode == 1 and "restore failed, nothing changed: data.jsonl line " in refused.stderr
    assert "does not open with the SECRET_KEY the archive's manifest holds: it was sealed under another key" in (
        refused.stderr
    )
    damaged = tmp_path / "damaged.tar.gz"
    damaged.write_bytes(archive.read_bytes()[:-100])
    with damaged.open("rb") as stdin:
        refused = appliance.manage("restore", "--force", "-", check=False, stdin=stdin)
    assert refused.returncode == 1 and "stdin is not a whole Hearth backup" in refused.stderr, refused.stderr
    assert "hearth-restore-" not in refused.stderr
    assert appliance.contents() == before


def test_a_restore_with_its_redis_stopped_restores_and_says_what_that_means(
    source: tuple[Instance, dict[str, Any]], tmp_path: Path
) -> None:
    """docs/operations.md's restore into a new data folder runs after make down, which stops the Redis make up
    started (it keeps nothing): the restore goes on and says so, where it once refused."""
    appliance, _ = source
    archive, _ = archive_of(appliance, tmp_path / "whole.tar.gz")
    away = Instance(appliance.env | {"REDIS_URL": "redis://127.0.0.1:9/0"}, appliance.folder)  # nothing listens
    done = away.manage("restore", "--force", str(archive), check=False)
    assert done.returncode == 0, done.stderr
    assert "restore: Redis did not answer (" in done.stdout and "so the restore is not noted there" in done.stdout
