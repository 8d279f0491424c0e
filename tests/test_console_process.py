"""The console in its own process behind the relay processes (appliance.web_server, as `make up` and compose
run it): pages, sign-in and the JSON API work through the relay's forward with the client's address and
scheme as Django would see them in one process; what the forward refuses (a body over the limit, a target
that is not a path) and what it passes on unchanged; uploads that stall or vanish hold nothing; a console
stopped cold does not stop the gateway; one that dies answers 503 until it is started again; stopping the
web server, or killing it outright, leaves no console or relay behind."""

import os
import re
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from appliance.web_server import CONSOLE_START_SECONDS, remove_stale_console_folders
from console.audit.models import AuditEntry
from tests.conftest import Proc, login, start_web
from tests.gatewayworld import within
from tests.simworld import Served

pytestmark = pytest.mark.django_db(transaction=True)
MAX_BODY = 1_000_000
CHAT = {"model": "llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


class WebServer:
    def __init__(self, proc: Proc, base: str) -> None:
        self.proc, self.base = proc, base

    def console_pid(self) -> int:
        """The console's uvicorn: the web server's child running appliance.console_asgi."""
        for entry in Path("/proc").iterdir():
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == self.proc.proc.pid and b"appliance.console_asgi:application" in cmdline:
                return int(entry.name)
        raise AssertionError("no console process:\n" + self.proc.output())

    def socket_folder(self) -> Path:
        found = re.search(r"unix socket (\S+)/console\.sock", self.proc.output())
        assert found, self.proc.output()
        return Path(found[1])


@pytest.fixture
def web_server(live_env: dict[str, str], tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[WebServer]:
    """`python -m appliance.web_server` with two relay processes (or the number a test's parameter gives),
    believing X-Forwarded-For from 127.0.0.1."""
    env = {
        **live_env,
        "HEARTH_WEB_WORKERS": str(getattr(request, "param", 2)),
        "HEARTH_CONSOLE_WORKERS": "1",
        "HEARTH_DRAIN_SECONDS": "2",
        "HEARTH_TRUSTED_PROXIES": "127.0.0.1",
        "HEARTH_MAX_BODY_BYTES": str(MAX_BODY),
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prometheus"),
    }
    proc, base = start_web(env, tmp_path / "web.log")
    yield WebServer(proc, base)
    proc.stop()


def test_sign_in_and_the_api_work_through_the_relay_with_the_clients_address(
    web_server: WebServer, admin_user: object
) -> None:
    client = login(web_server.base)
    assert client.get("/").status_code == 200
    created = client.post("/api/keys", json={"name": "through the relay"})
    assert created.status_code == 201 and created.json()["key"].startswith("hk-"), created.text
    assert client.get("/api/keys").json()  # the session cookie and the CSRF token made it both ways
    # a client may not say who it is through the private header (the relay sets it from the connection),
    # while a trusted proxy's X-Forwarded-For is believed, as in one process
    for claim in ({"X-Hearth-Peer": "http 198.51.100.9 1 h 80"}, {"X-Forwarded-For": "203.0.113.7"}):
        with httpx.Client(base_url=web_server.base, headers=claim) as other:
            other.get("/login/")
            token = other.cookies["csrftoken"]
            other.post("/login/", data={"username": "admin", "password": "wrong", "csrfmiddlewaretoken": token})
    ips = sorted(f"{e.action} {e.ip}" for e in AuditEntry.objects.filter(action__startswith="signin"))
    assert ips == ["signin 127.0.0.1", "signin.failed 127.0.0.1", "signin.failed 203.0.113.7"], ips
    page = httpx.get(f"{web_server.base}/login/", headers={"X-Hearth-Peer": "https 198.51.100.9 1 h 443"})
    assert "secure" not in page.headers["set-cookie"].lower()  # the connection was plain http, whatever it says


def raw(base: str, request: bytes) -> socket.socket:
    """A connection to the web server that has sent ``request`` as it is."""
    parts = urlsplit(base)
    conn = socket.create_connection((parts.hostname, parts.port), timeout=10)
    conn.sendall(request)
    return conn


def test_what_the_relay_refuses_or_passes_on_as_it_came(web_server: WebServer, admin_user: object) -> None:
    big = b"x" * (MAX_BODY + 1)
    page = httpx.post(f"{web_server.base}/login/", content=big)
    api = httpx.post(f"{web_server.base}/api/keys", content=big, headers={"Content-Type": "application/json"})
    assert (page.status_code, api.status_code) == (413, 413) and "over 1000000 bytes" in api.json()["detail"]
    with raw(web_server.base, b"OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") as conn:
        assert conn.recv(200).startswith(b"HTTP/1.1 400 ")
    agent = "café-agent"  # UTF-8 bytes reach Django as they came, as they would in one process
    client = httpx.Client(base_url=web_server.base, headers={b"User-Agent": agent.encode()})
    client.get("/login/")
    client.post(
        "/login/",
        data={"username": "admin", "password": "admin-password-1", "csrfmiddlewaretoken": client.cookies["csrftoken"]},
    )
    assert AuditEntry.objects.get(action="signin").user_agent == agent.encode().decode("latin-1")


def test_uploads_that_stall_or_vanish_hold_no_connection_to_the_console(web_server: WebServer) -> None:
    partial = b"POST /login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\nusername=x"
    for _ in range(300):  # each hangs up with 990 bytes of its body unsent
        raw(web_server.base, partial).close()
    stalled = [raw(web_server.base, partial) for _ in range(300)]  # these keep their connections open
    try:
        assert httpx.get(f"{web_server.base}/login/", timeout=10).status_code < 500
    finally:
        for conn in stalled:
            conn.close()


@pytest.mark.parametrize("web_server", [1, 2], indirect=True, ids=["one relay process", "two"])
def test_a_console_stopped_cold_does_not_stop_the_gateway(served: Served, web_server: WebServer) -> None:
    pid = web_server.console_pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(httpx.ReadTimeout):
            httpx.get(f"{web_server.base}/login/", timeout=2)
        for _ in range(4):  # each on a new connection, so both relay processes are asked
            answer = httpx.post(
                f"{web_server.base}/v1/chat/completions",
                json=CHAT,
                timeout=30,
                headers={"Authorization": f"Bearer {served.key}"},
            )
            assert answer.status_code == 200, answer.text
        assert httpx.get(f"{web_server.base}/ready", timeout=5).status_code == 200
    finally:
        os.kill(pid, signal.SIGCONT)
    assert httpx.get(f"{web_server.base}/login/", timeout=10).status_code < 500


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_console_that_dies_answers_503_until_it_is_started_again(web_server: WebServer) -> None:
    first = web_server.console_pid()
    os.kill(first, signal.SIGKILL)
    within(10, lambda: not _alive(first))
    page = httpx.get(f"{web_server.base}/login/", timeout=10)
    api = httpx.get(f"{web_server.base}/api/keys", timeout=10)
    assert (page.status_code, page.headers["retry-after"], api.status_code) == (503, "2", 503), page.text
    assert "console is not answering" in page.text and "console is not answering" in api.json()["detail"]
    assert page.headers["content-security-policy"].startswith("default-src 'none'")  # as every console page has one
    deadline = time.monotonic() + 60
    while httpx.get(f"{web_server.base}/login/", timeout=10).status_code >= 500:
        assert time.monotonic() < deadline, web_server.proc.output()[-3000:]
        time.sleep(0.5)
    assert web_server.console_pid() != first
    assert "the console process exited with -9; starting it again" in web_server.proc.output()


def test_every_line_of_the_web_log_says_when_and_which_process(web_server: WebServer) -> None:
    assert httpx.get(f"{web_server.base}/nothing-here/", timeout=10).status_code == 404  # the console logs it
    assert httpx.get(f"{web_server.base}/static/hearth.css", timeout=10).status_code == 200  # Django warned here
    os.kill(web_server.console_pid(), signal.SIGKILL)  # and the web server that it starts it again
    deadline = time.monotonic() + 60
    while "starting it again" not in web_server.proc.output():
        assert time.monotonic() < deadline, web_server.proc.output()[-3000:]
        time.sleep(0.2)
    stamp = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (INFO|WARNING|ERROR) \[(\d+)\] [\w.]+: ")
    lines = [line for line in web_server.proc.output().splitlines() if line.strip()]
    assert all(stamp.match(line) for line in lines), [line for line in lines if not stamp.match(line)][:5]
    pids = {int(found.group(2)) for line in lines if (found := stamp.match(line))}
    assert web_server.proc.proc.pid in pids and len(pids) >= 3  # the web server, its relay, its consoles


def relay_pids(web: WebServer) -> list[int]:
    children = Path(f"/proc/{web.proc.proc.pid}/task/{web.proc.proc.pid}/children").read_text().split()
    return [int(c) for c in children if int(c) != web.console_pid()]


@pytest.mark.parametrize("web_server", [1, 2], indirect=True, ids=["one relay process", "two"])
def test_a_web_server_killed_outright_takes_its_relays_and_console_with_it(web_server: WebServer) -> None:
    left = [web_server.console_pid(), *relay_pids(web_server)]
    assert len(left) >= 1, left  # the console; with two relays, them too (and multiprocessing's resource tracker)
    os.kill(web_server.proc.proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while any(
        Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2] for pid in left
    ):
        assert time.monotonic() < deadline, [Path(f"/proc/{p}/cmdline").read_bytes() for p in left]
        time.sleep(0.5)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{web_server.base}/login/", timeout=5)


@pytest.mark.parametrize("web_server", [1, 2], indirect=True, ids=["one relay process", "two"])
def test_stopping_the_web_server_leaves_no_console_behind(web_server: WebServer) -> None:
    pid, folder = web_server.console_pid(), web_server.socket_folder()
    assert folder.stat().st_mode & 0o777 == 0o700
    web_server.proc.proc.send_signal(signal.SIGTERM)
    assert web_server.proc.proc.wait(30) == 0, web_server.proc.output()[-3000:]
    assert not Path(f"/proc/{pid}").exists() and not folder.exists()


def test_a_stop_signal_to_the_whole_process_group_ends_it_with_no_error_and_no_console_started_again(
    live_env: dict[str, str], tmp_path: Path
) -> None:
    """docker stop, systemd and Ctrl-C signal every process of the group at once: the console, drained, ends on
    SIGTERM while the web server drains its relays (HEARTH_DRAIN_SECONDS at most, its default here). It logged an
    ERROR and started the console again."""
    env = {
        **live_env,
        "HEARTH_WEB_WORKERS": "2",
        "HEARTH_CONSOLE_WORKERS": "1",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prometheus"),
    }
    proc, base = start_web(env, tmp_path / "web.log")
    web = WebServer(proc, base)
    pid = web.console_pid()
    os.killpg(proc.proc.pid, signal.SIGTERM)
    assert proc.proc.wait(60) == 0, proc.output()[-3000:]
    said = proc.output()
    assert " ERROR " not in said and "starting it again" not in said, said[-3000:]
    assert not _alive(pid)


def test_what_a_killed_web_server_left_in_the_temp_folder_is_removed_and_nothing_else(tmp_path: Path) -> None:
    stale, starting, other = tmp_path / "hearth-console-a", tmp_path / "hearth-console-b", tmp_path / "unrelated"
    for folder in (stale, starting, other):
        folder.mkdir()
    (stale / "console.sock").write_text("")  # not a listening socket: nothing accepts there
    old = time.time() - CONSOLE_START_SECONDS - 5
    for folder in (stale, other):
        os.utime(folder, (old, old))
    assert remove_stale_console_folders(tmp_path) == [stale]
    assert starting.exists() and other.exists()
