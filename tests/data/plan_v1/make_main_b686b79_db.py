"""How tests/data/plan_v1/main-b686b79.sqlite3 and main-b686b79.expected.json were made: run once at commit
b686b79 (main before plans were stored with a version), from the root of a checkout of that commit
(``git worktree add --detach /tmp/plan-oldmain b686b79``), with that commit's code:

    cd /tmp/plan-oldmain && DEBUG=1 HEARTH_DATA_DIR=/tmp/plan-v1 \
        DATABASE_URL=sqlite:////tmp/plan-v1/main-b686b79.sqlite3 HEARTH_GPU_INVENTORY=sim:8xH100-80GB \
        HEARTH_SGLANG_CPU_PYTHON=/usr/bin/python3 REDIS_URL=redis://127.0.0.1:6379/4 \
        /work/main/.venv/bin/python /work/main/tests/data/plan_v1/make_main_b686b79_db.py

It builds the database through that commit's own migrations and console functions (add_local_model,
add_demo_model, create_deployment, apply_change, external.register against a simulator it starts), sets the
states and replica rows a launch, a stop and a failure would have left, and writes, per deployment, what that
commit answered: GET /api/deployments/{id} and the launch spec of each replica slot (argv, environment, GPUs).
It imports modules of that commit: kept as the record of how the files were made, not to be run again.
tests/test_migrate_plan_v1.py reads both files.
"""

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, os.getcwd())  # the checkout of b686b79, not the tree this file is kept in
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")

import django

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

call_command("migrate", verbosity=0)

from console.catalog.models import ModelSource  # noqa: E402
from console.catalog.sources import add_demo_model, add_local_model  # noqa: E402
from console.deployments import admin_actions, changes, external  # noqa: E402
from console.deployments.lifecycle import launch_spec  # noqa: E402
from console.deployments.models import Deployment, Replica  # noqa: E402
from console.deployments.planning import gpus_in_words  # noqa: E402

OUT = Path(os.environ["DATABASE_URL"].removeprefix("sqlite:///")).with_suffix(".expected.json")
DATA = Path(os.environ["HEARTH_DATA_DIR"])
HERE = Path(__file__).resolve().parent
now = timezone.now()


def smol_folder() -> Path:
    folder = DATA / "smol-checkpoint"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text((HERE.parent / "smollm2-135m-config.json").read_text())
    header = json.dumps({"w": {"dtype": "BF16", "shape": [2048], "data_offsets": [0, 4096]}}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(4096))
    return folder


def replica(dep: Deployment, port: int, *, running: bool, oom: bool = False, runtime: str = "process") -> None:
    Replica.objects.create(
        deployment=dep,
        runtime=runtime,
        runtime_name=f"hearth-plan-v1-replica-{port}",
        handle="1",
        host="127.0.0.1",
        port=port,
        engine_api_key=f"hek-plan-v1-{port}",
        running=running,
        exit_code=None if running else (137 if oom else 0),
        oom_killed=oom,
        started_at=now,
        ready_at=now if running else None,
        stopped_at=None if running else now,
    )


def ran(dep: Deployment, state: str, reason: str, **fields: object) -> None:
    """Leave ``dep`` as a launch that got to ``state`` would: its GPUs in words, its engine version."""
    gpus = gpus_in_words(dep.plan) if dep.plan.get("gpu_indices") else "CPU"
    Deployment.objects.filter(pk=dep.pk).update(state=state, state_reason=reason, gpu_model=gpus[:100], **fields)


