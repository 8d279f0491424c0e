"""An engine that does not tell its version when it becomes ready (SGLang's /server_info came back empty in two
full runs): the read at ready tries again and waits for a slow answer, an SGLang without /server_info is read at
/get_server_info, and reconcile reads again a ready deployment's empty version (console.deployments.watching).
The engine is a real HTTP server on loopback answering as SGLang's /server_info does."""

import json
import logging
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils import timezone

from console.catalog.models import ModelSource
from console.deployments import admin_actions, watching
from console.deployments.models import Deployment, Replica
from tests.simworld import ensure_model

pytestmark = pytest.mark.django_db


class _Engine(ThreadingHTTPServer):
    """Answers GET /server_info and /get_server_info with 503 ``failures`` times in all, then 200 and a version
    after ``delay`` seconds; a path in ``missing`` is a 404."""

    failures = 0
    delay = 0.0
    missing: tuple[str, ...] = ()
    seen: list[str]


class _Handler(BaseHTTPRequestHandler):
    server: _Engine

    def do_GET(self) -> None:
        self.server.seen.append(self.path)
        if self.path in self.server.missing:
            self.send_response(404)
            self.end_headers()
            return
        time.sleep(self.server.delay)
        if self.server.failures > 0:
            self.server.failures -= 1
            self.send_response(503)
            self.end_headers()
            return
        body = json.dumps({"version": "0.5.15.post1", "api_key": "engine-key"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def engine() -> Iterator[_Engine]:
    server = _Engine(("127.0.0.1", 0), _Handler)
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _ready_sglang(port: int) -> Deployment:
    """A ready sglang-cpu deployment whose one replica answers on ``port``, its version never read (rows only)."""
    ensure_model()
    dep = admin_actions.create_deployment(
        name="sg", model=ModelSource.objects.get(name="llama-8b"), engine="sglang-cpu", max_model_len=8192
    )
    started = timezone.now() - timedelta(minutes=1)
    Deployment.objects.filter(pk=dep.pk).update(state="ready", engine_version="")
    Replica.objects.create(
        deployment=dep, runtime="process", host="127.0.0.1", port=port, engine_api_key="engine-key", running=True,
        started_at=started, ready_at=started,
    )  # fmt: skip
    return dep


def test_reconcile_reads_again_the_version_a_ready_engine_did_not_tell(engine: _Engine) -> None:
    dep = _ready_sglang(engine.server_address[1])
    engine.failures = 1  # the first reconcile's one read

    watching.mend_engine_versions()
    dep.refresh_from_db()
    assert dep.engine_version == ""
    assert engine.seen == ["/server_info"]  # the older path answers the same way: not asked

    watching.mend_engine_versions()
    dep.refresh_from_db()
    assert dep.engine_version == "0.5.15.post1"
    watching.mend_engine_versions()
    assert len(engine.seen) == 2  # a version once read is not read again


def test_the_read_at_ready_tries_again_before_it_gives_up_and_says_why(
    engine: _Engine, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=watching.__name__)
    monkeypatch.setattr(watching, "VERSION_PAUSE", 0.01)
    replica = _ready_sglang(engine.server_address[1]).replicas.get()
    engine.failures = watching.VERSION_TRIES - 1
    assert watching._engine_version(replica, "sglang-cpu") == "0.5.15.post1"
    engine.failures = watching.VERSION_TRIES
    assert watching._engine_version(replica, "sglang-cpu") == ""
    assert "no engine version from /server_info (HTTP 503)" in caplog.text
    assert "engine-key" not in caplog.text


def test_the_read_at_ready_waits_for_a_slow_answer_that_a_reconcile_does_not(
    engine: _Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watching, "MEND_WAIT", 0.2)
    dep = _ready_sglang(engine.server_address[1])
    engine.delay = 0.5  # a busy engine's scheduler answering late

    watching.mend_engine_versions()
    dep.refresh_from_db()
    assert dep.engine_version == ""
    assert watching._engine_version(dep.replicas.get(), "sglang-cpu", tries=1, wait=5) == "0.5.15.post1"


def test_an_sglang_without_server_info_is_read_at_get_server_info(engine: _Engine) -> None:
    replica = _ready_sglang(engine.server_address[1]).replicas.get()
    engine.missing = ("/server_info",)  # SGLang before 0.5.6
    assert watching._engine_version(replica, "sglang-cpu", tries=1) == "0.5.15.post1"
    assert engine.seen == ["/server_info", "/get_server_info"]
