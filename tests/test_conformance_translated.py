"""The simulator's Anthropic and Responses conformance suites (tests/simulator/test_anthropic_api.py and
test_responses_api.py), run again through Hearth's gateway in front of a simulator that serves neither API
(``--no-anthropic --no-responses``): every check of the native shapes must hold for the translation too.

The same test functions are collected here with a ``sim`` fixture that is the gateway: a deployment whose
served name is the suites' model, launched by the real Celery task, and a Hearth key.
"""

from collections.abc import Iterator

import anthropic
import openai
import pytest

from tests.conftest import Workers, login
from tests.simulator.simproc import MODEL
from tests.simulator.test_anthropic_api import (  # noqa: F401 - collected here, against the gateway
    test_a_mentioned_tool_is_used,
    test_a_message_has_text_stop_reason_and_usage,
    test_a_streamed_tool_use_sends_input_json_deltas,
    test_a_too_long_message_is_a_400,
    test_a_tool_result_gets_a_text_answer,
    test_count_tokens_agrees_with_usage_and_system_blocks_count,
    test_keys_x_api_key_or_bearer_and_a_wrong_one_is_401,
    test_stop_sequences_end_with_stop_sequence,
    test_the_raw_stream_follows_the_documented_order,
    test_the_sdk_stream_helper_builds_the_same_message,
)
from tests.simulator.test_responses_api import (  # noqa: F401 - collected here, against the gateway
    test_a_mentioned_tool_is_called_streamed_and_not,
    test_a_response_has_text_status_and_usage,
    test_agent_mode_runs_a_copy_task_with_codexs_shell_tool,
    test_the_context_limit_and_unknown_items_are_refused_in_openais_shape,
    test_the_sdk_stream_helper_builds_the_same_response,
    test_the_stream_follows_vllms_event_order_with_sequence_numbers,
)
from tests.simworld import ensure_model, wait_state

pytestmark = pytest.mark.django_db(transaction=True)


class Gateway:
    """The gateway in the place of a simulator: the interface the suites use of tests.simulator.simproc.Sim."""

    def __init__(self, web: str, key: str) -> None:
        self.base, self.key = web, key

    def openai(self, api_key: str | None = None) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base + "/v1", api_key=api_key or self.key, max_retries=0, timeout=30)

    def anthropic(self, api_key: str | None = None) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.base, api_key=api_key or self.key, max_retries=0, timeout=30)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


@pytest.fixture
def sim(web: str, worker: Workers, admin_user: object) -> Iterator[Gateway]:
    client = login(web)
    ensure_model()
    body = {
        "name": MODEL,
        "model": "llama-8b",
        "engine": "simulator",
        "max_model_len": 4096,
        "extra_args": ["--no-anthropic", "--no-responses"],
    }
    dep_id = client.post("/api/deployments", json=body).json()["id"]
    client.post(f"/api/deployments/{dep_id}/launch")
    assert wait_state(client, dep_id, {"ready", "failed"})["state"] == "ready"
    yield Gateway(web, client.post("/api/keys", json={"name": "conformance"}).json()["key"])
    client.post(f"/api/deployments/{dep_id}/stop")
    wait_state(client, dep_id, {"stopped", "failed"})
