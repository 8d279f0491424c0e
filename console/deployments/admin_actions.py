"""What an admin asks of a deployment: create it (with its plan), launch, stop, delete. The work on engines
is handed to Celery after the transaction commits (console.deployments.dispatch); errors a user can fix
raise ConsoleError."""

from django.db import IntegrityError, transaction
from django.db.models import Q

from console.audit.recording import record
from console.catalog.models import ModelSource
from console.deployments import dispatch, external, room_making
from console.deployments.engine_flags import check_extra_args
from console.deployments.idle_settings import check_idle_settings
from console.deployments.lifecycle import configured_version
from console.deployments.models import ACTIVE_STATES, Deployment, DeploymentState, DesiredState, Replica
from console.deployments.naming import refuse_case_clash
from console.deployments.planning import MAX_REPLICAS, demo_refusal
from console.errors import ConsoleError
from console.fanout import bump_routing_version
from console.names import INT_MAX, SERVED_NAME, check_name
from engines.external import EXTERNAL_ENGINE
from engines.launch import EngineKind
from engines.room import Verdict
from engines.sleep_support import IdlePolicy


def create_deployment(
    *,
    name: str,
    model: ModelSource,
    engine: str,
    max_model_len: int = 0,
    kv_space_gib: float = 1.0,
    served_model_name: str = "",
    extra_args: list[str] | None = None,
    kv_cache_dtype: str = "auto",
    gpu_memory_utilization: float = 0.0,
    tensor_parallel_size: int = 0,
    replica_count: int = 1,
    max_tokens_cap: int | None = None,
    max_num_seqs: int = 0,
    tool_call_parser: str = "",
    reasoning_parser: str = "",
    fit_max_tokens: bool = True,
    idle_policy: str = IdlePolicy.STAY,
    idle_minutes: int = 30,
    sleep_level: int = 1,
    always_on: bool = False,
    make_room: bool = False,
) -> Deployment:
    """Create a stopped deployment with its plan; launch it with ``launch``. ``tool_call_parser`` and
    ``reasoning_parser`` override the plan's choice ("none": off); ``fit_max_tokens`` (on unless turned off) lowers
    an output limit over the context left instead of refusing the request; the idle settings are console.deployments.
    idle_settings'.

    One that fits only if idle deployments are put aside (console.deployments.room_making) is planned on the GPUs
    that room frees, and its launch makes the room: when their idle policies allow it, or with ``make_room`` (the
    admin's consent; it is then launched at once).

    Raises ConsoleError when the plan does not fit (with what would, and what room would make it fit), the
    replicas do not fit the GPUs or the host's memory, a name is taken (in any case), a demo catalog model (no
    weights) is asked of an engine other than the simulator, or the engine cannot have the idle settings (why).
    """
    if not 1 <= replica_count <= MAX_REPLICAS:
        raise ConsoleError(f"A deployment runs 1 to {MAX_REPLICAS} replicas.")
    if max_tokens_cap is not None and not 1 <= max_tokens_cap <= INT_MAX:
        raise ConsoleError(f"The max_tokens cap must be from 1 to {INT_MAX:,} tokens (or empty for none).")
    name = check_name(name, "Deployment name")
    served = check_name(served_model_name or name, "Served model name", SERVED_NAME)
    refuse_case_clash(name, served)
    if model.kind == ModelSource.Kind.DEMO and engine != EngineKind.SIMULATOR:
        raise ConsoleError(demo_refusal(model))
    check_extra_args(extra_args or [], engine)
    idle = {
        "idle_policy": idle_policy,
        "idle_minutes": idle_minutes,
        "sleep_level": sleep_level,
        "always_on": always_on,
    }
    check_idle_settings(
        engine,
        configured_version(engine),
        idle_policy=idle_policy,
        idle_minutes=idle_minutes,
        sleep_level=sleep_level,
        always_on=always_on,
    )
    options = {
        "max_model_len": max_model_len,
        "kv_space_gib": kv_space_gib,
        "kv_cache_dtype": kv_cache_dtype,
        "gpu_memory_utilization": gpu_memory_utilization,
        "tensor_parallel_size": tensor_parallel_size,
        "replica_count": replica_count,
        "max_num_seqs": max_num_seqs,
        "tool_call_parser": tool_call_parser,
        "reasoning_parser": reasoning_parser,
        "fit_max_tokens": fit_max_tokens,
        "max_tokens_cap": max_tokens_cap,
    }
    planned = room_making.new_plan(name, model, engine, options, consent=make_room)
    plan = planned.plan
    if planned.refusal:
        raise ConsoleError(planned.refusal)
    if not plan.fits:
        raise ConsoleError(" ".join([plan.reasons[-1], *plan.remedies]))
    try:
        with transaction.atomic():
            dep = Deployment.objects.create(
                name=name,
                model=model,
                engine=engine,
                served_model_name=served,
                max_model_len=plan.max_model_len,
                kv_space_gib=kv_space_gib,
                extra_args=extra_args or [],
                plan=plan.to_json(),
                replica_count=replica_count,
                max_tokens_cap=max_tokens_cap,
                fit_max_tokens=fit_max_tokens,
                tool_call_parser=tool_call_parser.strip(),
                reasoning_parser=reasoning_parser.strip(),
                state=DeploymentState.STOPPED,
                **idle,
            )
            record(
                None,
                "deployment.create",
                dep,
                {
                    "model": model.name,
                    "engine": engine,
                    "served_model_name": served,
                    "replica_count": replica_count,
                    "max_model_len": dep.max_model_len,
                    "extra_args": dep.extra_args,
                    "max_tokens_cap": max_tokens_cap,
                    "fit_max_tokens": fit_max_tokens,
                    **idle,
                    **({"room": planned.room.words()} if planned.room else {}),
                },
            )
    except IntegrityError:
        raise ConsoleError(_clash(name, served)) from None
    if make_room and planned.room is not None:
        launch(dep, make_room=True)
    return dep


