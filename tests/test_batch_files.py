"""A batch input's checks (console.batches.files) without processes: each bad line named, nothing stored; a stored
file's content reassembled from its chunks; and a backup (console.backup) carries the chunks, so a restore brings
the files back with their rows."""

import json
import tarfile
from collections.abc import Callable
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


def test_a_leading_byte_order_mark_is_skipped() -> None:
    """A file saved by Excel or PowerShell starts with a UTF-8 BOM: its first line is read as any other."""
    assert [x["custom_id"] for x in files.checked_lines(f"\ufeff{line('a')}\n{line('b')}\n".encode())] == ["a", "b"]


@pytest.mark.django_db
def test_each_refusal_has_a_code_and_its_param() -> None:
    """A field's bad value is invalid_value naming the field; a bad line of the file, invalid_file (param file)."""
    from console.batches import batches

    key = ApiKey.objects.create(name="codes", prefix="hk-codes", key_hash="f" * 64)
    stored = files.upload(key.id, "in.jsonl", "batch", line().encode())
    cases: dict[str, Callable[[], object]] = {
        "endpoint": lambda: batches.create(key.id, stored.public_id, "/v1/models", "24h", None),
        "completion_window": lambda: batches.create(key.id, stored.public_id, "/v1/embeddings", "1h", None),
        "metadata": lambda: batches.create(key.id, stored.public_id, "/v1/embeddings", "24h", {"k": 1}),
        "purpose": lambda: files.upload(key.id, "x.jsonl", "fine-tune", line().encode()),
    }
    for param, call in cases.items():
        with pytest.raises(FileError) as refused:
            call()
        assert (refused.value.code, refused.value.param, refused.value.status) == ("invalid_value", param, 400)
    with pytest.raises(FileError) as refused:
        batches.create(key.id, stored.public_id, "/v1/chat/completions", "24h", None)  # its line is an embedding
    assert (refused.value.code, refused.value.param) == ("invalid_value", "endpoint")
    for data in (b"[1]", line(method="GET").encode(), b"\xff"):
        with pytest.raises(FileError) as refused:
            files.checked_lines(data)
        assert (refused.value.code, refused.value.param) == ("invalid_file", "file")


@pytest.mark.django_db
def test_a_list_after_an_unknown_id_is_refused_naming_it() -> None:
    from console.batches import batches
    from gateway.batch_api import _files_of

    key = ApiKey.objects.create(name="after", prefix="hk-after", key_hash="a" * 64)
    for call in (lambda: batches.listed(key.id, "batch_nope", 20), lambda: _files_of(key.id, None, "file-nope", 20)):
        with pytest.raises(FileError) as refused:
            call()
        assert refused.value.status == 400 and refused.value.param == "after" and "nope" in refused.value.message
        assert refused.value.message.endswith(("one of your batches.", "one of your files."))


@pytest.mark.django_db
def test_an_ended_batch_is_not_cancelled_and_a_cancelled_one_is_returned_as_it_is() -> None:
    from django.utils import timezone

    from console.batches import batches
    from console.batches.models import Batch, Status

    key = ApiKey.objects.create(name="cancel", prefix="hk-cancel", key_hash="b" * 64)
    for status in (Status.COMPLETED, Status.FAILED, Status.EXPIRED):
        ended = Batch.objects.create(key=key, endpoint="/v1/embeddings", input_file_id="f", expires_at=timezone.now())
        Batch.objects.filter(pk=ended.pk).update(status=status)
        ended.refresh_from_db()
        with pytest.raises(FileError) as refused:
            batches.cancel(ended)
        assert refused.value.status == 400 and refused.value.code == "batch_not_cancellable"
        assert refused.value.message == (
            f"Batch {ended.public_id} is {status}; only a validating or in_progress batch can be cancelled."
        )
    for status in (Status.CANCELLING, Status.CANCELLED):
        Batch.objects.filter(pk=ended.pk).update(status=status)
        ended.refresh_from_db()
        assert batches.cancel(ended).status == status


