"""The gateway bench's report and peers (bench/report.py, bench/nginx_peer.py, bench/splice_peer.py,
bench/gateway_overhead.py's ``--peers``): issue 35's nginx verdict, issue 17's LiteLLM check left to LiteLLM,
nginx's configuration, and the Python floor (a uvloop splice) beside both."""

import argparse
import math
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import gateway_overhead
import nginx_peer
import report


def cell(streams: int, path: str, added50: float = 0.0, ratio: float = 1.0, cpu: float = math.nan) -> report.Cell:
    return report.Cell(
        streams, path, 100, 50.0, 60.0, added50, added50 * 2, 1000.0, ratio, ratio, ratio, 0, cpu, 0.4, 20.0
    )


def run(levels: dict[int, tuple[tuple[float, float, float], tuple[float, float, float]]]) -> list[report.Cell]:
    """Cells for direct, hearth and nginx at each level from (CPU µs per chunk, vs direct, added p50 ms) pairs."""
    cells = []
    for n, (hearth, nginx) in levels.items():
        cells.append(cell(n, "direct"))
        cells.append(cell(n, "hearth", cpu=hearth[0], ratio=hearth[1], added50=hearth[2]))
        cells.append(cell(n, "nginx", cpu=nginx[0], ratio=nginx[1], added50=nginx[2]))
    return cells


def test_nginx_verdict_prints_the_cpu_ratio_at_every_level_and_judges_issue_35s_targets() -> None:
    cells = run(
        {
            1: ((280.0, 0.99, 0.5), (40.0, 1.0, 0.2)),
            64: ((63.0, 0.99, 2.8), (28.0, 1.0, 0.5)),
            256: ((29.0, 0.85, 98.5), (18.0, 0.98, 24.7)),
        }
    )
    head, *levels = report.nginx_verdict(cells).splitlines()
    assert head.startswith("verdict vs nginx (hearth / nginx): MISSES CPU at 64, CPU at 256, throughput at 256")
    assert "added TTFT at 256" in head
    assert [line.split(" streams")[0].strip() for line in levels] == ["1", "64", "256"]
    assert "CPU 280 / 40 µs per chunk = 7.00×" in levels[0] and "MISS" not in levels[0]  # 1 stream: not judged
    assert "CPU 63 / 28 µs per chunk = 2.25× (≤ 1.5× MISS)" in levels[1]
    assert "vs direct 0.85 (≥ 0.95 MISS) / 0.98" in levels[2]
    assert "added TTFT p50 98.5 / 24.7 ms (≤ 2× MISS)" in levels[2]


def test_nginx_verdict_meets_when_hearth_is_within_the_ratios() -> None:
    cells = run({64: ((40.0, 1.0, 0.6), (28.0, 1.0, 0.5)), 256: ((27.0, 0.96, 40.0), (18.0, 0.98, 24.7))})
    head = report.nginx_verdict(cells).splitlines()[0]
    assert head == "verdict vs nginx (hearth / nginx): MEETS issue 35's targets"
    only_64 = [c for c in cells if c.streams == 64]
    assert "MEETS the targets it could check" in report.nginx_verdict(only_64)


def test_without_nginx_the_verdict_says_it_was_not_checked() -> None:
    cells = [c for c in run({64: ((40.0, 1.0, 0.6), (28.0, 1.0, 0.5))}) if c.path != "nginx"]
    assert report.nginx_verdict(cells) == "vs nginx: NOT CHECKED (no nginx in this run)"


def test_litellms_3x_check_is_not_asked_of_nginx() -> None:
    cells = run({64: ((40.0, 1.0, 0.6), (28.0, 1.0, 0.5))})
    line = report.verdict(cells, ["nginx"])
    assert "added p50 nginx" not in line and "vs LiteLLM: NOT CHECKED" in line
    assert line.startswith("verdict: MEETS the targets it could check")
    cells.append(cell(64, "litellm", added50=1800.0, ratio=0.2, cpu=1100.0))
    assert "added p50 litellm vs hearth 64: 1800.0 vs 0.6 ms (3000×) (≥ 3× ok)" in report.verdict(cells, ["litellm"])


