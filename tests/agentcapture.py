"""Each coding-agent CLI's first request with tools, captured from the installed CLI (scripts/install-agent-clis.sh)
by a small proxy in front of the engine simulator, and kept as the product's record of that agent
(engines/agent_requests/<client>-<version>.json, read by engines.agent_clients).

scripts/record-agent-requests.sh records every agent afresh from the versions installed now (run it after a CLI's
pinned version changes in scripts/install-agent-clis.sh); tests/test_agent_requests.py captures them again and
checks the records still hold.
"""

import datetime
import http.server
import json
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from engines.agent_clients import REQUESTS_DIR
from gateway.responses_chat import responses_to_chat
from gateway.translate import messages_to_chat
from tests.agentworld import NPM_BIN, SOURCE, TASK, cli, run
from tests.outside import OutsideSim

MODEL = "agent-model"  # the name the simulator serves and each CLI is told to use
WORKDIR = "/work"  # the capture's working folder, as the record writes it (the real one is a temporary folder)
HOME = "/root"  # the CLI's HOME, likewise
Json = dict[str, Any]


class Capture(http.server.ThreadingHTTPServer):
    """A proxy on 127.0.0.1 that keeps each POST body's JSON (``bodies``: path and body) and relays the request to
    ``upstream``, the whole answer then returned at once (an event stream arrives whole, which clients accept)."""

    def __init__(self, upstream: str) -> None:
        self.upstream, self.bodies = upstream, []
        super().__init__(("127.0.0.1", 0), _Relay)
        self.base = f"http://127.0.0.1:{self.server_address[1]}"

    bodies: list[tuple[str, Json]]


class _Relay(http.server.BaseHTTPRequestHandler):
    server: Capture

    def do_GET(self) -> None:
        self._relay(b"")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            self.server.bodies.append((self.path, json.loads(body)))
        except ValueError:
            pass
        self._relay(body)

    def _relay(self, body: bytes) -> None:
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "accept", "authorization")}
        answer = httpx.request(
            self.command, self.server.upstream + self.path, content=body, headers=headers, timeout=60
        )
        self.send_response(answer.status_code)
        self.send_header("content-type", answer.headers.get("content-type", "application/json"))
        self.send_header("content-length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the bodies are what the capture keeps."""


@contextmanager
def capturing(log: Path) -> Iterator[Capture]:
    """The simulator (agent mode, a 64K context, as the agent tests deploy it) behind a Capture proxy."""
    sim = OutsideSim(log, MODEL, "--max-model-len", "65536", api_key="")
    proxy = Capture(sim.base)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        yield proxy
    finally:
        proxy.shutdown()
        sim.stop()


@dataclass(frozen=True)
class Agent:
    """One CLI: its name, npm package and pinned version (install-agent-clis.sh), the route its requests take,
    the gateway's translation of them to chat completions, and how to run it against a base URL."""

    name: str
    slug: str
    package: str
    route: str
    to_chat: Callable[[Json], Json]
    command: Callable[[str, Path, Path], tuple[list[str], dict[str, str]]]

    def version(self) -> str:
        """The version installed under the test cache (its npm package.json)."""
        manifest = NPM_BIN.parent / "lib/node_modules" / self.package / "package.json"
        if not manifest.exists():
            cli(NPM_BIN / "missing")  # fails saying how to install the CLIs
        return str(json.loads(manifest.read_text())["version"])


def _claude(base: str, work: Path, home: Path) -> tuple[list[str], dict[str, str]]:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base,
        "ANTHROPIC_AUTH_TOKEN": "capture",
        "ANTHROPIC_MODEL": MODEL,
        "ANTHROPIC_SMALL_FAST_MODEL": MODEL,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": MODEL,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    return [cli(NPM_BIN / "claude"), "-p", TASK, "--allowedTools", "Read,Write"], env


def _codex(base: str, work: Path, home: Path) -> tuple[list[str], dict[str, str]]:
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    (home / ".codex/config.toml").write_text(
        f'model = "{MODEL}"\nmodel_provider = "hearth"\n\n[model_providers.hearth]\nname = "Hearth"\n'
        f'base_url = "{base}/v1"\nenv_key = "HEARTH_API_KEY"\nwire_api = "responses"\n'
        "request_max_retries = 0\nstream_max_retries = 0\n"
    )
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "HEARTH_API_KEY": "capture"}
    return [
        cli(NPM_BIN / "codex"),
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        TASK,
    ], env


AGENTS = (
    Agent("Claude Code", "claude-code", "@anthropic-ai/claude-code", "/v1/messages", messages_to_chat, _claude),
    Agent("Codex", "codex", "@openai/codex", "/v1/responses", responses_to_chat, _codex),
)


def first_request(agent: Agent, proxy: Capture, folder: Path) -> tuple[Json, str]:
    """Run ``agent`` once in a fresh working folder under ``folder`` against ``proxy``: its first request with
    tools on its route, its temporary folders written as WORKDIR and HOME, and what the CLI printed."""
    work, home = folder / f"{agent.slug}-work", folder / f"{agent.slug}-home"
    work.mkdir()
    home.mkdir()
    (work / "source.txt").write_text(SOURCE)
    start = len(proxy.bodies)
    argv, env = agent.command(proxy.base, work, home)
    output = run(argv, work, env)
    for path, body in proxy.bodies[start:]:
        if path.split("?")[0] == agent.route and body.get("tools"):
            return _placed(body, {work: WORKDIR, home: HOME}), output
    raise AssertionError(f"{agent.name} sent no request with tools to {agent.route}:\n{output}")


def _placed(body: Json, places: dict[Path, str]) -> Json:
    """``body`` with each temporary folder of ``places`` written as the path it stands for (also in the dashed
    form Claude Code names its project folders with)."""
    text = json.dumps(body)
    for folder, name in places.items():
        for path in {str(folder), str(folder.resolve())}:
            text = text.replace(path, name).replace(path.replace("/", "-"), name.replace("/", "-"))
    loaded: Json = json.loads(text)
    return loaded


def record(agent: Agent, request: Json, version: str) -> Json:
    """The record engines.agent_clients reads: the request as sent, and the chat-completions request the gateway
    makes of it (what a chat template renders), with the CLI's version and the capture's date."""
    chat = agent.to_chat(request)
    return {
        "client": agent.name,
        "version": version,
        "package": agent.package,
        "route": agent.route,
        "captured": datetime.date.today().isoformat(),
        "source": (
            f"the first request with tools of {agent.package} {version} (npm), run as in tests/agentcapture.py on "
            f"the task {TASK!r}, captured by a proxy in front of the engine simulator; 'chat' is the gateway's "
            "translation of it to chat completions (gateway.translate, gateway.responses_chat)"
        ),
        "max_tokens": request.get("max_tokens", request.get("max_output_tokens")),
        "chat": {"messages": chat["messages"], "tools": chat.get("tools", [])},
        "request": request,
    }


def main() -> None:
    """Record every agent of AGENTS from the installed CLIs into REQUESTS_DIR (older versions' files are kept)."""
    with tempfile.TemporaryDirectory() as tmp, capturing(Path(tmp) / "sim.log") as proxy:
        for agent in AGENTS:
            version = agent.version()
            request, _ = first_request(agent, proxy, Path(tmp))
            path = REQUESTS_DIR / f"{agent.slug}-{version}.json"
            path.write_text(json.dumps(record(agent, request, version), indent=1, ensure_ascii=False) + "\n")
            print(f"recorded {path}")
