"""The address policy on its own (appliance.address_policy): every numeric form of an IPv4 address read as the C
library reads it, the refused ranges and ports with their words, what HEARTH_EXTERNAL_ALLOW lifts and what it
never does, host names checked, and the policy the settings make. Registration under it:
tests/test_external_refused.py."""

import ipaddress
import socket

import pytest
from django.conf import settings
from django.test import override_settings

from appliance.address_policy import (
    Guarded,
    Policy,
    allowed_networks,
    ascii_host,
    bound_here,
    current,
    ip_of,
    ipv4_of,
    judge,
    resolve,
)

LOOPBACK = ipaddress.ip_address("127.0.0.1")
NOWHERE = Policy(is_local=lambda address: False)  # no port guarded, no address of this box


@pytest.mark.parametrize(
    "form",
    ["2130706433", "0177.0.0.1", "0x7f.1", "0x7f000001", "127.1", "127.0.1", "0177.1", "017700000001"],
)
def test_every_numeric_form_of_loopback_is_loopback_as_libc_reads_it(form: str) -> None:
    assert ipv4_of(form) == LOOPBACK
    assert ip_of(form) == LOOPBACK
    assert socket.getaddrinfo(form, 80, type=socket.SOCK_STREAM)[0][4][0] == "127.0.0.1"  # what a connect reaches


def test_a_trailing_dot_is_the_same_address_as_url_parsers_read_it() -> None:
    assert ip_of("127.0.0.1.") == ip_of("0x7f.1.") == LOOPBACK  # stricter than libc, which asks DNS then


@pytest.mark.parametrize("form", ["::ffff:127.0.0.1", "[::ffff:127.0.0.1]", "::ffff:7f00:1"])
def test_an_ipv4_mapped_ipv6_address_is_its_ipv4_address(form: str) -> None:
    assert ip_of(form) == LOOPBACK


@pytest.mark.parametrize("name", ["gpu-box", "10.0.0.5.example", "256.1.1.1", "0x100000000", "08.0.0.1", "1.2.3.4.5"])
def test_what_no_numeric_form_reads_is_a_name(name: str) -> None:
    assert ipv4_of(name) is None


@pytest.mark.parametrize(
    ("address", "words"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.3.4", "loopback"),
        ("::1", "loopback"),
        ("0.0.0.0", "'this host'"),
        ("::", "unspecified"),
        ("169.254.169.254", "link-local (169.254.0.0/16), the cloud metadata address"),
        ("fe80::1", "link-local (fe80::/10)"),
        ("fd00:ec2::254", "cloud metadata"),
        ("100.100.100.200", "cloud metadata"),
        ("224.0.0.251", "multicast"),
        ("ff02::1", "multicast"),
        ("255.255.255.255", "reserved"),
        ("::127.0.0.1", "IPv4-compatible"),
    ],
)
def test_the_refused_ranges_say_why(address: str, words: str) -> None:
    verdict = judge(NOWHERE, address, 8000, [address])
    assert words in verdict.refused and verdict.addresses == ()


@pytest.mark.parametrize("address", ["10.0.0.5", "172.16.8.1", "192.168.1.20", "fd12:3456::7", "8.8.8.8"])
def test_private_ranges_and_the_internet_are_allowed(address: str) -> None:
    verdict = judge(NOWHERE, address, 8000, [address])
    assert verdict.refused == "" and verdict.addresses == (ipaddress.ip_address(address),)


def test_a_name_is_refused_when_any_of_its_answers_is() -> None:
    verdict = judge(NOWHERE, "gpu-box", 8000, ["10.0.0.5", "::ffff:169.254.169.254"])
    assert verdict.refused.startswith("gpu-box is 169.254.169.254, link-local")
    assert judge(NOWHERE, "gpu-box", 8000, []).refused == "gpu-box resolves to no address"


def test_the_allowance_lifts_the_range_rules_it_covers_and_says_so() -> None:
    policy = Policy(allowed_networks(["127.0.0.0/8", "fe80::/10"]), is_local=lambda address: False)
    verdict = judge(policy, "localhost", 8000, ["127.0.0.1", "10.0.0.5"])
    assert verdict.refused == "" and verdict.allowed_by == (
        "127.0.0.1 (loopback (127.0.0.0/8): this box itself) by 127.0.0.0/8",
    )
    assert "link-local" in judge(policy, "169.254.169.254", 80, ["169.254.169.254"]).refused  # not covered
    assert judge(policy, "::1", 80, ["::1"]).refused  # an IPv4 network covers no IPv6 address


def test_a_guarded_port_is_refused_on_its_hosts_and_this_boxs_addresses_whatever_the_allowance() -> None:
    redis = Guarded(6379, "this appliance's Redis", frozenset({ipaddress.ip_address("10.0.0.9")}))
    box = {ipaddress.ip_address("10.0.0.2"), LOOPBACK}
    policy = Policy(allowed_networks(["0.0.0.0/0"]), (redis,), is_local=lambda address: address in box)
    assert judge(policy, "cache", 6379, ["10.0.0.9"]).refused == "10.0.0.9:6379 is this appliance's Redis"
    assert judge(policy, "10.0.0.2", 6379, ["10.0.0.2"]).refused == "10.0.0.2:6379 is this appliance's Redis"
    assert judge(policy, "2130706433", 6379, ["2130706433"]).refused == "127.0.0.1:6379 is this appliance's Redis"
    assert judge(policy, "10.0.0.7", 6379, ["10.0.0.7"]).refused == ""  # another box's Redis port: its business
    assert judge(policy, "10.0.0.9", 8000, ["10.0.0.9"]).refused == ""


def test_this_boxs_addresses_are_those_a_socket_binds_to() -> None:
    assert bound_here(LOOPBACK) and bound_here(ipaddress.ip_address("127.0.0.2"))
    assert not bound_here(ipaddress.ip_address("203.0.113.77"))  # TEST-NET-3: no box has it


def test_host_names_are_checked_and_international_ones_encoded() -> None:
    assert ascii_host("bücher.example") == "xn--bcher-kva.example" and ascii_host("gpu_box-2.lan") == "gpu_box-2.lan"
    for bad in ["a" * 300, "a" * 64 + ".lan", "two..dots", "-lead.lan", "sp ace", ""]:
        with pytest.raises(ValueError, match="is not a host name"):
            ascii_host(bad)
    with pytest.raises(ValueError, match="is not a host name"):
        resolve("a" * 300, 80)  # before any lookup: getaddrinfo would raise UnicodeError ("label too long")


def test_a_bad_allowance_names_itself() -> None:
    with pytest.raises(ValueError, match="HEARTH_EXTERNAL_ALLOW: 'ten'"):
        allowed_networks(["10.0.0.0/8", "ten"])


@override_settings(
    HEARTH_EXTERNAL_ALLOW=["10.8.0.0/16"],
    HEARTH_PORT=8123,
    HEARTH_GATEWAY_URL="http://localhost:8124",
    REDIS_URL="redis://127.0.0.1:6380/2",
)
def test_the_settings_make_the_policy() -> None:
    policy = current()
    assert policy.allow == (ipaddress.ip_network("10.8.0.0/16"),)
    guards = {g.port: g for g in policy.guarded}
    assert guards[8123].what == guards[8124].what == "this appliance itself" and LOOPBACK in guards[8124].addresses
    assert guards[6380] == Guarded(6380, "this appliance's Redis", frozenset({LOOPBACK}))
    assert guards[int(settings.DATABASES["default"]["PORT"] or 5432)].what == "this appliance's database"
