"""Download a Hugging Face checkpoint into the weights cache before its engine starts, at its pinned commit.

The cache is huggingface_hub's own layout (``<HEARTH_WEIGHTS_DIR>/hub/models--org--name/{blobs,snapshots}``), the
one an engine's huggingface_hub reads from the same volume, so an engine started afterwards finds every file and
fetches nothing. The hub is ``HF_ENDPOINT`` (huggingface_hub.constants.ENDPOINT), the token HEARTH_HF_TOKEN_FILE's
(else huggingface_hub's own: HF_TOKEN, its token file).

Each file is fetched by huggingface_hub's ``http_get`` (Range requests, its own retries within a transfer) into
``blobs/<etag>.hearth-partial``, written unbuffered so the bytes on disk are the bytes received. That file is kept
across an interruption, even a killed process: the next attempt asks only for what is missing (``Range:
bytes=N-``). huggingface_hub 2.4's ``hf_hub_download`` does not: it writes to a per-process
``<etag>.<uuid>.incomplete`` and deletes it on failure (file_download.py ``_download_to_tmp_and_move``, after
huggingface_hub#4228), so a failed 140 GB download starts over. A finished file is checked against the hub's
size and hash (``model_info(files_metadata=True)``: the LFS sha256, else the git blob sha1) before it is moved to
``blobs/<etag>``; ``hf_hub_download`` then links it into ``snapshots/<sha>/`` as it links any cached blob.
"""

import errno
import hashlib
import json
import logging
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

from django.conf import settings

from console.catalog.hub import hub_error_words
from console.templatetags.byte_units import iec
from console.weights.progress import Progress

log = logging.getLogger(__name__)
ATTEMPTS = 5  # tries of one file (or of the file list) before the download has failed
BACKOFF = 2.0  # seconds before the second try, doubling (with up to 50% jitter), at most BACKOFF_CAP
BACKOFF_CAP = 60.0
PARTIAL = ".hearth-partial"  # suffix of a blob being downloaded, kept for a resume
READ_CHUNK = 8 * 2**20  # bytes read at a time when hashing
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EROFS})  # the disk's faults, not the link's


class WeightsError(RuntimeError):
    """The weights could not be downloaded; the message says which repo and file, and why, in plain words."""


class CorruptFile(WeightsError):
    """A downloaded file is not the hub's (size or hash); it is deleted, so the next try fetches it afresh."""


@dataclass(frozen=True)
class HubFile:
    """One file of a repo at a commit, as the hub describes it: ``size`` in bytes (None when the hub gave none),
    ``sha256`` of an LFS file's content ("" for a file kept in git), ``blob_id`` its git blob sha1."""

    name: str
    size: int | None
    sha256: str
    blob_id: str


def hub_cache() -> Path:
    """huggingface_hub's cache folder inside the weights cache (HF_HUB_CACHE for an engine given HF_HOME there)."""
    return Path(settings.HEARTH_WEIGHTS_DIR) / "hub"


def hf_token() -> str | None:
    """The token in HEARTH_HF_TOKEN_FILE; None (huggingface_hub's own lookup) when there is none or it is empty."""
    path = Path(settings.HEARTH_HF_TOKEN_FILE) if settings.HEARTH_HF_TOKEN_FILE else None
    token = path.read_text().strip() if path is not None and path.is_file() else ""
    return token or None


def snapshot_dir(repo_id: str, revision: str) -> Path:
    """Where the files of ``repo_id`` at commit ``revision`` are linked once downloaded."""
    from huggingface_hub.file_download import repo_folder_name

    return hub_cache() / repo_folder_name(repo_id=repo_id, repo_type="model") / "snapshots" / revision


def list_files(repo_id: str, revision: str) -> list[HubFile]:
    """The repo's files at ``revision`` with their sizes and hashes (GET /api/models/{repo}/revision/{rev}?blobs=1).
    Raises what huggingface_hub raises."""
    from huggingface_hub import HfApi

    info = HfApi().model_info(repo_id, revision=revision, files_metadata=True, token=hf_token())
    return [
        HubFile(s.rfilename, s.size, s.lfs.sha256 if s.lfs else "", s.blob_id or "")
        for s in info.siblings or []
        if not s.rfilename.startswith(".")  # .gitattributes and the like: no engine reads them
    ]


