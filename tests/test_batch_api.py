"""The OpenAI Files and Batches API end to end (issue 30): the openai SDK's own workflow against a simulator
deployment behind a web server and a worker of this module's own instance (no other worker takes their tasks; the
worker is killed and started again), output and error files in OpenAI's shape, each bad input refused whole, cancel,
another key's 404, and a 1,000-line batch answered exactly once with its worker killed twice."""

import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from django.utils import timezone

from tests.conftest import Proc, Workers, _stop_engines_left_running, login, start_web, start_worker
from tests.simworld import deploy, ensure_model, wait_state

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]
INSTANCE = f"batch-{secrets.token_hex(4)}"
BODY_LIMIT = 64 * 1024  # HEARTH_MAX_BODY_BYTES of the box: a line over it is refused
FILE_LIMIT = 1024 * 1024  # HEARTH_BATCH_FILE_MAX_BYTES of the box


@dataclass
class Box:
    base: str
    web: Proc
    worker: Workers

    def restart_worker(self) -> None:
        """Start the workers again after a crash, once each says it is ready."""
        self.worker.restart()


@pytest.fixture(scope="module")
def box(live_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Box]:
    """A web server and a worker of this module's own instance, with small body and file limits."""
    folder = tmp_path_factory.mktemp("batch")
    env = {
        **live_env,
        "HEARTH_INSTANCE": INSTANCE,
        "HEARTH_MAX_BODY_BYTES": str(BODY_LIMIT),
        "HEARTH_BATCH_FILE_MAX_BYTES": str(FILE_LIMIT),
        "HEARTH_BATCH_CONCURRENCY": "8",
    }
    web, base = start_web(env, folder / "web.log")
    worker = start_worker({**env, "HEARTH_GATEWAY_URL": base}, folder)
    yield Box(base, web, worker)
    worker.stop()
    web.stop()
    with override_settings(HEARTH_INSTANCE=INSTANCE):
        _stop_engines_left_running()


@dataclass
class Llama:
    box: Box
    client: httpx.Client
    dep_id: int
    key: str

    def openai(self, key: str | None = None) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.box.base}/v1", api_key=key or self.key, max_retries=0, timeout=60)

    def new_key(self, **fields: Any) -> str:
        resp = self.client.post("/api/keys", json={"name": secrets.token_hex(4), **fields})
        assert resp.status_code in (200, 201), resp.text
        return str(resp.json()["key"])


@pytest.fixture
def llama(box: Box) -> Iterator[Llama]:
    """A ready simulator deployment "llama" on ``box`` and a key for it."""
    User.objects.create_superuser("admin", "", "admin-password-1")
    client = login(box.base)
    dep_id = deploy(box.base, client, "llama")
    dep = wait_state(client, dep_id, {"ready", "failed"}, within=120)
    assert dep["state"] == "ready", (dep, box.worker.output()[-3000:])
    key = client.post("/api/keys", json={"name": "batch"}).json()["key"]
    yield Llama(box, client, dep_id, key)
    client.post(f"/api/deployments/{dep_id}/stop")
    wait_state(client, dep_id, {"stopped", "failed"})


def chat_line(custom_id: str, model: str = "llama", max_tokens: int = 4, url: str = "/v1/chat/completions") -> bytes:
    body = {"model": model, "messages": [{"role": "user", "content": f"say {custom_id}"}], "max_tokens": max_tokens}
    body |= {"ignore_eos": True} if max_tokens > 4 else {}  # a slow line: exactly max_tokens, 12 ms each
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body}).encode()


def jsonl(lines: list[bytes]) -> bytes:
    return b"\n".join(lines) + b"\n"


def wait_batch(client: openai.OpenAI, batch_id: str, statuses: set[str], within: float = 300) -> Any:
    """The batch once its status is one of ``statuses`` (polled with the SDK's retrieve)."""
    deadline = time.monotonic() + within
    while (batch := client.batches.retrieve(batch_id)).status not in statuses:
        assert time.monotonic() < deadline, batch
        time.sleep(0.5)
    return batch


