"""A new key's secret, carried from the POST that made it to the page that shows it, once.

The POST keeps the secret in Redis for SHOWN_TTL seconds, encrypted with a random token (Fernet,
AES-128-CBC + HMAC-SHA256), under the token's SHA-256; the redirect's URL carries the token. The page
takes it with GETDEL: a reload or a second tab finds nothing, and neither Redis nor the session ever
holds the secret in a readable form. The secret is kept before the key's row is written, so a Redis
outage refuses the create rather than leaving a key nobody saw.
"""

import base64
import hashlib
import secrets

import redis
from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

from appliance.redis_keys import redis_key
from console.errors import ConsoleError

SHOWN_TTL = 120  # seconds between the POST and its redirected page
REDIS_TIMEOUT = 5.0  # seconds to connect, and for an answer: a Redis that hangs fails the page, not holds it for ever


def _client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=REDIS_TIMEOUT, socket_connect_timeout=REDIS_TIMEOUT)


def _redis_key(token: str) -> str:
    return redis_key(f"shown-key:{hashlib.sha256(token.encode()).hexdigest()}")


def keep(secret: str) -> str:
    """Keep ``secret`` for one showing; returns the token for the page's URL (43 URL-safe characters).

    Raises ConsoleError when Redis cannot be reached or does not answer within REDIS_TIMEOUT seconds.
    """
    raw = secrets.token_bytes(32)
    token = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    sealed = Fernet(base64.urlsafe_b64encode(raw)).encrypt(secret.encode())
    try:
        _client().set(_redis_key(token), sealed, ex=SHOWN_TTL)
    except redis.RedisError:
        raise ConsoleError("Redis cannot be reached, so no key was made; try again in a moment.") from None
    return token


def take(token: str) -> str | None:
    """The secret ``token`` was given for, once; None when it was taken, expired, or never existed."""
    if not 40 <= len(token) <= 50:
        return None
    try:
        sealed = _client().getdel(_redis_key(token))
        raw = base64.urlsafe_b64decode(token + "=")
    except (redis.RedisError, ValueError):
        return None
    if not isinstance(sealed, bytes):
        return None
    try:
        return Fernet(base64.urlsafe_b64encode(raw)).decrypt(sealed).decode()
    except (InvalidToken, ValueError):
        return None
