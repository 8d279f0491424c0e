"""What coding agents need of a deployment, decided with its plan and used at launch: the engine's parsers
(chosen from the model's config and chat template, overridable, warned about when missing) and whether its
context serves Claude Code and Codex, with "fit max_tokens to the context left" reaching the gateway."""

import json
from pathlib import Path

import pytest
from django.test import Client

from console.catalog import sources
from console.catalog.models import ModelSource
from console.deployments import admin_actions, changes
from console.deployments.lifecycle import launch_spec
from console.deployments.models import Deployment, Replica
from console.deployments.planning import plan_for
from console.errors import ConsoleError
from gateway.registry import load_snapshot
from tests.test_modelconfig import write_safetensors

pytestmark = pytest.mark.django_db
DATA = Path(__file__).parent.parent / "console" / "catalog" / "demo"  # the demo catalog
LLAMA_TEMPLATE = "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}"


def hf_model(name: str, fixture: str, template: str = "") -> ModelSource:
    config = json.loads((DATA / f"{fixture}.json").read_text())["config"]
    return ModelSource.objects.create(
        name=name,
        kind="hf",
        repo_id=f"org/{name}",
        revision="a" * 40,
        config=config,
        weights_bytes=16_000_000_000,
        chat_template=template,
    )


def simulated(model: ModelSource, **options: object) -> Deployment:
    return admin_actions.create_deployment(name=model.name, model=model, engine="simulator", **options)  # type: ignore[arg-type]


def command(dep: Deployment) -> list[str]:
    replica = Replica(deployment=dep, runtime="process", host="127.0.0.1", port=9, engine_api_key="k", runtime_name="r")
    return launch_spec(dep, replica).args


def test_the_plan_picks_the_parsers_by_family_and_the_launch_passes_them() -> None:
    dep = simulated(hf_model("qwen", "qwen3-8b"), max_model_len=32768)
    assert dep.plan["parsers"]["tool_call_parser"] == "hermes"
    assert dep.plan["parsers"]["reasoning_parser"] == "qwen3"
    assert dep.plan["parsers"]["warning"] is None and "Qwen3" in dep.plan["parsers"]["reasons"][0]
    args = command(dep)
    assert args[args.index("--tool-call-parser") + 1] == "hermes" and "--enable-auto-tool-choice" in args
    assert args[args.index("--reasoning-parser") + 1] == "qwen3"


