"""Engine lifecycle steps the launch, watch and stop code composes: make the image present, start (or
adopt) replicas, end one and say why it ended, and take note of a crash before the replica starts again.

Side effects (runtimes, the database) live in the console and the gateway, never in engines/.
"""

import dataclasses
import functools
import secrets
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from appliance.runtimes import Runtime, RuntimeError_, RuntimeStatus, engine_name_prefix, get_runtime
from appliance.runtimes.process import engine_port
from console.deployments.agent_support import launch_parsers
from console.deployments.models import Deployment, Replica
from console.weights.for_launch import in_weights_volume, local_model
from engines import adapters
from engines.launch import CONTAINER_ONLY_ENGINES, GPU_ENGINES, EngineKind, LaunchSpec, image_version
from engines.logscan import listen_failure, scan
from engines.planner import GpuPlan
from engines.sglang import build_sglang_cpu_spec
from engines.sglang_launcher import launcher_program
from engines.sleep_support import IdlePolicy, supports_sleep
from engines.vllm import API_SERVER_MODULE, build_simulator_spec, build_vllm_cpu_spec
from engines.vllm_flags import SLEEP_MODE_ENV

LOG_LINES = 60  # kept on the replica and shown in the console
SCAN_LINES = 2000  # read for the root cause of a failure
CONTAINER_PORT = 8000  # where engines listen inside their container (vLLM's and SGLang's default)
CONTAINER_MODELS = "/models"  # local model folders are bound read-only below this, by model name
SIGKILL_CODES = {-9, 137}
OOM_HINT_CPU = "It ran out of memory: lower the KV space or max_model_len, or give the engine more memory."
OOM_HINT_GPU = "It ran out of GPU memory; the deployment page offers the known remedy."


def image_ref(dep: Deployment) -> str:
    """The image a deployment runs as configured: the one its pin came from, else HEARTH_ENGINE_IMAGES'."""
    return dep.engine_image_ref or settings.HEARTH_ENGINE_IMAGES[dep.engine]


def configured_version(engine: str, pinned_ref: str = "") -> str:
    """The engine version a deployment of ``engine`` launches (the tag of its image, ``pinned_ref`` or the configured
    one: "v0.11.0"); "" where no image names one (the local engines, an external deployment)."""
    return image_version(pinned_ref or settings.HEARTH_ENGINE_IMAGES.get(engine, ""))


def sleep_mode(dep: Deployment) -> bool:
    """Whether ``dep`` launches with sleep mode: its idle policy is sleep and its engine's version can
    (engines.sleep_support)."""
    version = configured_version(dep.engine, dep.engine_image_ref)
    return dep.idle_policy == IdlePolicy.SLEEP and supports_sleep(dep.engine, version)


def sleep_mode_on(spec: LaunchSpec) -> bool:
    """Whether an engine started from ``spec`` can sleep: ``--enable-sleep-mode`` among its flags and its routes on."""
    dev = all(spec.env.get(name) == value for name, value in SLEEP_MODE_ENV.items())
    return "--enable-sleep-mode" in spec.args and dev


def prepare(dep: Deployment, progress: Callable[[str], None]) -> str:
    """Make the engine's image present and return it pinned by digest ("" for a local process): the
    deployment's pin when it has one (pulled again by digest if it was removed), else the configured
    image. A deployment keeps its pin until its settings change (console.deployments.changes clears it).

    Raises RuntimeError_ (a registry that refuses, Docker unreachable).
    """
    runtime = get_runtime()
    if runtime.name != "docker":
        if dep.engine in CONTAINER_ONLY_ENGINES:
            raise RuntimeError_(f"{EngineKind(dep.engine).label} runs only as a container: set HEARTH_RUNTIME=docker.")
        return ""
    probe = LaunchSpec(EngineKind(dep.engine), [], [], {}, "", 0, "", "", image=dep.engine_image or image_ref(dep))
    return runtime.prepare(probe, progress)


