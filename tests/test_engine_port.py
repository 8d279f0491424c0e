"""The port the process runtime's engines get (appliance.runtimes.process.engine_port): free, and above the kernel's
ephemeral range where there is room, so that no outgoing connection takes it while the engine loads."""

import socket
from pathlib import Path

import pytest

from appliance.runtimes import process
from appliance.runtimes.process import engine_port


def test_it_is_free_and_above_the_ephemeral_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("32768\t60999\n")
    monkeypatch.setattr(process, "EPHEMERAL_RANGE", ranges)
    ports = {engine_port("127.0.0.1") for _ in range(20)}
    assert all(61_000 <= port <= 65_535 for port in ports) and len(ports) > 1  # spread, not one port for all
    port = ports.pop()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # free


def test_without_room_above_the_range_or_without_it_the_kernel_picks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("1024 65535\n")
    monkeypatch.setattr(process, "EPHEMERAL_RANGE", ranges)
    assert 1024 <= engine_port("127.0.0.1") <= 65_535
    monkeypatch.setattr(process, "EPHEMERAL_RANGE", tmp_path / "absent")
    assert 0 < engine_port("127.0.0.1") <= 65_535


def test_an_address_not_of_this_machine_is_an_oserror() -> None:
    with pytest.raises(OSError):
        engine_port("192.0.2.1")  # TEST-NET-1
