"""The private header that carries a forwarded console request's client, scheme and server (appliance.console_peer)."""

from appliance.console_peer import PEER_HEADER, peer_header, restore


def test_what_the_relay_saw_is_what_the_console_gets_back() -> None:
    relay = {
        "type": "http",
        "scheme": "https",
        "client": ("2001:db8::7", 51234),
        "server": ("10.0.0.2", 8000),
        "headers": [(b"host", b"hearth")],
    }
    forwarded = {
        "type": "http",
        "scheme": "http",
        "client": None,
        "server": None,
        "headers": [(b"host", b"hearth"), peer_header(relay)],
    }
    console = restore(forwarded)
    assert (console["scheme"], console["client"], console["server"]) == (
        "https",
        ("2001:db8::7", 51234),
        ("10.0.0.2", 8000),
    )
    assert console["headers"] == [(b"host", b"hearth")]


def test_missing_addresses_stay_missing_and_a_malformed_header_changes_nothing() -> None:
    header = peer_header({"type": "http", "scheme": "http", "client": None, "server": None})
    assert header == (PEER_HEADER, b"http - - - -")
    assert restore({"scheme": "http", "headers": [header]})["client"] is None
    for bad in (b"", b"https 1.2.3.4", b"gopher 1.2.3.4 1 h 80", b"https 1.2.3.4 1 h 80 extra"):
        scope = {"scheme": "http", "client": None, "headers": [(PEER_HEADER, bad)]}
        assert restore(scope) is scope
