"""After the whole suite (this module runs last: its tests are marked ``last``), no API key secret, engine
key or SECRET_KEY appears in any log, page, metric, a database dump, the decoded sessions or Redis.

Run alone it first makes its own traffic: a simulator deployment launched by the worker, keys created in
the console and the API, one rotated, requests through the gateway, one revoke. Leaks are found by
shape as well as by value: any ``hk-XXXXXXXX.<secret>`` or ``hek-<32>`` string anywhere is a key that
should not be there, whoever made it; the values known here (this test's keys, the running engines'
keys, SECRET_KEY) are searched for as they are.
"""

import os
import re
import subprocess
from pathlib import Path

import httpx
import pytest
import redis
from django.conf import settings
from django.contrib.sessions.models import Session
from django.db import connection

from console.access.models import ApiKey
from console.deployments.models import Deployment, Replica
from tests.outside import ENGINE_KEY, OutsideSim
from tests.simworld import Served, hearth_metrics
from tests.test_roles import pages, url_for

pytestmark = [pytest.mark.last, pytest.mark.django_db(transaction=True)]
SHAPES = {
    "an API key": re.compile(rb"hk-[A-Za-z0-9]{8}\.[A-Za-z0-9_-]{20,}"),
    "an engine key": re.compile(rb"hek-[A-Za-z0-9_-]{32}"),
}
MAX_FILE = 64 * 1024 * 1024


def traffic(served: Served) -> list[str]:
    """Keys made, rotated, used and revoked the ways people do; returns every secret that was shown."""
    client = served.client
    shown = [served.key]
    made = client.post("/keys/", data={"name": "console key", "csrfmiddlewaretoken": client.cookies["csrftoken"]})
    page = client.get(made.headers["location"]).text
    shown.append(re.search(r'data-field="new_key">([^<]+)<', page).group(1))  # type: ignore[union-attr]
    rotate = client.post("/api/keys", json={"name": "to rotate"}).json()
    shown.append(rotate["key"])
    shown.append(client.post(f"/api/keys/{rotate['id']}/rotate", json={"grace_seconds": 60}).json()["key"])
    for key in shown[-1:] + shown[:1]:
        answer = httpx.post(
            f"{served.web}/v1/chat/completions",
            headers={"Authorization": f"Bearer {key}"},
            json={"model": "llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
    assert client.delete(f"/api/keys/{rotate['id']}").status_code == 204
    return shown


def crawl(served: Served) -> dict[str, bytes]:
    """Every page (GET) of the URLconf and every /api list, as the admin sees them, and /metrics."""
    dep = Deployment.objects.get(pk=served.dep_id)
    key = ApiKey.objects.latest("id")
    world = {"key": key, "people": {"member": key.owner}, "model": dep.model, "deployment": dep}
    seen = {}
    for name, route in pages().items():
        if name not in ("access:logout", "access:oidc_callback", "access:oidc_start"):
            path = url_for(route, world)
            seen[path] = served.client.get(path).content
    for path in (
        "/api/keys",
        "/api/deployments",
        f"/api/deployments/{dep.pk}",
        "/api/members",
        "/api/usage",
        "/api/audit",
        "/api/models",
        f"/api/deployments/{dep.pk}/metrics",
    ):
        seen[path] = served.client.get(path).content
    seen["/metrics"] = hearth_metrics(served.web).encode()
    return seen


def dumps() -> dict[str, bytes]:
    """The test database as pg_dump writes it, the sessions decoded, and every Redis key and value."""
    db = connection.settings_dict
    dump = subprocess.run(
        ["pg_dump", "--data-only", "-h", db["HOST"] or "127.0.0.1", "-U", db["USER"] or "postgres", db["NAME"]],
        capture_output=True,
        check=True,
    ).stdout
    sessions = repr([s.get_decoded() for s in Session.objects.all()]).encode()
    r = redis.Redis.from_url(settings.REDIS_URL)
    values = b"\n".join(k + b"=" + (r.dump(k) or b"") for k in r.scan_iter(count=1000))
    return {"pg_dump": dump, "sessions (decoded)": sessions, "redis": values}


def logs(base: Path) -> dict[str, bytes]:
    """Every file this test run wrote under its temporary folders (``base``; `make test` runs the suite in
    stages and names the folder that holds them all in HEARTH_TEST_RUN_DIR), and the engines' logs, pytest-xdist
    workers' included. Left out: the folders of tests that copy the checkout (tests/test_image.py's build
    contexts and what Docker sent), whose files are the repository's own, test settings and fixtures included,
    not anything Hearth wrote."""
    base = Path(os.environ.get("HEARTH_TEST_RUN_DIR") or base)
    copies = {found.parent.parent for found in base.rglob("manage.py")}
    written = [f for f in base.rglob("*") if copies.isdisjoint(f.parents)]
    engines = [*(settings.DATA_DIR / "engines").glob("*.log"), *settings.DATA_DIR.glob("xdist-*/engines/*.log")]
    files = [*written, *engines]
    return {str(f): f.read_bytes() for f in files if f.is_file() and f.stat().st_size <= MAX_FILE}


def leaks(corpus: dict[str, bytes], secrets: dict[str, str]) -> list[str]:
    found = []
    for where, text in corpus.items():
        for what, shape in SHAPES.items():
            if match := shape.search(text):
                found.append(f"{where}: something shaped like {what} ({match.group()[:14].decode()}…)")
        found += [f"{where}: {what}" for what, value in secrets.items() if value.encode() in text]
    return found


def test_no_key_secret_engine_key_or_secret_key_is_in_any_log_page_metric_or_dump(
    served: Served, tmp_path_factory: pytest.TempPathFactory
) -> None:
    shown = traffic(served)
    engine_keys = [r.engine_api_key for r in Replica.objects.all()]
    assert engine_keys and all(k.startswith("hek-") for k in engine_keys)
    secrets = {f"API key {k[:11]}…": k for k in shown} | {f"engine key {k[:6]}…": k for k in engine_keys}
    secrets["SECRET_KEY"] = settings.SECRET_KEY
    secrets["an outside engine's key"] = ENGINE_KEY
    outside = OutsideSim(tmp_path_factory.mktemp("outside") / "sim.log", "outside-secret")
    try:
        registered = served.client.post(
            "/api/external-deployments", json={"base_url": outside.base, "engine_kind": "vllm", "api_key": ENGINE_KEY}
        )
        assert registered.status_code == 201, registered.text
        answer = httpx.post(
            f"{served.web}/v1/chat/completions",
            headers={"Authorization": f"Bearer {shown[0]}"},
            json={"model": "outside-secret", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        corpus = {**crawl(served), **dumps(), **logs(tmp_path_factory.getbasetemp())}
        corpus[f"/deployments/{registered.json()['id']}/"] = served.client.get(
            f"/deployments/{registered.json()['id']}/"
        ).content
    finally:
        outside.stop()
    assert any(b"console key" in text for text in corpus.values()), "the crawl saw no key page"
    assert not (found := leaks(corpus, secrets)), "\n".join(found)
