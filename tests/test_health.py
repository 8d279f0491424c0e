"""The open probes on a real web process: /health answers while the process is up, whatever else is down;
/ready answers 200 only with the database and Redis reachable, keys and routes loaded and room on the data disk,
else 503 in JSON with Retry-After and the failing check named (never its connection details), and comes back by
itself; /metrics comes back by itself after a database outage too."""

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from tests.conftest import free_port, start_web
from tests.gatewayworld import gateway_processes
from tests.ledgerworld import TcpProxy, database_url_through, within

pytestmark = pytest.mark.django_db(transaction=True)


def probe(base: str, path: str) -> httpx.Response:
    answer = httpx.get(base + path, headers={"Host": "10.0.0.7:8000"}, timeout=15)  # a balancer's own address
    assert answer.headers["content-type"] == "application/json", answer.text
    return answer


def test_ready_when_the_database_and_redis_answer(web: str) -> None:
    assert probe(web, "/health").json() == {"status": "up"}
    answer = probe(web, "/ready")
    assert answer.status_code == 200
    checks = {"database": "ok", "redis": "ok", "keys_and_routes": "ok", "data_disk": "ok"}
    assert answer.json() == {"status": "ready", "checks": checks}


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


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of 8 MiB mounted for the test (root only: skipped elsewhere), unmounted after it."""
    mount = tmp_path / "data"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs", str(mount)], check=False)
    if mounted.returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def test_not_ready_while_the_data_disk_is_full_and_ready_again_once_space_is_freed(
    live_env: dict[str, str], small_disk: Path, tmp_path: Path
) -> None:
    env = {**live_env, "HEARTH_DATA_DIR": str(small_disk), "HEARTH_READY_MIN_FREE_MIB": "2"}
    proc, base = start_web(env, tmp_path / "web.log")
    try:
        assert probe(base, "/ready").json()["checks"]["data_disk"] == "ok"
        filler = small_disk / "filler"
        with filler.open("wb") as out:
            try:
                while True:
                    out.write(b"\0" * 65536)
                    out.flush()
            except OSError:
                pass
        assert shutil.disk_usage(small_disk).free < 2 * 1024 * 1024
        full = probe(base, "/ready")
        assert full.status_code == 503 and full.headers["retry-after"] == "5", full.text
        assert full.json()["checks"]["data_disk"].startswith("full: 0 MiB free, under 2"), full.text
        assert {k: v for k, v in full.json()["checks"].items() if k != "data_disk"} == {
            "database": "ok",
            "redis": "ok",
            "keys_and_routes": "ok",
        }
        filler.unlink()
        within(10, lambda: probe(base, "/ready").status_code == 200)
    finally:
        proc.stop()


@pytest.fixture
def database_proxy() -> Iterator[TcpProxy]:
    db = settings.DATABASES["default"]
    proxy = TcpProxy((db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)))
    yield proxy
    proxy.close()


def test_ready_and_metrics_come_back_by_themselves_after_a_database_outage(
    live_env: dict[str, str], database_proxy: TcpProxy, tmp_path: Path
) -> None:
    env = {**live_env, "DATABASE_URL": database_url_through(database_proxy, live_env)}
    proc, base = start_web(env, tmp_path / "web.log")
    token = {"Authorization": f"Bearer {settings.HEARTH_METRICS_TOKEN}"}

    def metrics() -> httpx.Response:
        return httpx.get(base + "/metrics", headers=token, timeout=15)

    try:
        assert probe(base, "/ready").status_code == 200
        wrong = httpx.get(base + "/v1/models", headers={"Authorization": "Bearer hk-wrong.x"}, timeout=15)
        assert wrong.status_code == 401  # counted in the gateway's own series
        assert "hearth_engine_series_up 1\n" in metrics().text
        database_proxy.cut()
        within(10, lambda: probe(base, "/ready").status_code == 503)
        assert probe(base, "/ready").json()["checks"]["database"].startswith("unreachable")
        for _ in range(3):  # asked again and again during the outage, as Prometheus would
            during = metrics()
            assert during.status_code == 200 and "hearth_engine_series_up 0\n" in during.text, during.text[-500:]
            assert "hearth_gateway_" in during.text  # the gateway's own series are still served
        database_proxy.restore()
        within(15, lambda: probe(base, "/ready").status_code == 200)
        within(15, lambda: metrics().status_code == 200 and "hearth_engine_series_up 1\n" in metrics().text)
    finally:
        proc.stop()