def test_peers_default_to_litellm_and_nginx_and_none_is_none() -> None:
    assert gateway_overhead.peers("litellm,nginx") == ["litellm", "nginx"]
    assert gateway_overhead.peers("nginx,splice") == ["nginx", "splice"]
    assert gateway_overhead.peers("none") == []
    with pytest.raises(argparse.ArgumentTypeError, match="unknown peer envoy"):
        gateway_overhead.peers("nginx,envoy")


def test_nginx_config_is_a_foreground_streaming_proxy_under_the_runs_folder(tmp_path: Path) -> None:
    argv, env = nginx_peer.argv_env(tmp_path, 8001, 8002)
    config = (tmp_path / "nginx/nginx.conf").read_text()
    for directive in (
        "daemon off;",
        "master_process on;",
        "worker_processes 1;",
        "proxy_buffering off;",
        "proxy_http_version 1.1;",
        'proxy_set_header Connection "";',
        "server 127.0.0.1:8001;",
        "listen 127.0.0.1:8002",
        f"pid {tmp_path}/nginx/nginx.pid;",
    ):
        assert directive in config
    assert "keepalive 1024;" in config and "proxy_read_timeout 3600s;" in config
    prefix = tmp_path / "nginx"
    assert argv[1:] == ["-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-e", str(prefix / "error.log")]
    assert "REDIS_URL" not in env and "DATABASE_URL" not in env


@pytest.mark.process
def test_debians_nginx_accepts_the_config(tmp_path: Path) -> None:
    """Debian's nginx, unpacked by scripts/test-services.sh (make test), takes the bench's configuration."""
    argv, env = nginx_peer.argv_env(tmp_path, 8001, 8002)
    checked = subprocess.run([*argv, "-t"], env=env, capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr
    assert "test is successful" in checked.stderr


def test_the_python_floor_line_sets_the_splice_beside_nginx_and_hearth() -> None:
    cells = run({64: ((51.0, 1.0, 1.1), (16.0, 1.0, 0.1)), 256: ((36.0, 0.98, 18.2), (12.0, 1.0, 0.7))})
    cells += [cell(64, "splice", cpu=15.0), cell(256, "splice", cpu=13.0)]
    head, *levels = report.splice_floor(cells).splitlines()
    assert head == "python floor (a uvloop TCP splice, splice_peer.py):"
    assert "64 streams: CPU µs per chunk hearth 51, splice 15 (kernel 40 %), nginx 16" in levels[0]
    assert "splice / nginx 0.94×, hearth / splice 3.40×" in levels[0]
    assert "splice / nginx 1.08×, hearth / splice 2.77×" in levels[1]
    without = [c for c in cells if c.path != "splice"]
    assert report.splice_floor(without) == "python floor: NOT CHECKED (needs splice and nginx in the run)"
    cells.append(cell(64, "splice-watch", cpu=24.0))
    watched = report.splice_floor(cells).splitlines()[-1]
    assert watched == (
        "  64 streams: the stream read as Hearth must (splice-watch) 24 µs per chunk = splice + 9; "
        "splice-watch / nginx 1.50×"
    )


class StreamedAnswer(BaseHTTPRequestHandler):
    """An engine's streamed answer in three reads, chunked, on a kept-alive connection."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in (b"data: 1\n\n", b"data: 2\n\n", b"data: [DONE]\n\n"):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def engine() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), StreamedAnswer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.mark.process
@pytest.mark.parametrize("watch", [[], ["--watch"]], ids=["splice", "splice-watch"])
def test_the_splice_relays_streams_as_they_came_on_kept_alive_connections(engine: int, watch: list[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    splice = gateway_overhead.ROOT / "bench/splice_peer.py"
    proc = subprocess.Popen([sys.executable, str(splice), str(port), str(engine), *watch], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "the splice did not start"
                time.sleep(0.1)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
            for _ in range(2):  # the second on the same connection
                with client.stream("POST", "/v1/chat/completions", json={"stream": True}) as answer:
                    assert answer.headers["content-type"] == "text/event-stream"
                    assert b"".join(answer.iter_bytes()) == b"data: 1\n\ndata: 2\n\ndata: [DONE]\n\n"
    finally:
        proc.terminate()
        _, errors = proc.communicate(timeout=10)
    assert b"Traceback" not in errors, errors.decode()  # the watch read both answers
