"""Issue 36 against real web servers: Hearth registered as its own endpoint is refused; a loop of two Hearths
pointing at each other ends at the first hop back with an error and one request-log row per client request on
each; an engine's 500 with a secret in it reaches neither surface's clients, streamed or not, and the web log
holds it under the reference they are given."""

import http.server
import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.test import Client

from console.access import keys as apikeys
from console.deployments.models import Deployment
from console.observability.models import RequestLog
from tests.conftest import ROOT, Proc, start_web

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]
CHAT = {"model": "loop-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
MESSAGE = {"model": "loop-model", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


def until(check: Callable[[], Any], within: float = 30, what: str = "") -> Any:
    deadline = time.monotonic() + within
    while not (found := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return found


def register(admin: Client, base_url: str, key: str) -> tuple[int, dict[str, Any]]:
    body = {"base_url": base_url, "engine_kind": "vllm", "api_key": key}
    resp = admin.post("/api/external-deployments", body, content_type="application/json")
    return resp.status_code, resp.json()


def test_hearth_itself_is_refused_as_an_endpoint_even_with_an_admin_key(
    web: str, admin: Client, admin_user: object
) -> None:
    """The probe carries this Hearth's hop marker; its own gateway answers 508 and the registration says why."""
    key = apikeys.create_key("admin's own", admin_user)[1]
    status, body = register(admin, web, key)
    assert status == 400 and "is this Hearth itself" in body["detail"], body
    assert not Deployment.objects.exists() and not RequestLog.objects.exists()


def manage(env: dict[str, str], *args: str) -> str:
    """``manage.py args`` in ``env``; what it printed."""
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def hearth_b(folder: Path, env: dict[str, str], a_url: str, a_key: str) -> tuple[Proc, str, str, Path]:
    """A second Hearth (its own SQLite database, data folder and instance) with a ready deployment 'loop-model'
    whose one endpoint is Hearth A at ``a_url`` (engine key ``a_key``), made by hand as no registration would
    allow; returns it, its URL, an API key of it and its database."""
    database = folder / "b.sqlite3"
    b_env = {
        **env,
        "DATABASE_URL": f"sqlite:///{database}",
        "HEARTH_DATA_DIR": str(folder),
        "HEARTH_INSTANCE": "hearthb",
    }
    manage(b_env, "migrate", "--noinput", "-v0")
    made = f"""
from django.contrib.auth.models import User
from console.access import keys
from console.deployments.external import _new_replica
from console.deployments.models import Deployment, DeploymentState
from engines.external import EXTERNAL_ENGINE, ExternalKind
from engines.stored_plan import StoredPlan
dep = Deployment.objects.create(
    name="loop-model", model=None, engine=EXTERNAL_ENGINE, served_model_name="loop-model", max_model_len=4096,
    kv_space_gib=0, plan=StoredPlan(None).to_json(), replica_count=0, state=DeploymentState.READY,
)
_new_replica(dep, {a_url!r}, ExternalKind("vllm"), {a_key!r}, "")
print(keys.create_key("from A", User.objects.create_superuser("b-admin", password="b-password-1"))[1])
"""
    key = manage(b_env, "shell", "-c", made).strip().splitlines()[-1]
    proc, url = start_web(b_env, folder / "web-b.log")
    return proc, url, key, database


def test_two_hearths_pointing_at_each_other_end_at_the_first_hop_back_with_one_row_per_request(
    web: str, admin: Client, admin_user: object, live_env: dict[str, str], tmp_path: Path
) -> None:
    """Client → A → B → A: A sees its own marker come back and refuses it (508) before it is billed; B and A
    pass the 508 back. Each Hearth logs exactly one row per request it was sent, none for the refused hop."""
    b_key_at_a = apikeys.create_key("engine key of B", admin_user)[1]
    proc, b_url, a_key_at_b, b_database = hearth_b(tmp_path, live_env, web, b_key_at_a)
    try:
        status, dep = register(admin, b_url, a_key_at_b)  # another Hearth is a legitimate endpoint
        assert status == 201, dep
        client_key = apikeys.create_key("client", admin_user)[1]
        headers = {"Authorization": f"Bearer {client_key}"}
        sent = [
            httpx.post(f"{web}/v1/chat/completions", json=CHAT, headers=headers, timeout=30),
            httpx.post(f"{web}/v1/chat/completions", json={**CHAT, "stream": True}, headers=headers, timeout=30),
            httpx.post(f"{web}/v1/messages", json=MESSAGE, headers={"x-api-key": client_key}, timeout=30),
        ]
        for resp in sent:
            assert resp.status_code == 508 and resp.headers["content-type"] == "application/json", resp.text
            assert "came back to the Hearth that sent it" in resp.json()["error"]["message"]
            assert resp.headers["x-should-retry"] == "false"
        assert sent[2].json()["type"] == "error"  # Anthropic's shape for an Anthropic client
        rows_at_a = until(lambda: RequestLog.objects.count() >= 3 and list(RequestLog.objects.all()), what="A's rows")
        assert [r.status for r in rows_at_a] == [508, 508, 508]

        def rows_at_b() -> list[tuple[int]]:
            with sqlite3.connect(b_database) as db:
                return db.execute("SELECT status FROM observability_requestlog").fetchall()

        assert until(lambda: len(rows_at_b()) >= 3 and rows_at_b(), what="B's rows") == [(508,)] * 3
        # the refused hop, which ended before the client's request, would have been flushed with it
        assert RequestLog.objects.count() == 3 and len(rows_at_b()) == 3
    finally:
        proc.stop()


SECRET = "hunter2-Zx81"
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/engine/cache.py", line 41, in connect\n'
    f"ConnectionError: redis://cache:{SECRET}@10.0.0.7/0 refused (password={SECRET})"
)


class _Leaky(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint of one model whose every POST fails with a traceback holding a password."""

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._answer(200, {"object": "list", "data": [{"id": "leaky", "object": "model"}]})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self._answer(500, {"error": {"message": TRACEBACK, "type": "InternalServerError", "code": 500}})

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def leaky() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Leaky)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_an_engines_500_with_a_secret_reaches_no_client_and_the_web_log_has_it_under_their_reference(
    admin: Client, admin_user: object, live_env: dict[str, str], tmp_path: Path, leaky: str
) -> None:
    proc, web = start_web(live_env, tmp_path / "web.log")
    try:
        status, dep = register(admin, leaky, "")
        assert status == 201, dep
        key = apikeys.create_key("client", admin_user)[1]
        chat = {"model": "leaky", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
        message = {"model": "leaky", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
        asked = [
            ("/v1/chat/completions", chat),
            ("/v1/chat/completions", {**chat, "stream": True}),
            ("/v1/messages", message),
            ("/v1/messages", {**message, "stream": True}),
        ]
        for path, body in asked:
            resp = httpx.post(f"{web}{path}", json=body, headers={"x-api-key": key}, timeout=30)
            assert resp.status_code == 500 and resp.headers["content-type"] == "application/json", resp.text
            assert SECRET not in resp.text and "Traceback" not in resp.text
            said = resp.json()["error"]["message"]
            assert (resp.json().get("type") == "error") == (path == "/v1/messages")
            ref = said.split("ref ")[1].split(" ")[0]
            line = until(lambda ref=ref: [x for x in proc.output().splitlines() if f"(ref {ref})" in x], what=ref)
            assert SECRET in line[0]  # the admin has the whole body under the reference
    finally:
        proc.stop()
