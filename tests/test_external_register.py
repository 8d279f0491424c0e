"""Registering engines Hearth did not launch: what a good endpoint gives (its model, its version, a ready
deployment, its key sealed), each way a registration fails with its message and nothing saved (a bad URL, an
endpoint not reachable, a certificate that does not verify, a server that is not OpenAI-compatible, a refused key,
a served model name already taken), and what Hearth will not do to them (launch, stop, change, export). The
address policy: tests/test_external_refused.py."""

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.db import connection
from django.test import Client

from console.audit.models import AuditEntry
from console.deployments.models import Deployment, Replica
from engines.external import base_url_of, speaks_anthropic, speaks_responses, version_in
from tests.conftest import free_port
from tests.outside import ENGINE_KEY, OutsideSim, web_server

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OutsideSim]:
    engine = OutsideSim(tmp_path_factory.mktemp("outside") / "sim.log", "outside-model")
    yield engine
    engine.stop()


def register(admin: Client, **body: str) -> tuple[int, dict[str, object]]:
    resp = admin.post("/api/external-deployments", body, content_type="application/json")
    return resp.status_code, resp.json()


def nothing_saved() -> None:
    assert not Deployment.objects.exists() and not Replica.objects.exists()
    assert not AuditEntry.objects.filter(action__startswith="deployment.").exists()


def test_a_good_endpoint_becomes_a_ready_deployment_with_its_version_and_its_key_sealed(
    admin: Client, sim: OutsideSim
) -> None:
    status, dep = register(admin, base_url=sim.base + "/v1/", engine_kind="vllm", api_key=ENGINE_KEY)
    assert status == 201, dep
    assert dep["state"] == "ready" and dep["external"] and dep["served_model_name"] == "outside-model"
    assert dep["name"] == "outside-model" and dep["engine"] == "external" and dep["engine_version"] == "0.32.0+sim"
    [replica] = dep["replicas"]  # type: ignore[misc]
    assert replica["base_url"] == sim.base and replica["ready"] and replica["engine_version"] == "0.32.0+sim"
    assert ENGINE_KEY not in str(dep)
    with connection.cursor() as cursor:
        cursor.execute("SELECT engine_api_key FROM deployments_replica")
        [(stored,)] = cursor.fetchall()
    assert stored.startswith("fernet:") and ENGINE_KEY not in stored
    assert Replica.objects.get().engine_api_key == ENGINE_KEY
    [entry] = AuditEntry.objects.filter(action="deployment.register")
    assert ENGINE_KEY not in str(entry.changes) and entry.changes["engine_api_key"] == "set"
    page = admin.get(f"/deployments/{dep['id']}/").content.decode()
    assert sim.base in page and "up" in page and ENGINE_KEY not in page and "Launch" not in page
    # the Coding agents tab: no plan to show, each agent's settings for the name it is served as
    assert (
        'data-tab="agents"' in page and 'data-tab="plan"' not in page and "export ANTHROPIC_MODEL=outside-model" in page
    )
    pages = ["status/", "logs/", "panel/", "series/", "export/", "change/", "endpoints/add/", "capacity/"]
    for path in [
        "/",
        "/deployments/",
        "/usage/",
        f"/api/deployments/{dep['id']}/metrics",
        *(f"/deployments/{dep['id']}/{page}" for page in pages),
    ]:
        shown = admin.get(path)
        assert shown.status_code == 200 and ENGINE_KEY not in shown.content.decode(), path


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("ftp://127.0.0.1/x", "not an http:// or https:// URL"),
        ("127.0.0.1:8000", "not an http:// or https:// URL"),
        ("http://user:secret@127.0.0.1:8000", "not in the URL"),
        ("http://127.0.0.1:99999", "not a URL"),
        ("http://127.0.0.1:8000/?x=1", "query"),
    ],
)
def test_a_bad_url_is_refused_with_what_is_wrong(admin: Client, url: str, words: str) -> None:
    status, body = register(admin, base_url=url, engine_kind="vllm")
    assert status == 400 and words in str(body["detail"]), body
    nothing_saved()


def test_a_refused_connection_says_not_reachable(admin: Client) -> None:
    status, body = register(admin, base_url=f"http://127.0.0.1:{free_port()}", engine_kind="sglang")
    assert status == 400 and "is not reachable" in str(body["detail"]), body
    nothing_saved()


def test_a_tls_failure_says_the_certificate_did_not_verify(admin: Client, tmp_path: Path) -> None:
    with web_server(tls_folder=tmp_path) as url:
        status, body = register(admin, base_url=url, engine_kind="vllm")
    assert status == 400 and "TLS handshake" in str(body["detail"]), body
    assert "certificate verify failed" in str(body["detail"]) or "self-signed" in str(body["detail"])
    nothing_saved()


def test_an_https_url_to_an_http_server_is_not_reachable(admin: Client, sim: OutsideSim) -> None:
    status, body = register(admin, base_url=sim.base.replace("http://", "https://"), engine_kind="vllm")
    assert status == 400 and "is not reachable" in str(body["detail"]) and "https://" in str(body["detail"]), body
    nothing_saved()


def test_a_server_that_answers_but_is_not_openai_compatible_is_refused(admin: Client) -> None:
    with web_server() as url:
        status, body = register(admin, base_url=url, engine_kind="openai")
    assert status == 400 and "not an OpenAI-compatible server" in str(body["detail"]), body
    nothing_saved()


