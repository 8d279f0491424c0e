"""Backup and restore of a whole appliance in one archive: ``manage.py backup FILE`` and ``manage.py restore FILE``
(console/management/commands; FILE ``-`` is stdout or stdin). This module writes and reads archives;
console.restore puts one into a database.

The archive is a gzip'd tar, created with mode 0600 (it holds secrets), of two members:

- ``manifest.json``: ``{"format": "hearth-backup", "version": 1, "created_at": ISO 8601 UTC, "database":
  "postgresql" | "sqlite", "migrations": [[app label, migration name], ...] (those applied at backup),
  "secret_key": the appliance's SECRET_KEY, "data": {"objects": rows, "bytes": size, "sha256": hex}}``;
- ``data.jsonl``: every row of every table of the installed apps but sessions (users, members, API keys, models,
  deployments, replicas, their events, prices, metric mappings and every other setting kept in the database, the
  request log, metric history, the audit log, sign-in throttling, content types and permissions), one object a line in
  Django's own serialization format (``jsonl``, what ``dumpdata`` and ``loaddata`` read and write), primary keys
  kept: deployment ids (in URLs, in engine containers' ``hearth.deployment`` labels) stay what they were.

Why Django's serializers and not pg_dump or SQLite's ``.dump``: one archive for both databases (an appliance on the
embedded SQLite moves to PostgreSQL by a backup and a restore); no client binaries (the image has no pg_dump, and a
pg_dump older than the server refuses it); nothing tied to the server's version; rows pass through the models, so
sealed values are handled field by field and an older schema's rows load into the models as they were then.
Rows stream both ways (``iterator``, a line at a time): memory does not grow with the request log. The rows are read
in one snapshot (PostgreSQL: REPEATABLE READ; SQLite: one deferred read transaction), so they agree with each other.

Secrets: engine keys (SealedCharField) are written sealed under the appliance's SECRET_KEY, which the manifest
holds. A restore opens them with the archive's key and seals them again under the target's own SECRET_KEY, so the
target keeps its key and still reaches the engines. API keys are kept as their SHA-256 (console.access.key_format):
the same keys work on the target whatever its SECRET_KEY. Sessions (LEFT_OUT) are not archived: a session's key is
the console's ``sessionid`` cookie, so an archive holding them would sign its reader in as whoever was signed in;
after a restore everyone signs in again.

Not in the archive (LEFT_OUT_WORDS): sessions; Redis (the broker's queue, caches, rate-limit windows and spending
counters, which beat checks against the request log, and the request-log spool's last seconds); engine containers
and the model weights they downloaded; HEARTH_DATA_DIR's runtime files (engine pid files and logs, Prometheus's
multiprocess files, beat's schedule); the environment (``.env``, HEARTH_HF_TOKEN_FILE); Caddy's certificates;
Prometheus's own data. None is needed to read the data back. The SQLite
database under HEARTH_DATA_DIR is the data itself, and the generated ``secret_key`` file there is the SECRET_KEY
the manifest holds.

A restore (console.restore) checks the whole archive and refuses one from a newer Hearth or a database holding data
before it changes anything; then, in one transaction, it rebuilds the archive's schema, loads the rows into the
models as they were there, and migrates to today's schema: an archive from an older Hearth is upgraded as the older
appliance would have been in place.
"""

import hashlib
import io
import json
import os
import sys
import tarfile
import tempfile
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, time
from pathlib import Path
from typing import IO, Any

from django.apps import apps
from django.conf import settings
from django.core.management.base import CommandError
from django.core.serializers import jsonl
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.db.migrations.recorder import MigrationRecorder
from django.db.models import Model

from console.sealed import SealedCharField, seal

FORMAT, VERSION = "hearth-backup", 1
MANIFEST, DATA = "manifest.json", "data.jsonl"
PRIVATE = 0o600
CHUNK = 2000  # rows read per query while dumping
HASH_BLOCK = 1 << 20  # bytes
LEFT_OUT = frozenset({"sessions.session"})  # models whose rows are not archived (module docstring)
LEFT_OUT_WORDS = (
    "console sessions (everyone signs in again), Redis (queues, caches, rate-limit windows, spending counters), "
    "engine containers and model weights, runtime files, the environment (.env, the Hugging Face token file), "
    "Caddy's certificates, Prometheus's data"
)


