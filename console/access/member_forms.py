"""Forms of the members pages: add a member, change one's role, state and limits."""

from typing import Any

from django import forms

from console.access.forms import INT_NAMES, LimitErrors, ModelNamesField, count_field, split_models, usd_field
from console.access.key_limits import MAX_DAYS
from console.access.models import PRIORITY_HELP, Priority, Role

UNLIMITED = "Empty: unlimited."


class MemberAddForm(forms.Form):
    username = forms.CharField(max_length=150)
    password = forms.CharField(
        widget=forms.PasswordInput, min_length=8, max_length=128, help_text="They can change it after signing in."
    )
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)


class MemberPasswordForm(forms.Form):
    """An admin's new password for a member, typed twice; kept as typed (no strip), as sign-in takes it."""

    password = forms.CharField(
        widget=forms.PasswordInput,
        strip=False,
        min_length=8,
        max_length=128,
        label="New password",
        help_text="Their sessions end; tell them the password, which they can change after signing in.",
    )
    password2 = forms.CharField(widget=forms.PasswordInput, strip=False, max_length=128, label="New password (again)")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("password") and data.get("password2") is not None and data["password"] != data["password2"]:
            self.add_error("password2", "The two passwords differ.")
        return data


class MemberForm(LimitErrors):
    role = forms.ChoiceField(
        choices=Role.choices, help_text="A viewer looks and acts on nothing: made one, their live keys are revoked."
    )
    is_active = forms.BooleanField(
        required=False, label="Active", help_text="An inactive member cannot sign in; their keys are revoked."
    )
    allowed_models = ModelNamesField("Served model names their keys may use, comma-separated; empty: any.")
    max_tokens_cap = count_field("max_tokens cap per key", "Tokens per request. Empty: no cap.")
    requests_per_minute = count_field("Requests per minute per key", UNLIMITED)
    tokens_per_minute = count_field("Tokens per minute per key", f"Prompt + completion. {UNLIMITED}")
    tokens_per_day = count_field("Tokens per day per key", f"Per UTC day. {UNLIMITED}")
    max_concurrent = count_field(
        "Requests at once per key",
        "Requests (streams included) each key may have open at the same time; the next is refused (429). " + UNLIMITED,
    )
    max_key_days = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_DAYS, label="Keys expire within (days)", help_text="Empty: never."
    )
    max_keys = count_field("Live keys at once", "Empty: any.")
    daily_budget_usd = usd_field("Daily budget (USD)", "All their keys together, per UTC day.")
    monthly_budget_usd = usd_field("Monthly budget (USD)", "All their keys together, per UTC month.")
    default_priority = forms.ChoiceField(
        choices=Priority.choices,
        required=False,
        initial=Priority.STANDARD,
        label="Class of their keys",
        help_text=f"Their keys' default. {PRIORITY_HELP}",
    )

    def limits(self) -> dict[str, Any]:
        """The cleaned limits and default class (left out when not given) as console.access.members.set_member_limits
        takes them."""
        data = self.cleaned_data
        names = (*INT_NAMES, "max_key_days", "max_keys", "daily_budget_usd", "monthly_budget_usd")
        limits = {"allowed_models": split_models(data["allowed_models"]), **{name: data[name] for name in names}}
        return limits | ({"default_priority": data["default_priority"]} if data["default_priority"] else {})