def _clash(name: str, served: str) -> str:
    """Which of a new deployment's names another deployment holds already, in words."""
    if Deployment.objects.filter(name=name).exists():
        return f"A deployment named '{name}' exists already; pick another name."
    holder = Deployment.objects.filter(served_model_name=served).values_list("name", flat=True).first()
    if holder is not None:
        return f"Deployment '{holder}' serves the model name '{served}' already; pick another served model name."
    return "A deployment with that name or served model name exists already."


def launch(deployment: Deployment, make_room: bool = False, why: str = "") -> None:
    """Move a stopped or failed deployment to pending and enqueue its launch after commit. One that does not fit the
    free GPUs waits in pending while the worker makes room (console.deployments.room_actions.launch_when_room): the
    least recently used idle deployments are put aside when their idle policies allow it, or with ``make_room`` (the
    admin's consent). ``why``: a launch no admin asked for says why, in words, in its audit entry.

    Raises ConsoleError when it is already active, made of engines Hearth did not launch, or does not fit and room
    cannot be made (or needs the consent not given): the words say what would make room; ServiceAway, nothing
    changed, when the task queue does not answer (dispatch.send_after_commit).
    """
    external.refused(deployment, "launch")
    room = None
    if deployment.state in (DeploymentState.STOPPED, DeploymentState.FAILED):
        room = room_making.room_for_launch(deployment, consent=make_room)
    if room is not None and room.verdict in (Verdict.ASK, Verdict.NONE):
        consent = " Launch it with Make room (API: make_room) to put them aside." if room.verdict == Verdict.ASK else ""
        raise ConsoleError(f"{deployment.name} does not fit the free GPUs. {room.words()}{consent}")
    with transaction.atomic():
        before = deployment.state
        reason = f"Waiting for room: {room.words()}" if room else "Waiting for a worker."
        if not deployment.move(DeploymentState.PENDING, reason, desired=DesiredState.SERVING):
            then = "wait until it has stopped" if deployment.state == DeploymentState.STOPPING else "stop it first"
            raise ConsoleError(f"{deployment.name} is {deployment.state}; {then}, then launch it again.")
        facts: dict[str, object] = {"state": [before, DeploymentState.PENDING]} | ({"reason": why} if why else {})
        if room is not None:
            facts |= {"room": room.words(), "make_room": make_room}
            dispatch.send_after_commit(dispatch.LAUNCH_WHEN_ROOM, deployment.pk, make_room)
        else:
            dispatch.send_after_commit(dispatch.LAUNCH, deployment.pk)
        record(None, "deployment.launch", deployment, facts)


