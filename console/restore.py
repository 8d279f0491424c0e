"""Restore of an archive written by console.backup (``manage.py restore FILE``), whose docstring gives the archive
and the reasons for its form. In order, changing nothing until the last step:

1. read_manifest: the whole archive is read and its data checked against its manifest (size, SHA-256);
2. unknown_migrations: an archive naming a migration this Hearth lacks is from a newer one, and refused;
3. tables_holding_rows: a database holding rows beyond those FILLED_BY_MIGRATE is refused unless forced;
4. in one transaction: this appliance's tables dropped, the archive's schema migrated to (and emptied of the rows
   its migrations seed), the archive's rows loaded into the models as they were there, this Hearth's migrations
   applied on top (their data migrations run on the rows, as an upgrade in place would have run them), content
   types and permissions of newer models added (post_migrate), and the archive's replicas marked ended, their
   deployments stopped keeping what was wanted (console.deployments.stopping.forget_restored_engines: their engines
   are the other appliance's; this one's worker launches them again).

A failure in step 4 rolls the whole of it back. The gateways are then told to read keys and routes again.

Before step 4 the restore marks its time in Redis (console.observability.restored; a Redis that does not answer is
said and not waited for: the one make up starts is stopped by make down and keeps nothing): the spending counters
there keep what was spent since the backup, which the restored request log lacks, and beat's accounting check then
never lowers a counter of this day or month to the log. A restore that fails after the mark leaves it: the counters
of this day and month are only raised to the log until they end. Once step 4 is committed, the counters of keys and
members made since the backup are deleted. Sessions are not archived (console.backup.LEFT_OUT), and an older
archive's are not loaded: everyone signs in again.
"""

import io
import json
import tarfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import redis
from cryptography.fernet import InvalidToken
from django.apps.registry import Apps
from django.core import serializers
from django.core.management.base import CommandError
from django.core.management.color import no_style
from django.core.management.sql import emit_post_migrate_signal
from django.core.serializers import python
from django.db import DatabaseError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.graph import MigrationGraph
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder
from django.db.models import Model

from console.backup import DATA, LEFT_OUT, Manifest, archived_models, member, read_manifest, tables
from console.deployments.stopping import forget_restored_engines
from console.fanout import bump_routing_version
from console.observability import restored
from console.sealed import SealedCharField, unseal_under

# A freshly migrated database holds rows of these and is still empty: content types and permissions (migrate's
# post_migrate), metric mappings and GPU prices (Hearth's migrations observability 0005 and 0006).
FILLED_BY_MIGRATE = frozenset(
    {"contenttypes.contenttype", "auth.permission", "observability.metricmapping", "observability.pricesetting"}
)
BATCH = 500  # rows written per INSERT (fewer where SQLite's limit on parameters says)
SEALED_ELSEWHERE = (
    "its sealed value (an engine key) does not open with the SECRET_KEY the archive's manifest holds: it was sealed "
    "under another key, so the manifest and the data are not of one backup (its secret_key edited, or data.jsonl "
    "taken from another appliance's archive); restore an archive as manage.py backup wrote it"
)


def unknown_migrations(manifest: Manifest) -> list[str]:
    """The archive's applied migrations this Hearth does not have on disk ("app.name"): it was made by a newer one."""
    known = MigrationLoader(None, ignore_no_migrations=True).disk_migrations
    return sorted(f"{app}.{name}" for app, name in manifest.migrations if (app, name) not in known)


def tables_holding_rows() -> list[str]:
    """The archived tables (those FILLED_BY_MIGRATE apart) that hold a row in the database as it is now (a table not
    made yet holds none)."""
    existing = set(connection.introspection.table_names())
    found = []
    with connection.cursor() as cursor:
        for table in tables(m for m in archived_models() if m._meta.label_lower not in FILLED_BY_MIGRATE):
            if table in existing:
                cursor.execute(f"SELECT 1 FROM {connection.ops.quote_name(table)} LIMIT 1")  # noqa: S608 - a model's table
                if cursor.fetchone():
                    found.append(table)
    return found


