"""A key's limits, checked: in range for the database, and within the ceilings an admin set on its
owner (console.access.models.Member). The same rules serve a new key, a change of a key's limits, and
the lowering of a member's keys when their ceilings go down (``clamp``)."""

from collections.abc import Collection
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.utils import timezone

from console.access.models import ApiKey, Member
from console.access.served_models import check_served
from console.errors import ConsoleError
from console.names import INT_MAX, SERVED_NAME, check_name

INT_LIMITS = ("max_tokens_cap", "requests_per_minute", "tokens_per_minute", "tokens_per_day", "max_concurrent")
BUDGETS = ("daily_budget_usd", "monthly_budget_usd")
LIMITS = ("allowed_models", "expires_at", *INT_LIMITS, *BUDGETS)
MAX_DAYS = 36_500
BUDGET_MIN, BUDGET_MAX = Decimal("0.01"), Decimal("9999999999.99")  # the column: 12 digits, 2 after the point


class LimitError(ConsoleError):
    """A ConsoleError about one limit: ``field`` is its name as LIMITS and the JSON API spell it, e.g.
    "max_concurrent"; a message that names the limit starts with that name, e.g. "max_concurrent must be at most 4
    (the limit set for you)." ("for bob" to an admin acting for bob). A console form shows it under that field, its
    label in the name's place (console.access.forms.LimitErrors)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


class LimitsRefused(ConsoleError):
    """Several limits refused at once (``errors``, each a LimitError), so a form can show each under its field;
    its message is theirs, one after the other."""

    def __init__(self, errors: list[LimitError]) -> None:
        super().__init__(" ".join(str(e) for e in errors))
        self.errors = errors


def expiry(days: int | None) -> datetime | None:
    """The moment a key given ``days`` to live expires (None: never). Raises LimitError out of range."""
    if days is None:
        return None
    if not 1 <= days <= MAX_DAYS:
        raise LimitError(f"expires_in_days must be from 1 to {MAX_DAYS:,} (or empty for never).", "expires_in_days")
    return timezone.now() + timedelta(days=days)


def checked(limits: dict[str, Any], held: Collection[str] = ()) -> dict[str, Any]:
    """``limits`` (some of LIMITS) in range, names checked, budgets as 2-place Decimals, ``expires_at`` an
    aware datetime in the future (one without a zone is read as UTC: expiry_moment). Each allowed model is
    served by a deployment (console.access.served_models), unless it is in ``held``, the key's or member's own.

    Raises ConsoleError naming the first bad one (LimitError where it is one limit: all but integers out of range).
    """
    if unknown := set(limits) - set(LIMITS):
        raise ConsoleError(f"Unknown key limit(s): {', '.join(sorted(unknown))}.")
    out = dict(limits)
    if bad := [k for k in INT_LIMITS if out.get(k) is not None and not 1 <= out[k] <= INT_MAX]:
        raise ConsoleError(f"{', '.join(bad)} must be from 1 to {INT_MAX:,} (or empty for no limit).")
    for name in BUDGETS:
        if out.get(name) is not None:
            out[name] = budget(out[name], name)
    budgets_in_order(out.get("daily_budget_usd"), out.get("monthly_budget_usd"))
    if out.get("expires_at") is not None:
        out["expires_at"] = expiry_moment(out["expires_at"])
    if "allowed_models" in out:
        models = out["allowed_models"] or []
        try:
            out["allowed_models"] = sorted({check_name(m, "Allowed model", SERVED_NAME) for m in models})
            check_served(out["allowed_models"], held)
        except ConsoleError as exc:
            raise LimitError(str(exc), "allowed_models") from None
    return out


def budgets_in_order(daily: Decimal | None, monthly: Decimal | None) -> None:
    """Raises LimitError for a daily budget over the monthly one (USD): the monthly one would always stop spending
    first, so one of them is a slip (a trial saved daily 5, monthly 2 without a word)."""
    if daily is not None and monthly is not None and daily > monthly:
        raise LimitError(
            f"daily_budget_usd is {daily} USD, more than the monthly budget of {monthly} USD, which would stop "
            "spending first: lower the daily budget or raise the monthly one.",
            "daily_budget_usd",
        )


def expiry_moment(value: object) -> datetime:
    """``value`` (a datetime) as an aware datetime in the future. One without a time zone, as the JSON API
    gets "2030-01-01T00:00:00" or "2030-01-01", is read as UTC, as the console's form reads it and its
    pages show it; returned in UTC. Raises LimitError when it is no datetime, not after now, or more than MAX_DAYS
    days away (a new key's most)."""
    if not isinstance(value, datetime):
        raise LimitError(
            "expires_at must be a date and time, e.g. 2030-01-01T00:00:00Z (or empty for never).", "expires_at"
        )
    moment = value.replace(tzinfo=UTC) if timezone.is_naive(value) else value
    if moment <= timezone.now():
        raise LimitError("expires_at must be in the future (or empty for never).", "expires_at")
    if moment - timezone.now() > timedelta(days=MAX_DAYS):  # as a new key's days; 9999-12-31 overflows in storage
        raise LimitError(f"expires_at must be within {MAX_DAYS:,} days (or empty for never).", "expires_at")
    return moment.astimezone(UTC)


def budget(value: object, name: str) -> Decimal:
    """A USD amount from 0.01 to 9,999,999,999.99, to the cent. Raises LimitError about ``name`` otherwise, and for
    an amount finer than a cent (a trial's 0.0157 was kept as 0.02, a budget 27 % over what was asked)."""
    try:
        given = Decimal(str(value))
        amount = given.quantize(Decimal("0.01"))
    except (InvalidOperation, ValueError):
        raise LimitError(f"{name} must be an amount in USD, e.g. 25 or 12.50.", name) from None
    if not BUDGET_MIN <= amount <= BUDGET_MAX:
        raise LimitError(f"{name} must be from {BUDGET_MIN} to {BUDGET_MAX:,} USD (or empty for no budget).", name)
    if amount != given:
        raise LimitError(f"{name} is kept to the cent: {given} USD would be {amount}; give it with 2 decimals.", name)
    return amount


def within_ceilings(
    member: Member | None,
    limits: dict[str, Any],
    *,
    clamp: bool = False,
    key: ApiKey | None = None,
    whose: str = "you",
) -> dict[str, Any]:
    """``limits`` (all of LIMITS) within ``member``'s ceilings: a limit left empty gets the ceiling;
    one above it raises LimitError about it (LimitsRefused naming each, for several), or with ``clamp`` is lowered
    to it. No member (an admin's key): unchanged. An existing ``key``'s expiry may not move past its secret's age
    allowing it (``latest_expiry``). ``whose``: whom an error names, "you" (the member acting) or their name (an
    admin acting for them)."""
    if member is None:
        return limits
    out, refused = dict(limits), []
    lowered = [(name, getattr(member, name), "{:,}", False) for name in INT_LIMITS]
    lowered += [(name, getattr(member, name), "{} USD", True) for name in BUDGETS]
    if (days := member.max_key_days) is not None:
        latest, words = latest_expiry(days, key)
        lowered.append(("expires_at", latest, words, False))
    for name, ceiling, shown, keep_empty in lowered:
        try:
            out[name] = _lower(name, out[name], ceiling, clamp, shown, whose, keep_empty)
        except LimitError as exc:
            refused.append(exc)
    if member.allowed_models:
        among = "yours" if whose == "you" else f"{whose}'s"
        mine, theirs = set(out["allowed_models"]), set(member.allowed_models)
        if mine - theirs and not clamp:
            refused.append(
                LimitError(f"Allowed models must be among {among}: {', '.join(sorted(theirs))}.", "allowed_models")
            )
        out["allowed_models"] = sorted(mine & theirs or theirs)
    if len(refused) > 1:
        raise LimitsRefused(refused)
    if refused:
        raise refused[0]
    return out


def latest_expiry(days: int, key: ApiKey | None = None) -> tuple[datetime, str]:
    """The latest expiry a member's "keys expire within ``days``" allows, and how to say it: ``days`` from now for a
    new key; for an existing one, no later than ``days`` after its secret was made (created or last rotated), or
    than it expires already, so the limit cannot be renewed for ever without rotating (a fresh user's trial
    pushed a key's expiry 30 days on, again and again)."""
    now = timezone.now()
    latest = now + timedelta(days=days)
    if key is None or key.expires_at is None:
        return latest, f"{days} days away"
    born = key.rotated_at or key.created_at
    kept = max(born + timedelta(days=days), key.expires_at)
    if kept >= latest - timedelta(hours=1):  # a secret made within the hour: as good as a new key's
        return min(kept, latest), f"{days} days away"
    return kept, f"{kept:%Y-%m-%d %H:%M} UTC, {days} days after its secret was made (rotate it to renew)"


def _lower(name: str, value: Any, ceiling: Any, clamp: bool, shown: str, whose: str, keep_empty: bool) -> Any:
    if ceiling is None:
        return value
    if value is None:
        return None if keep_empty else ceiling
    if value > ceiling and not clamp:
        words = shown if "{" not in shown else shown.format(ceiling)
        raise LimitError(f"{name} must be at most {words} (the limit set for {whose}).", name)
    return min(value, ceiling)
