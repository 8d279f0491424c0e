"""Scraping: every ready replica's /metrics, mapped to canonical names, pushed to a Redis list per
replica (newest first, METRICS_KEEP scrapes kept), and each running replica's log tail refreshed."""

import json
import logging
import time

import httpx
import redis
from django.conf import settings

from appliance.runtimes import get_runtime
from console.deployments.lifecycle import LOG_LINES
from console.deployments.models import DeploymentState, Replica
from engines.launch import EngineKind
from engines.metrics import parse_metrics

log = logging.getLogger(__name__)
S = DeploymentState
METRICS_KEEP = 720  # scrapes kept per replica (1 h at the default 5 s interval)


def metrics_key(replica_id: int) -> str:
    """The Redis list of a replica's scrapes, each ``{"time": unix seconds, "values": {name: value}}``."""
    return f"hearth:metrics:{replica_id}"


def scrape_all() -> None:
    """One scrape of every ready replica; a replica whose scrape fails is logged and skipped."""
    r = redis.Redis.from_url(settings.REDIS_URL)
    replicas = Replica.objects.filter(running=True, deployment__state__in=[S.LOADING, S.READY])
    for replica in replicas.select_related("deployment"):
        runtime = get_runtime(replica.runtime)
        replica.log_tail = runtime.logs(replica.runtime_name, LOG_LINES)
        replica.save(update_fields=["log_tail"])
        if replica.deployment.state != S.READY:
            continue
        try:
            resp = httpx.get(f"{replica.base_url}/metrics", timeout=3)
            resp.raise_for_status()
            mapping = "sglang" if replica.deployment.engine == EngineKind.SGLANG else "vllm"
            scrape = parse_metrics(resp.text, mapping, time.time())
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("scrape of replica %s failed: %s", replica.pk, exc)
            continue
        key = metrics_key(replica.pk)
        r.lpush(key, json.dumps({"time": scrape.time, "values": scrape.values}))
        r.ltrim(key, 0, METRICS_KEEP - 1)