def stop(deployment: Deployment) -> None:
    """Move an active deployment to stopping and enqueue the stop after commit; one stopped that a request or the
    worker would launch again (stopped with the appliance, ``relaunch_due``, or stopped to save) is kept stopped
    instead (``desired`` stopped: requests held for its wake are refused, a trial's admin could not keep one down).

    Raises ConsoleError when it is not running, or made of engines Hearth did not launch; ServiceAway, nothing
    changed, when the task queue does not answer (dispatch.send_after_commit).
    """
    external.refused(deployment, "stop")
    if deployment.relaunch_due or deployment.stopped_to_save:
        _keep_stopped(deployment)
        return
    with transaction.atomic():
        before = deployment.state
        stopping = deployment.state in ACTIVE_STATES and deployment.move(
            DeploymentState.STOPPING, desired=DesiredState.STOPPED
        )
        if not stopping:
            raise ConsoleError(f"{deployment.name} is {deployment.state}; there is nothing to stop.")
        record(None, "deployment.stop", deployment, {"state": [before, DeploymentState.STOPPING]})
        transaction.on_commit(bump_routing_version)
        dispatch.send_after_commit(dispatch.STOP, deployment.pk)


def _keep_stopped(deployment: Deployment) -> None:
    """A deployment stopped with the appliance and wanted serving, or stopped to save, stays stopped: no relaunch,
    no wake by a request (those held for one are refused once the routes reload). Raises ConsoleError when the
    worker launched it meanwhile."""
    before = deployment.desired
    with transaction.atomic():
        kept = Deployment.objects.filter(pk=deployment.pk, state=DeploymentState.STOPPED, desired=before).update(
            desired=DesiredState.STOPPED, state_reason="Stopped by the admin."
        )
        if not kept:
            raise ConsoleError(f"{deployment.name} changed state meanwhile; try again.")
        deployment.desired, deployment.state_reason = DesiredState.STOPPED, "Stopped by the admin."
        record(None, "deployment.stop", deployment, {"desired": [before, DesiredState.STOPPED]})
        transaction.on_commit(bump_routing_version)


def delete_deployment(deployment: Deployment) -> None:
    """Forget a stopped or failed deployment and its replicas' records; an external deployment whatever its
    state (unregistered: its engines run on, unrouted). Raises ConsoleError while a launched one runs."""
    ended = Q(state__in=[DeploymentState.STOPPED, DeploymentState.FAILED]) | Q(engine=EXTERNAL_ENGINE)
    with transaction.atomic():
        # Locked first: the worker's scrapes keep adding rows that refer to the deployment and its replicas
        # (samples, scrape health). Each such insert waits for this transaction and then fails on the gone
        # row, instead of landing between the delete's collection and its commit (an IntegrityError: 500).
        locked = list(Deployment.objects.select_for_update().filter(ended, pk=deployment.pk).values_list("pk"))
        list(Replica.objects.select_for_update().filter(deployment_id=deployment.pk).values_list("pk"))
        if not locked:
            todo = "wait until it has stopped" if deployment.state == DeploymentState.STOPPING else "stop it"
            raise ConsoleError(f"{deployment.name} is {deployment.state}; {todo} before deleting it.")
        Deployment.objects.filter(pk=deployment.pk).delete()
        record(None, "deployment.delete", deployment, {"name": deployment.name})
        transaction.on_commit(bump_routing_version)
