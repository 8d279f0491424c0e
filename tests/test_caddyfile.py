"""The HTTPS proxy's configuration (appliance.caddyfile) and what HEARTH_HOSTNAME implies (appliance.public_name), as
plain values; tests/test_tls_proxy.py runs Caddy with it."""

import io

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from appliance import public_name
from appliance.caddyfile import TIMEOUT_MARGIN, Site, render


def test_the_hostname_is_read_as_a_name_on_the_wire() -> None:
    assert public_name.hostname("  LLM.Example.COM. ") == "llm.example.com"
    assert public_name.hostname("bücher.example") == "xn--bcher-kva.example"
    assert public_name.hostname("") == ""
    for bad in ("https://llm.example.com", "llm.example.com:8443", "llm.example.com/v1", "a b.example"):
        with pytest.raises(ValueError, match="HEARTH_HOSTNAME"):
            public_name.hostname(bad)


def test_the_hostname_fills_the_settings_left_unset() -> None:
    assert public_name.allowed_hosts("llm.example.com", ["localhost"]) == ["localhost", "llm.example.com"]
    assert public_name.allowed_hosts("localhost", ["localhost"]) == ["localhost"]
    assert public_name.allowed_hosts("", ["localhost"]) == ["localhost"]
    assert public_name.trusted_origins("llm.example.com") == ["https://llm.example.com"]
    assert public_name.trusted_origins("") == []
    assert public_name.trusted_proxies("llm.example.com") == ["127.0.0.1", "::1"]
    assert public_name.trusted_proxies("") == []  # no proxy named: nobody's X-Forwarded-Proto is believed


@pytest.mark.parametrize(
    ("name", "private"),
    [
        ("gpu-box", True),
        ("localhost", True),
        ("gpu-box.lan", True),
        ("llm.corp.internal", True),
        ("hearth.home.arpa", True),
        ("10.1.2.3", True),
        ("llm.example.com", False),
        ("inference.acme.io", False),
    ],
)
def test_a_private_name_gets_caddys_own_ca_a_public_one_acme(name: str, private: bool) -> None:
    assert public_name.is_private(name) is private
    text = render(Site(hostname=name, upstream="web:8000", stream_idle_timeout=600))
    assert ("tls internal" in text) is private
    assert ("skip_install_trust" in text) is private  # Caddy never touches the trust store of its own machine


def test_every_streaming_timeout_outlasts_hearths_own_and_nothing_buffers() -> None:
    text = render(Site(hostname="llm.example.com", upstream="web:8000", stream_idle_timeout=600.5))
    proxy = 601 + TIMEOUT_MARGIN
    lines = [line.strip() for line in text.splitlines()]
    for directive in ("read_timeout", "write_timeout", "response_header_timeout", "idle"):
        assert f"{directive} {proxy}s" in lines, directive
    assert "flush_interval -1" in lines
    assert not any(line.startswith(("read_body", "write ", "request_buffers", "response_buffers")) for line in lines)
    assert "llm.example.com {" in lines and "reverse_proxy web:8000 {" in lines
    assert "admin off" in lines
    assert "http://127.0.0.1:2080 {" in lines and 'respond /healthz "ok" 200' in lines  # compose's health check


def test_ports_storage_email_and_the_ca_choice_reach_the_file() -> None:
    site = Site(
        hostname="llm.example.com",
        upstream="127.0.0.1:8000",
        stream_idle_timeout=30,
        internal_ca=True,
        email="ops@example.com",
        https_port=8443,
        http_port=8080,
        storage="/srv/caddy data",
    )
    lines = [line.strip() for line in render(site).splitlines()]
    assert {"https_port 8443", "http_port 8080", "email ops@example.com", "tls internal"} <= set(lines)
    assert 'storage file_system "/srv/caddy data"' in lines  # quoted: a space would split the token
    assert "llm.example.com:8443 {" in lines
    with pytest.raises(ValueError, match="HEARTH_HOSTNAME"):
        render(Site(hostname="", upstream="web:8000", stream_idle_timeout=600))


def test_the_command_prints_the_file_or_says_what_is_missing() -> None:
    out = io.StringIO()
    with override_settings(HEARTH_HOSTNAME="gpu-box.lan", HEARTH_TLS_CA="auto", HEARTH_STREAM_IDLE_TIMEOUT=120):
        call_command("caddyfile", "--upstream", "web:8000", stdout=out)
    assert "gpu-box.lan {" in out.getvalue() and f"read_timeout {120 + TIMEOUT_MARGIN}s" in out.getvalue()
    with override_settings(HEARTH_HOSTNAME="gpu-box.lan", HEARTH_TLS_CA="public"):
        call_command("caddyfile", stdout=(public := io.StringIO()))
    assert "tls internal" not in public.getvalue()
    with override_settings(HEARTH_HOSTNAME=""), pytest.raises(CommandError, match="set HEARTH_HOSTNAME"):
        call_command("caddyfile")
    with override_settings(HEARTH_HOSTNAME="gpu-box", HEARTH_TLS_CA="self-signed"), pytest.raises(CommandError):
        call_command("caddyfile")