def test_a_missing_or_wrong_engine_key_is_refused_without_showing_it(admin: Client, sim: OutsideSim) -> None:
    status, body = register(admin, base_url=sim.base, engine_kind="vllm")
    assert status == 400 and "demands an engine API key" in str(body["detail"]), body
    status, body = register(admin, base_url=sim.base, engine_kind="vllm", api_key="wrong-key-7")
    assert status == 400 and "refused the engine API key" in str(body["detail"]) and "wrong-key-7" not in str(body)
    nothing_saved()


def test_a_served_model_name_already_taken_is_refused(admin: Client, sim: OutsideSim) -> None:
    assert register(admin, base_url=sim.base, engine_kind="vllm", api_key=ENGINE_KEY)[0] == 201
    status, body = register(admin, base_url=sim.base, engine_kind="vllm", api_key=ENGINE_KEY, name="again")
    assert status == 400 and "'outside-model' is already taken" in str(body["detail"]), body
    assert Deployment.objects.count() == 1 and Replica.objects.count() == 1
    status, body = register(admin, base_url=sim.base, engine_kind="vllm", api_key=ENGINE_KEY, model="other")
    assert status == 400 and "does not serve 'other'" in str(body["detail"]), body


def test_the_form_shows_the_reason_and_saves_nothing(admin: Client) -> None:
    assert 'href="/deployments/external/"' in admin.get("/deployments/").content.decode()
    page = admin.post(
        "/deployments/external/",
        {"base_url": f"http://127.0.0.1:{free_port()}", "engine_kind": "vllm", "api_key": "typed-key-9"},
    )
    html = page.content.decode()
    assert page.status_code == 200 and "is not reachable" in html and "typed-key-9" not in html
    nothing_saved()


def test_the_form_registers_and_hearth_never_starts_stops_changes_or_exports_it(admin: Client, sim: OutsideSim) -> None:
    resp = admin.post("/deployments/external/", {"base_url": sim.base, "engine_kind": "vllm", "api_key": ENGINE_KEY})
    dep = Deployment.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"/deployments/{dep.pk}/"
    for action in ("launch", "stop"):
        answer = admin.post(f"/api/deployments/{dep.pk}/{action}")
        assert answer.status_code == 400 and "Hearth did not launch" in answer.json()["detail"]
    change = admin.post(f"/api/deployments/{dep.pk}/change", {"max_model_len": 1024}, content_type="application/json")
    assert change.status_code == 400 and "Hearth did not launch" in change.json()["detail"]
    assert admin.get(f"/api/deployments/{dep.pk}/export").status_code == 400
    dep.refresh_from_db()
    assert dep.state == "ready"
    assert admin.delete(f"/api/deployments/{dep.pk}").status_code == 204  # remove = unregister, while ready
    assert not Deployment.objects.exists() and not Replica.objects.exists()
    assert httpx.get(sim.base + "/health", timeout=5).status_code == 200  # the engine itself runs on


def test_an_endpoint_added_to_a_deployment_must_serve_its_name(admin: Client, sim: OutsideSim) -> None:
    status, dep = register(admin, base_url=sim.base, engine_kind="vllm", api_key=ENGINE_KEY)
    assert status == 201, dep
    other = OutsideSim(sim.log.with_name("other.log"), "someone-else")
    try:
        resp = admin.post(
            f"/api/deployments/{dep['id']}/endpoints",
            {"base_url": other.base, "engine_kind": "vllm", "api_key": ENGINE_KEY},
            content_type="application/json",
        )
        assert resp.status_code == 400 and "does not serve 'outside-model'" in resp.json()["detail"]
        same = admin.post(
            f"/api/deployments/{dep['id']}/endpoints",
            {"base_url": sim.base, "engine_kind": "vllm"},
            content_type="application/json",
        )
        assert same.status_code == 400 and "already has the endpoint" in same.json()["detail"]
    finally:
        other.stop()
    [only] = Replica.objects.all()
    gone = admin.delete(f"/api/deployments/{dep['id']}/endpoints/{only.pk}")
    assert gone.status_code == 400 and "remove the deployment" in gone.json()["detail"]


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("http://10.0.0.5:8000/v1", "http://10.0.0.5:8000"),
        ("https://box/llm/v1/", "https://box/llm"),
        ("HTTP://[::1]:11434", "http://[::1]:11434"),
    ],
)
def test_base_urls_are_kept_without_v1(given: str, kept: str) -> None:
    assert base_url_of(given) == kept


def test_each_kind_tells_its_version_and_serves_what_its_release_does() -> None:
    assert version_in("llama.cpp", {"build_info": "b6123-1a2b3c4"}) == "b6123-1a2b3c4"
    assert version_in("ollama", {"version": "0.5.7"}) == "0.5.7" and version_in("vllm", {"x": 1}) == ""
    assert speaks_anthropic("vllm", "0.11.0") and not speaks_anthropic("vllm", "0.10.2")
    assert speaks_responses("vllm", "0.10.0") and not speaks_responses("vllm", "")
    assert not speaks_anthropic("sglang", "0.5.9") and not speaks_responses("ollama", "0.12.0")
