"""The pre-flight check: each check from real inputs, ``manage.py doctor``, the console page and the API.

Docker is this machine's real daemon when /var/run/docker.sock answers (tests marked ``docker``), and an
unreachable one (DOCKER_HOST at a socket that does not exist) otherwise: the docker SDK's real error.
Disk numbers come from a real temporary folder. There is no GPU here, so NVML's readings (driver version,
compute processes) enter only as plain data handed to the pure checks.
"""

import http.client
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from django.core.management import call_command
from django.test import Client, override_settings
from django.utils import timezone

from appliance.doctor import (
    FAIL,
    GIB,
    NOT_USED,
    PASS,
    Check,
    DiskNeed,
    DockerFacts,
    container_pids,
    disk_check,
    docker_check,
    driver_check,
    find_cdi_specs,
    gpu_processes_check,
    nearest_existing,
    nvidia_runtime_check,
    read_disk,
    read_docker,
    run_checks,
    session_pids,
)
from appliance.hardware import GpuProcess, InventoryError, driver_version
from console.catalog.models import ModelSource
from console.deployments.models import Deployment, Replica
from console.preflight.disk import disk_need, weights_to_download
from tests.conftest import Workers

DOCKER_SOCK = "/var/run/docker.sock"
NAMES = [
    "Docker",
    "NVIDIA container runtime",
    "NVIDIA driver",
    "Weights cache disk",
    "GPUs free of other processes",
]
SIMULATED = "the GPU inventory is simulated (HEARTH_GPU_INVENTORY={})"
# What `nvidia-ctk cdi generate` writes (NVIDIA Container Toolkit docs, "Support for Container Device Interface").
CDI_SPEC = """---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
"""


def _daemon_version() -> str:
    """The daemon's version from a raw GET /version on its socket (not through the docker SDK)."""
    conn = http.client.HTTPConnection("localhost")
    conn.sock = socket.socket(socket.AF_UNIX)
    conn.sock.connect(DOCKER_SOCK)
    conn.request("GET", "/version")
    return str(json.loads(conn.getresponse().read())["Version"])


@pytest.fixture
def no_docker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """DOCKER_HOST at a socket nobody listens on; returns its address."""
    address = f"unix://{tmp_path}/no-docker.sock"
    monkeypatch.setenv("DOCKER_HOST", address)
    return address


# Docker


@pytest.mark.docker  # fails without a daemon: make test starts one
def test_a_reachable_daemon_passes_with_its_server_version() -> None:
    facts = read_docker()
    assert facts.error == "" and facts.version == _daemon_version()
    check = docker_check(facts, "docker")
    assert check.status == PASS and check.detail.startswith(f"Docker Engine {facts.version} (API ")
    assert check.fix == ""


def test_an_unreachable_daemon_fails_under_the_docker_runtime_with_the_fix(no_docker: str) -> None:
    facts = read_docker()
    assert "Error while fetching server API version" in facts.error  # the docker SDK's own words
    check = docker_check(facts, "docker")
    assert check.status == FAIL and not check.ok
    assert check.detail.startswith("Docker is not reachable: Error while fetching")
    assert "systemctl enable --now docker" in check.fix and "/var/run/docker.sock" in check.fix


def test_docker_is_not_used_under_the_process_runtime_and_no_failure_text_shows(no_docker: str) -> None:
    check = docker_check(read_docker(), "process")
    assert check == Check("Docker", NOT_USED, "HEARTH_RUNTIME=process runs engines as local processes")
    assert check.ok and "not reachable" not in check.detail


# NVIDIA container runtime


def test_no_nvidia_runtime_and_no_cdi_spec_fails_with_the_toolkit_fix(no_docker: str, tmp_path: Path) -> None:
    check = nvidia_runtime_check(read_docker(), find_cdi_specs([tmp_path]), "docker")
    assert check.status == FAIL and "Docker is not reachable, and no CDI spec for nvidia.com/gpu" in check.detail
    assert "nvidia-container-toolkit" in check.fix
    assert "nvidia-ctk runtime configure --runtime=docker" in check.fix


@pytest.mark.docker  # fails without a daemon: make test starts one
def test_the_real_daemon_s_runtimes_are_named_when_nvidia_is_missing() -> None:
    facts = read_docker()
    check = nvidia_runtime_check(facts, [], "docker")
    assert "runc" in facts.runtimes
    if "nvidia" in facts.runtimes:  # a GPU box with the toolkit configured
        assert check.status == PASS and check.detail.startswith('Docker runtime "nvidia"')
    else:
        assert check.status == FAIL and re.search(r"Docker's runtimes are [^,]*runc", check.detail)


