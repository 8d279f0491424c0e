"""The openai SDK's batch workflow against vLLM (CPU) (issue 30's acceptance): files.create, batches.create,
retrieve until completed, files.content; every custom_id answered once in OpenAI's output shape, by the engine."""

import json
import time

import openai
import pytest

from tests.conftest import ENGINE_READY_WITHIN, Workers, login
from tests.test_e2e_vllm import MODEL_DIR, engine_built, wait_for

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]
__all__ = ["engine_built"]  # the module fixture that fails the tests when the engine is not built
READY_WITHIN = ENGINE_READY_WITHIN


def test_a_batch_runs_on_vllm_cpu_through_the_openai_sdk(web: str, worker: Workers, admin_user: object) -> None:
    client = login(web)
    assert client.post("/api/models", json={"name": "smollm2-135m", "path": str(MODEL_DIR)}).status_code == 201
    fields = {"name": "smol-batch", "model": "smollm2-135m", "engine": "vllm-cpu", "max_model_len": 2048}
    resp = client.post("/api/deployments", json=fields | {"kv_space_gib": 1})
    assert resp.status_code == 201, resp.text
    dep_id = resp.json()["id"]
    assert client.post(f"/api/deployments/{dep_id}/launch").status_code == 202
    try:
        dep = wait_for(client, dep_id, {"ready", "failed"}, READY_WITHIN)
        assert dep["state"] == "ready", f"{dep}\n--- worker log ---\n{worker.output()[-4000:]}"
        key = client.post("/api/keys", json={"name": "batch"}).json()["key"]
        gpt = openai.OpenAI(base_url=f"{web}/v1", api_key=key)
        colours = ["red", "green", "blue", "amber"]
        lines = [
            {
                "custom_id": colour,
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {
                    "model": "smol-batch",
                    "messages": [{"role": "user", "content": f"Say {colour}."}],
                    "max_tokens": 8,
                },
            }
            for colour in colours
        ]
        data = "\n".join(json.dumps(line) for line in lines).encode()
        uploaded = gpt.files.create(file=("colours.jsonl", data), purpose="batch")
        batch = gpt.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
        deadline = time.monotonic() + 300
        while (done := gpt.batches.retrieve(batch.id)).status not in ("completed", "failed", "expired", "cancelled"):
            assert time.monotonic() < deadline, done
            time.sleep(1)
        assert done.status == "completed" and done.request_counts.completed == 4, done  # type: ignore[union-attr]
        assert done.output_file_id is not None
        output = [json.loads(x) for x in gpt.files.content(done.output_file_id).text.splitlines()]
        assert sorted(x["custom_id"] for x in output) == sorted(colours)
        for line in output:
            assert line["id"].startswith("batch_req_") and line["error"] is None
            answer = line["response"]["body"]
            assert line["response"]["status_code"] == 200 and answer["model"] == "smol-batch"
            assert answer["choices"][0]["message"]["content"] and answer["usage"]["completion_tokens"] <= 8
    finally:
        client.post(f"/api/deployments/{dep_id}/stop")
        wait_for(client, dep_id, {"stopped", "failed"}, 60)
