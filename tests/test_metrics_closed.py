"""Hearth's own /metrics is closed by default (issue 36): with no HEARTH_METRICS_TOKEN it answers 403 saying how to
set one, unless an admin sets HEARTH_METRICS_OPEN; with a token it wants that token whatever else is set; and
compose's Prometheus gets the token it is given (its command writes the file prometheus.yml reads) or stops
saying why. The token's wrong and right forms against a real gateway process: tests/test_gateway_security.py."""

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.test import override_settings

from gateway.metrics_endpoint import metrics_app
from tests.conftest import ROOT

pytestmark = pytest.mark.django_db


def call_metrics(authorization: bytes = b"") -> tuple[int, dict[bytes, bytes], bytes]:
    """(status, headers, body) of /metrics asked in this process with that Authorization header."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request"}

    async def send(message: Any) -> None:
        sent.append(dict(message))

    headers = [(b"authorization", authorization)] if authorization else []
    asyncio.run(metrics_app({"type": "http", "path": "/metrics", "headers": headers}, receive, send))
    return sent[0]["status"], dict(sent[0]["headers"]), b"".join(m.get("body", b"") for m in sent[1:])


@override_settings(HEARTH_METRICS_TOKEN="", HEARTH_METRICS_OPEN=False)
def test_without_a_token_metrics_are_closed_and_say_how_to_open_them() -> None:
    for authorization in (b"", b"Bearer anything"):
        status, headers, body = call_metrics(authorization)
        assert status == 403 and headers[b"content-type"] == b"application/json"
        why = json.loads(body)["error"]
        assert "HEARTH_METRICS_TOKEN" in why and "HEARTH_METRICS_OPEN=true" in why and b"hearth_" not in body


@override_settings(HEARTH_METRICS_TOKEN="", HEARTH_METRICS_OPEN=True)
def test_an_admin_may_open_them_to_anyone() -> None:
    status, _, body = call_metrics()
    assert status == 200 and b"# HELP hearth_engine_scrape_age_seconds" in body


@override_settings(HEARTH_METRICS_TOKEN="metrics-token-9", HEARTH_METRICS_OPEN=True)
def test_a_token_set_is_wanted_even_when_they_are_open() -> None:
    status, headers, body = call_metrics(b"Bearer wrong")
    assert status == 401 and b"bearer" in headers[b"www-authenticate"].lower() and b"metrics-token-9" not in body
    assert call_metrics(b"Bearer metrics-token-9")[0] == 200


def prometheus_command(folder: Path) -> str:
    """compose's Prometheus command as its shell runs it, with its files under ``folder`` and a stand-in
    Prometheus that prints its arguments."""
    [command] = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]["prometheus"]["command"]
    stand_in = folder / "prometheus"
    stand_in.write_text('#!/bin/sh\necho "prometheus $*"\n')
    stand_in.chmod(0o755)
    (folder / "data").mkdir()
    return (
        command.replace("$$", "$").replace("/bin/prometheus", str(stand_in)).replace("/prometheus/", f"{folder}/data/")
    )


@pytest.mark.process
def test_composes_prometheus_reads_the_token_it_is_given_and_stops_without_one(tmp_path: Path) -> None:
    command = prometheus_command(tmp_path)
    scrape = yaml.safe_load((ROOT / "scripts" / "monitoring" / "prometheus.yml").read_text())["scrape_configs"][0]
    assert scrape["authorization"]["credentials_file"] == "/prometheus/hearth-token"
    env = {"PATH": os.environ["PATH"], "HEARTH_METRICS_TOKEN": "given-token-3"}
    ran = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, timeout=30)
    assert ran.returncode == 0 and ran.stdout.startswith("prometheus --config.file="), ran.stderr
    assert (tmp_path / "data" / "hearth-token").read_text() == "given-token-3"
    env["HEARTH_METRICS_TOKEN"] = ""
    ran = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, timeout=30)
    assert ran.returncode == 1 and "set HEARTH_METRICS_TOKEN" in ran.stderr and "prometheus --" not in ran.stdout
