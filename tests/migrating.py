"""Running the project's migrations to a point and back, for the tests that check a migration keeps every row."""

from collections.abc import Iterator
from contextlib import contextmanager

from django.apps.registry import Apps
from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def migrate(targets: list[tuple[str, str]]) -> Apps:
    """The database migrated (forward or back) to ``targets`` ([(app label, migration name)]); the models as they
    were there (use ``get_model``)."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@contextmanager
def schema_at(targets: list[tuple[str, str]]) -> Iterator[Apps]:
    """The database at ``targets`` while the block runs, then at today's schema again (the rest of the suite runs
    on it)."""
    yield migrate(targets)
    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
