"""Engines Hearth did not launch behind the real appliance (web and worker processes): a simulator the test
started, registered as a deployment, streams both SDKs with Hearth's keys and quotas, shows its metrics, goes
down and comes back as reconcile sees it; one without Anthropic's API gets the translation; a mixed deployment
(one replica Hearth launched, one external) keeps conversations on one replica and survives either side stopping.
"""

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from console.deployments.models import Deployment, Replica
from console.fanout import bump_routing_version
from console.observability.models import RequestLog
from tests.conftest import Workers, login, serving
from tests.outside import ENGINE_KEY, OutsideSim
from tests.quotaworld import room_in_minute
from tests.simworld import deploy, wait_state

pytestmark = pytest.mark.django_db(transaction=True)
CHAT = [{"role": "user", "content": "Name three colours."}]


def until(check: Callable[[], Any], within: float = 30, what: str = "") -> Any:
    """``check()``'s first truthy value, polled every 0.3 s."""
    deadline = time.monotonic() + within
    while not (value := check()):
        assert time.monotonic() < deadline, f"not within {within} s: {what}"
        time.sleep(0.3)
    return value


def endpoint(client: httpx.Client, dep_id: int) -> dict[str, Any]:
    dep = client.get(f"/api/deployments/{dep_id}").json()
    return next(r for r in dep["replicas"] if r["external"])  # type: ignore[no-any-return]


def stream_both(web: str, key: str, model: str) -> tuple[str, str]:
    """The text of an openai chat stream and an anthropic messages stream through the gateway."""
    sdk = openai.OpenAI(base_url=f"{web}/v1", api_key=key, max_retries=0, timeout=60)
    chat = "".join(
        c.choices[0].delta.content or ""
        for c in sdk.chat.completions.create(model=model, messages=CHAT, max_tokens=12, stream=True)
        if c.choices
    )  # type: ignore[arg-type]
    claude = anthropic.Anthropic(base_url=web, api_key=key, max_retries=0, timeout=60)
    with claude.messages.stream(model=model, max_tokens=12, messages=CHAT) as stream:  # type: ignore[arg-type]
        message = "".join(stream.text_stream)
    return chat, message


def test_an_outside_simulator_serves_both_sdks_with_keys_and_quotas_shows_metrics_and_goes_down_and_back(
    web: str, worker: Workers, admin_user: object, tmp_path: Path
) -> None:
    sim = OutsideSim(tmp_path / "sim.log", "outside-sim")
    client = login(web)
    try:
        resp = client.post(
            "/api/external-deployments", json={"base_url": sim.base, "engine_kind": "vllm", "api_key": ENGINE_KEY}
        )
        assert resp.status_code == 201, resp.text
        dep_id = resp.json()["id"]
        key = client.post("/api/keys", json={"name": "outside", "requests_per_minute": 3}).json()["key"]
        serving("nothing-here")  # a key may name only a served model: one that was, and is gone by its first use
        other = client.post("/api/keys", json={"name": "elsewhere", "allowed_models": ["nothing-here"]}).json()["key"]
        Deployment.objects.filter(served_model_name="nothing-here").delete()
        bump_routing_version()

        room_in_minute(20)  # the four requests below fall in one minute's window
        chat, message = stream_both(web, key, "outside-sim")
        assert chat and message
        sdk = openai.OpenAI(base_url=f"{web}/v1", api_key=key, max_retries=0)
        assert [m.id for m in sdk.models.list()] == ["outside-sim"]
        sdk.chat.completions.create(model="outside-sim", messages=CHAT, max_tokens=4)  # type: ignore[arg-type]
        with pytest.raises(openai.RateLimitError):  # the key's 3 requests a minute are spent
            sdk.chat.completions.create(model="outside-sim", messages=CHAT, max_tokens=4)  # type: ignore[arg-type]
        with pytest.raises(openai.PermissionDeniedError):
            openai.OpenAI(base_url=f"{web}/v1", api_key=other, max_retries=0).chat.completions.create(
                model="outside-sim", messages=CHAT, max_tokens=4
            )  # type: ignore[arg-type]
        logged = until(
            lambda: (
                list(RequestLog.objects.filter(model="outside-sim", status=200))
                if RequestLog.objects.filter(model="outside-sim", status=200).count() == 3
                else None
            ),
            10,
            "three request log rows",
        )
        assert {r.endpoint for r in logged} == {"/v1/chat/completions", "/v1/messages"}
        assert all(r.completion_tokens and r.prompt_tokens for r in logged)
        assert sim.served_requests() == 3  # the gateway sent the engine's key: the simulator demands it

        numbers = until(
            lambda: (
                (m := client.get(f"/api/deployments/{dep_id}/metrics").json())["values"].get("generation_tokens_total")
                and m
            ),
            20,
            "scraped metrics",
        )
        assert numbers["replicas"][0]["flavor"] == "vllm" and numbers["values"]["generation_tokens_total"] > 0
        panel = client.get(f"/deployments/{dep_id}/panel/").text
        assert 'data-field="generation_tokens_total">no data' not in panel and "kv_cache_usage" in panel

        sim.stop()
        down = until(lambda: (e := endpoint(client, dep_id))["down_reason"] and e, 20, "the endpoint seen down")
        assert not down["ready"] and "is not reachable" in down["down_reason"]
        page = client.get(f"/deployments/{dep_id}/").text
        assert 'data-field="endpoint-state">down' in page and "is not reachable" in page
        answer = httpx.post(
            f"{web}/v1/chat/completions",
            headers={"Authorization": f"Bearer {other}"},
            json={"model": "nothing-here", "messages": CHAT},
        )
        assert answer.status_code == 404  # a model nobody deployed is still unknown, not 503
        fresh = client.post("/api/keys", json={"name": "after"}).json()["key"]
        answer = httpx.post(
            f"{web}/v1/chat/completions",
            headers={"Authorization": f"Bearer {fresh}"},
            json={"model": "outside-sim", "messages": CHAT, "max_tokens": 4},
        )
        assert answer.status_code == 503 and int(answer.headers["retry-after"]) >= 1, answer.text
        assert answer.json()["error"]["code"] == "no_ready_replica"

        sim.start()
        until(lambda: endpoint(client, dep_id)["ready"], 20, "the endpoint seen back")
        back = openai.OpenAI(base_url=f"{web}/v1", api_key=fresh, max_retries=0)
        assert back.chat.completions.create(model="outside-sim", messages=CHAT, max_tokens=4).choices  # type: ignore[arg-type]
        for text in (page, client.get("/api/audit").text, worker.output()):
            assert ENGINE_KEY not in text
    finally:
        sim.stop()


