"""How the console tells every gateway process that keys or routes changed: a version number in Redis
that each gateway watches (gateway.registry reloads when it moves)."""

import redis
from django.conf import settings

ROUTING_VERSION_KEY = "hearth:routing-version"


def bump_routing_version() -> None:
    """Move the routing version, so every gateway process reloads keys and routes.

    Raises redis.RedisError when Redis cannot be reached.
    """
    redis.Redis.from_url(settings.REDIS_URL).incr(ROUTING_VERSION_KEY)
