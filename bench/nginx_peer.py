"""nginx as a peer gateway for ``gateway_overhead.py``: the practical floor of a streaming reverse proxy.

Debian's ``nginx`` package (1.22 on Debian 12) is fetched with ``apt-get download`` and unpacked with
``dpkg-deb -x`` under ``~/.cache/hearth/nginx`` (``$HEARTH_CACHE_DIR/nginx``) the first time, as
``scripts/test-services.sh`` unpacks promtool: not installed, so no system service starts and nothing stays
running. The bench runs it in the foreground (``daemon off``), a master and one worker, with its prefix, pid
file, temp folders and error log under the run's temporary folder, configured as a streaming reverse proxy:
``proxy_buffering off``, HTTP/1.1 with ``Connection ""`` to an upstream block that keeps connections to the
engine alive, a long ``proxy_read_timeout``, no access log. It checks no key: the client's Authorization
header goes to the engine as it came, as on the direct path.
"""

import gzip
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

DIR = Path(os.environ.get("HEARTH_CACHE_DIR") or Path.home() / ".cache/hearth") / "nginx"
EXE = DIR / "usr/sbin/nginx"
CONFIG = """\
daemon off;
master_process on;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{
    worker_connections 8192;
}}
http {{
    access_log off;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    keepalive_requests 1000000;
    upstream engine {{
        server 127.0.0.1:{engine_port};
        keepalive 1024;
        keepalive_requests 1000000;
        keepalive_timeout 60s;
    }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location / {{
            proxy_pass http://engine;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 3600s;
            proxy_send_timeout 3600s;
        }}
    }}
}}
"""


def ensure() -> str | None:
    """Unpack Debian's nginx under DIR unless its binary is there; None, or why not (nothing here raises)."""
    if EXE.exists():
        return None
    print(f"unpacking Debian's nginx under {DIR} (once)…", flush=True)
    try:
        with tempfile.TemporaryDirectory(prefix="hearth-nginx-") as download:
            got = subprocess.run(["apt-get", "download", "nginx"], cwd=download, capture_output=True, timeout=300)
            if got.returncode != 0:  # an empty or stale package list: refresh it once
                subprocess.run(["apt-get", "update", "-qq"], capture_output=True, timeout=300)
                got = subprocess.run(["apt-get", "download", "nginx"], cwd=download, capture_output=True, timeout=300)
            debs = sorted(Path(download).glob("nginx_*.deb"))
            if got.returncode != 0 or not debs:
                tail = got.stderr.decode(errors="replace").strip().splitlines()[-2:]
                return f"apt-get download nginx failed ({got.returncode}): " + " | ".join(tail)
            part = Path(download) / "unpacked"  # renamed into place whole, so a broken unpack leaves nothing
            subprocess.run(["dpkg-deb", "-x", str(debs[-1]), str(part)], check=True, capture_output=True, timeout=120)
            DIR.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(DIR, ignore_errors=True)
            shutil.move(part, DIR)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"could not unpack nginx under {DIR}: {exc}"
    return None if EXE.exists() else f"{EXE} is not in Debian's nginx package"


def version() -> str:
    """The package's version from its Debian changelog ("1.22.1-9+deb12u12"), or "?"."""
    try:
        with gzip.open(DIR / "usr/share/doc/nginx/changelog.Debian.gz", "rt") as changelog:
            first = changelog.readline()
    except OSError:
        return "?"
    return first.split("(", 1)[1].split(")", 1)[0] if "(" in first else "?"


def argv_env(tmp: Path, engine_port: int, port: int) -> tuple[list[str], dict[str, str]]:
    """The command line (its config written under ``tmp/nginx``, its prefix) and a clean environment."""
    prefix = tmp / "nginx"
    prefix.mkdir(exist_ok=True)
    config = prefix / "nginx.conf"
    config.write_text(CONFIG.format(prefix=prefix, engine_port=engine_port, port=port))
    env = {k: v for k in ("PATH", "LANG") if (v := os.environ.get(k))}
    return [str(EXE), "-p", str(prefix), "-c", str(config), "-e", str(prefix / "error.log")], env
