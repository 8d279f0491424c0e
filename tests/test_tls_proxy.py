"""HTTPS in front of Hearth as the tls profile serves it: Debian's Caddy (2.6.2) with the Caddyfile ``manage.py
caddyfile`` writes, certificates from Caddy's internal CA (its root read from Caddy's data folder), before a Hearth
web server started as conftest.start_web starts one, with HEARTH_HOSTNAME set and nothing else of the proxy's.

One Caddy and one Hearth serve every test here. The Hearth sends no keep-alives (HEARTH_SSE_KEEPALIVE 600 s), so an
engine's silence is silence on the wire too. Caddy 2.6 cuts no silent response by its defaults (the server's
read_body and write timeouts are off, its idle timeout of 5 minutes is for a connection between requests, the
proxy transport has no read timeout): what the generated file must get right is to leave a silence up to
HEARTH_STREAM_IDLE_TIMEOUT alone and to let Hearth, not the proxy, end a longer one, with its error relayed.
"""

import json
import os
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import anthropic
import httpx
import openai
import pytest
import yaml
from playwright.sync_api import sync_playwright

from tests.chromium import CHROMIUM, CHROMIUM_ARGS
from tests.conftest import ROOT, Proc, free_port, start_web
from tests.simworld import Served

pytestmark = [pytest.mark.process, pytest.mark.browser, pytest.mark.django_db(transaction=True)]
CADDY = "/usr/bin/caddy"  # Debian's package (scripts/test-services.sh installs it)
IDLE_TIMEOUT = 6  # seconds: the test Hearth's HEARTH_STREAM_IDLE_TIMEOUT


@dataclass(frozen=True)
class Https:
    """Caddy at ``base`` (https://localhost:<port>) before the Hearth web server at ``upstream``; ``ca``: a context
    trusting Caddy's internal CA only; ``health``: its health site (plain HTTP on 127.0.0.1)."""

    base: str
    ca: ssl.SSLContext
    upstream: str  # the Hearth behind it, plain HTTP
    health: str

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base, verify=self.ca, timeout=60)


def _wait_until_served(base: str, root_cert: Path, caddy: Proc) -> ssl.SSLContext:
    """A context trusting Caddy's root, once Caddy made it and answers over HTTPS with a certificate it signed."""
    deadline = time.monotonic() + 60  # Caddy makes its CA and the site's certificate at start: about a second
    while time.monotonic() < deadline:
        assert caddy.proc.poll() is None, caddy.output()
        if root_cert.exists():
            ca = ssl.create_default_context(cafile=str(root_cert))
            try:
                httpx.get(f"{base}/ready", verify=ca, timeout=2)
                return ca
            except httpx.TransportError:
                pass
        time.sleep(0.2)
    pytest.fail("Caddy did not serve HTTPS:\n" + caddy.output())


@pytest.fixture(scope="module")
def https(live_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Https]:
    if not Path(CADDY).exists():
        pytest.fail("Debian's caddy is not installed: make services (scripts/test-services.sh) installs it")
    folder = tmp_path_factory.mktemp("tls")
    env = {
        k: v
        for k, v in live_env.items()
        if k not in {"ALLOWED_HOSTS", "CSRF_TRUSTED_ORIGINS", "HEARTH_TRUSTED_PROXIES"}
    }
    env |= {
        "HEARTH_HOSTNAME": "localhost",
        "HEARTH_SSE_KEEPALIVE": "600",
        "HEARTH_STREAM_IDLE_TIMEOUT": str(IDLE_TIMEOUT),
    }
    web, upstream = start_web(env, folder / "web.log")
    port, storage = free_port(), folder / "caddy"
    ports = ["--https-port", str(port), "--http-port", str(free_port()), "--health-port", str(health := free_port())]
    argv = [sys.executable, "manage.py", "caddyfile", "--upstream", urlsplit(upstream).netloc, *ports]
    argv += ["--storage", str(storage), "--output", str(folder / "Caddyfile")]
    subprocess.run(argv, cwd=ROOT, env=env, check=True, capture_output=True)
    # HOME and XDG_* point into the test's folder: Caddy writes nothing of this machine's own
    caddy_env = {"PATH": env["PATH"], "HOME": str(folder), "XDG_DATA_HOME": str(folder), "XDG_CONFIG_HOME": str(folder)}
    caddy = Proc(
        [CADDY, "run", "--config", str(folder / "Caddyfile"), "--adapter", "caddyfile"], caddy_env, folder / "caddy.log"
    )
    base = f"https://localhost:{port}"
    try:
        ca = _wait_until_served(base, storage / "pki" / "authorities" / "local" / "root.crt", caddy)
        yield Https(base, ca, upstream, f"http://127.0.0.1:{health}")
    finally:
        caddy.stop()
        web.stop()


