"""Shows what pip downloads, with sizes and progress, where ``pip -q`` showed nothing for minutes.

    pip install --progress-bar raw PACKAGES | python3 scripts/pip_progress.py PREFIX [--watch DIR --expect-mb N]

Reads pip's standard output (its own ``Downloading NAME (SIZE)`` lines and ``--progress-bar raw``'s ``Progress
DONE of TOTAL`` bytes) and writes, after PREFIX: each download's name and size; its progress, redrawn in place on a
terminal and a line every ``--every`` seconds (default 10) elsewhere (a log, CI); and, with ``--watch``, while pip
installs and prints nothing, DIR's size against the ``--expect-mb`` it reaches once installed. The rest of pip's
output (each requirement it checks) is dropped; its warnings and errors go to standard error, untouched.
Standard library only: it runs under an engine venv's fresh Python before anything is installed there.
"""

import argparse
import os
import re
import selectors
import sys
import time
from collections.abc import Callable
from typing import TextIO

DOWNLOAD = re.compile(r"^\s*(Downloading|Resuming download|Using cached) (\S+)(?: \(([^)]*)\))?\s*$")
PROGRESS = re.compile(r"^Progress (\d+) of (\d+)$")
INSTALLING = re.compile(r"^Installing collected packages: (.+)$")
BUILDING = re.compile(r"^Building wheels for collected packages: (.+)$")


def size(n: float) -> str:
    """Bytes as pip writes sizes (1000-based), in GB from 1 GB up: ``"312.4 MB"``, ``"1.21 GB"``."""
    if n >= 1e9:
        return f"{n / 1e9:.2f} GB"
    if n >= 1e6:
        return f"{n / 1e6:.1f} MB"
    return f"{n / 1e3:.0f} kB"


def count(n: int, noun: str) -> str:
    """``"1 file"``, ``"3 files"``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def parse_size(shown: str | None) -> int:
    """pip's size text back to bytes: ``"312.4 MB"`` → 312400000; 0 for none or another text."""
    units = {"bytes": 1, "kB": 1000, "MB": 1000**2, "GB": 1000**3}
    number, _, unit = (shown or "").partition(" ")
    try:
        return round(float(number) * units[unit])
    except (ValueError, KeyError):
        return 0


def folder_bytes(path: str) -> int:
    """The bytes of every file under ``path`` (links not followed); 0 while it does not exist."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:  # pip removed it meanwhile
                continue
    return total


class Report:
    """pip's output in, the lines a person reads out: feed ``line()`` each line of pip's, ``tick()`` when pip
    has said nothing for a while, ``close()`` at its end."""

    def __init__(
        self,
        out: TextIO,
        prefix: str,
        *,
        terminal: bool,
        every: float = 10.0,
        watch: str | None = None,
        expect_mb: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.out, self.prefix, self.terminal, self.every = out, prefix, terminal, every
        self.watch, self.expect_mb, self.clock = watch, expect_mb, clock
        self.name: str | None = None  # the file downloading now
        self.done = 0  # its bytes so far
        self.expected = 0  # its size as pip gave it (pip shows no progress under 512 kB)
        self.finished = 0  # bytes of the downloads before it
        self.files = 0
        self.cached = 0
        self.last_shown = 0.0
        self.open_line: str | None = None  # what the terminal line being redrawn shows (a file, a folder)
        self.installing = False

    def write(self, text: str, *, redraw: str | None = None) -> None:
        """One line; on a terminal, one that ``redraw`` names is drawn again in place until another follows."""
        if self.open_line is not None and redraw != self.open_line:
            self.out.write("\n")
            self.open_line = None
        if self.terminal and redraw is not None:
            self.out.write(f"\r\x1b[K{self.prefix}{text}")
            self.open_line = redraw
        else:
            self.out.write(f"{self.prefix}{text}\n")
        self.out.flush()

    def end_download(self) -> None:
        if self.name is not None:
            self.finished += max(self.done, self.expected)
        self.name, self.done, self.expected = None, 0, 0

    def line(self, text: str) -> None:
        if progress := PROGRESS.match(text):
            self.progress(int(progress[1]), int(progress[2]))
        elif download := DOWNLOAD.match(text):
            self.end_download()
            verb, url, shown = download.groups()
            name = url.rsplit("/", 1)[-1]
            if verb == "Using cached":
                self.cached += 1
            elif not name.endswith(".metadata"):  # the resolver reads a wheel's metadata alone: a few kB
                self.files += 1
                self.name, self.expected, self.last_shown = name, parse_size(shown), self.clock()
                self.write(f"downloading {name} ({shown or 'size unknown'})", redraw=name)
        elif installing := INSTALLING.match(text):
            self.end_download()
            self.installing, self.last_shown = True, self.clock()
            self.write(f"installing {count(len(installing[1].split(', ')), 'package')}")
        elif building := BUILDING.match(text):
            self.end_download()
            self.write(f"building from source: {building[1]}")

    def progress(self, done: int, total: int) -> None:
        if self.name is None:
            return
        self.done = done
        now = self.clock()
        if self.terminal:
            of = f" of {size(total)} ({100 * done // total}%)" if total else ""
            self.write(f"downloading {self.name}: {size(done)}{of}", redraw=self.name)
        elif done < total and now - self.last_shown >= self.every:
            self.last_shown = now
            so_far = f"; {size(self.finished + done)} downloaded in all" if self.files > 1 else ""
            self.write(f"  {self.name}: {size(done)} of {size(total)} ({100 * done // total}%){so_far}")
        if total and done >= total:
            self.end_download()

    def tick(self) -> None:
        """pip is quiet (installing, building): show the watched folder's size, at most every ``every`` s."""
        now = self.clock()
        if not (self.installing and self.watch) or (not self.terminal and now - self.last_shown < self.every):
            return
        self.last_shown = now
        of = f" of ~{size(self.expect_mb * 1e6)}" if self.expect_mb else ""
        self.write(f"  {size(folder_bytes(self.watch))}{of} in {self.watch}", redraw=self.watch)

    def close(self) -> None:
        self.end_download()
        if self.files or self.cached:
            cached = f"; {self.cached} from pip's cache" if self.cached else ""
            self.write(f"downloaded {count(self.files, 'file')}, {size(self.finished)}{cached}")
        elif self.open_line is not None:
            self.out.write("\n")
            self.out.flush()


def follow(stream: TextIO, report: Report, tick_s: float) -> None:
    """Feeds ``report`` each line of ``stream`` as it comes and a tick whenever none came for ``tick_s``."""
    fd, pending = stream.fileno(), b""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            if not selector.select(tick_s):
                report.tick()
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                report.line(line.decode(errors="replace").rstrip("\r"))
    if pending:
        report.line(pending.decode(errors="replace"))
    report.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("prefix", help='what each line starts with, e.g. "setup-vllm-cpu: "')
    parser.add_argument("--every", type=float, default=10.0, help="seconds between lines off a terminal")
    parser.add_argument("--watch", help="a folder whose size to show while pip installs")
    parser.add_argument("--expect-mb", type=float, help="the watched folder's size once installed, in MB")
    args = parser.parse_args()
    terminal = sys.stdout.isatty()
    report = Report(
        sys.stdout, args.prefix, terminal=terminal, every=args.every, watch=args.watch, expect_mb=args.expect_mb
    )
    follow(sys.stdin, report, tick_s=1.0 if terminal else min(args.every, 5.0))


if __name__ == "__main__":
    main()