def test_a_cdi_spec_for_nvidia_gpus_is_found_and_other_kinds_are_not(tmp_path: Path) -> None:
    etc, run = tmp_path / "etc-cdi", tmp_path / "run-cdi"
    etc.mkdir()
    (etc / "nvidia.yaml").write_text(CDI_SPEC)
    (etc / "amd.yaml").write_text(CDI_SPEC.replace("nvidia.com/gpu", "amd.com/gpu"))
    (etc / "notes.txt").write_text(CDI_SPEC)
    (etc / "nvidia.json").write_text(json.dumps({"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": []}))
    specs = find_cdi_specs([etc, run])  # run does not exist: skipped
    assert specs == [etc / "nvidia.json", etc / "nvidia.yaml"]
    check = nvidia_runtime_check(DockerFacts(version="28.2.2", runtimes=("runc",)), specs, "docker")
    assert check.status == PASS and check.detail == f"CDI specs {etc / 'nvidia.json'}, {etc / 'nvidia.yaml'}"


def test_the_nvidia_runtime_or_cdi_devices_in_docker_info_pass() -> None:
    # docker info's Runtimes after `nvidia-ctk runtime configure --runtime=docker`
    facts = DockerFacts(version="28.2.2", runtimes=("io.containerd.runc.v2", "nvidia", "runc"))
    check = nvidia_runtime_check(facts, [], "docker")
    assert check == Check("NVIDIA container runtime", PASS, 'Docker runtime "nvidia"')
    facts = DockerFacts(version="28.2.2", runtimes=("runc",), cdi_devices=("nvidia.com/gpu=0", "nvidia.com/gpu=all"))
    assert nvidia_runtime_check(facts, [], "docker").detail == "CDI devices nvidia.com/gpu=0, nvidia.com/gpu=all"


def test_the_nvidia_runtime_is_not_used_under_the_process_runtime_or_a_simulated_box() -> None:
    check = nvidia_runtime_check(DockerFacts(error="refused"), [], "process")
    assert check == Check("NVIDIA container runtime", NOT_USED, "HEARTH_RUNTIME=process gives no container a GPU")
    demo = nvidia_runtime_check(DockerFacts(version="28.2.2", runtimes=("runc",)), [], "docker", "sim:8xH100-80GB")
    assert demo == Check("NVIDIA container runtime", NOT_USED, SIMULATED.format("sim:8xH100-80GB"))


# NVIDIA driver


def test_without_a_driver_nvml_says_so() -> None:
    try:
        version = driver_version()
    except InventoryError as exc:
        assert str(exc).startswith("NVML is not available")
    else:  # a machine with a driver
        assert re.fullmatch(r"\d+\.\d+(\.\d+)?", version)


def test_the_driver_version_is_reported() -> None:
    assert driver_check("570.124.06", "", "auto", "docker") == Check("NVIDIA driver", PASS, "driver 570.124.06")


def test_a_missing_driver_fails_where_gpus_are_needed_and_not_on_a_cpu_box() -> None:
    error = "NVML is not available: NVML Shared Library Not Found"
    for inventory, runtime in [("auto", "docker"), ("nvml", "process")]:
        check = driver_check("", error, inventory, runtime)
        assert check.status == FAIL and error in check.detail and "nvidia-smi" in check.fix
    check = driver_check("", error, "auto", "process")
    assert check.status == NOT_USED and check.detail.startswith("engines run on CPU") and check.fix == ""


def test_a_simulated_inventory_is_said_and_not_a_failure() -> None:
    check = driver_check("", "", "sim:8xH100-80GB", "docker")
    assert check == Check("NVIDIA driver", NOT_USED, SIMULATED.format("sim:8xH100-80GB"))


# Weights cache disk


def test_the_disk_is_measured_on_the_nearest_existing_folder(tmp_path: Path) -> None:
    cache = tmp_path / "cache" / "hearth"
    assert nearest_existing(cache) == tmp_path
    check = read_disk(cache, DiskNeed(margin_gib=0))
    assert check.status == PASS and f"at {cache} (not created yet: measured on {tmp_path}); " in check.detail
    cache.mkdir(parents=True)
    assert f"GiB at {cache}; no weights to download" in read_disk(cache, DiskNeed(margin_gib=0)).detail


