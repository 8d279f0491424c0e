"""scripts/gpu-check.sh and ``manage.py gpu_check``: the GPU inventory read through Hearth's own code and the plans
made on it. This box has no GPU: a simulated profile stands in for NVML's answer (the same Inventory), and NVML's
absence is a clear failure, not a traceback."""

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parent.parent


def gpu_check(**env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "HEARTH_GPU_INVENTORY", "SECRET_KEY"}}
    script = ROOT / "scripts/gpu-check.sh"
    return subprocess.run([str(script)], env={**base, **env}, capture_output=True, text=True, timeout=120)


def test_on_an_h200_profile_it_lists_the_gpu_and_plans_each_catalog_model() -> None:
    result = gpu_check(HEARTH_GPU_INVENTORY="sim:1xH200-141GB")
    out = result.stdout
    assert result.returncode == 0, result.stderr
    assert "Inventory: 1× NVIDIA H200 (140.4 GiB each), simulated (1xH200-141GB)" in out
    assert "GPU 0: NVIDIA H200, GPU-sim-1xH200-141GB-0, 140.4 GiB total, 0.00 GiB used by other processes" in out
    assert "llama-3.1-8b-instruct (15.0 GiB of weights): fits at tensor parallel 1 on GPU 0" in out
    # 131.4 GiB of weights on one 140.4-GiB GPU at utilization 0.9: no room for one sequence of any length
    assert (
        "llama-3.3-70b-instruct (131.4 GiB of weights): does not fit: weights, activation peak and non-torch memory "
        "take more than the 126.4 GiB vLLM may use per GPU, so nothing is left for the KV cache."
    ) in out
    assert "--- pre-flight" in out and "Traceback" not in result.stderr


def test_without_nvml_it_says_so_and_fails() -> None:
    result = gpu_check()
    assert result.returncode == 1
    assert "No GPU inventory: NVML is not available" in result.stderr and "Traceback" not in result.stderr
