"""The open probes on a real web process: /health answers while the process is up, whatever else is down;
/ready answers 200 only with the database and Redis reachable and keys and routes loaded, else 503 in JSON
with Retry-After and the failing check named (never its connection details)."""

from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from tests.gatewayworld import gateway_processes

pytestmark = pytest.mark.django_db(transaction=True)


def probe(base: str, path: str) -> httpx.Response:
    answer = httpx.get(base + path, headers={"Host": "10.0.0.7:8000"}, timeout=15)  # a balancer's own address
    assert answer.headers["content-type"] == "application/json", answer.text
    return answer


def test_ready_when_the_database_and_redis_answer(web: str) -> None:
    assert probe(web, "/health").json() == {"status": "up"}
    answer = probe(web, "/ready")
    assert answer.status_code == 200
    assert answer.json() == {"status": "ready", "checks": {"database": "ok", "redis": "ok", "keys_and_routes": "ok"}}


def test_not_ready_without_redis_but_alive(live_env: dict[str, str], tmp_path: Path) -> None:
    closed = f"redis://127.0.0.1:{free_port()}/0"
    with gateway_processes(1, {**live_env, "REDIS_URL": closed}, tmp_path) as (base,):
        assert probe(base, "/health").status_code == 200
        answer = probe(base, "/ready")
    assert answer.status_code == 503 and answer.headers["retry-after"] == "5"
    body = answer.json()
    assert body["status"] == "not ready" and body["checks"]["database"] == "ok"
    assert body["checks"]["redis"].startswith("unreachable") and "127.0.0.1" not in answer.text


def test_not_ready_without_the_database_and_the_gateway_answers_503_not_500(
    live_env: dict[str, str], tmp_path: Path
) -> None:
    gone = f"postgres://postgres@127.0.0.1:{free_port()}/nothing"
    with gateway_processes(1, {**live_env, "DATABASE_URL": gone}, tmp_path) as (base,):
        assert probe(base, "/health").status_code == 200
        ready = probe(base, "/ready")
        refused = httpx.get(base + "/v1/models", headers={"Authorization": "Bearer hk-whatever.x"}, timeout=15)
    assert ready.status_code == 503
    checks = ready.json()["checks"]
    assert checks["database"].startswith("unreachable") and checks["keys_and_routes"].startswith("unreachable")
    assert checks["redis"] == "ok"
    assert refused.status_code == 503 and refused.headers["retry-after"] == "2"
    assert refused.json()["error"]["code"] == "service_unavailable"