def external_deployment() -> Deployment:
    """Registered against a simulator started for the purpose (the row keeps its URL; nothing need answer there)."""
    port = 18190
    argv = [sys.executable, "-m", "engines.simulator", "--port", str(port), "--served-model-name", "ext-chat"]
    sim = subprocess.Popen([*argv, "--max-model-len", "4096"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the simulator did not come up"
            time.sleep(0.1)
        return external.register(base_url=f"http://127.0.0.1:{port}", engine_kind="vllm", name="ext-chat")
    finally:
        sim.terminate()
        sim.wait(10)


admin = get_user_model().objects.create_superuser("admin", "", "admin-password-1")
smol = add_local_model("smol", str(smol_folder()))
llama_config = json.loads(Path("console/catalog/demo/llama-3.1-8b-instruct.json").read_text())["config"]
llama = ModelSource.objects.create(
    name="llama-8b",
    kind="hf",
    repo_id="meta-llama/Llama-3.1-8B-Instruct",
    revision="0e9e39f249a16976918f6564b8830bc894c89659",
    config=llama_config,
    weights_bytes=16_060_522_496,
)
demo = add_demo_model("llama-3.3-70b-instruct")

# The simulator on the simulated 8×H100 box: one ready on GPU 0, then two replicas at TP 2 planned around it.
sim = admin_actions.create_deployment(name="sim-8b", model=llama, engine="simulator", max_model_len=8192)
ran(sim, "ready", "Serving.", engine_version="0.32.0")
replica(sim, 18101, running=True)
tp2 = admin_actions.create_deployment(
    name="sim-tp2",
    model=llama,
    engine="simulator",
    max_model_len=16384,
    tensor_parallel_size=2,
    replica_count=2,
    max_num_seqs=64,
    kv_cache_dtype="fp8",
    extra_args=["--enable-prefix-caching"],
)
ran(tp2, "stopped", "Stopped by an admin.", engine_version="0.32.0")
for port in (18102, 18103):
    replica(tp2, port, running=False)
# vLLM in a container: planned as the simulator (vLLM is offered only where a container reaches real GPUs; the
# plan is the same GPU plan), then switched, as tests/test_docker_spec.py does; it ran out of GPU memory.
gpu = admin_actions.create_deployment(
    name="vllm-8b", model=llama, engine="simulator", max_model_len=32768, gpu_memory_utilization=0.92
)
Deployment.objects.filter(pk=gpu.pk).update(engine="vllm")
gpu.refresh_from_db()
ran(gpu, "failed", "The engine exited while loading with code 137: CUDA out of memory.")
replica(gpu, 8000, running=False, oom=True, runtime="docker")
demo_dep = admin_actions.create_deployment(name="demo-70b", model=demo, engine="simulator", max_model_len=8192)

# CPU engines: vLLM (CPU) ready; SGLang (CPU) out of host memory; one never launched, then changed.
cpu = admin_actions.create_deployment(name="smol-cpu", model=smol, engine="vllm-cpu", max_model_len=2048)
ran(cpu, "ready", "Serving.", engine_version="0.32.0")
replica(cpu, 18104, running=True)
sgl = admin_actions.create_deployment(
    name="smol-sglang", model=smol, engine="sglang-cpu", max_model_len=2048, kv_space_gib=2.0
)
ran(sgl, "failed", "The engine exited while loading with code 137. It ran out of memory.")
replica(sgl, 18105, running=False, oom=True)
new = admin_actions.create_deployment(
    name="smol-new", model=smol, engine="vllm-cpu", max_model_len=4096, tool_call_parser="none", fit_max_tokens=True
)
changes.apply_change(new, **(changes.current_settings(new) | {"max_model_len": 1024, "extra_args": ["--seed", "3"]}))
ext = external_deployment()

client = Client(HTTP_HOST="localhost")
client.force_login(admin)
expected: dict[str, object] = {}
for dep in Deployment.objects.order_by("name"):
    api = client.get(f"/api/deployments/{dep.pk}").json()
    specs = []
    if not dep.external:
        runtime = "docker" if dep.engine in ("vllm", "sglang") else "process"
        row = Replica(deployment=dep, runtime=runtime, host="127.0.0.1", port=8000, engine_api_key="hek-plan-v1")
        for slot in range(dep.replica_count):
            spec = launch_spec(dep, row, slot)
            specs.append({"args": spec.args, "env": spec.env, "gpu_indices": list(spec.gpu_indices)})
    expected[dep.name] = {"raw_plan": dep.plan, "api": api, "launch_specs": specs}
OUT.write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
print(f"{Deployment.objects.count()} deployments; expected answers in {OUT}")
