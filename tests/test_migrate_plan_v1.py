"""A database made by main at b686b79, before plans had a version (tests/data/plan_v1), is migrated by today's code
on SQLite and on PostgreSQL and serves the same deployments: every plan reads back equal through
Deployment.stored_plan, the JSON API answers each deployment as that commit did (its plan with "version" and
"kind" added), each replica slot's launch spec builds with the same planned flags and GPUs, each page shows its
plan's reasons; migrated back, the plans are as they were stored."""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

pytestmark = pytest.mark.process  # manage.py and the answers run in processes of their own
ROOT = Path(__file__).resolve().parent.parent  # not conftest's: ``python -m`` runs this before Django is set up
DATA = ROOT / "tests" / "data" / "plan_v1"
DB_FILE = DATA / "main-b686b79.sqlite3"
EXPECTED: dict[str, dict[str, Any]] = json.loads((DATA / "main-b686b79.expected.json").read_text())
KINDS = {"simulator": "gpu", "vllm": "gpu", "vllm-cpu": "cpu", "sglang-cpu": "cpu", "external": "none"}
# The flags and environment a launch takes from the plan (and the deployment's model and names).
PLANNED_FLAGS = (
    "--model",
    "--model-path",
    "--served-model-name",
    "--revision",
    "--tensor-parallel-size",
    "--gpu-memory-utilization",
    "--max-model-len",
    "--max-num-seqs",
    "--kv-cache-dtype",
    "--kv-cache-tokens",
    "--context-length",
    "--max-total-tokens",
    "--tool-call-parser",
    "--reasoning-parser",
)
# vLLM (CPU)'s KV budget: env VLLM_CPU_KVCACHE_SPACE (GiB) as b686b79 passed it, the flag (bytes) since
KV_BUDGET_ENV, KV_BUDGET_FLAG = "VLLM_CPU_KVCACHE_SPACE", "--kv-cache-memory-bytes"
PG = "postgres://postgres@127.0.0.1:5432"
SKIPPED_TABLES = {"django_migrations", "django_content_type", "auth_permission", "sqlite_sequence"}


def answers() -> dict[str, Any]:
    """What today's code answers for each deployment of the database at DATABASE_URL. Run in a process of its own
    (``python -m tests.test_migrate_plan_v1``), so Django is set up here, on that database."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.utils.html import escape

    from console.deployments.lifecycle import launch_spec
    from console.deployments.models import Deployment, Replica

    client = Client(HTTP_HOST="localhost")
    client.force_login(get_user_model().objects.get(username="admin"))
    out: dict[str, Any] = {}
    for dep in Deployment.objects.order_by("name"):
        plan = dep.stored_plan
        page = client.get(f"/deployments/{dep.pk}/")
        specs = []
        if not dep.external:
            runtime = "docker" if dep.engine in ("vllm", "sglang") else "process"
            row = Replica(deployment=dep, runtime=runtime, host="127.0.0.1", port=8000, engine_api_key="hek-plan-v1")
            for slot in range(dep.replica_count):
                spec = launch_spec(dep, row, slot)
                specs.append({"args": spec.args, "env": spec.env, "gpu_indices": list(spec.gpu_indices)})
        out[dep.name] = {
            "stored": dep.plan,
            "typed": plan.to_json(),
            "replica_gpus": [list(plan.replica_gpus(slot)) for slot in range(dep.replica_count)],
            "api": client.get(f"/api/deployments/{dep.pk}").json(),
            "page": page.status_code,
            "page_shows_reasons": all(escape(r) in page.content.decode() for r in plan.reasons),
            "launch_specs": specs,
        }
    return out


def planned(spec: dict[str, Any]) -> dict[str, Any]:
    """The planned flags' values (``--flag value`` or ``--flag=value``), the KV budget in bytes however it was
    passed (None where none was) and the GPUs."""
    args, flags = spec["args"], {}
    for index, arg in enumerate(args):
        name, _, value = arg.partition("=")
        if name in (*PLANNED_FLAGS, KV_BUDGET_FLAG):
            flags[name] = value or args[index + 1]
    budget, gib = flags.pop(KV_BUDGET_FLAG, None), spec["env"].get(KV_BUDGET_ENV)
    kv_budget = int(budget) if budget is not None else None if gib is None else int(float(gib) * 2**30)
    return {"flags": flags, "kv_budget_bytes": kv_budget, "gpu_indices": spec["gpu_indices"]}


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def environment(url: str, tmp_path: Path) -> dict[str, str]:
    """The appliance's environment on ``url``: the SECRET_KEY and settings the file was made with (DEBUG's, so its
    sealed engine keys open), a data folder of its own."""
    return {
        **os.environ,
        "DATABASE_URL": url,
        "HEARTH_DATA_DIR": str(tmp_path / "data"),
        "DEBUG": "1",
        "SECRET_KEY": "django-insecure-development-only",
        "HEARTH_GPU_INVENTORY": "sim:8xH100-80GB",
        "HEARTH_SGLANG_CPU_PYTHON": "/usr/bin/python3",
    }


@pytest.fixture
def sqlite_db(tmp_path: Path) -> str:
    """A copy of the file, as a DATABASE_URL."""
    shutil.copy(DB_FILE, tmp_path / "hearth.sqlite3")
    return f"sqlite:///{tmp_path / 'hearth.sqlite3'}"


@pytest.fixture
def postgres_db(tmp_path: Path) -> Iterator[str]:
    """A PostgreSQL database at the file's migrations, holding its rows copied table by table, as a DATABASE_URL."""
    name = f"hearth_plan_v1_{os.getpid()}"
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
    url = f"{PG}/{name}"
    env = environment(url, tmp_path)
    source = sqlite3.connect(DB_FILE)
    applied = source.execute("SELECT app, max(name) FROM django_migrations GROUP BY app ORDER BY app").fetchall()
    steps = "".join(f"call_command('migrate', {app!r}, {name!r}, verbosity=0)\n" for app, name in applied)
    code = f"import django\ndjango.setup()\nfrom django.core.management import call_command\n{steps}"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    copy_rows(source, url)
    yield url
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def copy_rows(source: sqlite3.Connection, url: str) -> None:
    """Every row of the file's tables (but Django's own bookkeeping, which migrate made) into the same tables in
    PostgreSQL in place of the rows the migrations seeded, SQLite's 0/1 as booleans where the column is one; then
    each id sequence past the copied ids. One transaction: foreign keys are checked at its end."""
    tables = sorted(
        {t for (t,) in source.execute("SELECT name FROM sqlite_master WHERE type = 'table'")} - SKIPPED_TABLES
    )
    with psycopg.connect(url) as target:
        for table in tables:
            target.execute(f'DELETE FROM "{table}"')
        for table in tables:
            cursor = source.execute(f'SELECT * FROM "{table}"')
            columns = [c[0] for c in cursor.description]
            rows = cursor.fetchall()
            if not rows:
                continue
            kinds = dict(
                target.execute(
                    "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = %s", (table,)
                ).fetchall()
            )
            rows = [
                [bool(v) if kinds[c] == "boolean" and v is not None else v for c, v in zip(columns, row, strict=True)]
                for row in rows
            ]
            names, marks = ", ".join(f'"{c}"' for c in columns), ", ".join(["%s"] * len(columns))
            with target.cursor() as cur:
                cur.executemany(f'INSERT INTO "{table}" ({names}) VALUES ({marks})', rows)
            if "id" in columns:
                target.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")


