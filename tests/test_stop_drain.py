"""A Stop lets the requests in flight finish (console.deployments.stopping.drain), through the real gateway, worker
and simulator: a stream running when the admin stops its deployment ends whole, the page says how many requests are
left meanwhile, a new request is refused, and the engine is ended once the stream is over."""

import time

import httpx
import openai
import pytest

from tests.conftest import Workers, login
from tests.simworld import deploy, wait_state

pytestmark = pytest.mark.django_db(transaction=True)
TOKENS = 40  # the stream's answer: 100 ms a token on the simulator, ~4 s in all


def test_a_stream_running_at_a_stop_ends_whole_before_its_engine_stops(
    web: str, worker: Workers, admin_user: object
) -> None:
    client = login(web)
    dep_id = deploy(web, client, "drainer", ["--decode-ms-per-token", "100", "--natural-output-tokens", "1000"])
    assert wait_state(client, dep_id, {"ready", "failed"})["state"] == "ready"
    key = client.post("/api/keys", json={"name": "drain"}).json()["key"]
    sdk = openai.OpenAI(base_url=f"{web}/v1", api_key=key, max_retries=0, timeout=60)
    question = [{"role": "user", "content": "Tell me a long story."}]
    stream = iter(sdk.chat.completions.create(model="drainer", messages=question, max_tokens=TOKENS, stream=True))
    chunks = [next(stream)]  # the answer has begun

    assert client.post(f"/api/deployments/{dep_id}/stop").status_code == 202
    deadline = time.monotonic() + 10
    while "in flight" not in (dep := client.get(f"/api/deployments/{dep_id}").json())["state_reason"]:
        assert time.monotonic() < deadline, dep
        time.sleep(0.1)
    assert dep["state"] == "stopping"
    assert dep["state_reason"] == "Stopping: 1 request in flight gets up to 30 s to finish."
    late = httpx.post(
        f"{web}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": "drainer", "messages": question, "max_tokens": 4},
        timeout=30,
    )
    assert late.status_code == 503, late.text  # no new request for a model that is stopping

    chunks.extend(stream)
    assert chunks[-1].choices[0].finish_reason == "length", chunks[-3:]  # whole: cut by max_tokens, not by the stop
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == TOKENS
    assert wait_state(client, dep_id, {"stopped", "failed"}, within=30)["state"] == "stopped"