def test_too_little_free_disk_fails_with_the_numbers_in_gib(tmp_path: Path) -> None:
    check = read_disk(tmp_path, DiskNeed(10**6 * GIB, "huge 976562.5 GiB", 10))
    usage = shutil.disk_usage(tmp_path)
    free, total = re.match(r"([\d.]+) GiB free of ([\d.]+) GiB at ", check.detail).groups()  # type: ignore[union-attr]
    assert float(free) == pytest.approx(usage.free / GIB, abs=0.2) and float(total) == round(usage.total / GIB, 1)
    assert check.status == FAIL and check.detail.endswith(
        "; 1000010.0 GiB wanted: 1000000.0 GiB of weights to download (huge 976562.5 GiB)"
        " + 10 GiB margin (HEARTH_DOCTOR_MIN_FREE_GIB)"
    )
    assert "HEARTH_WEIGHTS_DIR" in check.fix


def test_the_disk_check_is_sized_by_the_weights_to_download_plus_the_margin() -> None:
    need = DiskNeed(141_107_412_992, "llama-70b 131.4 GiB", 10)  # Llama 3.1 70B's published checkpoint bytes
    check = disk_check(Path("/data/cache"), Path("/data/cache"), 100 * GIB, 200 * GIB, need)
    assert check.detail == (
        "100.0 GiB free of 200.0 GiB at /data/cache; 141.4 GiB wanted: 131.4 GiB of weights to download "
        "(llama-70b 131.4 GiB) + 10 GiB margin (HEARTH_DOCTOR_MIN_FREE_GIB)"
    )
    assert check.status == FAIL and check.fix.startswith("Free 41.4 GiB there, or point HEARTH_WEIGHTS_DIR")
    assert disk_check(Path("/c"), Path("/c"), 142 * GIB, 200 * GIB, need).status == PASS


def test_a_box_with_nothing_to_download_wants_only_the_margin() -> None:
    check = disk_check(Path("/c"), Path("/c"), 12 * GIB, 50 * GIB, DiskNeed(margin_gib=10))
    assert check == Check(
        "Weights cache disk",
        PASS,
        "12.0 GiB free of 50.0 GiB at /c; no weights to download, 10 GiB margin (HEARTH_DOCTOR_MIN_FREE_GIB) wanted",
    )
    assert disk_check(Path("/c"), Path("/c"), 9 * GIB, 50 * GIB, DiskNeed(margin_gib=10)).status == FAIL


# GPUs free of other processes


