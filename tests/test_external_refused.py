"""Registering an engine Hearth did not launch under the address policy (issue 36): each refused form of an
address is a 400 naming the policy with nothing sent there (a listener the test starts counts zero connections:
one made would wait in its backlog), an address of this box's own network still registers, HEARTH_EXTERNAL_ALLOW
lets more through and the audit log says so, a name that resolves to a refused address after its registration is
taken out of the routes at the next health check without being asked, and every failed connection reads the same
("not reachable"), whether the port is closed, silent or speaks something other than HTTP.

No allowance here unless a test gives one (the run's HEARTH_EXTERNAL_ALLOW=127.0.0.0/8 is for the other tests'
engines, on 127.0.0.1)."""

import http.server
import ipaddress
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client, override_settings

from appliance.address_policy import range_rule
from console.audit.models import AuditEntry
from console.deployments import external, probing
from console.deployments.models import Deployment, Replica
from tests.conftest import free_port

pytestmark = pytest.mark.django_db
MODEL = "policy-model"
REFUSED = "refused by the address policy"


class _Models(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible server of one model: its /v1/models, 404 elsewhere."""

    def do_GET(self) -> None:
        found = self.path == "/v1/models"
        body = json.dumps({"object": "list", "data": [{"id": MODEL}]} if found else {}).encode()
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class Listener(http.server.ThreadingHTTPServer):
    """A listener on ``host``:``port`` (0: a free one); with ``serve``, the server above in a thread, else a
    socket nobody accepts on. ``connections()`` counts every connection made to it, taken or still waiting."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, serve: bool = False) -> None:
        self.taken = 0
        super().__init__((host, port), _Models)
        self.port = self.server_address[1]
        self.serving = serve
        if serve:
            threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def get_request(self) -> tuple[socket.socket, Any]:
        self.taken += 1
        return super().get_request()

    def connections(self) -> int:
        """Those taken, and those still waiting in the backlog (serving stops: none is taken meanwhile)."""
        if self.serving:
            self.shutdown()
            self.serving = False
        self.socket.setblocking(False)
        while True:
            try:
                conn, _ = self.socket.accept()
            except BlockingIOError:
                return self.taken
            conn.close()
            self.taken += 1


@pytest.fixture(autouse=True)
def no_allowance(settings: Any) -> None:
    settings.HEARTH_EXTERNAL_ALLOW = []


@pytest.fixture
def tripwire() -> Iterator[Listener]:
    listener = Listener()
    yield listener
    listener.server_close()


def register(admin: Client, url: str) -> tuple[int, str]:
    resp = admin.post("/api/external-deployments", {"base_url": url}, content_type="application/json")
    return resp.status_code, str(resp.json().get("detail", resp.json()))


def own_private_address() -> str:
    """An address of this box outside loopback (the one it would reach a private network from)."""
    for probe in ("10.255.255.255", "172.31.255.255", "192.168.255.255"):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            try:
                sock.connect((probe, 9))  # UDP: no packet sent, the route chosen
            except OSError:
                continue
            address = sock.getsockname()[0]
        if ipaddress.ip_address(address).is_private and not range_rule(ipaddress.ip_address(address)):
            return str(address)
    pytest.skip("this box has no private address outside loopback to listen on")


def resolving(monkeypatch: pytest.MonkeyPatch, names: dict[str, str]) -> None:
    """``socket.getaddrinfo`` answers each of ``names`` with its address (what a DNS server would say)."""
    real = socket.getaddrinfo

    def answer(host: Any, *args: Any, **kwargs: Any) -> Any:
        return real(names.get(host, host), *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", answer)


def test_a_connection_made_to_the_tripwire_is_counted(tripwire: Listener) -> None:
    socket.create_connection(("127.0.0.1", tripwire.port)).close()
    assert tripwire.connections() == 1


@pytest.mark.parametrize(
    "host",
    ["2130706433", "0177.0.0.1", "0x7f.1", "127.1", "[::ffff:127.0.0.1]", "localhost", "gpu-box.example"],
)
def test_each_form_of_loopback_is_refused_naming_the_policy_and_nothing_is_sent(
    admin: Client, tripwire: Listener, monkeypatch: pytest.MonkeyPatch, host: str
) -> None:
    resolving(monkeypatch, {"gpu-box.example": "127.0.0.1"})
    status, detail = register(admin, f"http://{host}:{tripwire.port}")
    assert status == 400 and REFUSED in detail and "loopback" in detail, detail
    assert tripwire.connections() == 0
    assert not Deployment.objects.exists()


def test_the_appliances_own_port_and_its_redis_are_refused_even_where_loopback_is_allowed(
    admin: Client, tripwire: Listener, settings: Any
) -> None:
    settings.HEARTH_EXTERNAL_ALLOW = ["127.0.0.0/8"]
    with override_settings(HEARTH_PORT=tripwire.port):
        status, detail = register(admin, f"http://127.0.0.1:{tripwire.port}")
    assert status == 400 and f"127.0.0.1:{tripwire.port} is this appliance itself" in detail and REFUSED in detail
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{tripwire.port}/6"):  # read by the policy alone here
        status, detail = register(admin, f"http://0x7f.1:{tripwire.port}")
    assert status == 400 and "this appliance's Redis" in detail, detail
    assert tripwire.connections() == 0
    database_port = int(settings.DATABASES["default"]["PORT"] or 5432)
    status, detail = register(admin, f"http://127.0.0.1:{database_port}")
    assert status == 400 and "this appliance's database" in detail, detail


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest", "http://[fe80::1]:8000", "http://0.0.0.0:8000"])
def test_link_local_metadata_and_this_host_are_refused(admin: Client, url: str) -> None:
    status, detail = register(admin, url)
    assert status == 400 and REFUSED in detail, detail


def test_a_host_name_too_long_is_a_400_not_a_500(admin: Client) -> None:
    status, detail = register(admin, f"http://{'a' * 300}:8000")
    assert status == 400 and "is not a host name" in detail, detail
    page = admin.post("/deployments/external/", {"base_url": f"http://{'b' * 63}.{'c' * 64}:1", "engine_kind": "vllm"})
    assert page.status_code == 200 and "is not a host name" in page.content.decode()


def test_the_form_says_the_policy_refused(admin: Client, tripwire: Listener) -> None:
    page = admin.post(
        "/deployments/external/", {"base_url": f"http://0177.0.0.1:{tripwire.port}", "engine_kind": "vllm"}
    )
    assert page.status_code == 200 and REFUSED in page.content.decode()
    assert tripwire.connections() == 0


def test_an_address_of_this_boxs_network_registers(admin: Client) -> None:
    engine = Listener(own_private_address(), serve=True)
    try:
        status, detail = register(admin, f"http://{engine.server_address[0]}:{engine.port}")
        assert status == 201, detail
    finally:
        engine.server_close()
    [entry] = AuditEntry.objects.filter(action="deployment.register")
    assert "allowed_by_HEARTH_EXTERNAL_ALLOW" not in entry.changes


def test_the_allowance_lets_an_octal_loopback_through_and_the_audit_log_says_so(admin: Client, settings: Any) -> None:
    settings.HEARTH_EXTERNAL_ALLOW = ["127.0.0.0/8"]
    engine = Listener(serve=True)
    try:
        status, detail = register(admin, f"http://0177.0.0.1:{engine.port}")
        assert status == 201, detail
    finally:
        engine.server_close()
    [entry] = AuditEntry.objects.filter(action="deployment.register")
    assert entry.changes["allowed_by_HEARTH_EXTERNAL_ALLOW"] == [
        "127.0.0.1 (loopback (127.0.0.0/8): this box itself) by 127.0.0.0/8"
    ]
    settings.HEARTH_EXTERNAL_ALLOW = []
    dep = Deployment.objects.get()
    resp = admin.post(
        f"/api/deployments/{dep.pk}/endpoints", {"base_url": "http://2130706433:8001"}, content_type="application/json"
    )
    assert resp.status_code == 400 and REFUSED in resp.json()["detail"]


def test_a_name_that_resolves_to_loopback_after_registration_is_not_asked_again(
    admin: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Listener(own_private_address(), serve=True)
    names = {"gpu-box.example": str(engine.server_address[0])}
    resolving(monkeypatch, names)
    status, detail = register(admin, f"http://gpu-box.example:{engine.port}")
    assert status == 201, detail
    trap = Listener(port=engine.port)  # loopback, the same port: where the name points now
    try:
        names["gpu-box.example"] = "127.0.0.1"
        asked = engine.connections()
        assert external.check_endpoints() == 0
        assert trap.connections() == 0 and engine.connections() == asked
    finally:
        trap.server_close()
        engine.server_close()
    replica = Replica.objects.get()
    assert replica.ready_at is None and REFUSED in replica.down_reason
    page = admin.get(f"/deployments/{replica.deployment_id}/").content.decode()
    assert 'data-field="endpoint-state">down' in page and REFUSED in page


def test_an_endpoint_registered_before_a_stricter_policy_is_not_polled(admin: Client, settings: Any) -> None:
    settings.HEARTH_EXTERNAL_ALLOW = ["127.0.0.0/8"]
    engine = Listener(serve=True)
    try:
        assert register(admin, f"http://127.0.0.1:{engine.port}")[0] == 201
        assert external.check_endpoints() == 1  # asked, and up
        settings.HEARTH_EXTERNAL_ALLOW = []
        asked = engine.connections()
        assert external.check_endpoints() == 0
        assert engine.connections() == asked
    finally:
        engine.server_close()
    replica = Replica.objects.get()
    assert replica.ready_at is None and replica.down_reason.startswith(f"http://127.0.0.1:{engine.port} is {REFUSED}")


def test_every_failed_connection_reads_the_same(admin: Client, settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.HEARTH_EXTERNAL_ALLOW = ["127.0.0.0/8"]
    monkeypatch.setattr(probing, "REGISTER_TIMEOUT", 0.5)
    silent = Listener()  # takes the connection, never answers
    talker = socket.create_server(("127.0.0.1", 0))  # answers something that is not HTTP, then closes

    def ssh_banner() -> None:
        while True:
            try:
                conn, _ = talker.accept()
            except OSError:  # closed at the end of the test
                return
            conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
            conn.close()

    threading.Thread(target=ssh_banner, daemon=True).start()
    http_server = Listener(serve=True)
    urls = [
        f"http://127.0.0.1:{free_port()}",  # closed
        f"http://127.0.0.1:{silent.port}",
        f"http://127.0.0.1:{talker.getsockname()[1]}",
        f"https://127.0.0.1:{http_server.port}",  # TLS asked of a server that speaks plain HTTP
    ]
    try:
        details = []
        for url in urls:
            status, detail = register(admin, url)
            assert status == 400, detail
            details.append(detail.replace(url, "URL"))
    finally:
        for server in (silent, http_server):
            server.server_close()
        talker.close()
    assert details[0].startswith("URL is not reachable: no HTTP answer within 0.5 s.")
    assert len(set(details)) == 1, details