def restore(archive: Path, *, force: bool, name: str = "", say: Callable[[str], object] = print) -> Manifest:
    """Restore ``archive`` into this appliance's database (see the module docstring for the order and what each
    step refuses); returns its manifest. Raises CommandError, saying why and naming the archive ``name`` (default its
    path), with the database as it was. A Redis that does not answer is said (``say``), not refused."""
    name = name or str(archive)
    manifest = read_manifest(archive, name)
    if newer := unknown_migrations(manifest):
        raise CommandError(
            f"{name} comes from a newer Hearth: its schema has migrations this one lacks ({', '.join(newer)}). "
            "Upgrade Hearth to that version or later, then restore."
        )
    if not force and (held := tables_holding_rows()):
        raise CommandError(
            f"this database already holds data (tables {', '.join(held[:6])}{'…' if len(held) > 6 else ''}); "
            "restore into a fresh one, or pass --force to replace everything in it with the archive"
        )
    try:
        restored.mark(time.time())
    except (redis.RedisError, OSError) as exc:  # the docs' restore after make down: its Redis is stopped, and empty
        say(
            f"restore: Redis did not answer ({exc}), so the restore is not noted there. The Redis make up starts keeps "
            "no counters across a stop: nothing is lost. One that kept this appliance's counters would have a budget's "
            "spend since the backup lowered to the restored log by the next accounting check: restore with it up."
        )
    try:
        _rebuild(archive, manifest)
    except serializers.base.DeserializationError as exc:
        raise CommandError(f"restore failed, nothing changed: {exc}") from exc
    except (DatabaseError, LookupError) as exc:
        raise CommandError(f"restore failed, nothing changed: {type(exc).__name__}: {exc}") from exc
    return manifest


def _rebuild(archive: Path, manifest: Manifest) -> None:
    """In one transaction (SQLite's foreign-key checks off, as Django's migrate has them, until check_constraints):
    drop this appliance's tables, migrate to the archive's schema, empty its tables of the rows those migrations seed,
    load the archive's rows into the models as they were there,
    migrate to this Hearth's schema (its data migrations run on those rows), add content types and permissions of
    models newer than the archive (post_migrate, as migrate does)."""
    with connection.constraint_checks_disabled(), transaction.atomic():
        _drop_tables()
        executor = MigrationExecutor(connection)
        targets = _last_per_app(executor.loader.graph, manifest.migrations)
        executor.migrate(targets)
        models = executor.loader.project_state(targets, at_end=True).apps
        _empty_tables(models)
        with tarfile.open(archive, "r:gz") as tar:
            lines = io.TextIOWrapper(member(tar, DATA), encoding="utf-8")
            loaded = _save(_records(lines, manifest.secret_key, models), models)
        connection.check_constraints(table_names=tables(loaded))
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":  # no deferred checks pending when a migration alters a table
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            for sql in connection.ops.sequence_reset_sql(no_style(), loaded):
                cursor.execute(sql)
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
        emit_post_migrate_signal(0, False, connection.alias)
        forget_restored_engines()
        transaction.on_commit(bump_routing_version)
        transaction.on_commit(restored.forget_gone_holders)


