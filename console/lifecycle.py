"""Engine lifecycle steps the Celery tasks compose: start one replica, end one and say why it ended.

Side effects (runtimes, the database) live here and in console.tasks, never in engines/.
"""

import dataclasses
import secrets
import socket
import sys
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from appliance.runtimes import RuntimeStatus, get_runtime
from console.models import Deployment, Replica
from engines.launch import GPU_ENGINES, EngineKind, LaunchSpec
from engines.logscan import scan
from engines.planner import GpuPlan
from engines.sizing import SizingPlan
from engines.vllm import build_simulator_spec, build_vllm_cpu_spec

SIZING_FIELDS = {f.name for f in dataclasses.fields(SizingPlan)}
GPU_PLAN_FIELDS = {f.name for f in dataclasses.fields(GpuPlan)}
LOG_LINES = 60  # kept on the replica and shown in the console
SCAN_LINES = 2000  # read for the root cause of a failure
SIGKILL_CODES = {-9, 137}
OOM_HINT_CPU = "It ran out of memory: lower the KV space or max_model_len, or give the engine more memory."
OOM_HINT_GPU = (
    "It ran out of GPU memory: create the deployment again with a lower gpu_memory_utilization (e.g. 0.90 → 0.85) "
    "or a shorter max_model_len."
)


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def start_replica(dep: Deployment) -> Replica:
    """Create and start one replica of ``dep`` on a free port.

    Raises appliance.runtimes.RuntimeError_ when the runtime cannot start it (the row stays, not running).
    """
    runtime = get_runtime()
    host = settings.HEARTH_ENGINE_HOST
    replica = Replica.objects.create(
        deployment=dep, runtime=runtime.name, host=host, port=_free_port(host), engine_api_key=secrets.token_urlsafe(24)
    )
    replica.runtime_name = f"hearth-replica-{replica.pk}"
    replica.save(update_fields=["runtime_name"])
    replica.handle = runtime.start(replica.runtime_name, launch_spec(dep, replica))
    replica.running = True
    replica.save(update_fields=["handle", "running"])
    return replica


def launch_spec(dep: Deployment, replica: Replica) -> LaunchSpec:
    """The engine's launch spec from the deployment's stored plan."""
    common = {
        "served_model_name": dep.served_model_name,
        "host": replica.host,
        "port": replica.port,
        "api_key": replica.engine_api_key,
        "user_args": dep.extra_args,
    }
    if dep.engine == EngineKind.SIMULATOR:
        plan = GpuPlan(**{k: v for k, v in dep.plan.items() if k in GPU_PLAN_FIELDS} | {"split": None})
        return build_simulator_spec(
            python=sys.executable, code_dir=str(settings.BASE_DIR), model_path=dep.model.path or dep.model.repo_id,
            plan=plan, **common,
        )  # fmt: skip
    return build_vllm_cpu_spec(
        python=settings.HEARTH_VLLM_CPU_PYTHON,
        model_path=Path(dep.model.path),
        plan=SizingPlan(**{k: v for k, v in dep.plan.items() if k in SIZING_FIELDS}),
        kv_space_gib=dep.kv_space_gib,
        cache_dir=settings.HEARTH_CACHE_DIR,
        **common,
    )


def end_replica(replica: Replica, status: RuntimeStatus, when: str) -> str:
    """Stop what is left of the replica (an engine's children can outlive it), keep its last log lines
    and exit state, and say why it ended: its exit code and the root cause found in its log."""
    runtime = get_runtime(replica.runtime)
    final = runtime.stop(replica.runtime_name)
    log = runtime.logs(replica.runtime_name, SCAN_LINES)
    found = scan(log)
    replica.log_tail = "".join(log.splitlines(keepends=True)[-LOG_LINES:])
    replica.running = False
    replica.exit_code = status.exit_code if status.exit_code is not None else final.exit_code
    replica.oom_killed = status.oom_killed or final.oom_killed or found.oom
    replica.stopped_at = timezone.now()
    replica.save()
    code = "an unknown code" if replica.exit_code is None else f"code {replica.exit_code}"
    reason = f"The engine exited {when} with {code}" + (f": {found.cause}" if found.cause else ".")
    if replica.oom_killed:
        reason += " " + (OOM_HINT_GPU if replica.deployment.engine in GPU_ENGINES else OOM_HINT_CPU)
    elif replica.exit_code in SIGKILL_CODES:
        reason += (
            " It was killed (SIGKILL): by an admin, or by the kernel's OOM killer when the host ran out of memory."
        )
    return reason


def end_all(dep: Deployment) -> None:
    """Stop every running replica of ``dep``."""
    for replica in dep.replicas.filter(running=True):
        end_replica(replica, RuntimeStatus(running=True), "")