def test_the_sdks_stream_over_https_and_a_silence_is_ended_by_hearth_not_the_proxy(
    https: Https, served: Served
) -> None:
    http = openai.DefaultHttpxClient(verify=https.ca, timeout=60)  # each SDK's own client, trusting Caddy's CA
    oai = openai.OpenAI(base_url=f"{https.base}/v1", api_key=served.key, max_retries=0, http_client=http)
    claude = anthropic.Anthropic(
        base_url=https.base,
        api_key=served.key,
        max_retries=0,
        http_client=anthropic.DefaultHttpxClient(verify=https.ca, timeout=60),
    )
    quiet = IDLE_TIMEOUT - 2  # seconds the engine says nothing before its first token: no keep-alive either
    for prompt in ("Hello", f"Think [[sim:stall-first={quiet}]]"):
        stream = oai.chat.completions.create(
            model="llama", max_tokens=4, stream=True, messages=[{"role": "user", "content": prompt}]
        )
        chunks = [c for c in stream if c.choices]
        assert (
            "".join(c.choices[0].delta.content or "" for c in chunks)
            and chunks[-1].choices[0].finish_reason == "length"
        )
        with claude.messages.stream(
            model="llama", max_tokens=3, messages=[{"role": "user", "content": prompt}]
        ) as events:
            message = events.get_final_message()
        assert message.stop_reason == "max_tokens" and message.content[0].type == "text"

    body = {"model": "llama", "max_tokens": 4, "stream": True}
    body["messages"] = [{"role": "user", "content": f"Think [[sim:stall-first={IDLE_TIMEOUT + 4}]]"}]
    with http.stream(
        "POST", f"{https.base}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {served.key}"}
    ) as resp:
        answer = resp.read().decode()
    assert "upstream_timeout" in answer and "HEARTH_STREAM_IDLE_TIMEOUT" in answer, answer  # Hearth's words


def test_compose_caddys_health_check_asks_the_health_site_which_answers(https: Https) -> None:
    test = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]["caddy"]["healthcheck"]["test"]
    url = urlsplit(test[-1])
    assert test[:-1] == ["CMD", "wget", "-q", "-O", "-"] and url.port == 2080 and url.hostname == "127.0.0.1"
    answer = httpx.get(https.health + url.path, timeout=10)  # this Caddy's health port, as compose's asks its own
    assert (answer.status_code, answer.text) == (200, "ok")


def test_over_https_the_consoles_cookies_are_secure_and_hsts_is_sent(https: Https, admin_user: object) -> None:
    with https.client() as client:
        page = client.get("/login/")
        assert page.status_code == 200 and page.headers["strict-transport-security"] == "max-age=31536000"
        assert [c for c in page.headers.get_list("set-cookie") if c.startswith("csrftoken=")]
        credentials = {
            "username": "admin",
            "password": "admin-password-1",
            "csrfmiddlewaretoken": client.cookies["csrftoken"],
        }
        signed_in = client.post("/login/", data=credentials, headers={"Referer": f"{https.base}/login/"})
        assert signed_in.status_code == 302, signed_in.text
        cookies = [*page.headers.get_list("set-cookie"), *signed_in.headers.get_list("set-cookie")]
    assert {c.split("=", 1)[0] for c in cookies} >= {"csrftoken", "sessionid"}
    assert all("; secure" in c.lower() for c in cookies), cookies
    plain = httpx.get(f"{https.upstream}/login/", timeout=30)  # the same Hearth, reached without the proxy
    assert "strict-transport-security" not in plain.headers
    assert not any("; secure" in c.lower() for c in plain.headers.get_list("set-cookie"))