def converge(dep: Deployment) -> list[Replica]:
    """Make ``dep`` run its ``replica_count`` replicas: adopt the ones whose engines already run (a worker
    that died mid-launch started them), start the ones recorded but not started, create the rest.

    Raises RuntimeError_ when the runtime cannot start one (rows already started stay as they are).
    """
    runtime = get_runtime()
    live = list(dep.replicas.launched().filter(stopped_at__isnull=True).order_by("pk"))
    while len(live) < dep.replica_count:
        live.append(new_replica(dep, runtime))
    for slot, replica in enumerate(live):
        if not replica.running:
            start_replica(replica, slot, runtime)
    return live


ENGINE_KEY_PREFIX = "hek-"  # so a leaked engine key is found by its shape (tests/test_secrets_kept.py)


def new_replica(dep: Deployment, runtime: Runtime) -> Replica:
    """A new replica row of ``dep`` for ``runtime``, its address and engine key chosen, not started."""
    host = settings.HEARTH_ENGINE_HOST
    port = CONTAINER_PORT if runtime.name == "docker" else engine_port(host)
    key = ENGINE_KEY_PREFIX + secrets.token_urlsafe(24)
    replica = Replica.objects.create(deployment=dep, runtime=runtime.name, host=host, port=port, engine_api_key=key)
    replica.runtime_name = f"{engine_name_prefix()}replica-{replica.pk}"
    replica.save(update_fields=["runtime_name"])
    return replica


def start_replica(replica: Replica, slot: int, runtime: Runtime | None = None) -> None:
    """Start (or adopt) the engine of ``replica``, the ``slot``-th of its deployment. Raises RuntimeError_."""
    runtime = runtime or get_runtime(replica.runtime)
    spec = launch_spec(replica.deployment, replica, slot)
    started = runtime.start(replica.runtime_name, spec)
    replica.handle, replica.host, replica.port = started.handle, started.host, started.port
    replica.running, replica.ready_at, replica.restart_at = True, None, None
    replica.started_at, replica.sleep_mode = timezone.now(), sleep_mode_on(spec)
    fields = ["handle", "host", "port", "running", "ready_at", "restart_at", "started_at", "sleep_mode"]
    replica.save(update_fields=fields)


def restart_port(replica: Replica) -> None:
    """Choose the port of a local engine's replica again before it restarts (not saved: start_replica saves it):
    while it was down its port was free for any process to take, and an engine that cannot listen on its port
    restarts in vain. A container keeps CONTAINER_PORT on its own network."""
    if replica.runtime != "docker":
        replica.port = engine_port(replica.host)


def launch_spec(dep: Deployment, replica: Replica, slot: int = 0) -> LaunchSpec:
    """The engine's launch spec from the deployment's stored plan, for the replica's runtime.

    A local process listens on the replica's port on HEARTH_ENGINE_HOST; a container on
    CONTAINER_PORT on all of its own interfaces, with the model folder bound below /models. Every
    runtime's flags come from the engine's one builder (engines.vllm_flags, engines.sglang_flags).
    Raises RuntimeError_ for an engine the runtime cannot run, or what the builder refuses (a user
    flag Hearth owns or the engine's parser would refuse, an image too old, a plan that does not fit).
    """
    try:
        return _launch_spec(dep, replica, slot)
    except ValueError as exc:
        raise RuntimeError_(str(exc)) from None