def test_an_outside_engine_without_anthropics_api_gets_the_translation(
    web: str, worker: Workers, admin_user: object, tmp_path: Path
) -> None:
    sim = OutsideSim(tmp_path / "plain.log", "plain-sim", "--no-anthropic", "--no-responses", api_key="")
    client = login(web)
    try:
        resp = client.post("/api/external-deployments", json={"base_url": sim.base, "engine_kind": "openai"})
        assert resp.status_code == 201 and resp.json()["engine_version"] == "", resp.text
        key = client.post("/api/keys", json={"name": "plain"}).json()["key"]
        chat, message = stream_both(web, key, "plain-sim")
        assert chat and message  # /v1/messages would be a 404 at this engine: the gateway translated to chat
        assert client.delete(f"/api/deployments/{resp.json()['id']}").status_code == 204
        gone = httpx.post(
            f"{web}/v1/chat/completions",
            headers={"Authorization": f"Bearer {key}"},
            json={"model": "plain-sim", "messages": CHAT},
        )
        assert gone.status_code == 404  # unregistered: Hearth no longer routes to it, the engine runs on
        assert httpx.get(sim.base + "/health").status_code == 200
    finally:
        sim.stop()


def test_a_mixed_deployment_keeps_conversations_on_one_replica_and_survives_either_side_stopping(
    web: str, worker: Workers, admin_user: object, tmp_path: Path
) -> None:
    client = login(web)
    dep_id = deploy(web, client, "mixed")
    assert wait_state(client, dep_id, {"ready", "failed"})["state"] == "ready"
    launched = Replica.objects.get(deployment_id=dep_id, running=True)
    sim = OutsideSim(tmp_path / "second-box.log", "mixed")
    try:
        resp = client.post(
            f"/api/deployments/{dep_id}/endpoints",
            json={"base_url": sim.base, "engine_kind": "vllm", "api_key": ENGINE_KEY},
        )
        assert resp.status_code == 201, resp.text
        assert [r["external"] for r in resp.json()["replicas"]] == [False, True]
        assert "Add an engine Hearth did not launch" in client.get(f"/deployments/{dep_id}/").text
        key = client.post("/api/keys", json={"name": "mixed"}).json()["key"]
        sdk = openai.OpenAI(base_url=f"{web}/v1", api_key=key, max_retries=0, timeout=60)
        ask = lambda messages: sdk.chat.completions.create(model="mixed", messages=messages, max_tokens=4)  # noqa: E731

        conversation: list[dict[str, str]] = [{"role": "system", "content": "You are a patient tutor. " * 100}]
        for turn in range(3):
            conversation.append({"role": "user", "content": f"Question {turn}"})
            ask(conversation)
        inside = launched_requests(launched)
        assert sorted([inside, sim.served_requests()]) == [0, 3]  # one conversation, one replica
        for i in range(8):
            ask([{"role": "user", "content": f"Different question {i}" * (i + 1)}])
        assert launched_requests(launched) > inside and sim.served_requests() > 0  # others spread over both

        sim.stop()  # the second box goes away: the launched replica carries on, at once
        assert all(ask([{"role": "user", "content": f"while away {i}"}]).choices for i in range(4))
        until(lambda: not endpoint(client, dep_id)["ready"], 20, "the external replica seen down")
        sim.start()
        until(lambda: endpoint(client, dep_id)["ready"], 20, "the external replica seen back")

        os.kill(int(launched.handle), signal.SIGKILL)  # Hearth's own engine dies: the external one carries on
        served_before = sim.served_requests()
        assert all(ask([{"role": "user", "content": f"after the crash {i}"}]).choices for i in range(4))
        assert sim.served_requests() >= served_before + 4
        dep = client.get(f"/api/deployments/{dep_id}").json()
        assert dep["state"] == "ready", dep
    finally:
        client.post(f"/api/deployments/{dep_id}/stop")
        wait_state(client, dep_id, {"stopped", "failed"})
        sim.stop()


def launched_requests(replica: Replica) -> float:
    text = httpx.get(f"{replica.base_url}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("vllm:request_success_total{")
    )