@pytest.mark.django_db
def test_unanswered_lines_are_recorded_failed_once_and_counted() -> None:
    """record_failed stores the error lines of the lines still pending only, and counts exactly those."""
    from django.utils import timezone

    from console.batches import batches
    from console.batches.models import Batch, BatchLine, LineState

    key = ApiKey.objects.create(name="late", prefix="hk-late", key_hash="c" * 64)
    batch = Batch.objects.create(key=key, endpoint="/v1/embeddings", input_file_id="f", expires_at=timezone.now())
    rows = [
        BatchLine.objects.create(batch=batch, index=i, custom_id=f"c-{i}", url="/v1/embeddings", body={})
        for i in range(3)
    ]
    assert batches.record(rows[0].pk, batch.pk, True, {"done": 0})
    error = {"error": {"code": "batch_expired"}}
    assert batches.record_failed(batch.pk, {row.pk: error for row in rows}) == 2
    assert batches.record_failed(batch.pk, {row.pk: error for row in rows}) == 0
    batch.refresh_from_db()
    assert (batch.completed, batch.failed) == (1, 2)
    states = list(batch.lines.order_by("index").values_list("state", "answer"))
    assert states == [(LineState.DONE, {"done": 0}), (LineState.FAILED, error), (LineState.FAILED, error)]


def test_a_model_refused_for_the_moment_is_held_back_doubling_up_to_five_minutes() -> None:
    """Each 429/503 met after the last hold-back ended doubles it (5 s, 10 s, … 300 s); one met during it (a line
    sent before) does not; a longer Retry-After is obeyed."""
    from console.batches import runner

    held = runner._Runner(1, None, None, runner._Slots(1))  # type: ignore[arg-type]
    delays = []
    for _ in range(9):
        held._hold_back("m", 0.0)
        delays.append(held.backoff["m"])
        held._hold_back("m", 0.0)  # during the hold-back: counts once
        held.until["m"] = 0.0  # the hold-back is over
    assert delays == [5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0, 300.0]
    held._hold_back("other", 30.0)
    assert held.backoff["other"] == 5.0 and held._held("other") and not held._held("m")


def test_which_deployments_a_batch_sends_to_and_which_it_waits_for() -> None:
    from console.batches.runner import Served

    assert not Served("d", "ready", "serving").held
    for state in ("stopped", "failed", "pending", "loading"):
        assert Served("d", state, "stopped").held and Served("d", state, "serving").held
    put_aside = (
        Served("d", "asleep", "asleep"),
        Served("d", "waking", "serving"),
        Served("d", "stopped", "stopped_idle"),
    )
    with override_settings(HEARTH_BATCH_WAKES_DEPLOYMENTS=False):  # not sent: each line would be a logged 503
        assert all(served.held for served in put_aside)
    with override_settings(HEARTH_BATCH_WAKES_DEPLOYMENTS=True):  # sent: the gateway wakes it
        assert not any(served.held for served in put_aside)


def test_an_answer_the_gateway_kept_is_read_back_as_its_file_line() -> None:
    """At a cancel the runner stores the answers the gateway kept (gateway.batch_lines' JSON: latin-1 body)."""
    from console.batches.credential import LineCredential
    from console.batches.file_lines import Line, cancelled_in_flight, expired, kept_answer

    one = Line(1, LineCredential("batch_k", 0, 1), "c-1", "/v1/embeddings", "m")
    body = json.dumps({"object": "list", "data": [], "note": "é"}).encode().decode("latin-1")
    kept = json.dumps({"status": 200, "headers": [["X-Request-Id", "req-9"]], "body": body})
    ok, answer = kept_answer(one, kept.encode())
    assert ok and answer["custom_id"] == "c-1" and answer["error"] is None
    assert answer["response"] == {"status_code": 200, "request_id": "req-9", "body": json.loads(body.encode("latin-1"))}
    refused = json.dumps(
        {"status": 404, "headers": [], "body": '{"error": {"code": "model_not_found", "message": "x"}}'}
    )
    assert kept_answer(one, refused)[1]["error"] == {"code": "model_not_found", "message": "x"}
    lost = cancelled_in_flight(one)
    assert lost["error"]["code"] == "batch_cancelled" and "cancelled while in flight" in lost["error"]["message"]
    for in_flight in (False, True):
        late = expired(one, in_flight)
        assert late["response"] is None and late["custom_id"] == "c-1" and late["error"]["code"] == "batch_expired"
        assert ("in flight" in late["error"]["message"]) == in_flight


@pytest.mark.parametrize("given", [None, 5, ""])
def test_a_batch_without_an_input_file_id_is_a_400_naming_it(given: object) -> None:
    """A trial's missing input_file_id was a 404 "No such file: None."."""
    from console.batches.batches import create

    with pytest.raises(FileError) as refused:
        create(1, given, "/v1/chat/completions", "24h", None)  # type: ignore[arg-type]
    assert (refused.value.status, refused.value.param) == (400, "input_file_id")
    assert refused.value.code == "missing_required_parameter" and "Missing required parameter" in refused.value.message
