"""Two appliances on one Redis server (one database even) keep apart: every key Hearth's processes write
is under ``hearth:<HEARTH_INSTANCE>:`` (routing version, quota windows, prices, the published GPUs, the
cache, Celery's queues and bindings), and one appliance's worker never takes the other's tasks."""

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, login, start_worker
from tests.gatewayworld import RedisServer, gateway_processes, within

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def own_redis(live_env: dict[str, str], tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path, live_env)
    yield server
    server.stop()


def instance_env(live_env: dict[str, str], redis: RedisServer, name: str) -> dict[str, str]:
    return {**live_env, "REDIS_URL": redis.url, "HEARTH_INSTANCE": name, "HEARTH_SCRAPE_INTERVAL": "1"}


def keys_of(redis: RedisServer) -> list[str]:
    return sorted(k.decode() for k in redis.client().scan_iter())


def send_task_as(env: dict[str, str], task: str) -> None:
    """Enqueue ``task`` as that appliance's console would: its own settings, in a process of its own."""
    code = f"import django; django.setup(); from appliance.celery import app; app.send_task({task!r})"
    subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "appliance.settings"},
        check=True,
        timeout=60,
    )


def test_two_instances_on_one_redis_keep_their_keys_and_tasks_apart(
    live_env: dict[str, str], own_redis: RedisServer, tmp_path: Path, admin_user: object
) -> None:
    alpha, beta = instance_env(live_env, own_redis, "alpha"), instance_env(live_env, own_redis, "beta")
    worker = start_worker(alpha, tmp_path)
    try:
        with gateway_processes(1, alpha, tmp_path) as (web,):
            console = login(web)
            key = console.post("/api/keys", json={"name": "alpha", "requests_per_minute": 5}).json()["key"]
            assert httpx.get(f"{web}/v1/models", headers={"x-api-key": key}).status_code == 200
            assert console.get("/keys/").status_code == 200
            within(15, lambda: own_redis.client().exists("hearth:alpha:gpu-inventory") == 1)
        alpha_keys = keys_of(own_redis)
        assert {"hearth:alpha:routing-version", "hearth:alpha:_kombu.binding.celery"} <= set(alpha_keys)
        assert [k for k in alpha_keys if not k.startswith("hearth:alpha:")] == []

        send_task_as(beta, "console.observability.tasks.publish_gpus")
        own_redis.client().delete("hearth:alpha:gpu-inventory")
        send_task_as(alpha, "console.observability.tasks.publish_gpus")  # sent after beta's, taken by alpha's worker
        within(15, lambda: own_redis.client().exists("hearth:alpha:gpu-inventory") == 1)
        assert own_redis.client().llen("hearth:beta:celery") == 1
        assert own_redis.client().exists("hearth:beta:gpu-inventory") == 0
    finally:
        worker.stop()
    assert [k for k in keys_of(own_redis) if not k.startswith(("hearth:alpha:", "hearth:beta:"))] == []