def test_a_chat_template_tells_llama_3_apart_and_is_read_from_a_local_folder(tmp_path: Path) -> None:
    config = json.loads((DATA / "llama-3.1-8b-instruct.json").read_text())["config"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": LLAMA_TEMPLATE}))
    write_safetensors(tmp_path / "model.safetensors", {"w": 4096})
    model = sources.add_local_model("llama-local", str(tmp_path))
    assert model.chat_template == LLAMA_TEMPLATE
    dep = simulated(model, max_model_len=8192)
    assert dep.plan["parsers"]["tool_call_parser"] == "llama3_json"


def test_llama_3_without_its_template_is_told_by_its_config() -> None:
    dep = simulated(hf_model("llama", "llama-3.1-8b-instruct"), max_model_len=8192)  # the demo entry: no template
    assert dep.plan["parsers"]["tool_call_parser"] == "llama3_json" and dep.plan["parsers"]["family"].startswith(
        "Llama 3"
    )
    args = command(dep)
    assert args[args.index("--tool-call-parser") + 1] == "llama3_json"


def test_a_model_without_a_known_parser_on_the_simulator_is_a_note_and_an_override_is_used_and_said() -> None:
    bare = simulated(hf_model("phi", "phi-4-mini-instruct"), max_model_len=65536)
    assert bare.plan["parsers"]["tool_call_parser"] is None and bare.plan["parsers"]["warning"] is None
    assert "set one before exporting this deployment to vLLM" in bare.plan["parsers"]["reasons"][-1]
    assert all(a["serves"] for a in bare.plan["agents"])  # the Simulator takes tools without a parser
    assert "--tool-call-parser" not in command(bare)
    chosen = simulated(
        hf_model("phi-set", "phi-4-mini-instruct"), max_model_len=8192, tool_call_parser="phi4_mini_json"
    )
    assert chosen.plan["parsers"]["tool_call_parser"] == "phi4_mini_json" and chosen.plan["parsers"]["warning"] is None
    assert "The admin set the tool-call parser to phi4_mini_json" in chosen.plan["parsers"]["reasons"][-1]
    args = command(chosen)
    assert args[args.index("--tool-call-parser") + 1] == "phi4_mini_json"


@pytest.mark.parametrize(
    ("engine", "field", "name", "ships"),
    [  # an other engine's spelling of a parser each ships (its own spelling in the list)
        ("simulator", "tool_call_parser", "llama3", ("vLLM 0.32.0 has no tool-call parser 'llama3'", "llama3_json")),
        ("vllm-cpu", "reasoning_parser", "deepseek-r1", ("vLLM 0.32.0 has no reasoning parser", "deepseek_r1")),
        ("sglang-cpu", "tool_call_parser", "llama3_json", ("SGLang 0.5.15.post1 has no tool-call parser", "llama3")),
    ],
)
def test_an_override_the_engine_does_not_ship_is_refused_naming_those_it_does(
    engine: str, field: str, name: str, ships: tuple[str, str]
) -> None:
    model, override = hf_model("llama-x", "llama-3.1-8b-instruct"), {field: name}
    with pytest.raises(ConsoleError) as refused:
        admin_actions.create_deployment(name="x", model=model, engine=engine, max_model_len=2048, **override)
    said, listed = str(refused.value).split("; it ships ")
    assert said.startswith(ships[0]) and ships[1] in listed.split(", ")
    assert not Deployment.objects.filter(name="x").exists()


def test_none_turns_a_chosen_parser_off_and_a_bad_name_is_refused_before_anything_is_saved() -> None:
    dep = simulated(hf_model("qwen-off", "qwen3-8b"), max_model_len=32768, reasoning_parser="none")
    assert dep.plan["parsers"]["reasoning_parser"] is None and "--reasoning-parser" not in command(dep)
    with pytest.raises(ConsoleError, match="not a parser name"):
        simulated(hf_model("qwen-bad", "qwen3-8b"), max_model_len=32768, tool_call_parser="--api-key x")
    assert not Deployment.objects.filter(name="qwen-bad").exists()


def test_the_plan_says_which_agents_a_context_serves_and_what_fitting_max_tokens_changes() -> None:
    short = simulated(hf_model("short", "qwen3-8b"), max_model_len=8192)
    assert {a["name"]: a["serves"] for a in short.plan["agents"]} == {"Claude Code": False, "Codex": False}
    mid = simulated(hf_model("mid", "qwen3-8b"), max_model_len=32768, fit_max_tokens=False)
    claude = next(a for a in mid.plan["agents"] if a["name"] == "Claude Code")
    assert not claude["serves"] and "fit max_tokens to the context left" in claude["reason"]
    fitted = simulated(hf_model("fitted", "qwen3-8b"), max_model_len=32768)  # fitting is on by default
    assert all(a["serves"] for a in fitted.plan["agents"])


def test_fit_max_tokens_reaches_the_gateways_route_and_a_change_keeps_the_overrides() -> None:
    dep = simulated(hf_model("route", "qwen3-8b"), max_model_len=32768, fit_max_tokens=True, reasoning_parser="none")
    Deployment.objects.filter(pk=dep.pk).update(state="ready")
    Replica.objects.create(
        deployment=dep,
        runtime="process",
        host="127.0.0.1",
        port=9,
        engine_api_key="k",
        running=True,
        ready_at=dep.created_at,
    )
    assert load_snapshot().routes["route"].fit_max_tokens
    dep.refresh_from_db()
    preview = changes.preview_change(dep, **changes.current_settings(dep) | {"max_num_seqs": 64})
    assert preview.plan.parsers is not None and preview.plan.parsers.reasoning_parser is None
    assert all(a.serves for a in preview.plan.agents) and len(preview.plan.agents) == 2


def test_the_console_shows_the_parsers_the_warning_and_the_agents_before_anything_launches(admin: Client) -> None:
    model = hf_model("page", "llama-3.1-8b-instruct")
    html = admin.post(
        "/deployments/plan/", {"name": "page", "model": model.pk, "engine": "simulator", "max_model_len": 8192}
    ).content.decode()
    assert 'data-field="parser-warning"' not in html and "Claude Code: not served." in html  # llama3_json chosen
    verdict = 'data-field="agent-verdict">No coding agent is served: Claude Code&#x27;s first request needs about'
    assert verdict in html and "more than the 8,192 this plan has; a max_model_len of" in html
    resp = admin.post(
        "/api/deployments",
        {
            "name": "page",
            "model": "page",
            "engine": "simulator",
            "max_model_len": 65536,
            "tool_call_parser": "llama3_json",
            "fit_max_tokens": True,
        },
        content_type="application/json",
    )
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert body["tool_call_parser"] == "llama3_json" and body["fit_max_tokens"] is True
    assert body["plan"]["parsers"]["tool_call_parser"] == "llama3_json"
    page = admin.get(f"/deployments/{body['id']}/").content.decode()
    assert 'data-field="tool_call_parser">llama3_json<' in page and "Claude Code: served." in page
    assert '<p class="ok" data-field="agent-verdict">Claude Code and Codex are served.</p>' in page


def test_without_a_tool_call_parser_a_real_engine_serves_no_agent_and_the_simulator_still_does() -> None:
    model = hf_model("no-parser", "phi-4-mini-instruct")
    on_vllm = plan_for(model, "vllm-cpu", max_model_len=65536, kv_space_gib=16, fit_max_tokens=True)
    assert on_vllm.parsers is not None and on_vllm.parsers.warning is not None
    assert "this engine refuses every request that carries tools" in on_vllm.parsers.warning
    assert on_vllm.agents and not any(a.serves for a in on_vllm.agents)
    assert all("refuses without a tool-call parser" in a.reason for a in on_vllm.agents)
    verdict = on_vllm.agents_verdict
    assert verdict and not verdict.ok and verdict.sentence.startswith("No coding agent is served: without a tool-call")
    on_sim = plan_for(model, "simulator", max_model_len=65536, fit_max_tokens=True)
    assert on_sim.agents and all(a.serves for a in on_sim.agents)  # it answers tools with no parser (its agent mode)
    assert on_sim.parsers is not None and on_sim.parsers.warning is None  # nothing orange above a served verdict
    assert on_sim.agents_verdict and on_sim.agents_verdict.ok
    with_parser = plan_for(
        model, "vllm-cpu", max_model_len=65536, kv_space_gib=16, fit_max_tokens=True, tool_call_parser="phi4_mini_json"
    )
    assert with_parser.parsers is not None and with_parser.parsers.warning is None
    assert with_parser.agents and all(a.serves for a in with_parser.agents)


def test_a_plan_that_does_not_fit_serves_no_agent_whatever_its_context(admin: Client) -> None:
    model = hf_model("huge", "llama-3.1-8b-instruct")
    html = admin.post(
        "/deployments/plan/", {"name": "huge", "model": model.pk, "engine": "simulator", "max_model_len": 99_999_999}
    ).content.decode()
    assert "Does not fit" in html or "does not fit" in html
    assert 'data-field="agent-verdict">No coding agent is served: the plan does not fit (above).' in html
    assert "Claude Code: served." not in html and 'data-field="agents"' not in html
