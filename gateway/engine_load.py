"""How loaded a deployment's engines are right now, read from each replica's own /metrics (for gateway.lanes).

The panels' history is scraped every HEARTH_SCRAPE_INTERVAL into the database: too late to release a held request as
the engine drains. gateway.lanes reads the replicas itself, a few times a second while the deployment has traffic.
Only three series are wanted, so a scrape's text is cut to their lines before it is parsed: the names come from
engines.metric_mappings' default rows (``requests_running``, ``requests_waiting``, ``kv_cache_usage`` of every
flavor: vLLM's ``vllm:num_requests_waiting``, SGLang's ``sglang:num_queue_reqs``, ...), the flavor is the one whose
names the text has (engines.metrics.choose_flavor), and engines.metrics.parse_metrics maps them. A vLLM 0.32.0
/metrics of ~40 KB is cut to a few lines, so a reading costs the gateway well under a millisecond of CPU.
"""

import asyncio
from dataclasses import dataclass

from engines.metric_mappings import DEFAULT_MAPPINGS
from engines.metrics import choose_flavor, parse_metrics
from gateway.snapshot import Upstream
from gateway.upstream import Engines
from gateway.upstream_errors import UpstreamBroken, UpstreamUnreachable

WATCHED = ("requests_running", "requests_waiting", "kv_cache_usage")
ROWS = [r for r in DEFAULT_MAPPINGS if r.canonical in WATCHED]
NAMES = tuple(sorted({r.metric.partition("{")[0] for r in ROWS}))
READ_TIMEOUT = 1.0  # seconds one /metrics may take; a replica slower than that is not read this time


@dataclass(frozen=True)
class Load:
    """One replica's engine as its /metrics said: requests running and waiting, KV-cache use (0–1; None when the
    engine exposes none)."""

    running: int
    waiting: int
    kv_usage: float | None


def parse_load(text: str) -> Load | None:
    """The Load in a /metrics text (Prometheus exposition); None when it has neither requests series."""
    lines = [line for line in text.splitlines() if line.startswith(NAMES)]
    present = {line.partition("{")[0].partition(" ")[0] for line in lines}
    flavor = choose_flavor("", "", present, ROWS)
    if not flavor:
        return None
    try:
        values = parse_metrics("\n".join(lines) + "\n", [r for r in ROWS if r.flavor == flavor], 0.0, flavor).values
    except ValueError:
        return None
    if "requests_running" not in values and "requests_waiting" not in values:
        return None
    kv = values.get("kv_cache_usage")
    return Load(int(values.get("requests_running", 0)), int(values.get("requests_waiting", 0)), kv)


class LoadReader:
    """Reads the replicas' /metrics with the gateway's own engine client (gateway.upstream: its kept-alive
    connections, httptools). It replaced an httpx client: 1–4 % of a relay process's busy samples at 64 streams
    in py-spy profiles (bench/README.md)."""

    def __init__(self, engines: Engines) -> None:
        self.engines = engines

    async def read(self, upstreams: tuple[Upstream, ...]) -> dict[int, Load]:
        """Replica id → its Load, for every replica of ``upstreams`` Hearth launched that answered in READ_TIMEOUT
        seconds with series it knows; endpoints Hearth did not launch are not read (their /metrics may need the
        address policy's judgement or serve nothing)."""
        launched = [u for u in upstreams if not u.external]
        if not launched:
            return {}
        answers = await asyncio.gather(*(self._one(u) for u in launched))
        return {u.replica_id: load for u, load in zip(launched, answers, strict=True) if load is not None}

    async def _one(self, upstream: Upstream) -> Load | None:
        try:
            async with asyncio.timeout(READ_TIMEOUT):
                async with await self.engines.get(upstream.base_url, "/metrics", upstream.engine_api_key) as answer:
                    body = await answer.read()
        except (UpstreamUnreachable, UpstreamBroken, TimeoutError):
            return None
        return parse_load(body.decode("utf-8", "replace")) if answer.status == 200 else None