def stored_plans(url: str) -> dict[str, Any]:
    """Each deployment's plan as the database holds it, by name."""
    query = "SELECT name, plan FROM deployments_deployment"
    if url.startswith("sqlite:///"):
        rows = sqlite3.connect(url.removeprefix("sqlite:///")).execute(query).fetchall()
        return {name: json.loads(plan) for name, plan in rows}
    with psycopg.connect(url) as conn:
        return dict(conn.execute(query).fetchall())


@pytest.mark.parametrize("database", ["sqlite_db", "postgres_db"])
def test_a_database_made_before_plans_had_a_version_migrates_and_serves_the_same(
    database: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = request.getfixturevalue(database)
    env = environment(url, tmp_path)
    assert "Applying deployments.0008_versioned_plans... OK" in manage(env, "migrate", "--noinput")
    assert "No changes detected" in manage(env, "makemigrations", "--check", "--dry-run")
    done = subprocess.run(
        [sys.executable, "-m", "tests.test_migrate_plan_v1"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert set(got) == set(EXPECTED) and len(got) == 8
    for name, then in EXPECTED.items():
        now, raw = got[name], then["raw_plan"]
        versioned = {**raw, "version": 2, "kind": KINDS[then["api"]["engine"]]}
        assert now["stored"] == now["typed"] == versioned, name
        api = {k: now["api"][k] for k in then["api"]}  # the API's fields as they were then (fields are only added)
        replicas = zip(api["replicas"], then["api"]["replicas"], strict=True)
        api["replicas"] = [{k: replica[k] for k in old} for replica, old in replicas]
        assert api == {**then["api"], "plan": versioned}, name
        assert now["page"] == 200 and now["page_shows_reasons"], name
        assert [planned(s) for s in now["launch_specs"]] == [planned(s) for s in then["launch_specs"]], name
        tp = raw.get("tensor_parallel_size") or 1
        held = [raw.get("gpu_indices", [])[slot * tp : (slot + 1) * tp] for slot in range(len(now["replica_gpus"]))]
        assert now["replica_gpus"] == held, name
    assert got["sim-tp2"]["replica_gpus"] == [[1, 2], [3, 4]]  # two replicas at TP 2, GPU 0 held by sim-8b
    remedy = ["gpu_memory_utilization", "PYTORCH_CUDA_ALLOC_CONF", "max_num_seqs"]  # read from the migrated plan
    assert [c["name"] for c in got["vllm-8b"]["api"]["remedy"]] == remedy
    manage(env, "migrate", "deployments", "0007", "--noinput")
    assert stored_plans(url) == {name: then["raw_plan"] for name, then in EXPECTED.items()}


if __name__ == "__main__":
    print(json.dumps(answers()))
