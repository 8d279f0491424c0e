"""LiteLLM's proxy as a peer gateway for ``gateway_overhead.py``, in its own venv, configured as LiteLLM documents
for an OpenAI-compatible backend (``model: openai/<name>``, ``api_base``, ``api_key``), one worker, no database.

The venv (``~/.cache/hearth/venv-litellm``, Python 3.12) is made and ``litellm[proxy]`` installed into it the
first time; later runs use it as it is. It refuses to start without a master key, so it gets a random one
(checked without a database, as Hearth checks its keys against an in-process snapshot).
"""

import os
import subprocess
from pathlib import Path

VENV = Path.home() / ".cache/hearth/venv-litellm"
PYTHON = "/root/.pyenv/versions/3.12.1/bin/python3.12"
CONFIG = """\
model_list:
  - model_name: bench
    litellm_params:
      model: openai/bench
      api_base: {api_base}
      api_key: anything
litellm_settings:
  telemetry: false
general_settings:
  master_key: {master_key}
"""


def _noise(line: str) -> bool:
    return "is ignored" in line or not line.strip()


def ensure_venv() -> str | None:
    """Make the venv and install ``litellm[proxy]`` unless its ``litellm`` command is there; None, or why not
    (nothing here raises)."""
    exe = VENV / "bin/litellm"
    if exe.exists():
        return None
    python = PYTHON if Path(PYTHON).exists() else "python3.12"
    print(f"installing litellm[proxy] into {VENV} (once; a few minutes)…", flush=True)
    try:
        if not (VENV / "bin/python").exists():
            subprocess.run([python, "-m", "venv", str(VENV)], check=True, capture_output=True, timeout=300)
        pip = subprocess.run(
            [str(VENV / "bin/pip"), "install", "-q", "litellm[proxy]"], capture_output=True, text=True, timeout=1200
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"could not make {VENV}: {exc}"
    noise = [ln for ln in (pip.stdout + pip.stderr).splitlines() if not _noise(ln)]
    if pip.returncode != 0 or not exe.exists():
        return f"pip install litellm[proxy] failed ({pip.returncode}): " + " | ".join(noise[-5:])
    return None


def version() -> str:
    meta = sorted(VENV.glob("lib/python3*/site-packages/litellm-*.dist-info"))
    return meta[-1].name.removeprefix("litellm-").removesuffix(".dist-info") if meta else "?"


def argv_env(tmp: Path, engine_port: int, port: int, master_key: str) -> tuple[list[str], dict[str, str]]:
    """The command line and a clean environment (no DATABASE_URL or REDIS_URL of the benchmark's, no network)."""
    config = tmp / "litellm.yaml"
    config.write_text(CONFIG.format(api_base=f"http://127.0.0.1:{engine_port}/v1", master_key=master_key))
    env = {k: v for k in ("PATH", "HOME", "LANG", "TERM") if (v := os.environ.get(k))}
    env.update(
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        LITELLM_TELEMETRY="False",
        LITELLM_LOG="ERROR",
        PYTHONUNBUFFERED="1",
        NO_PROXY="*",
    )
    argv = [
        str(VENV / "bin/litellm"),
        "--config",
        str(config),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        "1",
    ]
    return argv, env
