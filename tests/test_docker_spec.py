"""What the Docker runtime asks the daemon for, and what it tells the admin while pulling (no daemon needed).

The vLLM and SGLang GPU deployments cannot run here (no GPU, no registry); their container specs are
built and checked instead: flags from engines.vllm_flags and engines.sglang_flags for the image's version,
exactly the planned GPUs per replica, the model folder bound read-only, nothing published on the host.
"""

from pathlib import Path

import pytest
from django.test import override_settings

from appliance.runtimes.base import RuntimeError_
from appliance.runtimes.docker import LABEL_HOST_BINDS, WEIGHTS_CACHE, PullProgress, container_config
from console.catalog.models import ModelSource
from console.deployments import admin_actions, planning
from console.deployments.lifecycle import launch_spec
from console.deployments.models import Deployment, Replica
from console.errors import ConsoleError
from engines.launch import EngineKind, LaunchSpec, image_version
from engines.supported import SUPPORTED_ENGINES
from tests.simworld import LLAMA_8B, ensure_model

pytestmark = pytest.mark.django_db

GPU_BOX = {"HEARTH_RUNTIME": "docker", "HEARTH_GPU_INVENTORY": "sim:8xH100-80GB"}


def spec(**changes: object) -> LaunchSpec:
    fields: dict[str, object] = {
        "engine": EngineKind.VLLM,
        "program": [],
        "args": ["--model", "/models/m"],
        "env": {"VLLM_API_KEY": "k"},
        "host": "0.0.0.0",
        "port": 8000,
        "api_key": "k",
        "served_model_name": "m",
        "image": "vllm/vllm-openai:v0.11.0",
    }
    return LaunchSpec(**(fields | changes))  # type: ignore[arg-type]


def test_the_container_gets_exactly_the_planned_gpus_and_no_host_port(tmp_path: Path) -> None:
    token = tmp_path / "hf-token"
    token.write_text("hf_secret\n")
    with override_settings(HEARTH_HF_TOKEN_FILE=str(token), HEARTH_INSTANCE="abc"):
        config = container_config(
            "hearth-abc-replica-7",
            spec(gpu_indices=(2, 3), mounts={"/srv/models/m": "/models/m"}, labels={"hearth.deployment": "4"}),
            {},
        )
    (request,) = config["device_requests"]
    assert request["DeviceIDs"] == ["2", "3"] and request["Capabilities"] == [["gpu"]]
    assert "ports" not in config and "publish_all_ports" not in config
    assert config["network"] == "hearth-engines"
    assert config["volumes"]["/srv/models/m"] == {"bind": "/models/m", "mode": "ro"}
    assert config["volumes"]["hearth-weights"] == {"bind": WEIGHTS_CACHE, "mode": "rw"}
    assert config["environment"]["HF_TOKEN"] == "hf_secret"
    assert config["labels"] == {
        "hearth.deployment": "4",
        "hearth.replica": "hearth-abc-replica-7",
        "hearth.instance": "abc",
    }
    assert config["command"] == ["--model", "/models/m"]


def test_no_gpus_planned_means_no_device_request_and_local_images_get_their_host_binds() -> None:
    config = container_config("r", spec(), {LABEL_HOST_BINDS: "/usr,/opt/venv"})
    assert "device_requests" not in config
    assert config["volumes"]["/usr"] == {"bind": "/usr", "mode": "ro"}
    assert "HF_TOKEN" not in config["environment"]


def test_pull_progress_is_told_in_bytes_and_layers_and_a_refusal_is_an_error() -> None:
    progress = PullProgress("vllm/vllm-openai:v0.11.0")
    for event in [
        {"status": "Pulling from vllm/vllm-openai", "id": "v0.11.0"},
        {"status": "Already exists", "id": "a1"},
        {"status": "Pulling fs layer", "id": "b2"},
        {"status": "Downloading", "id": "b2", "progressDetail": {"current": 1_500_000_000, "total": 6_000_000_000}},
        {"status": "Pulling fs layer", "id": "c3"},
        {"status": "Downloading", "id": "c3", "progressDetail": {"current": 500_000_000, "total": 1_000_000_000}},
    ]:
        progress.feed(event)
    assert progress.words() == "Pulling vllm/vllm-openai:v0.11.0: 1.9 of 6.5 GiB, 1 of 3 layers done."
    progress.feed({"status": "Pull complete", "id": "c3"})
    assert progress.words() == "Pulling vllm/vllm-openai:v0.11.0: 2.3 of 6.5 GiB, 2 of 3 layers done."
    refusal = "Get https://registry-1.docker.io/v2/: dial tcp: lookup registry-1.docker.io: no such host"
    with pytest.raises(RuntimeError_, match=r"Could not pull vllm/vllm-openai:v0\.11\.0: Get .*no such host"):
        progress.feed({"error": refusal})


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("vllm/vllm-openai:v0.11.0", "v0.11.0"),
        ("lmsysorg/sglang:v0.5.19-cu129", "v0.5.19"),
        ("registry:5000/vllm/vllm-openai:v0.10.2@sha256:ab12", "v0.10.2"),
        ("vllm/vllm-openai", ""),
    ],
)
def test_the_engine_version_comes_from_the_image_tag(image: str, version: str) -> None:
    assert image_version(image) == version


