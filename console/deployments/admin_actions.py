"""What an admin asks of a deployment: create it (with its plan), launch, stop, delete. The work on engines
is handed to Celery after the transaction commits (console.deployments.dispatch); errors a user can fix
raise ConsoleError."""

from django.db import IntegrityError, transaction
from django.db.models import Q

from console.audit.recording import record
from console.catalog.models import ModelSource
from console.deployments import dispatch, external
from console.deployments.engine_flags import check_extra_args
from console.deployments.models import ACTIVE_STATES, Deployment, DeploymentState, Replica
from console.deployments.planning import MAX_REPLICAS, demo_refusal, plan_for
from console.errors import ConsoleError
from console.fanout import bump_routing_version
from console.names import INT_MAX, SERVED_NAME, check_name
from engines.external import EXTERNAL_ENGINE
from engines.launch import EngineKind


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
    fit_max_tokens: bool = False,
) -> Deployment:
    """Create a stopped deployment with its plan; launch it with ``launch``. ``tool_call_parser`` and
    ``reasoning_parser`` override the plan's choice ("none": off); ``fit_max_tokens`` lowers an output limit
    over the context left instead of refusing the request.

    Raises ConsoleError when the plan does not fit (with what would), the replicas do not fit the
    GPUs or the host's memory, a name is taken, or a demo catalog model (no weights) is asked of an engine
    other than the simulator.
    """
    if not 1 <= replica_count <= MAX_REPLICAS:
        raise ConsoleError(f"A deployment runs 1 to {MAX_REPLICAS} replicas.")
    if max_tokens_cap is not None and not 1 <= max_tokens_cap <= INT_MAX:
        raise ConsoleError(f"The max_tokens cap must be from 1 to {INT_MAX:,} tokens (or empty for none).")
    name = check_name(name, "Deployment name")
    served = check_name(served_model_name or name, "Served model name", SERVED_NAME)
    if model.kind == ModelSource.Kind.DEMO and engine != EngineKind.SIMULATOR:
        raise ConsoleError(demo_refusal(model))
    check_extra_args(extra_args or [])
    plan = plan_for(
        model,
        engine,
        max_model_len=max_model_len,
        kv_space_gib=kv_space_gib,
        kv_cache_dtype=kv_cache_dtype,
        gpu_memory_utilization=gpu_memory_utilization,
        tensor_parallel_size=tensor_parallel_size,
        replica_count=replica_count,
        max_num_seqs=max_num_seqs,
        tool_call_parser=tool_call_parser,
        reasoning_parser=reasoning_parser,
        fit_max_tokens=fit_max_tokens,
    )
    if not plan["fits"]:
        raise ConsoleError(" ".join([plan["reasons"][-1], *plan["remedies"]]))
    try:
        with transaction.atomic():
            dep = Deployment.objects.create(
                name=name,
                model=model,
                engine=engine,
                served_model_name=served,
                max_model_len=plan["max_model_len"],
                kv_space_gib=kv_space_gib,
                extra_args=extra_args or [],
                plan=plan,
                replica_count=replica_count,
                max_tokens_cap=max_tokens_cap,
                fit_max_tokens=fit_max_tokens,
                tool_call_parser=tool_call_parser.strip(),
                reasoning_parser=reasoning_parser.strip(),
                state=DeploymentState.STOPPED,
            )
            record(None, "deployment.create", dep, {
                "model": model.name, "engine": engine, "served_model_name": served, "replica_count": replica_count,
                "max_model_len": dep.max_model_len, "extra_args": dep.extra_args, "max_tokens_cap": max_tokens_cap,
            })  # fmt: skip
            return dep
    except IntegrityError:
        raise ConsoleError("A deployment with that name or served model name already exists.") from None


def launch(deployment: Deployment) -> None:
    """Move a stopped or failed deployment to pending and enqueue its launch after commit.

    Raises ConsoleError when it is already active, or made of engines Hearth did not launch.
    """
    external.refused(deployment, "launch")
    with transaction.atomic():
        before = deployment.state
        if not deployment.move(DeploymentState.PENDING, "Waiting for a worker."):
            then = "wait until it has stopped" if deployment.state == DeploymentState.STOPPING else "stop it first"
            raise ConsoleError(f"{deployment.name} is {deployment.state}; {then}, then launch it again.")
        record(None, "deployment.launch", deployment, {"state": [before, DeploymentState.PENDING]})
        transaction.on_commit(lambda: dispatch.send(dispatch.LAUNCH, deployment.pk))


def stop(deployment: Deployment) -> None:
    """Move an active deployment to stopping and enqueue the stop after commit.

    Raises ConsoleError when it is not running, or made of engines Hearth did not launch.
    """
    external.refused(deployment, "stop")
    with transaction.atomic():
        before = deployment.state
        if deployment.state not in ACTIVE_STATES or not deployment.move(DeploymentState.STOPPING):
            raise ConsoleError(f"{deployment.name} is {deployment.state}; there is nothing to stop.")
        record(None, "deployment.stop", deployment, {"state": [before, DeploymentState.STOPPING]})
        transaction.on_commit(bump_routing_version)
        transaction.on_commit(lambda: dispatch.send(dispatch.STOP, deployment.pk))


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