def slow_batch_under_way(client: openai.OpenAI, prefix: str, done: int) -> Any:
    """A batch of 60 lines of 150 tokens each, once ``done`` of them are answered (polled: no clock)."""
    data = jsonl([chat_line(f"{prefix}-{i}", max_tokens=150) for i in range(60)])
    uploaded = client.files.create(file=(f"{prefix}.jsonl", data), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    deadline = time.monotonic() + 120
    while client.batches.retrieve(batch.id).request_counts.completed < done:  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.2)
    return batch


def read_lines(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    """The JSONL lines of a file (none when there is no file)."""
    if file_id is None:
        return []
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines() if line.strip()]


def engine_requests(replica_url: str) -> float:
    """The engine's count of requests it finished (the simulator's vllm:request_success_total, every reason)."""
    text = httpx.get(f"{replica_url}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("vllm:request_success_total")
    )


def replica_url(dep_id: int) -> str:
    from console.deployments.models import Replica

    return str(Replica.objects.filter(deployment_id=dep_id).latest("id").base_url)


def test_openai_sdk_workflow(llama: Llama) -> None:
    """files.create, batches.create, retrieve until completed, files.content: every custom_id answered once, in
    OpenAI's output shape; the request log's rows carry the batch class and the batch id."""
    client = llama.openai()
    ids = [f"req-{i}" for i in range(12)]
    lines = [chat_line(i) for i in ids]
    uploaded = client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
    assert uploaded.id.startswith("file-") and uploaded.purpose == "batch" and uploaded.bytes == len(jsonl(lines))
    assert client.files.retrieve(uploaded.id).filename == "in.jsonl"
    assert client.files.content(uploaded.id).content == jsonl(lines)
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h", metadata={"job": "t"}
    )
    assert batch.id.startswith("batch_") and batch.status in ("validating", "in_progress")
    done = wait_batch(client, batch.id, {"completed", "failed", "expired", "cancelled"})
    assert done.status == "completed", done
    assert done.request_counts.total == 12 and done.request_counts.completed == 12 and done.request_counts.failed == 0
    assert done.error_file_id is None and done.metadata == {"job": "t"} and done.model == "llama"
    output = read_lines(client, done.output_file_id)
    usage = [line["response"]["body"]["usage"] for line in output]
    assert done.usage is not None and done.usage.input_tokens == sum(u["prompt_tokens"] for u in usage) > 0
    assert done.usage.output_tokens == sum(u["completion_tokens"] for u in usage) > 0
    assert done.usage.total_tokens == done.usage.input_tokens + done.usage.output_tokens
    assert sorted(line["custom_id"] for line in output) == sorted(ids)
    for line in output:
        assert line["id"].startswith("batch_req_") and line["error"] is None
        assert line["response"]["status_code"] == 200 and line["response"]["request_id"]
        assert line["response"]["body"]["object"] == "chat.completion"
    assert done.id in [b.id for b in client.batches.list(limit=5).data]
    assert [f.id for f in client.files.list(purpose="batch_output").data] == [done.output_file_id]
    assert [f.id for f in client.files.list(purpose="batch").data] == [uploaded.id]
    from console.observability.models import RequestLog

    deadline = time.monotonic() + 30
    while RequestLog.objects.filter(batch_id=batch.id).count() < 12:
        assert time.monotonic() < deadline, "request log rows of the batch"
        time.sleep(0.5)
    assert set(RequestLog.objects.filter(batch_id=batch.id).values_list("priority", flat=True)) == {"batch"}


def _refused(call: Any) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as caught:
        call()
    return caught.value