def _launch_spec(dep: Deployment, replica: Replica, slot: int) -> LaunchSpec:
    in_container = replica.runtime == "docker"
    model = dep.source.path or dep.source.repo_id
    if not in_container:  # a Hugging Face model's weights were downloaded before (console.weights.for_launch)
        model = local_model(dep.source, dep.engine) or model
    mounts: dict[str, str] = {}
    if in_container and dep.source.path:
        model = in_weights_volume(dep.source.path) or f"{CONTAINER_MODELS}/{dep.source.name}"
        if model.startswith(CONTAINER_MODELS):  # a folder of the host's, bound; one in the weights volume is there
            mounts[dep.source.path] = model
    tool_call_parser, reasoning_parser = launch_parsers(dep)
    common = {
        "tool_call_parser": tool_call_parser,
        "reasoning_parser": reasoning_parser,
        "served_model_name": dep.served_model_name,
        "host": "0.0.0.0" if in_container else replica.host,  # noqa: S104 - the container's own network only
        "port": replica.port,
        "api_key": replica.engine_api_key,
        "user_args": dep.extra_args,
    }
    sleeps = sleep_mode(dep)
    if dep.engine == EngineKind.VLLM_CPU:
        spec = build_vllm_cpu_spec(
            program=[] if in_container else [settings.HEARTH_VLLM_CPU_PYTHON, "-m", API_SERVER_MODULE],
            model=model,
            plan=dep.stored_plan.as_cpu(),
            cache_dir=Path("/root/.cache") if in_container else settings.HEARTH_CACHE_DIR,
            **common,
        )
    elif dep.engine == EngineKind.SGLANG_CPU:
        if in_container:
            raise RuntimeError_("SGLang (CPU) runs only as a local process: set HEARTH_RUNTIME=process.")
        spec = build_sglang_cpu_spec(
            program=launcher_program(settings.HEARTH_SGLANG_CPU_PYTHON),
            model=model,
            plan=dep.stored_plan.as_cpu(),
            cache_dir=settings.HEARTH_CACHE_DIR,
            **common,
        )
    else:
        plan = dep.stored_plan.as_gpu()
        if dep.engine == EngineKind.SIMULATOR:
            program = [] if in_container else [sys.executable, "-m", "engines.simulator"]
            env = {} if in_container else {"PYTHONPATH": str(settings.BASE_DIR)}
            spec = build_simulator_spec(program=program, model=model, plan=plan, env=env, sleep_mode=sleeps, **common)
        elif in_container:
            spec = _gpu_engine_spec(dep, replica, model, plan, sleeps)
        else:
            raise RuntimeError_(f"{EngineKind(dep.engine).label} runs only as a container: set HEARTH_RUNTIME=docker.")
    env = {**spec.env, **dep.engine_env}
    if not in_container:
        return dataclasses.replace(spec, env=env)
    gpus = _slot_gpus(dep, slot) if dep.engine in CONTAINER_ONLY_ENGINES else ()  # the simulator needs none
    image = dep.engine_image or image_ref(dep)
    labels = {"hearth.deployment": str(dep.pk)}
    return dataclasses.replace(spec, env=env, image=image, mounts=mounts, gpu_indices=gpus, labels=labels)


def _gpu_engine_spec(dep: Deployment, replica: Replica, model: str, plan: GpuPlan, sleeps: bool) -> LaunchSpec:
    """vLLM's or SGLang's container spec, its command from engines.adapters for the image's version (vLLM's with
    sleep mode when ``sleeps``). Raises ValueError as adapters.vllm_args and adapters.sglang_args do (launch_spec
    makes it a RuntimeError_)."""
    tool_call_parser, reasoning_parser = launch_parsers(dep)
    vllm = functools.partial(adapters.vllm_args, sleep_mode=sleeps)
    build = vllm if dep.engine == EngineKind.VLLM else adapters.sglang_args
    built = build(
        version=image_version(image_ref(dep)),
        model=model,
        revision=dep.source.revision or None,
        served_model_name=dep.served_model_name,
        port=replica.port,
        api_key=replica.engine_api_key,
        plan=plan,
        user_args=dep.extra_args,
        tool_call_parser=tool_call_parser,
        reasoning_parser=reasoning_parser,
    )
    return LaunchSpec(
        engine=EngineKind(dep.engine),
        program=[],
        args=built.command,
        env=built.env,
        host="0.0.0.0",  # noqa: S104
        port=replica.port,
        api_key=replica.engine_api_key,
        served_model_name=dep.served_model_name,
        added_flags=built.added,
    )


