"""The Alerts page's forms: one rule's tuning, and where alerts go."""

from typing import Any
from urllib.parse import urlsplit

from django import forms
from django.core.validators import validate_email

from console.alerts.models import AlertRule, Destination
from console.alerts.rules import KINDS, Kind

# the longest a condition may be asked to hold (the window of a rate) and the longest between repeats, minutes
MOST_MINUTES = {"for_minutes": (1440.0, "a day"), "repeat_minutes": (10080.0, "a week")}


class RuleForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = AlertRule
        fields = ("enabled", "threshold", "for_minutes", "repeat_minutes")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for name in ("threshold", "for_minutes"):
            if data.get(name) is not None and data[name] < 0:
                self.add_error(name, "Must be 0 or more.")
        if data.get("repeat_minutes") is not None and data["repeat_minutes"] < 1:
            self.add_error("repeat_minutes", "Repeat at most once a minute (1 or more).")
        kind, threshold = KINDS.get(self.instance.kind), data.get("threshold")
        if kind is not None and threshold is not None and threshold >= 0:
            self._check_threshold(kind, threshold)
        for name, (minutes, words) in MOST_MINUTES.items():
            if data.get(name) is not None and data[name] > minutes:
                self.add_error(name, f"At most {minutes:,.0f} minutes ({words}).")
        return data

    def _check_threshold(self, kind: Kind, threshold: float) -> None:
        """The threshold within what its unit means: a bound that makes the alert fire always or never is refused."""
        if kind.most is not None and threshold > kind.most:
            self.add_error("threshold", f"At most {kind.most:g}; its unit: {kind.unit}.")
        elif threshold < kind.least:
            self.add_error("threshold", f"At least {kind.least:g}; its unit: {kind.unit}.")
        elif kind.whole and threshold != int(threshold):
            self.add_error("threshold", f"A whole number: the threshold counts {kind.unit}.")


class DestinationForm(forms.ModelForm):  # type: ignore[type-arg]
    webhook_url = forms.URLField(
        required=False, max_length=2000, assume_scheme="https", help_text="A Slack or Mattermost incoming webhook."
    )

    class Meta:
        model = Destination
        fields = ("webhook_url", "email_to")

    def clean_webhook_url(self) -> str:
        url = self.cleaned_data["webhook_url"]
        try:
            parts = urlsplit(url)
            _ = parts.port
        except ValueError as exc:  # Django's URLValidator takes any 5 digits
            raise forms.ValidationError("A webhook URL's port is 1 to 65535.") from exc
        if url and parts.scheme not in ("http", "https"):  # URLValidator takes ftp(s) too, which nothing can post to
            raise forms.ValidationError(f"A webhook URL is http or https, not {parts.scheme}.")
        return str(url)

    def clean_email_to(self) -> str:
        addresses = [a.strip() for a in self.cleaned_data["email_to"].split(",") if a.strip()]
        bad = []
        for address in addresses:
            try:
                validate_email(address)
            except forms.ValidationError:
                bad.append(address[:100])
        if len(bad) == 1:
            raise forms.ValidationError(f"{bad[0]} is not an email address.")
        if bad:
            raise forms.ValidationError(f"{', '.join(bad)} are not email addresses.")
        return ", ".join(addresses)
