"""Servers the tests start themselves, outside Hearth, to register as engines Hearth did not launch: the
simulator as a plain process (``python -m engines.simulator``, as vLLM would be run by hand on a second box), a
TLS server whose certificate no system CA signed, and a web server that is not OpenAI-compatible."""

import datetime
import http.server
import ipaddress
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.conftest import ROOT, free_port

ENGINE_KEY = "outside-engine-key-Zq81"  # the key an outside engine demands: searched for where it must not be


class OutsideSim:
    """The simulator run by the test on a port of its own; stop and start it again on the same port."""

    def __init__(self, log: Path, served: str, *flags: str, api_key: str = ENGINE_KEY) -> None:
        self.port, self.log, self.served = free_port(), log, served
        self.base = f"http://127.0.0.1:{self.port}"
        key = ["--api-key", api_key] if api_key else []
        self.argv = [
            sys.executable,
            "-m",
            "engines.simulator",
            "--port",
            str(self.port),
            "--served-model-name",
            served,
            "--max-model-len",
            "8192",
            *key,
            *flags,
        ]
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv, cwd=ROOT, stdout=self.log.open("ab"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(self.base + "/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert self.proc.poll() is None and time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def served_requests(self) -> float:
        """vLLM's request_success_total on this engine: how many requests it answered."""
        text = httpx.get(self.base + "/metrics", timeout=10).text
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("vllm:request_success_total{")
        )


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 signed by its own key (no CA vouches for it), and the key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


class _Page(http.server.BaseHTTPRequestHandler):
    """Answers every GET with a web page (200 text/html), as a server that is not an inference engine would."""

    def do_GET(self) -> None:
        body = b"<html><body>Welcome to the intranet</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def web_server(tls_folder: Path | None = None) -> Iterator[str]:
    """A web page server in a thread; with ``tls_folder``, behind TLS with a self-signed certificate made there.
    Yields its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    scheme = "http"
    if tls_folder is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*self_signed(tls_folder))
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{scheme}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def ready_deployment(
    name: str, engine: str, port: int, pid: int, engine_api_key: str, extra_args: list[str], max_model_len: int
) -> Iterator[int]:
    """A ready deployment ``name`` of ``engine`` whose one process-runtime replica is an engine the test started
    itself (process ``pid``, listening on ``port``); yields the deployment's id. The session's Celery worker, when
    an earlier test on this xdist worker started it, reconciles every process-runtime replica: the engine's pid file
    makes this one read as running, not as crashed (and restarted). The pid file goes before the engine does, so no
    runtime ever stops it by that file."""
    from django.conf import settings

    from console.catalog.models import ModelSource
    from console.deployments.models import Deployment, DeploymentState, Replica

    source = ModelSource.objects.create(name=name, kind="local", path="/nonexistent", config={}, weights_bytes=0)
    dep = Deployment.objects.create(
        name=name,
        model=source,
        engine=engine,
        served_model_name=name,
        max_model_len=max_model_len,
        kv_space_gib=1.0,
        plan={},
        extra_args=extra_args,
        state=DeploymentState.READY,
    )
    runtime_name = f"{name}-engine"  # no instance prefix: never one of the appliance's own (orphans are those)
    Replica.objects.create(
        deployment=dep,
        runtime="process",
        runtime_name=runtime_name,
        host="127.0.0.1",
        port=port,
        engine_api_key=engine_api_key,
        running=True,
        ready_at=dep.created_at,
    )
    pidfile = settings.DATA_DIR / "engines" / f"{runtime_name}.pid"
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    pidfile.write_text(str(pid))
    try:
        yield dep.pk
    finally:
        pidfile.unlink(missing_ok=True)
