"""Scraping, every HEARTH_SCRAPE_INTERVAL (beat): each ready replica's /metrics, fetched in parallel, parsed and
mapped (engines.metrics, the mapping chosen by the engine version Hearth read back and by the names present),
stored in the history with the replica's scrape health; the request log's new rows counted into the history;
each deployment's price per token published for the gateway (console.observability.pricing); each running
replica's log tail refreshed. An endpoint Hearth did not launch is scraped with its engine key (llama.cpp guards
/metrics with it), its flavor picked by its engine kind and version; one whose kind serves no /metrics
(engines.external.NO_METRICS) is not asked, and its scrape health says why; its log is not Hearth's to read."""

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import httpx
from django.conf import settings
from django.db import IntegrityError
from django.db.models import F

from appliance.runtimes import get_runtime
from console.deployments import probing
from console.deployments.lifecycle import LOG_LINES
from console.deployments.models import ACTIVE_STATES, Deployment, DeploymentState, DesiredState, Replica
from console.observability import history, pricing, request_stats
from console.observability.mappings import mapping_rows
from console.observability.models import PriceSetting, ScrapeHealth
from engines.external import METRIC_ENGINES, NO_METRICS, ExternalKind
from engines.metric_mappings import MappingRow
from engines.metrics import Scrape, choose_flavor, parse_metrics, sample_names

log = logging.getLogger(__name__)
S = DeploymentState


def scrape_timeout() -> float:
    """Seconds a /metrics may take: under one interval (so scrapes never pile up), 1 to 3 s."""
    return max(1.0, min(3.0, settings.HEARTH_SCRAPE_INTERVAL * 0.8))


def fetch(replica: Replica) -> tuple[float, str] | Exception:
    """(time, text) of one /metrics, or the error (ValueError for a kind that serves none)."""
    if replica.external and replica.engine_kind in NO_METRICS:
        return ValueError(NO_METRICS[ExternalKind(replica.engine_kind)])
    url = f"{replica.base_url}/metrics"
    try:
        if replica.external:  # with its key, through the address policy (its host resolved and judged now)
            resp = probing.get(url, replica.engine_api_key, scrape_timeout())
        else:
            resp = httpx.get(url, timeout=scrape_timeout())
        resp.raise_for_status()
        return time.time(), resp.text
    except (httpx.HTTPError, probing.EndpointError) as exc:
        return exc


def parse(replica: Replica, text: str, at: float, rows: list[MappingRow]) -> Scrape:
    """Map one scrape with the flavor its engine and names call for. Raises ValueError for non-Prometheus text."""
    dep = replica.deployment
    if replica.external:
        engine, version = METRIC_ENGINES.get(ExternalKind(replica.engine_kind), ""), replica.engine_version
    else:
        engine, version = dep.engine, dep.engine_version
    flavor = choose_flavor(engine, version, sample_names(text), rows)
    return parse_metrics(text, [r for r in rows if r.flavor == flavor], at, flavor)


def scrape_all() -> int:
    """One scrape of every ready replica; returns how many answered. A failed scrape is recorded on the
    replica's ScrapeHealth (the panels flag it) and stores no sample."""
    history.check_bounds_cache()
    replicas = list(
        Replica.objects.filter(running=True, deployment__state__in=[S.LOADING, S.READY]).select_related("deployment")
    )
    for replica in (r for r in replicas if not r.external):
        logs = get_runtime(replica.runtime).logs(replica.runtime_name, LOG_LINES)
        Replica.objects.filter(pk=replica.pk).update(log_tail=logs)  # none when deleted meanwhile
    ready = [r for r in replicas if r.deployment.state == S.READY and (r.up or not r.external)]
    rows = mapping_rows()
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(ready)))) as pool:
        results = list(pool.map(fetch, ready))
    good = 0
    for replica, result in zip(ready, results, strict=True):
        try:
            good += _record(replica, result, rows)
        except IntegrityError:  # its deployment was deleted since the query above
            log.info("replica %s was deleted while scraped; its scrape is dropped", replica.pk)
    deployments = list(Deployment.objects.all())
    reachable = [d for d in deployments if d.state in ACTIVE_STATES or d.desired == DesiredState.STOPPED_IDLE]
    try:
        request_stats.record_requests([d for d in reachable if d.state == S.READY], datetime.now(UTC))
    except IntegrityError:  # the Redis cursor stays: the next scrape counts these rows without that deployment
        log.info("a deployment was deleted while its requests were counted; counted again at the next scrape")
    _publish_prices(reachable)
    priced = {d.pk for d in reachable}
    pricing.unpublish_prices([d.pk for d in deployments if d.pk not in priced])
    return good


def _record(replica: Replica, result: tuple[float, str] | Exception, rows: list[MappingRow]) -> int:
    now = datetime.now(UTC)
    health, _ = ScrapeHealth.objects.get_or_create(replica=replica)
    try:
        if isinstance(result, Exception):
            raise result
        scrape = parse(replica, result[1], result[0], rows)
    except (httpx.HTTPError, ValueError) as exc:
        log.warning("scrape of replica %s failed: %s", replica.pk, exc)
        error = str(exc)[:500] or type(exc).__name__
        ScrapeHealth.objects.filter(pk=health.pk).update(
            last_attempt_at=now, failures_in_row=F("failures_in_row") + 1, last_error=error
        )
        return 0
    history.record_scrape(replica, scrape)
    ScrapeHealth.objects.filter(pk=health.pk).update(
        last_attempt_at=now,
        last_success_at=now,
        failures_in_row=0,
        last_error="",
        series=scrape.series,
        flavor=scrape.flavor,
    )
    return 1


def _publish_prices(deployments: list[Deployment]) -> None:
    """The steady price per token (console.observability.pricing) of each deployment a request can reach: serving,
    loading, asleep or waking, or stopped to save (a request launches it again). A request held for a wake is
    priced when admitted, before the wake, and was charged nothing when only ready deployments' prices were kept."""
    prices = list(PriceSetting.objects.all())
    for dep in deployments:
        pricing.publish_price(dep, prices)