def test_processes_that_are_not_hearth_s_fail_with_pid_name_and_memory() -> None:
    processes = [
        GpuProcess(0, 4242, "python3", 12 * GIB + GIB // 2),
        GpuProcess(1, 777, "", None),
        GpuProcess(0, 100, "vllm", 70 * GIB),
    ]
    check = gpu_processes_check(processes, {100}, "nvml")
    assert check.status == FAIL
    assert check.detail == "GPU 0: pid 4242 python3, 12.5 GiB; GPU 1: pid 777 (name unreadable), memory unknown"
    assert "nvidia-smi" in check.fix
    ours = gpu_processes_check(processes[2:], {100}, "nvml")
    assert ours == Check("GPUs free of other processes", PASS, "no other processes (1 of Hearth's engines)")
    assert gpu_processes_check([], set(), "auto").detail == "no processes"


def test_the_process_check_is_not_used_when_simulated_or_unreadable() -> None:
    check = gpu_processes_check(None, set(), "sim:1xH200-141GB")
    assert check.status == NOT_USED and check.detail == SIMULATED.format("sim:1xH200-141GB")
    check = gpu_processes_check(None, set(), "auto", "NVML is not available: NVML Shared Library Not Found")
    assert check.status == NOT_USED
    assert check.detail == "no GPU processes to read: NVML is not available: NVML Shared Library Not Found"


@pytest.mark.process
def test_processes_in_a_process_runtime_engine_s_session_are_hearth_s(tmp_path: Path) -> None:
    engine = subprocess.Popen(
        ["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE, start_new_session=True, text=True
    )
    try:
        child = int(engine.stdout.readline())  # type: ignore[union-attr]
        (tmp_path / "hearth-replica-1.pid").write_text(str(engine.pid))
        (tmp_path / "broken.pid").write_text("not a pid")
        assert session_pids([child, os.getpid(), 2**22 + 1], tmp_path) == {child}
    finally:
        os.killpg(engine.pid, signal.SIGKILL)
        engine.wait()


@pytest.fixture
def hearth_container() -> Iterator[int]:
    """A container labelled like Hearth's engines (a skeleton image, the host's /usr bound read-only, as
    scripts/build-engine-images.sh does), running sleep; yields the host PID of that sleep."""
    client = docker.from_env()
    skeleton = io.BytesIO()
    with tarfile.open(fileobj=skeleton, mode="w") as tar:
        for name, target in [("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")]:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    image = f"hearth-test/doctor-{uuid.uuid4().hex[:8]}"
    client.api.import_image_from_data(skeleton.getvalue(), repository=image, tag="local")
    container = client.containers.run(
        f"{image}:local",
        ["/usr/bin/sleep", "60"],
        detach=True,
        labels={"hearth.replica": "doctor-test"},
        volumes={"/usr": {"bind": "/usr", "mode": "ro"}},
        network_mode="none",
    )
    try:
        container.reload()
        yield int(container.attrs["State"]["Pid"])
    finally:
        container.remove(force=True)
        client.images.remove(f"{image}:local", force=True)
        client.close()


@pytest.mark.docker  # fails without a daemon: make test starts one
def test_processes_in_hearth_s_containers_are_hearth_s(hearth_container: int) -> None:
    ours = container_pids()
    assert hearth_container in ours and os.getpid() not in ours
    processes = [GpuProcess(0, hearth_container, "sleep", GIB), GpuProcess(0, os.getpid(), "pytest", GIB)]
    check = gpu_processes_check(processes, ours, "nvml")
    assert check.status == FAIL and check.detail == f"GPU 0: pid {os.getpid()} pytest, 1.0 GiB"


def test_no_container_pids_without_docker(no_docker: str) -> None:
    assert container_pids() == set()


# The weights the deployments still download


def _deployment(name: str, model: ModelSource, engine: str, ready: bool = False) -> Deployment:
    dep = Deployment.objects.create(
        name=name,
        model=model,
        engine=engine,
        served_model_name=name,
        max_model_len=4096,
        kv_space_gib=1,
        plan={},
        state="stopped",
    )
    if ready:
        Replica.objects.create(deployment=dep, runtime="docker", host="h", port=8000, ready_at=timezone.now())
    return dep


@pytest.mark.django_db
def test_only_never_served_hugging_face_checkpoints_on_gpu_engines_count_once_each() -> None:
    def model(name: str, kind: str, size: int) -> ModelSource:
        return ModelSource.objects.create(name=name, kind=kind, config={}, weights_bytes=size, repo_id=f"org/{name}")

    big, small = model("llama-70b", "hf", 141_107_412_992), model("qwen-8b", "hf", 16_381_470_720)
    local, served = model("smol", "local", 269_030_016), model("served", "hf", 10 * GIB)
    _deployment("a", big, "vllm")
    _deployment("b", big, "sglang")  # the same checkpoint: one download
    _deployment("c", small, "simulator")  # loads no weights
    _deployment("d", local, "vllm")  # read where it is
    _deployment("e", served, "vllm", ready=True)  # in the cache already
    assert weights_to_download() == {"llama-70b": 141_107_412_992}
    need = disk_need()
    assert (need.weights_bytes, need.what, need.margin_gib) == (141_107_412_992, "llama-70b 131.4 GiB", 10.0)
    _deployment("f", small, "vllm")
    assert disk_need().what == "llama-70b 131.4 GiB, qwen-8b 15.3 GiB"


# All checks, the command


def _passing(tmp_path: Path) -> override_settings:
    return override_settings(
        HEARTH_RUNTIME="process",
        HEARTH_GPU_INVENTORY="sim:1xH200-141GB",
        HEARTH_WEIGHTS_DIR=tmp_path / "cache",
        HEARTH_DOCTOR_MIN_FREE_GIB=0,
    )


# On the demo box (process runtime, simulated GPUs) only the disk applies.
DEMO_STATUSES = [NOT_USED, NOT_USED, NOT_USED, PASS, NOT_USED]


def test_run_checks_gives_every_check_in_order(tmp_path: Path) -> None:
    with _passing(tmp_path):
        checks = run_checks()
    assert [c.name for c in checks] == NAMES and all(c.ok and c.fix == "" for c in checks)
    assert [c.status for c in checks] == DEMO_STATUSES


@pytest.mark.django_db
def test_the_command_prints_a_line_per_check_with_its_status(tmp_path: Path) -> None:
    out = io.StringIO()
    with _passing(tmp_path):
        call_command("doctor", stdout=out)  # no SystemExit: nothing failed
    lines = out.getvalue().splitlines()
    expected = [f"{status.upper()} {name}" for status, name in zip(DEMO_STATUSES, NAMES, strict=True)]
    assert [line.split(":")[0] for line in lines] == expected
    assert lines[2] == "NOT USED NVIDIA driver: " + SIMULATED.format("sim:1xH200-141GB")


@pytest.mark.django_db
def test_the_command_prints_the_fix_and_exits_1_on_a_failure(tmp_path: Path) -> None:
    out = io.StringIO()
    with _passing(tmp_path), override_settings(HEARTH_DOCTOR_MIN_FREE_GIB=1_000_000):
        with pytest.raises(SystemExit) as exit_:
            call_command("doctor", stdout=out)
    assert exit_.value.code == 1
    text = out.getvalue()
    assert re.search(r"^FAIL Weights cache disk: [\d.]+ GiB free of .*\n     fix: Free [\d.]+ GiB there", text, re.M)
    assert text.count("NOT USED ") == 4


@pytest.mark.django_db
def test_the_command_prints_json(tmp_path: Path) -> None:
    out = io.StringIO()
    with _passing(tmp_path):
        call_command("doctor", "--json", stdout=out)
    checks = json.loads(out.getvalue())
    assert [c["name"] for c in checks] == NAMES
    assert all(set(c) == {"name", "status", "ok", "detail", "fix"} and c["ok"] is True for c in checks)
    assert [c["status"] for c in checks] == DEMO_STATUSES


# The console page and the API


@pytest.mark.django_db
def test_the_page_and_the_api_need_a_login(client: Client) -> None:
    assert client.get("/doctor/")["Location"].startswith("/login/")
    assert client.get("/doctor/checks/")["Location"].startswith("/login/")
    assert client.get("/api/doctor").status_code == 401


@pytest.mark.django_db
def test_the_page_is_in_the_navigation_and_loads_the_checks(admin: Client) -> None:
    page = admin.get("/doctor/").text
    assert '<a href="/doctor/" aria-current="page">Pre-flight</a>' in page  # the navigation says where you are
    assert 'hx-get="/doctor/checks/" hx-trigger="load"' in page
    assert '<a href="/doctor/">Pre-flight</a>' in admin.get("/keys/").text


@pytest.mark.django_db
@override_settings(HEARTH_DOCTOR_WAIT=0)
def test_no_worker_answering_is_said_on_the_page_and_as_503(admin: Client) -> None:
    table = admin.get("/doctor/checks/").text
    assert "No worker answered within 0 s. Start it (docker compose up -d worker; make up again where " in table
    resp = admin.get("/api/doctor")
    assert resp.status_code == 503 and resp.json()["detail"].startswith("No worker answered within 0 s")


@pytest.mark.django_db
def test_the_worker_runs_the_checks_for_the_page_and_the_api(admin: Client, worker: Workers) -> None:
    table = admin.get("/doctor/checks/").text
    assert re.findall(r'<tr data-check="([^"]+)">', table) == NAMES
    assert f'data-field="host">{socket.gethostname()}<' in table
    # pytest-env's HEARTH_GPU_INVENTORY=sim:8xH100-80GB reaches the worker's environment
    assert SIMULATED.format("sim:8xH100-80GB") in table
    driver = re.search(r'<tr data-check="NVIDIA driver"><td data-field="status" class="muted">([^<]*)</td>', table)
    assert driver and driver[1] == "not used" and "PASS" not in table.split('data-check="Docker"')[1].split("</tr>")[0]
    body = admin.get("/api/doctor").json()
    assert set(body) == {"host", "checked_at", "ok", "checks"} and body["ok"] == all(c["ok"] for c in body["checks"])
    assert [c["name"] for c in body["checks"]] == NAMES
    assert all(set(c) == {"name", "status", "ok", "detail", "fix"} for c in body["checks"])
    assert all((c["fix"] == "") == (c["status"] != "fail") == c["ok"] for c in body["checks"])
    assert "console.preflight.tasks.run_preflight" in worker.output()