SKIPPED = ("/logout", "/static/", "/v1/", "/metrics", "/api/")  # not pages (/api/docs is added by hand)


def test_every_console_page_sends_a_csp_and_renders_without_a_violation(https: Https, served: Served) -> None:
    """Every page linked from the console, walked from the dashboard as the admin, with a ready deployment (its page,
    its memory bar, the dashboard's GPUs hold something), and the JSON API's docs."""
    violations: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_context(base_url=https.base, ignore_https_errors=True).new_page()
        page.on(
            "console", lambda m: violations.append(f"{page.url}: {m.text}") if "Content Security" in m.text else None
        )
        page.goto("/login/")
        page.get_by_label("Username").fill("admin")
        page.get_by_label("Password").fill("admin-password-1")
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(f"{https.base}/")
        seen: list[str] = []
        widths: list[str] = []
        queue = ["/", "/api/docs"]
        while queue:
            path = queue.pop(0)
            if path in seen:
                continue
            seen.append(path)
            head = page.request.get(path).headers
            if "attachment" in head.get("content-disposition", "") or "text/html" not in head.get("content-type", ""):
                continue  # a download (a CSV, a cluster export), not a page
            response = page.goto(path)
            assert response is not None and response.ok, (path, response and response.status)
            assert "default-src 'self'" in response.headers.get("content-security-policy", ""), path
            page.wait_for_load_state("networkidle")
            assert page.title(), path
            # widths the templates give as data-width (no style attribute) are set, on the page and its fragments
            widths += page.eval_on_selector_all("[data-width]", "bars => bars.map(bar => bar.style.width)")
            for href in page.eval_on_selector_all("a[href]", "links => links.map(a => a.href)"):
                link = urlsplit(urljoin(page.url, href))
                if link.netloc == urlsplit(https.base).netloc and not link.path.startswith(SKIPPED):
                    queue.append(link.path)
        # the forms that asked with an inline handler now ask through static/hearth-page.js
        page.goto(f"/deployments/{served.dep_id}/")
        asked: list[str] = []
        page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
        page.get_by_role("button", name="Stop").click()
        browser.close()
    assert not violations, violations
    assert widths and all(w.endswith("%") for w in widths), widths
    assert {"/", "/deployments/", f"/deployments/{served.dep_id}/", "/keys/", "/api/docs"} <= set(seen), seen
    assert asked and asked[0].startswith("Stop llama?") and served.state()["state"] == "ready"


def test_the_hostname_sets_the_hosts_the_origin_and_the_proxy_unless_they_are_set() -> None:
    script = "import django, json; django.setup(); from django.conf import settings as s; "
    script += "print(json.dumps([s.ALLOWED_HOSTS, s.CSRF_TRUSTED_ORIGINS, s.HEARTH_TRUSTED_PROXIES]))"
    unset = ("ALLOWED_HOSTS", "CSRF_TRUSTED_ORIGINS", "HEARTH_TRUSTED_PROXIES", "HEARTH_HOSTNAME")
    base = {k: v for k, v in os.environ.items() if k not in unset} | {"DJANGO_SETTINGS_MODULE": "appliance.settings"}

    def read(**env: str) -> list[list[str]]:
        done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=base | env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    hosts, origins, proxies = read(HEARTH_HOSTNAME="LLM.example.com")
    assert "llm.example.com" in hosts and "localhost" in hosts
    assert origins == ["https://llm.example.com"] and proxies == ["127.0.0.1", "::1"]
    assert read(HEARTH_HOSTNAME="llm.example.com", ALLOWED_HOSTS="a.example", HEARTH_TRUSTED_PROXIES="10.0.0.9") == [
        ["a.example"],
        ["https://llm.example.com"],
        ["10.0.0.9"],
    ]
    assert read()[1:] == [[], []]  # no name: no origin, and nobody's X-Forwarded-Proto is believed
    refused = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=base | {"HEARTH_HOSTNAME": "https://llm.example.com"},
        capture_output=True,
        text=True,
    )
    assert refused.returncode != 0 and "HEARTH_HOSTNAME" in refused.stderr