def gpu_deployment(engine: str, replicas: int, tp: int) -> Deployment:
    """A deployment planned on the simulated H100 box, then switched to ``engine`` (vLLM and SGLang are
    offered only where a container reaches real GPUs; their plan is the same GPU plan)."""
    ensure_model()
    model = ModelSource.objects.get(name="llama-8b")
    dep = admin_actions.create_deployment(
        name=f"d-{engine}",
        model=model,
        engine="simulator",
        max_model_len=8192,
        replica_count=replicas,
        tensor_parallel_size=tp,
        extra_args=["--enable-prefix-caching"],
    )
    Deployment.objects.filter(pk=dep.pk).update(engine=engine)
    dep.refresh_from_db()
    return dep


@pytest.mark.parametrize("engine", [EngineKind.VLLM, EngineKind.SGLANG])
def test_each_replica_of_a_gpu_engine_gets_its_own_share_of_the_planned_gpus(engine: EngineKind) -> None:
    dep = gpu_deployment(engine, replicas=2, tp=2)
    assert dep.plan["gpu_indices"] == [0, 1, 2, 3]
    replica = Replica(deployment=dep, runtime="docker", host="", port=8000, engine_api_key="key-1", runtime_name="r")
    with override_settings(**GPU_BOX):
        first, second = launch_spec(dep, replica, 0), launch_spec(dep, replica, 1)
    assert (first.gpu_indices, second.gpu_indices) == ((0, 1), (2, 3))
    assert first.image == SUPPORTED_ENGINES[engine].image  # the supported release's, by default
    assert first.labels == {"hearth.deployment": str(dep.pk)}
    assert first.args[-1] == "--enable-prefix-caching"  # the admin's flag, after Hearth's
    tp_flag = "--tensor-parallel-size" if engine == EngineKind.VLLM else "--tp-size"
    assert first.args[first.args.index(tp_flag) + 1] == "2"
    assert first.args[first.args.index("--revision") + 1] == "0e9e39f249a16976918f6564b8830bc894c89659"


def test_gpu_engines_are_offered_only_where_containers_can_reach_real_gpus() -> None:
    with override_settings(HEARTH_RUNTIME="process"):
        assert EngineKind.VLLM not in planning.available_engines()
        ensure_model()
        with pytest.raises(ConsoleError, match="not available here"):
            planning.plan_for(ModelSource.objects.get(name="llama-8b"), "vllm")
    with override_settings(HEARTH_RUNTIME="docker", HEARTH_GPU_INVENTORY="nvml"):
        assert {EngineKind.VLLM, EngineKind.SGLANG} <= set(planning.available_engines())
    with override_settings(**GPU_BOX):  # a simulated box: nothing real to give a vLLM container
        assert EngineKind.VLLM not in planning.available_engines()


def test_a_local_model_is_bound_read_only_below_models_in_the_container(tmp_path: Path) -> None:
    import json

    config = json.loads(Path(LLAMA_8B).read_text())["config"]
    model = ModelSource.objects.create(name="m8b", kind="local", path=str(tmp_path), config=config, weights_bytes=1)
    dep = admin_actions.create_deployment(name="sim-local", model=model, engine="simulator", max_model_len=8192)
    replica = Replica(deployment=dep, runtime="docker", host="", port=8000, engine_api_key="k", runtime_name="r")
    with override_settings(HEARTH_RUNTIME="docker"):
        built = launch_spec(dep, replica)
    assert built.mounts == {str(tmp_path): "/models/m8b"}
    assert built.args[built.args.index("--model") + 1] == "/models/m8b"
    assert built.program == [] and built.image == "hearth/simulator:local" and built.gpu_indices == ()