def test_bad_inputs_are_refused_whole(llama: Llama) -> None:
    """Each bad input answers an OpenAI-shaped error naming it, and stores nothing; a model the key may not use
    fails its own line in the error file, not the batch."""
    from console.batches.models import BatchFile

    client = llama.openai()
    cases = {
        "not JSONL": (b"custom_id,body\nx,y\n", "Line 1", 400),
        "over the body limit": (
            jsonl([chat_line("a"), chat_line("big", max_tokens=1) + b" " * BODY_LIMIT]),
            "Line 2",
            400,
        ),
        "duplicate custom_id": (jsonl([chat_line("a"), chat_line("b"), chat_line("a")]), "Line 3", 400),
        "over the file limit": (jsonl([chat_line(f"l{i}") for i in range(FILE_LIMIT // 100)]), "limit", 413),
        "wrong url": (jsonl([chat_line("a", url="/v1/models")]), "Line 1", 400),
    }
    for name, (data, says, status) in cases.items():
        error = _refused(lambda data=data: client.files.create(file=("bad.jsonl", data), purpose="batch"))
        assert error.status_code == status, (name, error)
        body = error.response.json()["error"]
        assert says in body["message"] and body["type"] and "code" in body and "param" in body, (name, body)
    assert BatchFile.objects.count() == 0

    only_llama = llama.new_key(allowed_models=["llama"])
    client = llama.openai(only_llama)
    data = jsonl([chat_line("ok"), chat_line("forbidden", model="other")])
    uploaded = client.files.create(file=("mixed.jsonl", data), purpose="batch")
    bad = _refused(
        lambda: client.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h")
    )
    said = "The request 'ok' in the file goes to /v1/chat/completions, not the batch's /v1/embeddings."
    assert bad.status_code == 400 and bad.response.json()["error"]["message"] == said
    window: Any = "1h"  # past the SDK's type: the gateway must refuse it
    bad = _refused(
        lambda: client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window=window
        )
    )
    assert bad.status_code == 400
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    done = wait_batch(client, batch.id, {"completed", "failed", "expired", "cancelled"})
    assert done.status == "completed" and (done.request_counts.completed, done.request_counts.failed) == (1, 1)
    [failed] = read_lines(client, done.error_file_id)
    assert failed["custom_id"] == "forbidden" and failed["response"]["status_code"] == 403
    assert failed["error"]["code"] and "other" in failed["error"]["message"]
    assert [line["custom_id"] for line in read_lines(client, done.output_file_id)] == ["ok"]


def test_another_key_sees_nothing(llama: Llama) -> None:
    """A key reads, lists, deletes and cancels only its own files and batches: another's are 404."""
    client = llama.openai()
    uploaded = client.files.create(file=("in.jsonl", jsonl([chat_line("a")])), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    other = llama.openai(llama.new_key())
    for call in (
        lambda: other.files.retrieve(uploaded.id),
        lambda: other.files.content(uploaded.id),
        lambda: other.files.delete(uploaded.id),
        lambda: other.batches.retrieve(batch.id),
        lambda: other.batches.cancel(batch.id),
        lambda: other.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        ),
    ):
        assert _refused(call).status_code == 404
    assert other.batches.list().data == [] and other.files.list().data == []
    wait_batch(client, batch.id, {"completed"})
    refused = _refused(lambda: client.batches.cancel(batch.id))
    assert refused.status_code == 400 and refused.response.json()["error"]["message"] == (  # 409: the SDK retried
        f"Batch {batch.id} is completed; only a validating or in_progress batch can be cancelled."
    )
    for after in (lambda: client.batches.list(after="batch_nope"), lambda: client.files.list(after="file-nope")):
        refused = _refused(after)
        assert refused.status_code == 400 and "nope" in refused.response.json()["error"]["message"]
    assert client.files.delete(uploaded.id).deleted
    assert _refused(lambda: client.files.retrieve(uploaded.id)).status_code == 404


def test_cancel_stops_and_keeps_what_finished(llama: Llama) -> None:
    """A cancelled batch stops (polled: no clock), its finished lines downloadable, the rest never answered."""
    client = llama.openai()
    batch = slow_batch_under_way(client, "slow", 3)
    assert client.batches.cancel(batch.id).status in ("cancelling", "cancelled")
    done = wait_batch(client, batch.id, {"cancelled", "completed"}, within=60)
    assert done.status == "cancelled" and done.cancelled_at is not None
    output = read_lines(client, done.output_file_id)
    assert 3 <= len(output) == done.request_counts.completed < 60
    assert all(line["response"]["status_code"] == 200 for line in output)
    from console.observability.models import RequestLog

    deadline = time.monotonic() + 30  # each line that ran (logged, charged) is in the files: none dropped in flight
    while RequestLog.objects.filter(batch_id=batch.id).count() != done.request_counts.completed:
        assert time.monotonic() < deadline, (RequestLog.objects.filter(batch_id=batch.id).count(), done)
        time.sleep(0.3)
    assert client.batches.cancel(batch.id).status == "cancelled"  # idempotent


def test_expiry_keeps_what_ran_and_lists_the_rest(llama: Llama) -> None:
    """A batch whose completion window ends mid-run (its expires_at moved back) stops sending, keeps the answers of
    its lines in flight, and ends expired with every line in its files exactly once: answered in the output, the
    rest in the error file as OpenAI's ``batch_expired``; the request counts add up to the total."""
    from console.batches.models import Batch
    from console.observability.models import RequestLog

    client = llama.openai()
    batch = slow_batch_under_way(client, "exp", 3)
    Batch.objects.filter(public_id=batch.id).update(expires_at=timezone.now())
    done = wait_batch(client, batch.id, {"expired", "completed"}, within=90)
    assert done.status == "expired" and done.expired_at is not None
    output, errors = read_lines(client, done.output_file_id), read_lines(client, done.error_file_id)
    counts = done.request_counts
    assert counts is not None and (counts.completed, counts.failed) == (len(output), len(errors))
    assert 3 <= counts.completed < 60 and counts.completed + counts.failed == counts.total == 60
    assert sorted(x["custom_id"] for x in output + errors) == sorted(f"exp-{i}" for i in range(60))
    assert all(x["response"]["status_code"] == 200 for x in output)
    assert all(x["response"] is None and x["error"]["code"] == "batch_expired" for x in errors)
    deadline = time.monotonic() + 30  # each line that ran (logged, charged) is in the output: none dropped in flight
    while RequestLog.objects.filter(batch_id=batch.id).count() != counts.completed:
        assert time.monotonic() < deadline, (RequestLog.objects.filter(batch_id=batch.id).count(), done)
        time.sleep(0.3)


def test_thousand_lines_exactly_once_across_two_worker_kills(llama: Llama) -> None:
    """A 1,000-line batch whose worker is killed twice mid-run (SIGKILL, its whole group) resumes each time: every
    line answered exactly once in the output, and the engine finished exactly 1,000 requests for it."""
    client = llama.openai()
    before = engine_requests(replica_url(llama.dep_id))
    uploaded = client.files.create(file=("k.jsonl", jsonl([chat_line(f"k-{i}") for i in range(1000)])), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    for at in (150, 550):
        deadline = time.monotonic() + 300
        while client.batches.retrieve(batch.id).request_counts.completed < at:  # type: ignore[union-attr]
            assert time.monotonic() < deadline, llama.box.worker.output()[-3000:]
            time.sleep(0.2)
        llama.box.worker.crash()
        llama.box.restart_worker()
    done = wait_batch(client, batch.id, {"completed", "failed", "expired", "cancelled"}, within=600)
    assert done.status == "completed" and done.request_counts.completed == 1000, done
    output = read_lines(client, done.output_file_id)
    assert sorted(line["custom_id"] for line in output) == sorted(f"k-{i}" for i in range(1000))
    assert engine_requests(replica_url(llama.dep_id)) - before == 1000


def test_a_forged_line_credential_is_refused(llama: Llama) -> None:
    """A line credential whose HMAC is not the appliance's authenticates nothing (401, OpenAI's shape)."""
    from console.access.models import ApiKey
    from console.batches.credential import LineCredential, sign

    key_id = ApiKey.objects.latest("id").id
    token = sign(LineCredential("batch_x", 0, key_id))  # signed under the test process's SECRET_KEY
    forged = token[:-4] + ("0000" if not token.endswith("0000") else "1111")
    body = {"model": "llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    for bearer in (forged, token.replace(".0.", ".1.", 1)):
        resp = httpx.post(
            f"{llama.box.base}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {bearer}"}
        )
        assert resp.status_code == 401 and resp.json()["error"]["type"], resp.text


def test_a_line_reaches_the_engine_once_whatever_its_runner_does(llama: Llama) -> None:
    """gateway.batch_lines: a line whose runner went away mid-answer is finished and kept; the same line asked again
    (while in flight, then after) is answered from what was kept, and the engine saw one request."""
    from console.access.models import ApiKey
    from console.batches.credential import LineCredential, sign

    line = LineCredential("batch_" + secrets.token_hex(12), 0, ApiKey.objects.latest("id").id)
    url, headers = f"{llama.box.base}/v1/chat/completions", {"authorization": f"Bearer {sign(line)}"}
    body = {"model": "llama", "messages": [{"role": "user", "content": "count"}], "max_tokens": 100, "ignore_eos": True}
    before = engine_requests(replica_url(llama.dep_id))
    with pytest.raises(httpx.ReadTimeout):  # the runner dies while the engine answers (100 tokens, ~1.2 s)
        httpx.post(url, json=body, headers=headers, timeout=httpx.Timeout(10, read=0.3))
    first = httpx.post(url, json=body, headers=headers, timeout=30)  # in flight still: waits for the kept answer
    again = httpx.post(url, json=body, headers=headers, timeout=30)
    assert first.status_code == again.status_code == 200 and first.json() == again.json()
    assert first.json()["usage"]["completion_tokens"] == 100
    assert engine_requests(replica_url(llama.dep_id)) - before == 1


def test_a_batch_for_a_deployment_not_ready_waits_unsent_and_says_why(llama: Llama) -> None:
    """A line for a deployment never launched is not sent (no 503 in the request log), the batch says which
    deployment it waits for (on the Batches page, the batch's page and in its API object), and a line for a model
    that does not exist fails at once; a UTF-8 BOM at the file's start is accepted."""
    from console.batches.models import Batch
    from console.observability.models import RequestLog

    ensure_model()
    plan = {"name": "unlaunched", "model": "llama-8b", "engine": "simulator", "max_model_len": 8192}
    assert llama.client.post("/api/deployments", json=plan).status_code == 201
    client = llama.openai()
    data = b"\xef\xbb\xbf" + jsonl(
        [chat_line(f"u-{i}", model="unlaunched") for i in range(3)] + [chat_line("x", "nosuch")]
    )
    uploaded = client.files.create(file=("bom.jsonl", data), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    deadline = time.monotonic() + 60
    while (row := Batch.objects.get(public_id=batch.id)).failed < 1 or not row.waiting_reason:
        assert time.monotonic() < deadline, (row.failed, row.waiting_reason, llama.box.worker.output()[-3000:])
        time.sleep(0.3)
    assert row.waiting_reason == "deployment unlaunched is stopped" and row.completed == 0
    for page in ("/batch-jobs/", f"/batch-jobs/{batch.id}/"):
        assert "waiting: deployment unlaunched is stopped" in llama.client.get(page).text
    assert getattr(client.batches.retrieve(batch.id), "waiting_reason", None) == "deployment unlaunched is stopped"
    [failed] = [x for x in row.lines.all() if x.answer]
    assert failed.custom_id == "x" and failed.answer is not None and failed.answer["response"]["status_code"] == 404
    while not RequestLog.objects.filter(batch_id=batch.id).exists():
        assert time.monotonic() < deadline, "the missing model's row"
        time.sleep(0.3)
    time.sleep(3)  # the runner ran its ticks: a line sent would be logged by now
    assert list(RequestLog.objects.filter(batch_id=batch.id).values_list("status", flat=True)) == [404]
    assert client.batches.cancel(batch.id).status in ("cancelling", "cancelled")
    done = wait_batch(client, batch.id, {"cancelled"}, within=60)
    assert (done.request_counts.completed, done.request_counts.failed) == (0, 1)
    assert Batch.objects.get(public_id=batch.id).waiting_reason == ""
