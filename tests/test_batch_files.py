"""A batch input's checks (console.batches.files) without processes: each bad line named, nothing stored; a stored
file's content reassembled from its chunks; and a backup (console.backup) carries the chunks, so a restore brings
the files back with their rows."""

import json
import tarfile
from pathlib import Path

import httpx
import pytest
from django.core.serializers import deserialize
from django.test import override_settings

from console import backup
from console.access.models import ApiKey
from console.batches import files
from console.batches.files import FileError
from console.batches.models import BatchFile, BatchFileChunk


def line(custom_id: str = "a", **changes: object) -> str:
    request = {"custom_id": custom_id, "method": "POST", "url": "/v1/embeddings", "body": {"model": "m", "input": "x"}}
    return json.dumps(request | changes)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"\xff\xfe", "not UTF-8"),
        (b"", "no request"),
        (b"[1, 2]\n", "Line 1 of the file is not a JSON object"),
        (f"{line()}\n{{nope".encode(), "Line 2 of the file is not JSON"),
        (line(custom_id="").encode(), "custom_id"),
        (line(method="GET").encode(), "'method': 'POST'"),
        (line(url="/v1/messages").encode(), "has url '/v1/messages'"),
        (line(body={"input": "x"}).encode(), "naming its 'model'"),
        (line(body={"model": "m", "stream": True}).encode(), "asks for a stream"),
        (f"{line('a')}\n\n{line('b')}\n{line('a')}".encode(), "Line 4 of the file repeats custom_id 'a'"),
    ],
)
def test_each_bad_line_is_named(data: bytes, says: str) -> None:
    with pytest.raises(FileError) as refused:
        files.checked_lines(data)
    assert says in refused.value.message and refused.value.status == 400


def test_blank_lines_are_skipped_and_limits_hold() -> None:
    assert [x["custom_id"] for x in files.checked_lines(f"\n{line('a')}\r\n\n{line('b')}\n".encode())] == ["a", "b"]
    with override_settings(HEARTH_MAX_BODY_BYTES=100), pytest.raises(FileError) as refused:
        files.checked_lines(f"{line('a')}\n{line('b', body={'model': 'm', 'input': 'x' * 200})}".encode())
    assert refused.value.line == 2 and "body limit (100 bytes)" in refused.value.message
    with override_settings(HEARTH_BATCH_FILE_MAX_BYTES=10), pytest.raises(FileError) as refused:
        files.upload(1, "x.jsonl", "batch", line().encode())
    assert refused.value.status == 413 and refused.value.code == "file_too_large"


@pytest.mark.django_db(transaction=True)
def test_content_in_chunks_and_in_the_backup(tmp_path: Path) -> None:
    key = ApiKey.objects.create(name="batch", prefix="hk-batchf", key_hash="c" * 64)
    data = "\n".join(line(f"id-{i}", body={"model": "m", "input": "y" * 900}) for i in range(2500)).encode()
    stored = files.upload(key.id, "big.jsonl", "batch", data)
    assert stored.lines == 2500 and stored.bytes == len(data) and stored.chunks.count() == 3  # 1 MiB chunks
    assert files.whole(stored) == data
    with pytest.raises(FileError):
        files.upload(key.id, "bad.jsonl", "batch", data + b"\n{")
    assert BatchFile.objects.count() == 1 and BatchFileChunk.objects.count() == 3  # nothing of the bad one

    archive = tmp_path / "backup.tar.gz"
    backup.backup(str(archive))
    with tarfile.open(archive) as tar:
        rows = backup.member(tar, backup.DATA).read().decode()
    chunks = [r.object for r in deserialize("jsonl", rows) if isinstance(r.object, BatchFileChunk)]
    assert b"".join(bytes(c.data) for c in sorted(chunks, key=lambda c: c.index)) == data


def test_the_runner_s_tasks_are_registered_and_beat_sweeps() -> None:
    """The names the gateway sends (console.batches.dispatch) are the worker's tasks; beat runs the sweep."""
    from appliance.celery import app, periodic_tasks
    from console.batches import dispatch

    app.loader.import_default_modules()
    assert set(dispatch.NAMES) <= set(app.tasks)
    assert dispatch.SWEEP in periodic_tasks()


def test_a_multipart_upload_is_read_whole_past_django_s_memory_size() -> None:
    """The form as the openai SDK sends it (httpx's multipart), its file larger than FILE_UPLOAD_MAX_MEMORY_SIZE."""
    from django.conf import settings

    from gateway.batch_api import form

    data = b"x" * (settings.FILE_UPLOAD_MAX_MEMORY_SIZE + 1000)
    request = httpx.Request("POST", "http://h/v1/files", data={"purpose": "batch"}, files={"file": ("in.jsonl", data)})
    assert form(request.headers["content-type"], request.read()) == ("batch", "in.jsonl", data)
    with pytest.raises(FileError):
        form("multipart/form-data; boundary=x", b"--x\r\nnot a part")


@pytest.mark.django_db
def test_batches_are_listed_newest_first_a_page_at_a_time() -> None:
    from django.utils import timezone

    from console.batches import batches
    from console.batches.models import Batch

    key = ApiKey.objects.create(name="pages", prefix="hk-pages", key_hash="d" * 64)
    made = [
        Batch.objects.create(key=key, endpoint="/v1/embeddings", input_file_id="file-x", expires_at=timezone.now())
        for _ in range(3)
    ]
    assert batches.listed(key.id, None, 2) == ([made[2], made[1]], True)
    assert batches.listed(key.id, made[1].public_id, 2) == ([made[0]], False)
    assert batches.listed(key.id + 1, None, 2) == ([], False)


@pytest.mark.django_db
def test_a_file_written_line_by_line_is_chunked_as_one_stored_whole() -> None:
    key = ApiKey.objects.create(name="lines", prefix="hk-lines", key_hash="e" * 64)
    lines = [b'{"n": %d, "pad": "%s"}\n' % (i, b"z" * 3000) for i in range(800)]
    written = files.store_lines(key.id, "out.jsonl", "batch_output", lines[:1], iter(lines[1:]))
    whole = files.store(key.id, "same.jsonl", "batch_output", b"".join(lines), 800)
    assert (written.bytes, written.lines, written.sha256) == (whole.bytes, whole.lines, whole.sha256)
    assert files.whole(written) == b"".join(lines) and written.chunks.count() == whole.chunks.count() == 3
