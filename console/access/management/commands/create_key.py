"""``manage.py create_key NAME [--owner USERNAME] [limits]``: an API key made from a shell, for a script or a box's
first setup (``docker compose exec -T web python manage.py create_key ci``), where the JSON API needs a signed-in
session first. The key alone goes to stdout, once, so ``KEY=$(...)`` takes it; what it is goes to stderr. Made as
the console makes one (console.access.keys.create_key: within the owner's ceilings, audited as theirs)."""

from decimal import Decimal, InvalidOperation
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from console.access.keys import create_key
from console.access.models import Priority
from console.errors import ConsoleError

WHOLE = (
    ("requests_per_minute", "requests per minute"),
    ("tokens_per_minute", "tokens per minute (prompt and output)"),
    ("tokens_per_day", "tokens per UTC day"),
    ("max_concurrent", "requests at once"),
    ("max_tokens_cap", "the most output tokens one request may ask for"),
    ("expires_in_days", "days until the key expires (none: never)"),
)
USD = (("daily_budget_usd", "USD per UTC day"), ("monthly_budget_usd", "USD per UTC calendar month"))


def _usd(text: str) -> Decimal:
    try:
        return Decimal(text)
    except InvalidOperation:
        raise CommandError(f"Not an amount of USD: {text!r} (e.g. 5 or 12.50).") from None


class Command(BaseCommand):
    help = "Make an API key and print it (stdout, once); what it is goes to stderr."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="the key's name, as the keys page lists it")
        parser.add_argument("--owner", help="the username of the member who holds it (default: the only admin)")
        parser.add_argument("--models", default="", help="served model names it may use, comma-separated (all)")
        for name, what in WHOLE:
            parser.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int, help=what)
        for name, what in USD:
            parser.add_argument(f"--{name.replace('_', '-')}", dest=name, type=_usd, help=what)
        parser.add_argument(
            "--priority", default="", choices=["", *Priority.values], help="its class (default: its owner's)"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        owner = _owner(opts["owner"])
        limits = {name: opts[name] for name, _ in (*WHOLE, *USD) if name != "expires_in_days"}
        models = [m.strip() for m in opts["models"].split(",") if m.strip()]
        try:
            row, key = create_key(
                opts["name"],
                owner,
                allowed_models=models,
                expires_in_days=opts["expires_in_days"],
                priority=opts["priority"],
                **limits,
            )
        except ConsoleError as exc:
            raise CommandError(str(exc)) from None
        self.stderr.write(f"API key {row.name} ({row.prefix}…) of {owner.get_username()}; it is not shown again.")
        self.stdout.write(key)


def _owner(username: str | None) -> Any:
    """The user named ``username``, or with none the only admin. Raises CommandError naming what is wrong."""
    users = get_user_model().objects.filter(is_active=True)
    if username is not None:
        user = users.filter(username=username).first()
        if user is None:
            raise CommandError(f"No active member named {username!r}.")
        return user
    admins = list(users.filter(is_superuser=True))  # console.access.roles: superusers are the admins
    if len(admins) != 1:
        found = "no admin yet: open the console once to make one" if not admins else f"{len(admins)} admins"
        raise CommandError(f"Say whose key it is with --owner USERNAME ({found}).")
    return admins[0]