def _last_per_app(graph: MigrationGraph, migrations: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Of ``migrations`` (all applied at backup), each app's last: the targets that migrate reaches them by."""
    applied = set(migrations)
    return [m for m in migrations if not any(c in applied for c in graph.node_map[m].children if c[0] == m[0])]


def _empty_tables(models: Apps) -> None:
    """Delete the rows the migrations to the archive's schema made (the seeds of metric mappings and prices): the
    archive holds those tables' rows as they were."""
    existing = set(connection.introspection.table_names())
    names = [m._meta.db_table for m in models.get_models(include_auto_created=True) if m._meta.db_table in existing]
    with connection.cursor() as cursor:
        for sql in connection.ops.sql_flush(no_style(), names):
            cursor.execute(sql)


def _drop_tables() -> None:
    """Drop every table of the installed apps' models, and Django's record of applied migrations."""
    names = connection.introspection.django_table_names(only_existing=True, include_views=False)
    if MigrationRecorder(connection).has_table():
        names.append(MigrationRecorder.Migration._meta.db_table)
    quoted = [connection.ops.quote_name(name) for name in names]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql" and quoted:
            cursor.execute(f"DROP TABLE {', '.join(quoted)} CASCADE")
        elif connection.vendor != "postgresql":
            for name in quoted:  # SQLite drops one table a statement
                cursor.execute(f"DROP TABLE {name}")


def _records(lines: Iterable[str], secret_key: str, models: Apps) -> Iterator[dict[str, Any]]:
    """The archive's rows in Django's Python serialization but those of models LEFT_OUT (an older archive's
    sessions), each sealed value opened with the archive's key (saving seals it again under this appliance's).
    Raises DeserializationError naming the line of one that is not a row as backup writes it, or whose sealed value
    the archive's key does not open; LookupError for a model the archive's schema lacks."""
    sealed: dict[str, list[str]] = {}  # model label → its sealed fields
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        record = _parsed(line, number)
        label = record["model"]
        if label in LEFT_OUT:
            continue
        if label not in sealed:
            fields = models.get_model(label)._meta.get_fields()
            sealed[label] = [f.name for f in fields if isinstance(f, SealedCharField)]
        for name in sealed[label]:
            if value := record["fields"].get(name):
                try:
                    record["fields"][name] = unseal_under(value, [secret_key])
                except InvalidToken:
                    raise serializers.base.DeserializationError(f"{DATA} line {number}: {SEALED_ELSEWHERE}") from None
        yield record


def _parsed(line: str, number: int) -> dict[str, Any]:
    """Line ``number`` of the archive's data as a row ``{"model": label, "fields": {...}, ...}``. Raises
    DeserializationError naming the line (not showing it: a row may hold a secret) when it is not one."""
    try:
        record = json.loads(line)
    except ValueError as exc:
        why = type(exc).__name__
        if isinstance(exc, json.JSONDecodeError):  # where, without what the line holds
            at = "the line's end" if exc.pos >= len(line.rstrip()) else f"character {exc.pos + 1}"
            why = f"{exc.msg} at {at}"
        raise serializers.base.DeserializationError(f"{DATA} line {number} is not JSON ({why})") from None
    if not isinstance(record, dict) or not isinstance(record.get("model"), str):
        raise serializers.base.DeserializationError(f"{DATA} line {number} is not a row (it names no model)")
    if not isinstance(record.get("fields"), dict):
        raise serializers.base.DeserializationError(f"{DATA} line {number} is not a row (it has no fields)")
    return record


class _Deserializer(python.Deserializer):
    """Django's Python deserializer taking its models from ``models`` (the models as they were at the archive's
    migrations) rather than from today's code."""

    def __init__(self, records: Iterator[dict[str, Any]], models: Apps) -> None:
        super().__init__(records)
        self.models = models

    def _get_model_from_node(self, model_identifier: str) -> type[Model]:
        try:
            return self.models.get_model(model_identifier)
        except LookupError:
            raise serializers.base.DeserializationError(f"Invalid model identifier: {model_identifier}") from None


def _save(records: Iterator[dict[str, Any]], models: Apps) -> list[type[Model]]:
    """Write each row as ``loaddata`` does (``Model.save(raw=True)``: its fields as given, no signals to today's
    models), but a model's rows in runs of multi-row INSERTs (one query for up to BATCH rows rather than an UPDATE
    and an INSERT each); a row with many-to-many links (users, groups) is saved alone. Returns the models saved."""
    saved: dict[type[Model], None] = {}
    run: list[Model] = []
    for obj in _Deserializer(records, models):
        model = type(obj.object)
        saved[model] = None
        if run and (type(run[0]) is not model or len(run) >= BATCH):
            _insert(run)
            run = []
        if obj.m2m_data or model._meta.parents:
            obj.save()
        else:
            run.append(obj.object)
    _insert(run)
    return list(saved)


def _insert(rows: list[Model]) -> None:
    """Rows of one model inserted raw, as ``Model.save_base(raw=True)`` inserts one, in as few queries as the
    database's limit on parameters allows."""
    if not rows:
        return
    model = type(rows[0])
    fields = model._meta.local_concrete_fields
    size = connection.ops.bulk_batch_size(fields, rows) or len(rows)
    for start in range(0, len(rows), size):
        # QuerySet._insert: what Model.save_base(raw=True) inserts a row with
        model._base_manager._insert(rows[start : start + size], fields=fields, raw=True)  # type: ignore[attr-defined]
