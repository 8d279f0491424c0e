"""A vLLM production-stack router registered as an endpoint Hearth did not launch: its version is read as the
router's own (GET /version, vllm_router.__version__), never as a vLLM version; its /metrics, which carries the
router's own view and none of the engines' KV-cache, throughput or latency series, is not scraped; and the console
says which panels it feeds and to register the engine pods for the others.

The stand-in router answers as production-stack's does at vllm-project/production-stack @ 66b60661 (chart
0.1.12): src/vllm_router/routers/main_router.py (``/version``, ``/v1/models``) and metrics_router.py."""

import http.server
import json
import threading
from collections.abc import Iterator

import pytest
from django.test import Client

from console.deployments import external
from console.deployments.models import Deployment, Replica
from console.observability import scraping
from engines.external import KIND_LABELS, ROUTER_PANELS, ExternalKind, speaks_anthropic, speaks_responses

pytestmark = pytest.mark.django_db
ROUTER_VERSION = "0.12.0"  # a router release whose number would pass vLLM's floors, were it read as vLLM's
ROUTER_METRICS = (  # names the router's /metrics serves (services/metrics_service/__init__.py)
    '# TYPE vllm:current_qps gauge\nvllm:current_qps{server="http://10.0.0.7:8000"} 2.0\n'
    '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{server="http://10.0.0.7:8000"} 3.0\n'
)


ASKED: list[str] = []  # the paths the stand-in router was asked, in order


class _Router(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        ASKED.append(self.path)
        answers = {
            "/version": json.dumps({"version": ROUTER_VERSION}),
            "/v1/models": json.dumps({"object": "list", "data": [{"id": "llama-70b", "object": "model"}]}),
            "/metrics": ROUTER_METRICS,
        }
        body = answers.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.end_headers()
        self.wfile.write((body or "").encode())

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def router() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Router)
    ASKED.clear()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def registered(admin: Client, url: str) -> dict[str, object]:
    resp = admin.post(
        "/api/external-deployments",
        {"base_url": url, "engine_kind": "production-stack"},
        content_type="application/json",
    )
    assert resp.status_code == 201, resp.content
    return dict(resp.json())


def test_the_routers_version_is_its_own_and_no_vllm_feature_is_read_from_it(admin: Client, router: str) -> None:
    dep = registered(admin, router)
    [replica] = dep["replicas"]  # type: ignore[misc]
    assert (replica["engine_kind"], replica["engine_version"]) == ("production-stack", ROUTER_VERSION)
    assert "/version" in ASKED
    # As vLLM's, 0.12.0 would serve /v1/messages and /v1/responses itself; the router's says nothing of its
    # engines', so the gateway translates both to chat completions, which every engine behind it serves.
    assert speaks_anthropic("vllm", ROUTER_VERSION) and speaks_responses("vllm", ROUTER_VERSION)
    assert not speaks_anthropic("production-stack", ROUTER_VERSION)
    assert not speaks_responses("production-stack", ROUTER_VERSION)
    assert Deployment.objects.get(pk=dep["id"]).engine_label == "vLLM production-stack router (not launched by Hearth)"


def test_the_console_says_which_panels_a_router_feeds_and_to_register_the_engine_pods(
    admin: Client, router: str
) -> None:
    dep = registered(admin, router)
    page = admin.get(f"/deployments/{dep['id']}/").content.decode()
    assert "feeds only the gateway&#x27;s panels" in page and "register the engine pods" in page
    external.check_endpoints()  # a health check keeps saying it
    assert Deployment.objects.get(pk=dep["id"]).state_reason == f"Serving. {ROUTER_PANELS}"
    form = admin.get("/deployments/external/").content.decode()
    assert 'value="production-stack"' in form and KIND_LABELS[ExternalKind.PRODUCTION_STACK] in form


def test_the_routers_metrics_are_not_read_as_an_engines(admin: Client, router: str) -> None:
    registered(admin, router)
    replica = Replica.objects.get()
    answer = scraping.fetch(replica)
    assert isinstance(answer, ValueError) and "register the engine pods" in str(answer)
    scraping.scrape_all()
    assert "/metrics" not in ASKED


def test_every_kind_fits_the_stored_column_which_has_no_choice_list() -> None:
    """Replica.engine_kind is free text of up to 20 characters: a new kind needs no migration, old rows keep theirs."""
    field = Replica._meta.get_field("engine_kind")
    assert not field.choices and all(len(kind) <= (field.max_length or 0) for kind in ExternalKind)