def _slot_gpus(dep: Deployment, slot: int) -> tuple[int, ...]:
    """The GPU indices of a deployment's ``slot``-th replica: its share of the plan's GPUs, TP each."""
    return dep.stored_plan.replica_gpus(slot)


def _read_end(replica: Replica, status: RuntimeStatus) -> tuple[str, RuntimeStatus]:
    """Stop what is left of the engine (an engine's children can outlive it) and return its last
    log lines and final exit state. The log is read before the stop too: a container's goes with it."""
    runtime = get_runtime(replica.runtime)
    before = runtime.logs(replica.runtime_name, SCAN_LINES)
    final = runtime.stop(replica.runtime_name)
    log = runtime.logs(replica.runtime_name, SCAN_LINES) or before
    exit_code = status.exit_code if status.exit_code is not None else final.exit_code
    return log, RuntimeStatus(False, exit_code, status.oom_killed or final.oom_killed)


def _explain(dep: Deployment, exit_code: int | None, oom: bool, cause: str, when: str) -> str:
    if listen_failure(cause):  # it had not exited: Hearth stopped it (console.deployments.watching)
        return (
            f"The engine could not listen on its port ({cause}): another process holds it. Hearth stopped the "
            "engine; a new launch, or a restart, takes another port."
        )
    code = "an unknown code" if exit_code is None else f"code {exit_code}"
    reason = f"The engine exited {when} with {code}" + (f": {cause.rstrip('.')}." if cause else ".")
    if oom:
        reason += " " + (OOM_HINT_GPU if dep.engine in GPU_ENGINES else OOM_HINT_CPU)
    elif exit_code in SIGKILL_CODES:
        reason += (
            " It was killed (SIGKILL): by an admin, or by the kernel's OOM killer when the host ran out of memory."
        )
    elif exit_code is None:  # started by a worker before its last restart: no one waits for its exit
        reason += (
            " Its exit code cannot be read (a worker before this one started it); where the line above is not what "
            "ended it, it was killed: by an admin, or by the kernel's OOM killer when the host ran out of memory."
        )
    return reason


def end_replica(replica: Replica, status: RuntimeStatus, when: str) -> str:
    """End the replica for good: keep its last log lines and exit state, and say why it ended (its exit
    code and the root cause found in its log)."""
    log, final = _read_end(replica, status)
    found = scan(log)
    replica.log_tail = "".join(log.splitlines(keepends=True)[-LOG_LINES:])
    replica.running = False
    replica.exit_code = final.exit_code
    replica.oom_killed = final.oom_killed or found.oom
    replica.stopped_at = timezone.now()
    replica.save()
    return _explain(replica.deployment, replica.exit_code, replica.oom_killed, found.cause or "", when)


def note_crash(replica: Replica, status: RuntimeStatus, restart_in: float) -> str:
    """A serving replica's engine died: keep that run's log and exit state as the previous run, remove
    what is left, and set the restart for ``restart_in`` seconds from now. Returns why it ended."""
    log, final = _read_end(replica, status)
    found = scan(log)
    replica.previous_log_tail = "".join(log.splitlines(keepends=True)[-LOG_LINES:])
    replica.previous_exit_code = final.exit_code
    replica.previous_oom_killed = final.oom_killed or found.oom
    replica.log_tail = ""
    replica.running = False
    replica.ready_at = None
    replica.restarts += 1
    replica.restart_at = timezone.now() + timedelta(seconds=restart_in)
    replica.save()
    oom = replica.previous_oom_killed
    return _explain(replica.deployment, final.exit_code, oom, found.cause or "", "while serving")


def end_all(dep: Deployment) -> None:
    """End every replica of ``dep`` that is not ended yet (running, or waiting to restart); endpoints Hearth did
    not launch are left as they are."""
    for replica in dep.replicas.launched().filter(stopped_at__isnull=True):
        end_replica(replica, RuntimeStatus(running=True), "")
