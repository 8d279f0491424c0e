"""A stand-in Hugging Face Hub: a real HTTP server serving one small repository at one commit through the endpoints
huggingface_hub 2.4 calls, for tests that set HF_ENDPOINT to it.

- ``GET /api/models/{repo}/revision/{rev}[?blobs=True]``: the model info (hf_api.py ``HfApi.model_info``): ``id``,
  ``sha`` and ``siblings`` with ``rfilename``, ``size``, ``blobId`` and, for LFS files, ``lfs`` {``sha256``,
  ``size``, ``pointerSize``}.
- ``HEAD``/``GET /{repo}/resolve/{rev}/{file}``: ``X-Repo-Commit``, ``ETag`` (the git blob id; an LFS file's
  ``X-Linked-Etag`` is its sha256, with ``X-Linked-Size``), ``Content-Length``; a ``Range: bytes=N-`` answered 206
  with ``Content-Range`` (file_download.py ``get_hf_file_metadata`` and ``http_get``).
- An unknown repo, revision or file: 404 with ``X-Error-Code`` (RepoNotFound, RevisionNotFound, EntryNotFound), as
  utils/_http.py ``hf_raise_for_status`` reads them.

What the tests steer: ``hold_after`` bytes of a file's body are sent and the response then waits until ``release``
is set (a transfer cut mid-file at a known place); ``corrupt`` names files served with one byte changed while the
model info keeps the true hashes; ``unavailable`` counts the GETs of a file answered 503 before it is served.
``transfers`` are the file bodies sent, in order, each with its first byte and the
bytes written; ``ranges`` the Range headers asked.
"""

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

CHUNK = 64 * 1024  # body bytes written at a time


@dataclass
class RepoFile:
    name: str
    data: bytes
    lfs: bool

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def blob_id(self) -> str:
        """git's blob sha1 (for an LFS file git holds its pointer; any stable id serves here)."""
        return hashlib.sha1(b"blob %d\x00" % len(self.data) + self.data, usedforsecurity=False).hexdigest()

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.blob_id


@dataclass
class Transfer:
    """One GET of a file's body: from byte ``start``, ``sent`` bytes written to the socket so far."""

    name: str
    start: int
    sent: int = 0


@dataclass
class StandinHub:
    repo: str
    commit: str
    files: dict[str, RepoFile]
    hold_after: dict[str, int] = field(default_factory=dict)
    release: threading.Event = field(default_factory=threading.Event)
    held: threading.Event = field(default_factory=threading.Event)
    corrupt: set[str] = field(default_factory=set)
    unavailable: dict[str, int] = field(default_factory=dict)  # file → GETs of it still to answer 503
    claimed_size: dict[str, int] = field(default_factory=dict)  # file → the size the model info gives instead
    transfers: list[Transfer] = field(default_factory=list)
    ranges: list[tuple[str, str]] = field(default_factory=list)
    url: str = ""

    def model_info(self) -> dict[str, object]:
        siblings = []
        for f in self.files.values():
            size = self.claimed_size.get(f.name, len(f.data))
            entry: dict[str, object] = {"rfilename": f.name, "size": size, "blobId": f.blob_id}
            if f.lfs:
                entry["lfs"] = {"sha256": f.sha256, "size": size, "pointerSize": 134}
            siblings.append(entry)
        return {"id": self.repo, "modelId": self.repo, "sha": self.commit, "private": False, "siblings": siblings}

    def sent(self, name: str) -> list[tuple[int, int]]:
        """(first byte, bytes written) of each body of ``name`` sent, in order."""
        return [(t.start, t.sent) for t in self.transfers if t.name == name]

    def body(self, name: str) -> bytes:
        data = self.files[name].data
        return data[:-1] + bytes([data[-1] ^ 0xFF]) if name in self.corrupt else data


def _handler(hub: StandinHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            return

        def do_GET(self) -> None:
            self._answer(body=True)

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def _missing(self, code: str) -> None:
            self.send_response(404)
            self.send_header("X-Error-Code", code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _answer(self, body: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            api = f"/api/models/{hub.repo}/revision/"
            if path.startswith(api):
                if path[len(api) :] not in (hub.commit, "main"):
                    return self._missing("RevisionNotFound")
                raw = json.dumps(hub.model_info()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw if body else b"")
                return None
            resolve = f"/{hub.repo}/resolve/"
            if not path.startswith(resolve):
                return self._missing("RepoNotFound")
            revision, _, name = path[len(resolve) :].partition("/")
            if revision not in (hub.commit, "main"):
                return self._missing("RevisionNotFound")
            if name not in hub.files:
                return self._missing("EntryNotFound")
            return self._file(hub.files[name], body)

        def _file(self, file: RepoFile, body: bool) -> None:
            if body and hub.unavailable.get(file.name):
                hub.unavailable[file.name] -= 1
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = hub.body(file.name)
            start = 0
            if body and (asked := self.headers.get("Range")):
                hub.ranges.append((file.name, asked))
                start = int(asked.removeprefix("bytes=").split("-")[0])
            self.send_response(206 if start else 200)
            self.send_header("X-Repo-Commit", hub.commit)
            self.send_header("ETag", f'"{file.blob_id}"')
            if file.lfs:
                self.send_header("X-Linked-Etag", f'"{file.sha256}"')
                self.send_header("X-Linked-Size", str(len(data)))
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.send_header("Content-Length", str(len(data) - start))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            if body:
                self._send(file.name, data, start)

        def _send(self, name: str, data: bytes, start: int) -> None:
            hold = hub.hold_after.get(name)
            position, transfer = start, Transfer(name, start)
            hub.transfers.append(transfer)
            try:
                while position < len(data):
                    if hold is not None and position >= hold and not hub.release.is_set():
                        hub.held.set()
                        hub.release.wait()
                    end = min(position + CHUNK, len(data), hold if hold is not None and position < hold else len(data))
                    self.wfile.write(data[position:end])
                    self.wfile.flush()
                    transfer.sent += end - position
                    position = end
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

    return Handler


@contextmanager
def standin_hub(repo: str, commit: str, files: list[RepoFile]) -> Iterator[StandinHub]:
    """Serve ``files`` as ``repo`` at ``commit`` on 127.0.0.1 (a free port) until the block ends; ``hub.url`` is
    what HF_ENDPOINT should be."""
    hub = StandinHub(repo, commit, {f.name: f for f in files})
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    server.daemon_threads = True
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        hub.release.set()
        server.shutdown()
        server.server_close()
