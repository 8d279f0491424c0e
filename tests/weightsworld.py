"""The weights tests' world (tests/test_weights_download.py, tests/test_weights_cache.py): a small Hugging Face repo
served by the stand-in hub (tests/standin_hub.py), a vLLM (CPU) deployment of it, and the launch's own code run in a
child process with HF_ENDPOINT set to the hub. The repo's config.json is SmolLM2-135M's (tests/data); its weights
file is random bytes (no engine loads them: the engine program is missing, so the launch fails at the start, after
the download).
"""

import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from django.test import Client

from console.catalog.models import ModelSource
from console.deployments import admin_actions
from console.deployments.models import Deployment
from tests.conftest import Proc
from tests.standin_hub import RepoFile, StandinHub

REPO = "hearth-test/tiny-llama"
COMMIT = "4f0e1d2c3b4a59687766554433221100ffeeddcc"
CONFIG = (Path(__file__).parent / "data" / "smollm2-135m-config.json").read_bytes()
# huggingface_hub's http_get writes what it receives 10 MiB at a time (constants.DOWNLOAD_CHUNK_SIZE; httpx2 buffers
# up to that), so a transfer cut after HOLD_AT bytes leaves one such chunk on disk.
CHUNK = 10 * 2**20
WEIGHTS = random.Random(34).randbytes(2 * CHUNK + 12_345)
HOLD_AT = CHUNK + 4_321  # bytes of the weights file sent before the stand-in hub waits


def files() -> list[RepoFile]:
    return [RepoFile("config.json", CONFIG, lfs=False), RepoFile("model.safetensors", WEIGHTS, lfs=True)]


def launch_env(live_env: dict[str, str], hub: StandinHub, tmp: Path) -> dict[str, str]:
    """The child's environment: the stand-in hub as HF_ENDPOINT, a weights cache of its own, no token, and an engine
    program that is not there (the launch fails at the engine's start, after the download under test)."""
    env = {k: v for k, v in live_env.items() if not k.startswith("HF_")}
    return {
        **env,
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(tmp / "hf-home"),  # huggingface_hub's own files (no token there)
        "HEARTH_HF_TOKEN_FILE": "",
        "HEARTH_WEIGHTS_DIR": str(tmp / "weights"),
        "HEARTH_VLLM_CPU_PYTHON": str(tmp / "no-engine" / "python"),
        "HEARTH_RUNTIME": "process",
    }


def model() -> ModelSource:
    """The stand-in repo as a model of the catalog."""
    return ModelSource.objects.create(
        name="tiny", kind="hf", repo_id=REPO, revision=COMMIT, config=json.loads(CONFIG), weights_bytes=len(WEIGHTS)
    )


def deployment(source: ModelSource | None = None, name: str = "tiny") -> int:
    """A stopped vLLM (CPU) deployment of the stand-in repo (``source``, else a new model of it), put in
    ``pending`` as the launch button does (without sending the Celery task: the test runs its body in a child
    process, or sends it)."""
    dep = admin_actions.create_deployment(name=name, model=source or model(), engine="vllm-cpu", max_model_len=2048)
    Deployment.objects.filter(pk=dep.pk).update(state="pending")
    return dep.pk


def run(env: dict[str, str], log: Path, step: str, dep_id: int) -> Proc:
    code = f"import django; django.setup(); from console.deployments import launching; launching.{step}({dep_id})"
    return Proc([sys.executable, "-c", code], env, log)


def blobs(tmp: Path) -> Path:
    return tmp / "weights" / "hub" / f"models--{REPO.replace('/', '--')}" / "blobs"


def shown_download(admin: Client, dep_id: int, proc: Proc) -> dict[str, Any]:
    """The deployment's JSON once it shows the weights file under way with bytes of it done."""
    deadline = time.monotonic() + 60
    while True:
        answer: dict[str, Any] = admin.get(f"/api/deployments/{dep_id}").json()
        shown = answer["weights_download"]
        if shown is not None and shown["done_bytes"] > len(CONFIG):
            return answer
        assert time.monotonic() < deadline and proc.proc.poll() is None, (answer, proc.output()[-3000:])
        time.sleep(0.2)


def finished(proc: Proc) -> str:
    assert proc.proc.wait(120) == 0, proc.output()[-3000:]
    return proc.output()
