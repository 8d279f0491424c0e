"""Forms of the capacity pages: a check, a tuning (a knob, its values and the check each runs), the SLO."""

from typing import Any

from django import forms

from console.capacity.tuning import FLAG_KNOBS, SETTING_KNOBS
from engines.capacity.profiles import MODES, PROFILES

MODE_LABELS = {"concurrency": "concurrency sweep (users)", "rate": "request-rate sweep (requests/s)"}


def parse_levels(text: str) -> list[float]:
    """ "1, 10, 50" → [1.0, 10.0, 50.0]; raises forms.ValidationError."""
    try:
        return [float(p) for p in text.replace(";", ",").split(",") if p.strip()]
    except ValueError:
        raise forms.ValidationError("Levels are numbers separated by commas, e.g. 1, 10, 50.") from None


class CheckFields(forms.Form):
    """What a check runs; its label and the live-traffic confirmation are CheckForm's."""

    profile = forms.ChoiceField(choices=[(p.name, f"{p.label}: {p.what}") for p in PROFILES.values()])
    mode = forms.ChoiceField(choices=[(m, MODE_LABELS[m]) for m in MODES])
    levels = forms.CharField(required=False, help_text="e.g. 1, 10, 50; empty: the profile's sweep.")
    shared_prefix = forms.BooleanField(required=False, label="Shared prefix first (prefix cache)")
    requests_per_level = forms.IntegerField(min_value=1, required=False, help_text="Empty: twice the top level.")
    max_seconds = forms.IntegerField(min_value=10, initial=300, label="At most (seconds)")
    prompt_tokens = forms.IntegerField(min_value=16, required=False, help_text="Tokens; empty: the profile's.")
    output_tokens = forms.IntegerField(
        min_value=1, required=False, label="Answer tokens", help_text="Empty: the profile's."
    )

    def clean_levels(self) -> list[float]:
        return parse_levels(self.cleaned_data.get("levels") or "")

    def check(self) -> dict[str, Any]:
        """start_check's keywords for the check itself."""
        data = self.cleaned_data
        return {
            "profile": data["profile"],
            "mode": data["mode"],
            "levels": data["levels"],
            "shared_prefix": data["shared_prefix"],
            "requests_per_level": data["requests_per_level"] or 0,
            "max_seconds": data["max_seconds"],
            "prompt_tokens": data["prompt_tokens"] or 0,
            "output_tokens": data["output_tokens"] or 0,
        }


class CheckForm(CheckFields):
    label = forms.CharField(max_length=200, required=False, help_text="What this run is for, e.g. 'before FP8 KV'.")
    confirm_live_traffic = forms.BooleanField(required=False, label="Yes, load it although it serves live traffic")


class TuningForm(CheckFields):
    """A knob, its values and the check each runs (each run is labelled with its value; accepting the
    downtime covers live traffic too)."""

    knob = forms.ChoiceField(choices=[(k, k) for k in (*SETTING_KNOBS, *FLAG_KNOBS)])
    values = forms.CharField(help_text="e.g. 64, 128, 256 · auto, fp8 · on, off. The setting now is tried first.")
    accept_downtime = forms.BooleanField(
        label="Relaunch the deployment for each value (the downtime above)",
        error_messages={"required": "Tick this to tune: each value relaunches the deployment (the downtime above)."},
    )
    field_order = ("knob", "values", "profile", "mode", "levels", "shared_prefix", "requests_per_level", "max_seconds")


class SloForm(forms.Form):
    ttft_seconds = forms.FloatField(min_value=0.001, label="TTFT at most (s)")
    itl_seconds = forms.FloatField(min_value=0.0001, label="ITL at most (s)")
