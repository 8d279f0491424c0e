"""Forms of the access pages: sign-in, the first admin, a new API key with its limits, a change of a key's
limits, and a rotation's grace period."""

from typing import Any, ClassVar, cast

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import AuthenticationForm, PasswordChangeForm
from django.contrib.auth.models import User
from django.contrib.auth.password_validation import password_validators_help_texts, validate_password
from django.core.validators import MaxLengthValidator
from django.db.models import QuerySet

from console.access.key_limits import BUDGET_MAX, BUDGET_MIN, MAX_DAYS, LimitError, LimitsRefused
from console.access.models import PRIORITY_HELP, Member, Priority
from console.errors import ConsoleError
from console.names import INT_MAX

PRICED_ONLY = (
    "It counts what requests are charged, at their deployment's price per token; where a deployment has none (on CPU, "
    "or GPUs without a price: Costs page), requests are charged nothing and pass."
)


def usd_field(label: str, help_text: str) -> forms.DecimalField:
    """An optional USD amount, as budgets take it (to the cent, from BUDGET_MIN to BUDGET_MAX)."""
    return forms.DecimalField(
        required=False, min_value=BUDGET_MIN, max_value=BUDGET_MAX, decimal_places=2, label=label, help_text=help_text
    )


def count_field(label: str | None = None, help_text: str = "") -> forms.IntegerField:
    """An optional whole number from 1 to INT_MAX (the column's), as key limits take it."""
    return forms.IntegerField(required=False, min_value=1, max_value=INT_MAX, label=label, help_text=help_text)


INT_NAMES = ("max_tokens_cap", "requests_per_minute", "tokens_per_minute", "tokens_per_day", "max_concurrent")


class LimitErrors(forms.Form):
    """A form that shows a ConsoleError from console.access where it belongs (``add_console_error``)."""

    limit_fields: ClassVar[dict[str, str]] = {}  # a limit's field here where its name differs (key_limits.LIMITS)

    def add_console_error(self, exc: ConsoleError) -> None:
        """Show ``exc`` under the field a LimitError is about, its leading API name swapped for the field's label
        ("max_concurrent must be at most 4 …" → "Requests at once must be at most 4 …"), each of several
        (LimitsRefused) under its own; others at the top."""
        if isinstance(exc, LimitsRefused):
            for each in exc.errors:
                self.add_console_error(each)
            return
        if not isinstance(exc, LimitError) or (field := self.limit_fields.get(exc.field, exc.field)) not in self.fields:
            self.add_error(None, str(exc))
            return
        message = str(exc)
        if message.startswith(f"{exc.field} "):
            message = f"{self[field].label}{message.removeprefix(exc.field)}"
        self.add_error(field, message)


def split_models(text: str) -> list[str]:
    """Model names from a comma-separated field."""
    return [m.strip() for m in text.split(",") if m.strip()]


class ModelNamesField(forms.CharField):
    """Served model names, comma-separated; empty: every model. Text that holds no name (``,,``) is refused rather
    than read as "every model": a restriction typed wrong never widens to all."""

    def __init__(self, help_text: str) -> None:
        super().__init__(required=False, max_length=2000, help_text=help_text)

    def clean(self, value: Any) -> str:
        text = str(super().clean(value))
        if text and not split_models(text):
            raise forms.ValidationError("No model name here; leave it empty to allow every model.")
        return text


def priority_field(*, default_label: str | None, interactive: bool) -> forms.ChoiceField:
    """A class (console.access.models.Priority) to choose, with ``default_label`` for "" (None: no such choice) and
    interactive offered only where ``interactive``."""
    choices = [(value, label) for value, label in Priority.choices if interactive or value != Priority.INTERACTIVE]
    blank = [] if default_label is None else [("", default_label)]
    return forms.ChoiceField(choices=blank + choices, required=False, label="Class", help_text=PRIORITY_HELP)


class KeyLimitsFields(LimitErrors):
    """The limits a key shares between its creation and a later change, and its class. Interactive is offered only
    where ``interactive`` (an admin, or an owner an admin made interactive: console.access.keys.checked_priority)."""

    allowed_models = ModelNamesField("Served model names, comma-separated; empty: every model.")
    max_tokens_cap = count_field("max_tokens cap", "Tokens per request; empty: no cap.")
    requests_per_minute = count_field(help_text="Empty: unlimited.")
    tokens_per_minute = count_field(help_text="Prompt + completion. Empty: unlimited.")
    tokens_per_day = count_field(help_text="Prompt + completion, per UTC day. Empty: unlimited.")
    max_concurrent = count_field(
        "Requests at once",
        "Requests (streams included) open at the same time; the next is refused (429). Empty: unlimited.",
    )
    daily_budget_usd = usd_field("Daily budget (USD)", f"Per UTC day; empty: none. {PRICED_ONLY}")
    monthly_budget_usd = usd_field("Monthly budget (USD)", f"Per UTC calendar month; empty: none. {PRICED_ONLY}")

    def __init__(
        self, *args: Any, interactive: bool = False, ceilings: Member | None = None, whose: str = "your", **kwargs: Any
    ) -> None:
        """``ceilings``: the Member row whose limits bind the key's owner (console.access.keys.ceilings_for; None:
        an admin's key), said in each field's help as ``whose`` limit ("your", "its owner's"): a field left empty
        takes it."""
        super().__init__(*args, **kwargs)
        self.fields["priority"] = priority_field(default_label="the owner's default", interactive=interactive)
        if ceilings is not None:
            self._say_ceilings(ceilings, whose)

    def _say_ceilings(self, ceilings: Member, whose: str) -> None:
        for name in INT_NAMES:
            if (most := getattr(ceilings, name)) is not None:
                self.fields[name].help_text = f"At most {most:,}, {whose} limit; empty: that limit."
        if ceilings.allowed_models:
            among = ", ".join(sorted(ceilings.allowed_models))
            models = self.fields["allowed_models"]
            models.help_text = (
                f"Served model names, comma-separated, within {whose} limit: {among}; empty: all of them."
            )
        if (days := ceilings.max_key_days) is not None:
            for name, words in (
                ("expires_in_days", f"At most {days:,}, {whose} limit; empty: {days:,} days."),
                (
                    "expires_at",
                    f"YYYY-MM-DD HH:MM, within {days:,} days ({whose} limit); empty: {days:,} days from now.",
                ),
            ):
                if name in self.fields:
                    self.fields[name].help_text = words

    def limits(self) -> dict[str, Any]:
        """The cleaned limits and class as console.access.keys takes them."""
        data = self.cleaned_data
        names = (*INT_NAMES, "daily_budget_usd", "monthly_budget_usd", "priority")
        return {"allowed_models": split_models(data["allowed_models"]), **{name: data[name] for name in names}}


