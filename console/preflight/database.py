"""Whether the database is ready for Hearth, for ``manage.py doctor``: the pre-flight a careful owner runs first
on a new box, before anything was migrated, says so in its report instead of failing on a missing table."""

from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor

from appliance.doctor import FAIL, Check

DATABASE = "Database"
MIGRATE = "Run python manage.py migrate (compose runs it in its migrate service before the others start)."


def database_check() -> Check | None:
    """A failed Check when the database is not ready: unreachable, not set up yet (no migration applied), or
    behind (some not applied); None when every migration is applied."""
    try:
        executor = MigrationExecutor(connection)
        missing = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as exc:
        fix = "Check DATABASE_URL and that the database server runs and lets this user in."
        return Check(
            DATABASE, FAIL, f"cannot read the database: {' '.join(str(exc).split()) or type(exc).__name__}", fix
        )
    if not missing:
        return None
    if not executor.loader.applied_migrations:
        return Check(DATABASE, FAIL, "not set up yet: no table exists (no migration applied)", MIGRATE)
    return Check(DATABASE, FAIL, f"{len(missing)} migrations not applied yet", MIGRATE)
