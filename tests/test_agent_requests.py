"""The installed coding-agent CLIs (scripts/install-agent-clis.sh) still send the first request the product has on
record for their version (engines/agent_requests, read by engines.agent_clients for the plan's agent checks):
each CLI runs its file task once against the engine simulator behind a capturing proxy (tests/agentcapture.py),
and its first request with tools must carry the recorded tools, in order, the recorded output limit, and a prompt
of the recorded size within SIZE_TOLERANCE (what varies between runs: the date, the machine's OS version).

A CLI at a version with no record, or whose request changed, fails saying to re-record with
scripts/record-agent-requests.sh.
"""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from engines.agent_clients import REQUESTS_DIR
from engines.chat_prompt import rendered_prompt
from tests.agentcapture import AGENTS, Agent, Capture, capturing, first_request, record

pytestmark = pytest.mark.process
SIZE_TOLERANCE = 0.02  # of the recorded prompt's tokens, either way
RERECORD = "re-record with scripts/record-agent-requests.sh (and commit engines/agent_requests/)"


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Capture]:
    with capturing(tmp_path_factory.mktemp("capture") / "sim.log") as capture:
        yield capture


@pytest.mark.parametrize("agent", AGENTS, ids=[a.slug for a in AGENTS])
def test_the_installed_cli_sends_the_first_request_on_record(agent: Agent, proxy: Capture, tmp_path: Path) -> None:
    version = agent.version()
    path = REQUESTS_DIR / f"{agent.slug}-{version}.json"
    assert path.exists(), f"{agent.name} {version} is installed but has no record {path.name}: {RERECORD}"
    kept = json.loads(path.read_text())
    request, output = first_request(agent, proxy, tmp_path)
    fresh = record(agent, request, version)
    changed = f"{agent.name} {version}'s first request differs from {path.name}: {RERECORD}"
    names = [[t["function"]["name"] for t in r["chat"]["tools"]] for r in (kept, fresh)]
    assert names[1] == names[0], f"{changed}\ntools now {names[1]}\nrecorded {names[0]}\n{output}"
    assert fresh["max_tokens"] == kept["max_tokens"], changed
    sizes = [rendered_prompt("", r["chat"]["messages"], r["chat"]["tools"]).tokens for r in (kept, fresh)]
    assert abs(sizes[1] - sizes[0]) <= SIZE_TOLERANCE * sizes[0], (
        f"{changed}: about {sizes[1]:,} prompt tokens now, {sizes[0]:,} recorded"
    )