@dataclass(frozen=True)
class Manifest:
    """What an archive says of itself (the module docstring gives its JSON)."""

    created_at: str
    database: str
    migrations: list[tuple[str, str]]
    secret_key: str
    objects: int
    size: int  # bytes of data.jsonl
    sha256: str

    def to_json(self) -> bytes:
        fields = asdict(self)
        data = {"objects": fields.pop("objects"), "bytes": fields.pop("size"), "sha256": fields.pop("sha256")}
        return json.dumps({"format": FORMAT, "version": VERSION, **fields, "data": data}, indent=1).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> "Manifest":
        """Raises CommandError for another format or version; AttributeError, KeyError, TypeError or ValueError for
        a malformed one."""
        doc = json.loads(raw)
        if doc.get("format") != FORMAT:
            raise CommandError("not a Hearth backup (its manifest names no hearth-backup format)")
        if doc.get("version") != VERSION:
            raise CommandError(f"backup format version {doc.get('version')!r}; this Hearth reads version {VERSION}")
        migrations = [(str(app), str(name)) for app, name in doc["migrations"]]
        data = doc["data"]
        return cls(
            str(doc["created_at"]),
            str(doc["database"]),
            migrations,
            str(doc["secret_key"]),
            int(data["objects"]),
            int(data["bytes"]),
            str(data["sha256"]),
        )


def archived_models() -> list[type[Model]]:
    """Every concrete model of the installed apps but those LEFT_OUT: an archive holds the rows of each."""
    models = [m for c in apps.get_app_configs() for m in c.get_models() if m._meta.managed and not m._meta.proxy]
    return [m for m in models if m._meta.label_lower not in LEFT_OUT]


def tables(models: Iterable[type[Model]]) -> list[str]:
    """The database tables of ``models``, with their many-to-many tables."""
    names = []
    for model in models:
        names.append(model._meta.db_table)
        throughs = (f.remote_field.through for f in model._meta.local_many_to_many)
        names += [t._meta.db_table for t in throughs if t is not None and t._meta.auto_created]
    return names


class _Encoder(DjangoJSONEncoder):
    """DjangoJSONEncoder, but datetimes and times to the microsecond (it cuts them to milliseconds)."""

    def default(self, o: Any) -> Any:
        return o.isoformat() if isinstance(o, datetime | time) else super().default(o)


class _SealingSerializer(jsonl.Serializer):
    """Django's JSON Lines serializer, writing a SealedCharField sealed (as the database holds it), not in clear."""

    _current: dict[str, Any]  # the row's fields as Django's Python serializer collects them

    def handle_field(self, obj: Model, field: Any) -> None:
        super().handle_field(obj, field)
        if isinstance(field, SealedCharField) and self._current[field.name]:
            self._current[field.name] = seal(self._current[field.name])


@contextmanager
def _snapshot() -> Iterator[None]:
    """One consistent view of the database while the block reads: on PostgreSQL a REPEATABLE READ, READ ONLY
    transaction; on SQLite (WAL mode) a deferred one, which holds no write lock (Hearth's own transactions take it at
    BEGIN), so the gateway and the console write on meanwhile."""
    if connection.vendor == "postgresql":
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield
        return
    with connection.cursor() as cursor:
        cursor.execute("BEGIN DEFERRED")
        try:
            yield
        finally:
            cursor.execute("COMMIT")


def _rows(models: list[type[Model]], counted: list[int]) -> Iterator[Model]:
    for model in models:
        for row in model._base_manager.order_by(model._meta.pk.name).iterator(chunk_size=CHUNK):
            counted[0] += 1
            yield row


def _digest(stream: IO[bytes]) -> tuple[str, int]:
    """(SHA-256 hex, bytes) of what ``stream`` holds."""
    digest, size = hashlib.sha256(), 0
    while block := stream.read(HASH_BLOCK):
        digest.update(block)
        size += len(block)
    return digest.hexdigest(), size


class NotAFile(ValueError):
    """A backup's destination is there and is not a regular file (``refused_destination``)."""