class ApiKeyForm(KeyLimitsFields):
    name = forms.CharField(max_length=100, help_text="Who or what will use it, e.g. 'alice laptop'.")
    expires_in_days = forms.IntegerField(required=False, min_value=1, max_value=MAX_DAYS, help_text="Empty: never.")
    field_order = ("name", "owner", "allowed_models", "max_tokens_cap", "expires_in_days")
    limit_fields: ClassVar[dict[str, str]] = {"expires_at": "expires_in_days"}  # a new key's expiry: its days

    def __init__(self, *args: Any, owners: QuerySet[User] | None = None, **kwargs: Any) -> None:
        """``owners``: whom an admin may make the key for (console.access.keys.possible_owners); None: a member's
        form, whose keys are their own."""
        super().__init__(*args, **kwargs)
        if owners is not None:
            self.fields["owner"] = forms.ModelChoiceField(
                owners,
                required=False,
                to_field_name="username",
                empty_label="yourself",
                help_text="Whom the key is for: it counts toward their limits and budgets, and they manage it.",
            )
            self.order_fields(self.field_order)

    def limits(self) -> dict[str, Any]:
        return {**super().limits(), "expires_in_days": self.cleaned_data["expires_in_days"]}

    def owner(self) -> User | None:
        """The owner chosen (None: the person making it)."""
        return self.cleaned_data.get("owner")


class KeyChangeForm(KeyLimitsFields):
    expires_at = forms.DateTimeField(
        required=False,
        label="Expires (UTC)",
        help_text="YYYY-MM-DD HH:MM; empty: never.",
        widget=forms.DateTimeInput(format="%Y-%m-%d %H:%M"),  # as the help says, not with seconds
    )

    def limits(self) -> dict[str, Any]:
        return {**super().limits(), "expires_at": self.cleaned_data["expires_at"]}


GRACE_CHOICES = [
    (0, "none: the old secret stops now"),
    (600, "10 minutes"),
    (3600, "1 hour"),
    (86_400, "1 day"),
    (7 * 86_400, "7 days"),
    (30 * 86_400, "30 days"),
]


class RotateForm(forms.Form):
    grace_seconds = forms.TypedChoiceField(
        choices=GRACE_CHOICES,
        coerce=int,
        initial=3600,
        label="Old secret keeps working for",
        help_text="Time to move your tools to the new secret.",
    )


MAX_PASSWORD = 4096  # characters a password may have at sign-in (no account's is longer: SetupForm's 128)


class LoginForm(AuthenticationForm):
    """Django's sign-in form with its lengths enforced before anyone is asked: a username longer than any
    account's (auth.User's 150) or a password over MAX_PASSWORD characters is the form's error, not a sign-in
    attempt (django-axes would store the username tried in its 255-character column: a 500)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        username = cast(forms.CharField, self.fields["username"])
        username.validators.append(MaxLengthValidator(username.max_length or 150))
        self.fields["password"].validators.append(MaxLengthValidator(MAX_PASSWORD))


def password_rules() -> str:
    """Django's password validators' rules as one line of help text: their HTML list, inside a field's paragraph,
    broke out of it as large bullets."""
    return " ".join(password_validators_help_texts())


class PasswordForm(PasswordChangeForm):
    """Django's change of one's own password, its rules as one line of help (password_rules)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["new_password1"].help_text = password_rules()


class SetupForm(forms.Form):
    """The first admin's username and password, the password typed twice: a typo in it would lock the only account
    of a fresh appliance out. Passwords are kept as typed (no strip), as sign-in takes them. Errors: Django's
    password validators' words under ``password``, a mismatch under ``password2``."""

    username = forms.CharField(max_length=150)
    password = forms.CharField(
        widget=forms.PasswordInput,  # never rendered back: render_value is False
        strip=False,
        min_length=8,
        max_length=128,
        help_text=password_rules(),
    )
    password2 = forms.CharField(
        widget=forms.PasswordInput,
        strip=False,
        max_length=128,
        label="Password (again)",
        help_text="The same password, to catch a typo.",
    )

    def clean_password(self) -> str:
        password: str = self.cleaned_data["password"]
        named = get_user_model()(username=self.cleaned_data.get("username", ""))  # "too similar to the username"
        validate_password(password, named)  # raises ValidationError with Django's validators' words
        return password

    def clean(self) -> dict[str, Any]:
        """The cleaned fields; two passwords that differ are an error under ``password2``."""
        data = super().clean() or {}
        password, again = data.get("password"), data.get("password2")
        if password is not None and again is not None and password != again:
            self.add_error("password2", "The two passwords differ: type the same one in both fields.")
        return data
