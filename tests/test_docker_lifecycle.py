"""Engines as Docker containers, launched by a real Celery worker through a real Docker daemon.

The images are the local ones scripts/build-engine-images.sh makes (no registry is reachable here):
the engine simulator, and the real vLLM CPU engine. The session's process-runtime worker is stopped
for this module and a Docker-runtime worker takes its place (tasks go to whichever worker listens).
"""

import hashlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import httpx
import openai
import pytest
from django.conf import settings

from console.deployments.models import Deployment
from tests.conftest import ENGINE_READY_WITHIN, ROOT, Workers, login, start_worker
from tests.simworld import deploy, ensure_model, wait_state

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

# The test run's own instance (every process of it shares one: tests/conftest.py's live_env), which labels its
# containers apart from any other appliance's on this daemon and names its Celery queue in Redis
INSTANCE = settings.HEARTH_INSTANCE
NETWORK = f"hearth-{INSTANCE}"
CHECKOUT = hashlib.sha256(str(ROOT).encode()).hexdigest()[:8]  # images per checkout: others' tests keep theirs
IMAGES = {
    "HEARTH_IMAGE_SIMULATOR": f"hearth/simulator:test-{CHECKOUT}",
    "HEARTH_IMAGE_VLLM_CPU": f"hearth/vllm-cpu:test-{CHECKOUT}",
}


def containers(client: docker.DockerClient, dep_id: int | None = None) -> list[Any]:
    labels = [f"hearth.instance={INSTANCE}"] + ([f"hearth.deployment={dep_id}"] if dep_id else [])
    # ignore_removed: one the worker removes between the daemon's list and its inspect is not an error
    return list(client.containers.list(all=True, filters={"label": labels}, ignore_removed=True))


@pytest.fixture(scope="module")
def daemon() -> Iterator[docker.DockerClient]:
    """The Docker daemon (a failure, not a skip, when it is missing: .ci/run starts one) and the images."""
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(f"no Docker daemon: {exc}. .ci/run installs docker.io and starts dockerd.")
    subprocess.run(["bash", "scripts/build-engine-images.sh"], cwd=ROOT, check=True, env={**os.environ, **IMAGES})
    yield client
    for container in containers(client):
        container.remove(force=True)
    for network in client.networks.list(names=[NETWORK]):
        network.remove()


@pytest.fixture(scope="module")
def docker_env(live_env: dict[str, str]) -> dict[str, str]:
    return {
        **live_env,
        "HEARTH_RUNTIME": "docker",
        "HEARTH_DOCKER_NETWORK": NETWORK,
        "HEARTH_STALE_AFTER": "5",
        "HEARTH_RESTART_BACKOFF": "1",
        **IMAGES,
    }


@pytest.fixture(scope="module")
def docker_worker(
    daemon: docker.DockerClient, docker_env: dict[str, str], worker: Workers, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Workers]:
    """A Docker-runtime worker in place of the session's worker, which starts again afterwards."""
    worker.stop()
    proc = start_worker(docker_env, tmp_path_factory.mktemp("docker-worker"))
    yield proc
    proc.stop()
    worker.restart()


def sdk(web: str, client: httpx.Client) -> openai.OpenAI:
    key = client.post("/api/keys", json={"name": "docker"}).json()["key"]
    return openai.OpenAI(base_url=f"{web}/v1", api_key=key, max_retries=0, timeout=120)


def stop_and_check_gone(client: httpx.Client, daemon: docker.DockerClient, dep_id: int) -> None:
    client.post(f"/api/deployments/{dep_id}/stop")
    wait_state(client, dep_id, {"stopped"}, within=60)
    assert containers(daemon, dep_id) == []