def refused_destination(destination: str) -> str:
    """Why ``destination`` may not take an archive, "" when it may: the archive is renamed over it whole, which
    replaces whatever is there, so only a new path or a regular file (not through a symbolic link) may be named. A
    backup to /dev/null, run as root, left a regular file in its place."""
    path = Path(destination)
    if destination == "-" or not path.exists(follow_symlinks=False):
        return ""
    if path.is_symlink():
        return f"it is a symbolic link (to {os.readlink(path)}); name the file itself"
    if path.is_file():
        return ""
    kind = "folder" if path.is_dir() else "device, pipe or socket"
    return f"it is a {kind}, not a file; name a new file, or '-' to write the archive to stdout"


def backup(destination: str) -> Manifest:
    """Write the archive to ``destination`` (a new path or a regular file, replaced whole once written, mode 0600;
    or ``-``: stdout) and return its manifest. Raises NotAFile, before anything is read, for a destination that is
    another kind of thing (``refused_destination``); OSError when it cannot be written, DatabaseError when the
    database cannot be read."""
    if why := refused_destination(destination):
        raise NotAFile(f"will not replace {destination}: {why}.")
    folder = None if destination == "-" else Path(destination).resolve().parent
    with tempfile.TemporaryDirectory(dir=folder, prefix=".hearth-backup-") as tmp:  # made 0700
        data = Path(tmp) / DATA
        counted = [0]
        with _snapshot(), data.open("w", encoding="utf-8") as out:
            _SealingSerializer().serialize(_rows(archived_models(), counted), stream=out, cls=_Encoder)
            applied = sorted(MigrationRecorder(connection).applied_migrations())
        with data.open("rb") as stream:
            sha256, size = _digest(stream)
        created = datetime.now(UTC).isoformat(timespec="seconds")
        manifest = Manifest(created, connection.vendor, applied, settings.SECRET_KEY, counted[0], size, sha256)
        archive = Path(tmp) / "archive"
        _write_tar(archive, manifest, data)
        if folder is None:
            with archive.open("rb") as stream:
                while block := stream.read(HASH_BLOCK):
                    sys.stdout.buffer.write(block)
        else:
            os.replace(archive, destination)
    return manifest


def _write_tar(path: Path, manifest: Manifest, data: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE)
    os.fchmod(fd, PRIVATE)  # whatever the umask
    with os.fdopen(fd, "wb") as out, tarfile.open(fileobj=out, mode="w:gz") as tar:
        body = manifest.to_json()
        info = tarfile.TarInfo(MANIFEST)
        info.size, info.mode, info.mtime = len(body), PRIVATE, int(datetime.now(UTC).timestamp())
        tar.addfile(info, io.BytesIO(body))
        info = tar.gettarinfo(data, arcname=DATA)
        info.mode, info.uid, info.gid, info.uname, info.gname = PRIVATE, 0, 0, "", ""
        with data.open("rb") as stream:
            tar.addfile(info, stream)


def read_manifest(archive: Path, name: str = "") -> Manifest:
    """The manifest of a whole archive: its members as backup writes them and its data of the size and SHA-256 the
    manifest gives. Raises CommandError saying what is wrong (not a Hearth backup, truncated, altered), naming the
    archive ``name`` (default its path)."""
    name = name or str(archive)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            if (names := tar.getnames()) != [MANIFEST, DATA]:
                raise CommandError(
                    f"{name} is not a Hearth backup: one holds {MANIFEST} and {DATA}, this holds "
                    f"{', '.join(names[:5]) or 'nothing'}"
                )
            manifest = Manifest.from_json(member(tar, MANIFEST).read())
            sha256, size = _digest(member(tar, DATA))
    except (tarfile.TarError, OSError, EOFError, zlib.error, AttributeError, KeyError, TypeError, ValueError) as exc:
        raise CommandError(f"{name} is not a whole Hearth backup ({type(exc).__name__}: {exc})") from exc
    if (sha256, size) != (manifest.sha256, manifest.size):
        raise CommandError(f"{name} is damaged: its data is not what its manifest says (SHA-256, size)")
    return manifest


def member(tar: tarfile.TarFile, name: str) -> IO[bytes]:
    stream = tar.extractfile(name)
    if stream is None:
        raise CommandError(f"the archive's {name} is not a file")
    return stream
