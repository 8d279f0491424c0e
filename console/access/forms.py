"""Forms of the access pages: the first admin, and a new API key with its limits."""

from typing import Any

from django import forms


class ApiKeyForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="Who or what will use it, e.g. 'alice laptop'.")
    allowed_models = forms.CharField(
        required=False, max_length=2000, help_text="Served model names, comma-separated; empty: every model."
    )
    max_tokens_cap = forms.IntegerField(
        required=False, min_value=1, label="max_tokens cap", help_text="Tokens per request; empty: no cap."
    )
    expires_in_days = forms.IntegerField(required=False, min_value=1, help_text="Empty: never expires.")
    requests_per_minute = forms.IntegerField(required=False, min_value=1, help_text="Empty: unlimited.")
    tokens_per_minute = forms.IntegerField(required=False, min_value=1, help_text="Prompt + completion.")
    tokens_per_day = forms.IntegerField(required=False, min_value=1, help_text="Prompt + completion, per UTC day.")
    max_concurrent = forms.IntegerField(required=False, min_value=1, label="Requests at once")

    def limits(self) -> dict[str, Any]:
        """The cleaned limits as console.access.keys.create_key takes them."""
        data = self.cleaned_data
        models = [m.strip() for m in data["allowed_models"].split(",") if m.strip()]
        names = ("max_tokens_cap", "expires_in_days", "requests_per_minute", "tokens_per_minute", "tokens_per_day",
                 "max_concurrent")  # fmt: skip
        return {"allowed_models": models, **{name: data[name] for name in names}}


class SetupForm(forms.Form):
    username = forms.CharField(max_length=150)
    password = forms.CharField(widget=forms.PasswordInput, min_length=8)
