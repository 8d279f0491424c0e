"""API keys: issued with their limits (shown once, stored hashed: console.access.key_format) and revoked.

Every change bumps the routing version, so each gateway process sees it on its next request.
"""

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from console.access.key_format import new_key
from console.access.models import ApiKey
from console.errors import ConsoleError
from console.fanout import bump_routing_version
from console.names import INT_MAX, SERVED_NAME, check_name

QUOTA_FIELDS = ("requests_per_minute", "tokens_per_minute", "tokens_per_day", "max_concurrent")
LIMIT_MAX = {"expires_in_days": 36_500}


def create_key(
    name: str,
    user: Any,
    *,
    allowed_models: list[str] | None = None,
    max_tokens_cap: int | None = None,
    expires_in_days: int | None = None,
    **quota: int | None,
) -> tuple[ApiKey, str]:
    """A new API key; returns (row, key). The key is in no row and no log: show it once.

    ``allowed_models`` (served model names; empty: all), ``max_tokens_cap`` (tokens per request),
    ``expires_in_days`` and the quotas in QUOTA_FIELDS (None: unlimited) limit it. Raises ConsoleError
    for a bad name or limit.
    """
    name = name.strip()
    if not name or len(name) > 100 or not name.isprintable():
        raise ConsoleError("Give the key a name of 1–100 printable characters (who or what will use it).")
    if unknown := set(quota) - set(QUOTA_FIELDS):
        raise ConsoleError(f"Unknown key limit(s): {', '.join(sorted(unknown))}.")
    limits = {"max_tokens_cap": max_tokens_cap, "expires_in_days": expires_in_days, **quota}
    if bad := [k for k, v in limits.items() if v is not None and not 1 <= v <= LIMIT_MAX.get(k, INT_MAX)]:
        raise ConsoleError(
            f"{', '.join(bad)} must be from 1 to {LIMIT_MAX.get(bad[0], INT_MAX):,} (or empty for no limit)."
        )
    models = sorted({check_name(m, "Allowed model", SERVED_NAME) for m in allowed_models or []})
    expires = timezone.now() + timedelta(days=expires_in_days) if expires_in_days else None
    key, prefix, digest = new_key()
    with transaction.atomic():
        row = ApiKey.objects.create(
            name=name, prefix=prefix, key_hash=digest, created_by=user, allowed_models=models,
            max_tokens_cap=max_tokens_cap, expires_at=expires, **quota,
        )  # fmt: skip
        transaction.on_commit(bump_routing_version)
    return row, key


def revoke_key(key: ApiKey) -> None:
    """Revoke at once: every gateway process drops it on its next request."""
    with transaction.atomic():
        ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        transaction.on_commit(bump_routing_version)