def fetch_model(repo_id: str, revision: str, report: Callable[[Progress], None]) -> Path:
    """Download every file of ``repo_id`` at commit ``revision`` into the weights cache, calling ``report`` after
    each chunk received (the caller throttles), and return the snapshot folder. A file already in the cache is not
    fetched again; a partial one is resumed. Each file gets ATTEMPTS tries with backoff; a corrupt one is fetched
    afresh at once. A commit downloaded and checked before, its files all still there, is not asked of the hub at all
    (an offline box launches it again). Raises WeightsError (CorruptFile when a file is still not the hub's after
    its tries)."""
    if is_complete(repo_id, revision):
        return snapshot_dir(repo_id, revision)
    progress = Progress(repo_id, 0)

    def pause(seconds: float, why: str) -> None:
        """Wait out a backoff, reporting each second (the report is the launch's heartbeat: HEARTH_STALE_AFTER)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            progress.retrying = f"Trying again in {left:.0f} s: {why}"
            report(progress)
            time.sleep(min(left, 1.0))
        progress.retrying = ""

    files = _retrying("the file list", repo_id, revision, lambda: list_files(repo_id, revision), pause)
    progress.total = sum(f.size or 0 for f in files)
    _check_room(repo_id, revision, files)
    for file in files:
        progress.file, before = file.name, progress.done
        report(progress)

        def attempt(file: HubFile = file, before: int = before) -> None:
            progress.done = before  # a try counts the file's bytes (on disk, then received) afresh
            fetch_file(repo_id, revision, file, progress, report)

        _retrying(file.name, repo_id, revision, attempt, pause)
    report(progress)
    _mark_complete(repo_id, revision, files)
    return snapshot_dir(repo_id, revision)


def _check_room(repo_id: str, revision: str, files: list[HubFile]) -> None:
    """Refuse a download the weights cache's disk cannot hold: the files not yet in the snapshot, less the bytes of
    their partial downloads, against the disk's free bytes. Raises WeightsError naming both."""
    snapshot = snapshot_dir(repo_id, revision)
    blobs = snapshot.parent.parent / "blobs"
    partial = sum(p.stat().st_size for p in blobs.glob(f"*{PARTIAL}")) if blobs.is_dir() else 0
    missing = sum(f.size or 0 for f in files if not (snapshot / f.name).exists()) - partial
    hub_cache().mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(hub_cache()).free
    if missing > free:
        raise WeightsError(
            f"The weights of {repo_id} need {iec(missing)} more on the weights cache's disk, which has {iec(free)} "
            "free: free space there (the weights cache page frees models no deployment uses)."
        )


def complete_marker(repo_id: str, revision: str) -> Path:
    """The note that ``repo_id`` at ``revision`` was downloaded whole and checked: its files' names and sizes (JSON),
    beside huggingface_hub's cache (HEARTH_WEIGHTS_DIR/complete/), where its scan_cache_dir does not look."""
    from huggingface_hub.file_download import repo_folder_name

    return (
        Path(settings.HEARTH_WEIGHTS_DIR) / "complete" / repo_folder_name(repo_id=repo_id, repo_type="model") / revision
    )


def _mark_complete(repo_id: str, revision: str, files: list[HubFile]) -> None:
    marker = complete_marker(repo_id, revision)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({f.name: f.size for f in files}))


def is_complete(repo_id: str, revision: str) -> bool:
    """Whether every file the marker names is in the snapshot at its size (a file deleted by hand since: not)."""
    marker, snapshot = complete_marker(repo_id, revision), snapshot_dir(repo_id, revision)
    try:
        sizes = json.loads(marker.read_text())
        return all((snapshot / name).stat().st_size == size or size is None for name, size in sizes.items())
    except (OSError, ValueError, AttributeError):  # no marker, a file gone, a marker not ours
        return False


def fetch_file(
    repo_id: str, revision: str, file: HubFile, progress: Progress, report: Callable[[Progress], None]
) -> None:
    """One file into ``blobs/<etag>`` (resuming its partial), checked, then linked into the snapshot.
    Raises CorruptFile, or what huggingface_hub and the network raise."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url
    from huggingface_hub.file_download import http_get, repo_folder_name
    from huggingface_hub.utils._fixes import WeakFileLock  # re-exported by huggingface_hub.utils, not in __all__
    from huggingface_hub.utils._headers import build_hf_headers

    token = hf_token()
    meta = get_hf_file_metadata(hf_hub_url(repo_id, file.name, revision=revision), token=token)
    if not meta.etag:
        raise WeightsError(f"The hub gave no ETag for {file.name} of {repo_id}, so it cannot be cached.")
    blob = hub_cache() / repo_folder_name(repo_id=repo_id, repo_type="model") / "blobs" / meta.etag
    blob.parent.mkdir(parents=True, exist_ok=True)
    partial = blob.with_name(blob.name + PARTIAL)
    with WeakFileLock(partial.with_name(partial.name + ".lock")):  # one writer per partial, across workers
        if blob.exists():
            progress.found(blob.stat().st_size)
        else:
            with partial.open("ab", buffering=0) as raw:
                start = raw.tell()
                if meta.size is not None and start > meta.size:  # not this file's beginning: start over
                    raw.truncate(0)
                    start = 0
                progress.found(start)
                sink = cast(BinaryIO, _Counted(raw, progress, report))
                http_get(
                    meta.location,
                    sink,
                    resume_size=start,
                    headers=build_hf_headers(token=token),
                    expected_size=meta.size,
                )
            check(partial, file, repo_id)
            partial.rename(blob)
    hf_hub_download(repo_id, file.name, revision=revision, cache_dir=hub_cache(), token=token)


def check(path: Path, file: HubFile, repo_id: str) -> None:
    """``path`` holds ``file`` as the hub has it: its size, and its LFS sha256 (else its git blob sha1). Raises
    CorruptFile, deleting ``path`` so the next try fetches it afresh."""
    size = path.stat().st_size
    if file.size is not None and size != file.size:
        why = f"{size:,} bytes arrived where the hub has {file.size:,}"
    elif file.sha256 and (got := _digest(path, hashlib.sha256())) != file.sha256:
        why = f"its sha256 is {got[:16]}… where the hub says {file.sha256[:16]}…"
    elif not file.sha256 and file.blob_id and (got := _digest(path, _git_blob(size))) != file.blob_id:
        why = f"its git blob sha1 is {got[:12]}… where the hub says {file.blob_id[:12]}…"
    else:
        return
    path.unlink()
    raise CorruptFile(f"{file.name} of {repo_id} is corrupt ({why}); it was deleted to be fetched again.")


def _git_blob(size: int) -> "hashlib._Hash":
    """git's object hash of a ``size``-byte blob, header fed (``blob <size>\\0``), content to follow."""
    digest = hashlib.sha1(usedforsecurity=False)
    digest.update(b"blob %d\x00" % size)
    return digest


