"""Requests refused before an engine was chosen, once their key authenticated: each leaves a request-log row.

README says every request is logged. A request the gateway answers itself with an error (a body that is not JSON,
a Content-Encoding it does not decode, a body over the limit, an unknown model or endpoint, a wrong base URL
(gateway.wrong_urls), a bug's 500) never reaches gateway.ledger, so it is spooled here: the key's, the model its body
named (cut to the column's length; "" when none), the endpoint as sent, its status, request ids and the error's
message, no tokens and no cost (console.observability.request_spool writes it). A request without a key that
authenticates leaves no row: there is no one to show it to; the metrics count it (gateway.accounting.count_refusal).
A request whose client left before its body was whole is logged so too, cancelled, with status 499
(gateway.request_body.CLIENT_LEFT).
"""

import logging
import time

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from console.observability.request_rows import encode
from console.observability.request_spool import spool_key
from gateway.accounting import Outcome, row_of
from gateway.request_body import CLIENT_LEFT
from gateway.request_ids import RequestIds
from gateway.snapshot import KeyEntry

log = logging.getLogger(__name__)
ENDPOINT_CHARS = 50  # RequestLog.endpoint's length
MODEL_CHARS = 200  # RequestLog.model's length


def refused(
    key: KeyEntry,
    model: str,
    surface: str,
    endpoint: str,
    status: int,
    arrived: float,
    ids: RequestIds,
    batch_id: str = "",
    error: str = "",
    stream: bool = False,
) -> Outcome:
    """The outcome of a request ``key`` sent to ``endpoint`` naming ``model``, refused with ``status`` and the
    message ``error`` its client was told; its duration runs from ``arrived`` (time.monotonic()) to now. Its class
    is the key's, or batch for a line of the Batch ``batch_id``; ``stream`` whether its body asked for a stream."""
    return Outcome(
        key.id,
        key.prefix,
        model[:MODEL_CHARS],
        surface,
        endpoint[:ENDPOINT_CHARS],
        stream,
        status=status,
        duration_seconds=time.monotonic() - arrived,
        request_id=ids.own,
        client_request_id=ids.client,
        ended_at=time.time(),
        priority="batch" if batch_id else key.priority,
        batch_id=batch_id,
        client_cancelled=status == CLIENT_LEFT,
        error=error,
    )


async def spool(redis: aioredis.Redis, outcome: Outcome) -> None:
    """Spool ``outcome``'s request-log row, without cost. Never raises: a row Redis does not take is lost, and
    logged."""
    row = row_of(outcome)
    row.pop("cost_usd")
    try:
        await redis.xadd(spool_key(), {"row": encode(row), "cost": ""})
    except (RedisError, OSError) as exc:
        log.warning(
            "the request log row of a refused request (id %s) is lost: Redis does not answer (%s)",
            outcome.request_id,
            exc,
        )
