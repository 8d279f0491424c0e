"""The shared world of the gateway tests against the engine simulator: a ready deployment behind the gateway
(launched by Celery on a simulated 8× H100), a key for it, and helpers to wait for states and log rows."""

import json
import time
from typing import Any

import anthropic
import httpx
import openai
from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families

from console.catalog.models import ModelSource
from console.deployments.models import Replica

LLAMA_8B = "console/catalog/demo/llama-3.1-8b-instruct.json"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]

CLAUDE_TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather for a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]


class Served:
    """A ready simulator deployment behind the gateway, and a key for it."""

    def __init__(self, web: str, client: httpx.Client, dep_id: int, key: str) -> None:
        self.web, self.client, self.dep_id, self.key = web, client, dep_id, key

    def openai(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.web}/v1", api_key=self.key, max_retries=0, timeout=60)

    def anthropic(self) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.web, api_key=self.key, max_retries=0, timeout=60)

    def state(self) -> dict[str, Any]:
        return self.client.get(f"/api/deployments/{self.dep_id}").json()  # type: ignore[no-any-return]

    def engine_metrics(self) -> str:
        replica = Replica.objects.filter(deployment_id=self.dep_id).latest("id")
        return httpx.get(f"{replica.base_url}/metrics", timeout=10).text


def ensure_model() -> None:
    """The llama-8b model row (a Hugging Face repo: the simulator loads no weights)."""
    config = json.loads(open(LLAMA_8B).read())["config"]
    if not ModelSource.objects.filter(name="llama-8b").exists():
        ModelSource.objects.create(
            name="llama-8b",
            kind="hf",
            repo_id="meta-llama/Llama-3.1-8B-Instruct",
            revision="0e9e39f249a16976918f6564b8830bc894c89659",
            config=config,
            weights_bytes=16_060_522_496,
        )


def deploy(web: str, client: httpx.Client, name: str, extra_args: list[str] | None = None) -> int:
    ensure_model()
    resp = client.post(
        "/api/deployments",
        json={
            "name": name,
            "model": "llama-8b",
            "engine": "simulator",
            "max_model_len": 8192,
            "extra_args": extra_args or [],
        },
    )
    assert resp.status_code == 201, resp.text
    dep_id: int = resp.json()["id"]
    assert client.post(f"/api/deployments/{dep_id}/launch").status_code == 202
    return dep_id


def wait_state(client: httpx.Client, dep_id: int, states: set[str], within: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while (dep := client.get(f"/api/deployments/{dep_id}").json())["state"] not in states:
        assert time.monotonic() < deadline, dep
        time.sleep(0.5)
    return dep  # type: ignore[no-any-return]


def hearth_metrics(web: str) -> str:
    """Hearth's own /metrics at ``web``, asked with the run's HEARTH_METRICS_TOKEN (it is closed without one)."""
    resp = httpx.get(f"{web}/metrics", headers={"Authorization": f"Bearer {settings.HEARTH_METRICS_TOKEN}"}, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.text


def truncated_count(web: str) -> float:
    """The appliance's own counter of truncated streams for "llama" (the web process lives all session)."""
    for family in text_string_to_metric_families(hearth_metrics(web)):
        for sample in family.samples:
            if sample.name == "hearth_gateway_truncated_streams_total" and sample.labels["model"] == "llama":
                return sample.value
    return 0.0


def wait_for_logs(count: int) -> list[Any]:
    """The request log once it holds ``count`` rows (rows are written after the answer is out)."""
    from console.observability.models import RequestLog

    deadline = time.monotonic() + 10
    while len(logs := list(RequestLog.objects.order_by("id"))) < count:
        assert time.monotonic() < deadline, f"{len(logs)} of {count} request log rows"
        time.sleep(0.1)
    return logs