def _digest(path: Path, digest: "hashlib._Hash") -> str:
    with path.open("rb") as f:
        while chunk := f.read(READ_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class _Counted:
    """The partial file as http_get writes it: every chunk written counts as received and is reported; a rewind
    (a server that ignored the Range: http_get seeks back and truncates) takes the lost bytes back off."""

    def __init__(self, raw: BinaryIO, progress: Progress, report: Callable[[Progress], None]) -> None:
        self.raw, self.progress, self.report = raw, progress, report

    def write(self, chunk: bytes) -> int:
        written = self.raw.write(chunk)
        self.progress.received(len(chunk))
        self.report(self.progress)
        return written

    def tell(self) -> int:
        return self.raw.tell()

    def seek(self, offset: int, whence: int = 0) -> int:
        before = self.raw.tell()
        after = self.raw.seek(offset, whence)
        self.progress.done -= before - after
        return after

    def truncate(self, size: int | None = None) -> int:
        return self.raw.truncate(size)


def _retrying[T](
    what: str, repo_id: str, revision: str, attempt: Callable[[], T], pause: Callable[[float, str], None]
) -> T:
    """``attempt()``, tried ATTEMPTS times: again at once after a corrupt file, after a backoff after a transient
    failure (the network, the hub's 5xx and 429), waited out by ``pause(seconds, why)``; not again after a permanent one
    (no such repo or file, gated).
    Raises WeightsError in words (console.catalog.hub.hub_error_words)."""
    for tries in range(1, ATTEMPTS + 1):
        try:
            return attempt()
        except CorruptFile as exc:
            if tries >= 2:  # fetched afresh and still not the hub's: the source is wrong, not the transfer
                raise CorruptFile(
                    f"{exc} It was fetched again and is still not the hub's: the download stops."
                ) from None
            log.warning("%s", exc)
        except WeightsError:
            raise
        except Exception as exc:  # huggingface_hub raises its HTTP client's transport errors as they are
            if not _transient(exc) or tries == ATTEMPTS:
                raise WeightsError(
                    f"Downloading {what} failed after {tries} tries: {_words(exc, repo_id, revision)}"
                ) from None
            delay = min(BACKOFF * 2 ** (tries - 1), BACKOFF_CAP) * (1 + random.random() / 2)  # noqa: S311 - jitter
            log.warning("downloading %s: %s; trying again in %.0f s", what, exc, delay)
            pause(delay, _words(exc, repo_id, revision))
    raise AssertionError("unreachable: the last try returns or raises")


def _transient(exc: Exception) -> bool:
    """Worth another try: a transport error, an OSError (a dropped connection, a short read), a 5xx or 429."""
    from huggingface_hub import errors

    if isinstance(exc, errors.RepositoryNotFoundError | errors.RevisionNotFoundError | errors.EntryNotFoundError):
        return False
    if isinstance(exc, errors.HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else 0
        return status >= 500 or status in (408, 429)
    if isinstance(exc, OSError):
        return exc.errno not in DISK_ERRNOS
    return type(exc).__module__.startswith(("httpx", "httpcore"))


def _words(exc: Exception, repo_id: str, revision: str) -> str:
    """What went wrong, as the catalog says it when a model is added; a missing file in words of its own."""
    from huggingface_hub import errors

    if isinstance(exc, errors.EntryNotFoundError):
        return f"{repo_id}@{revision[:12]} has no such file any more."
    if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS:
        return f"{exc.strerror or exc}: {exc.filename or 'the weights cache'} (HEARTH_WEIGHTS_DIR)."
    return hub_error_words(exc, repo_id, revision[:12])
