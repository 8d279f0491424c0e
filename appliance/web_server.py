"""The web processes: uvicorn serving appliance.asgi with HEARTH_WEB_WORKERS processes on one socket.

``python -m appliance.web_server --host H --port P`` (scripts/up.sh, compose.yaml and the image run it).
What the processes share lives in Redis and the database (quotas, concurrency, key and route changes, the
request log); their Prometheus metrics are summed through prometheus-client's multiprocess mode: each
process writes its samples under PROMETHEUS_MULTIPROC_DIR (set here, before any worker imports the client,
to ``DATA_DIR/run/prometheus`` unless given) and /metrics reads them all (gateway.metrics_endpoint.metrics_app). The
folder is emptied at each start: counters begin again at 0, which Prometheus reads as a restart.

Imports Django's settings only (never the app: each worker imports it itself).
"""

import argparse
import os
import shutil
from pathlib import Path

import uvicorn

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client.values reads it at import


def metrics_folder(data_dir: Path) -> Path:
    """An empty folder for the processes' metric files: PROMETHEUS_MULTIPROC_DIR when set, else
    ``data_dir/run/prometheus`` (made 0700). Returns the folder, also exported in PROMETHEUS_MULTIPROC_DIR."""
    folder = Path(os.environ.get(MULTIPROC_ENV) or data_dir / "run" / "prometheus")
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, mode=0o700)
    os.environ[MULTIPROC_ENV] = str(folder)
    return folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")
    from django.conf import settings

    metrics_folder(settings.DATA_DIR)
    # proxy_headers off: whether X-Forwarded-* is believed is Django's call (HEARTH_TRUSTED_PROXIES)
    uvicorn.run(
        "appliance.asgi:application", host=args.host, port=args.port, workers=settings.HEARTH_WEB_WORKERS,
        access_log=False, proxy_headers=False, timeout_graceful_shutdown=settings.HEARTH_DRAIN_SECONDS,
    )  # fmt: skip


if __name__ == "__main__":
    main()
