"""Several web processes on one port (appliance.web_server, as `make up` and compose run it): each serves
the gateway, and /metrics, asked of any of them, counts the requests all of them served."""

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from appliance import web_server
from tests.conftest import start_web
from tests.simworld import Served, hearth_metrics

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]
SENT = 48


@pytest.fixture
def two_processes(live_env: dict[str, str], tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """`python -m appliance.web_server` with HEARTH_WEB_WORKERS=2; yields its base URL and metrics folder."""
    folder = tmp_path / "prometheus"
    env = {**live_env, "HEARTH_WEB_WORKERS": "2", "PROMETHEUS_MULTIPROC_DIR": str(folder)}
    proc, base = start_web(env, tmp_path / "web.log")
    yield base, folder
    proc.stop()


def served_by_model(text: str, model: str) -> float:
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        if family.name == "hearth_gateway_requests"
        for s in family.samples
        if s.name.endswith("_total") and s.labels.get("model") == model
    )


def test_two_web_processes_serve_and_metrics_sum_what_both_served(
    served: Served, two_processes: tuple[str, Path]
) -> None:
    base, folder = two_processes
    body = {"model": "llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}

    def one(_: int) -> str:  # a connection of its own each, so either process may take it
        with httpx.Client(timeout=60) as client:
            resp = client.post(
                f"{base}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {served.key}"}
            )
            return "ok" if resp.status_code == 200 else f"{resp.status_code} {resp.text[:200]}"

    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(one, range(SENT)))
    assert answers == ["ok"] * SENT, [a for a in answers if a != "ok"]
    writers = {p.stem.rsplit("_", 1)[1] for p in folder.glob("counter_*.db")}
    assert len(writers) == 2, f"one process served all {SENT}: {sorted(folder.iterdir())}"
    for _ in range(3):  # whichever process answers, the sum is the same
        assert served_by_model(hearth_metrics(base), "llama") == SENT


def test_the_web_server_runs_uvicorn_with_the_workers_and_without_proxy_headers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, settings: Any
) -> None:
    settings.HEARTH_WEB_WORKERS, settings.DATA_DIR = 3, tmp_path
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "")  # unset; restored after the test
    (tmp_path / "run" / "prometheus").mkdir(parents=True)
    (tmp_path / "run" / "prometheus" / "counter_1.db").write_bytes(b"a stale run's samples")
    for name in ("HEARTH_CONSOLE_SOCKET", "HEARTH_WEB_SUPERVISOR"):  # main sets both: unset after the test
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    ran: dict[str, Any] = {}

    def run(app: str, **kwargs: Any) -> None:  # the relays' uvicorn; the console's is real
        socket = os.environ["HEARTH_CONSOLE_SOCKET"]
        with httpx.Client(transport=httpx.HTTPTransport(uds=socket), timeout=10) as console:
            ran.update(kwargs, app=app, socket=socket, console=console.get("http://localhost/static/hearth.css"))

    monkeypatch.setattr("uvicorn.run", run)
    web_server.main(["--port", "8123"])
    assert (ran["app"], ran["workers"], ran["port"], ran["proxy_headers"]) == (
        "appliance.asgi:application",
        3,
        8123,
        False,
    )
    assert ran["console"].status_code == 200 and not Path(ran["socket"]).exists()  # served, then removed
    assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(tmp_path / "run" / "prometheus")
    assert list((tmp_path / "run" / "prometheus").iterdir()) == []  # a new run counts from 0
