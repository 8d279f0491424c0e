"""A batch's ``model`` and ``usage`` in OpenAI's batch object: usage summed from its lines' answers as the runner
records them (chat, completions, Responses and embeddings name their tokens differently), and batches 0004, which
gives the batches of an existing database their model and usage from their lines."""

from typing import Any

import pytest
from django.utils import timezone

from console.access.models import ApiKey
from console.batches import batches
from console.batches.models import Batch, BatchLine
from tests.migrating import migrate, schema_at

BEFORE = [("batches", "0003_batch_waiting_reason")]
AFTER = [("batches", "0004_batch_model_and_usage")]


def answered(usage: Any) -> dict[str, Any]:
    return {"id": "r", "custom_id": "c", "response": {"status_code": 200, "body": {"usage": usage}}, "error": None}


CHAT = {
    "prompt_tokens": 12,
    "completion_tokens": 5,
    "total_tokens": 17,
    "prompt_tokens_details": {"cached_tokens": 8},
    "completion_tokens_details": {"reasoning_tokens": 2},
}
RESPONSES = {
    "input_tokens": 30,
    "output_tokens": 9,
    "input_tokens_details": {"cached_tokens": 16},
    "output_tokens_details": {"reasoning_tokens": 4},
}


def test_each_api_s_usage_is_read_and_odd_values_count_nothing() -> None:
    assert batches.usage_of(answered(CHAT)) == (12, 8, 5, 2)
    assert batches.usage_of(answered(RESPONSES)) == (30, 16, 9, 4)
    assert batches.usage_of(answered({"prompt_tokens": 7, "total_tokens": 7})) == (7, 0, 0, 0)  # embeddings
    odd = {"prompt_tokens": "12", "completion_tokens": True, "prompt_tokens_details": [1], "output_tokens": -3}
    assert batches.usage_of(answered(odd)) == (0, 0, 0, 0)
    for shape in ({"response": None, "error": {"code": "batch_expired"}}, {"response": {"body": "text"}}, {}):
        assert batches.usage_of(shape) == (0, 0, 0, 0)


@pytest.mark.django_db
def test_the_batch_object_gives_its_model_and_usage_summed_as_lines_are_answered() -> None:
    key = ApiKey.objects.create(name="u", prefix="hk-usage", key_hash="d" * 64)
    batch = Batch.objects.create(
        key=key, endpoint="/v1/chat/completions", input_file_id="f", expires_at=timezone.now(), model="llama"
    )
    rows = [
        BatchLine.objects.create(batch=batch, index=i, custom_id=f"c-{i}", url="/v1/chat/completions", body={})
        for i in range(3)
    ]
    empty = batches.batch_object(batch)
    assert empty["model"] == "llama" and empty["usage"]["total_tokens"] == 0 and empty["waiting_reason"] is None
    batch.waiting_reason = "deployment llama is stopped"
    assert batches.batch_object(batch)["waiting_reason"] == "deployment llama is stopped"
    assert batches.record(rows[0].pk, batch.pk, True, answered(CHAT))
    assert batches.record(rows[1].pk, batch.pk, True, answered(RESPONSES))
    assert not batches.record(rows[1].pk, batch.pk, True, answered(RESPONSES))  # once
    assert batches.record(rows[2].pk, batch.pk, False, {"response": {"status_code": 400, "body": {}}})
    batch.refresh_from_db()
    assert batches.batch_object(batch)["usage"] == {
        "input_tokens": 42,
        "input_tokens_details": {"cached_tokens": 24},
        "output_tokens": 14,
        "output_tokens_details": {"reasoning_tokens": 6},
        "total_tokens": 56,
    }
    batch.model = ""
    assert batches.batch_object(batch)["model"] is None  # lines naming several models


@pytest.mark.django_db(transaction=True)
def test_batches_0004_gives_existing_batches_their_model_and_usage() -> None:
    with schema_at(BEFORE) as before:
        made, lines = before.get_model("batches", "Batch"), before.get_model("batches", "BatchLine")
        key = ApiKey.objects.create(name="old", prefix="hk-old-b", key_hash="e" * 64)  # access is at today's schema
        one, mixed = (
            made.objects.create(
                key_id=key.pk,
                endpoint="/v1/chat/completions",
                input_file_id=f"f{i}",
                total=2,
                completed=1,
                expires_at=timezone.now(),
            )
            for i in range(2)
        )
        for batch, models in ((one, ("llama", "llama")), (mixed, ("llama", "qwen"))):
            for i, model in enumerate(models):
                answer = answered(CHAT) if i == 0 else None
                lines.objects.create(
                    batch=batch,
                    index=i,
                    custom_id=f"c{i}",
                    url="/v1/chat/completions",
                    body={"model": model},
                    answer=answer,
                    state="done" if answer else "pending",
                )
        after = migrate(AFTER).get_model("batches", "Batch")
        filled = {b.input_file_id: b for b in after.objects.all()}
        assert (filled["f0"].model, filled["f1"].model) == ("llama", "")
        for batch in filled.values():
            assert (batch.total, batch.completed) == (2, 1)
            usage = (batch.input_tokens, batch.cached_tokens, batch.output_tokens, batch.reasoning_tokens)
            assert usage == (12, 8, 5, 2)
        back = migrate(BEFORE).get_model("batches", "Batch")
        assert sorted(back.objects.values_list("input_file_id", "total")) == [("f0", 2), ("f1", 2)]