def test_a_simulator_runs_as_a_container_on_an_internal_network(
    web: str, docker_worker: Workers, daemon: docker.DockerClient, admin_user: object
) -> None:
    client = login(web)
    dep_id = deploy(web, client, "boxed")
    dep = wait_state(client, dep_id, {"ready", "failed"})
    assert dep["state"] == "ready", (dep, docker_worker.output()[-3000:])
    assert dep["engine_image"].startswith("sha256:")  # pinned: a local image has its id, not a registry digest
    assert dep["engine_version"] == "0.32.0+sim"  # read back from the running engine's /version
    assert dep["gpu_model"] == "GPU 0, an NVIDIA H100 80GB HBM3 (simulated)"

    (container,) = containers(daemon, dep_id)
    assert container.name == dep["replicas"][0]["runtime_name"]
    assert container.attrs["HostConfig"]["PortBindings"] in ({}, None)  # nothing published on the host
    assert list(container.attrs["NetworkSettings"]["Networks"]) == [NETWORK]
    assert container.image.id == dep["engine_image"]
    assert "VLLM_API_KEY" in " ".join(container.attrs["Config"]["Env"])  # the engine key: env, not argv
    assert not any("--api-key" in arg for arg in container.attrs["Config"]["Cmd"])

    chunks = sdk(web, client).chat.completions.create(
        model="boxed", messages=[{"role": "user", "content": "Hello"}], max_tokens=5, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    stop_and_check_gone(client, daemon, dep_id)


def test_a_worker_killed_mid_launch_ends_with_one_ready_container(
    web: str,
    docker_worker: Workers,
    daemon: docker.DockerClient,
    admin_user: object,
) -> None:
    client = login(web)
    dep_id = deploy(web, client, "phoenix", ["--load-seconds", "15"])
    wait_state(client, dep_id, {"loading"})
    docker_worker.crash()  # mid-launch: the engine loads, the watch dies with the worker
    docker_worker.restart()
    dep = wait_state(client, dep_id, {"ready", "failed"}, within=90)
    assert dep["state"] == "ready", (dep, docker_worker.output()[-3000:])
    assert len(containers(daemon, dep_id)) == 1
    stop_and_check_gone(client, daemon, dep_id)


def test_a_killed_engine_restarts_and_keeps_the_previous_runs_log(
    web: str, docker_worker: Workers, daemon: docker.DockerClient, admin_user: object
) -> None:
    client = login(web)
    dep_id = deploy(web, client, "phoenix2")
    assert wait_state(client, dep_id, {"ready", "failed"})["state"] == "ready"
    (container,) = containers(daemon, dep_id)
    container.kill()  # SIGKILL: exit code 137
    deadline = time.monotonic() + 60
    while (
        not (replica := client.get(f"/api/deployments/{dep_id}").json()["replicas"][0])["ready"]
        or not replica["restarts"]
    ):
        assert time.monotonic() < deadline, (replica, docker_worker.output()[-3000:])
        time.sleep(0.5)
    assert replica["previous_exit_code"] == 137
    assert "Starting vLLM API server" in replica["previous_log_tail"]
    assert wait_state(client, dep_id, {"ready"})["state"] == "ready"
    (restarted,) = containers(daemon, dep_id)
    assert restarted.id != container.id
    stop_and_check_gone(client, daemon, dep_id)


def test_an_oom_at_start_fails_with_the_remedy_and_applying_it_launches_again(
    web: str, docker_worker: Workers, daemon: docker.DockerClient, admin_user: object
) -> None:
    client = login(web)
    ensure_model()
    resp = client.post(
        "/api/deployments",
        json={
            "name": "tight",
            "model": "llama-8b",
            "engine": "simulator",
            "max_model_len": 8192,
            "gpu_memory_utilization": 0.92,
            "extra_args": ["--fault-oom-above-utilization", "0.9"],
        },
    )
    assert resp.status_code == 201, resp.text
    dep_id = resp.json()["id"]
    client.post(f"/api/deployments/{dep_id}/launch")
    dep = wait_state(client, dep_id, {"ready", "failed"})
    assert dep["state"] == "failed"
    assert "CUDA out of memory" in dep["state_reason"] and dep["replicas"][0]["oom_killed"]
    changes = {c["name"]: (c["before"], c["after"]) for c in dep["remedy"]}
    assert changes["gpu_memory_utilization"] == ("0.92", "0.88")
    assert changes["PYTORCH_CUDA_ALLOC_CONF"] == ("unset", "expandable_segments:True")
    assert int(changes["max_num_seqs"][1]) == int(changes["max_num_seqs"][0]) // 2

    page = client.get(f"/deployments/{dep_id}/").text
    assert "Known remedy for running out of memory" in page and "0.92 → <strong>0.88</strong>" in page
    token = client.cookies["csrftoken"]  # the console's button, as the admin clicks it
    assert client.post(f"/deployments/{dep_id}/remedy/", data={"csrfmiddlewaretoken": token}).status_code == 302
    dep = wait_state(client, dep_id, {"ready", "failed"})
    assert dep["state"] == "ready", dep
    (container,) = containers(daemon, dep_id)
    cmd = container.attrs["Config"]["Cmd"]
    assert cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.88"
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in container.attrs["Config"]["Env"]
    assert dep["remedy"] is None
    assert client.post(f"/api/deployments/{dep_id}/remedy").status_code == 400
    stop_and_check_gone(client, daemon, dep_id)


def test_a_change_recreates_the_deployment_old_container_first(
    web: str, docker_worker: Workers, daemon: docker.DockerClient, admin_user: object
) -> None:
    client = login(web)
    dep_id = deploy(web, client, "reshaped")
    assert wait_state(client, dep_id, {"ready", "failed"})["state"] == "ready"
    (old,) = containers(daemon, dep_id)
    change = {"max_model_len": 4096, "extra_args": ["--load-seconds", "2"]}
    preview = client.post(f"/api/deployments/{dep_id}/change", json=change).json()
    assert preview["recreate"] and preview["plan"]["max_model_len"] == 4096
    assert 10 < preview["downtime_seconds"] < 60  # the stop's grace and the last load time
    assert containers(daemon, dep_id)[0].id == old.id  # a preview changes nothing

    assert client.post(f"/api/deployments/{dep_id}/change", json=change | {"confirm": True}).status_code == 202
    deadline = time.monotonic() + 60
    while True:
        now = containers(daemon, dep_id)
        assert len(now) <= 1, "the new engine started beside the old one"
        dep = client.get(f"/api/deployments/{dep_id}").json()
        if dep["state"] == "ready" and now and now[0].id != old.id:
            break
        assert time.monotonic() < deadline, dep
        time.sleep(0.1)
    (new,) = containers(daemon, dep_id)
    assert new.id != old.id
    cmd = new.attrs["Config"]["Cmd"]
    assert cmd[cmd.index("--max-model-len") + 1] == "4096" and "--load-seconds" in cmd
    stop_and_check_gone(client, daemon, dep_id)


def test_an_image_no_registry_serves_fails_the_launch_with_the_daemons_reason(
    web: str, docker_worker: Workers, daemon: docker.DockerClient, admin_user: object
) -> None:
    client = login(web)
    ensure_model()
    resp = client.post("/api/deployments", json={"name": "unpulled", "model": "llama-8b", "engine": "simulator"})
    dep_id = resp.json()["id"]
    Deployment.objects.filter(pk=dep_id).update(engine_image="hearth-test/absent:1")  # a pin whose image is gone
    client.post(f"/api/deployments/{dep_id}/launch")
    dep = wait_state(client, dep_id, {"ready", "failed"})
    assert dep["state"] == "failed"
    assert dep["state_reason"].startswith("Could not pull hearth-test/absent:1: ")
    assert dep["replicas"] == [] and containers(daemon, dep_id) == []


def test_reconcile_removes_a_container_no_replica_owns(docker_worker: Workers, daemon: docker.DockerClient) -> None:
    image = daemon.images.get(IMAGES["HEARTH_IMAGE_SIMULATOR"])
    binds = {p: {"bind": p, "mode": "ro"} for p in image.labels["hearth.host-binds"].split(",")}
    stray = daemon.containers.run(
        image.id,
        ["--port", "8000"],
        name=f"hearth-{INSTANCE}-stray",
        detach=True,
        volumes=binds,
        labels={"hearth.replica": f"hearth-{INSTANCE}-stray", "hearth.instance": INSTANCE},
    )
    other = daemon.containers.run(
        image.id,
        ["--port", "8000"],
        name=f"other-{INSTANCE}",
        detach=True,
        volumes=binds,
        labels={"hearth.replica": "hearth-xyz-replica-1", "hearth.instance": "another-appliance"},
    )
    try:
        deadline = time.monotonic() + 30
        while stray.id in {c.id for c in daemon.containers.list(all=True, sparse=True)}:
            assert time.monotonic() < deadline, docker_worker.output()[-3000:]
            time.sleep(0.5)
        assert other.id in {c.id for c in daemon.containers.list(all=True, sparse=True)}  # not ours: left alone
    finally:
        other.remove(force=True)


@pytest.mark.engine
def test_the_real_vllm_cpu_engine_in_a_container(
    web: str, docker_worker: Workers, daemon: docker.DockerClient, admin_user: object
) -> None:
    model_dir = Path(os.environ.get("HEARTH_SMOLLM2_DIR", settings.HEARTH_CACHE_DIR / "models/SmolLM2-135M-Instruct"))
    client = login(web)
    resp = client.post("/api/models", json={"name": "smol-boxed", "path": str(model_dir)})
    assert resp.status_code == 201, resp.text
    resp = client.post(
        "/api/deployments",
        json={
            "name": "smol-boxed",
            "model": "smol-boxed",
            "engine": "vllm-cpu",
            "max_model_len": 2048,
            "kv_space_gib": 1,
        },
    )
    assert resp.status_code == 201, resp.text
    dep_id = resp.json()["id"]
    client.post(f"/api/deployments/{dep_id}/launch")
    dep = wait_state(client, dep_id, {"ready", "failed"}, within=ENGINE_READY_WITHIN)
    assert dep["state"] == "ready", (dep, docker_worker.output()[-3000:])
    assert dep["engine_version"].startswith("0.32")
    (container,) = containers(daemon, dep_id)
    assert {m["Destination"]: m["RW"] for m in container.attrs["Mounts"]}["/models/smol-boxed"] is False

    stream = sdk(web, client).chat.completions.create(
        model="smol-boxed",
        messages=[{"role": "user", "content": "Say hi"}],
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    stop_and_check_gone(client, daemon, dep_id)
