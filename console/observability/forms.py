"""Observability's forms: the request log's filters, a metric mapping, a GPU price, a deployment's price per million
tokens, a deployment's SLO."""

from typing import ClassVar

from django import forms
from django.core.exceptions import NON_FIELD_ERRORS

from console.access.models import Priority
from console.deployments.models import Deployment
from console.observability.models import MetricMapping, PriceSetting, ServiceLevel
from console.observability.outcomes import OUTCOMES
from console.observability.service_level import out_of_range
from engines.metric_mappings import CANONICAL


class RequestFilter(forms.Form):
    """The request log's filters, shared by the Requests page and its CSV export."""

    model = forms.CharField(required=False)
    key = forms.CharField(
        required=False,
        label="Key prefix or name",
        help_text="One key: its whole name (any case), or its prefix or the start of it (hk-…).",
    )
    status = forms.IntegerField(required=False, min_value=100, max_value=599)
    request_id = forms.CharField(
        required=False, max_length=128, label="Request id", help_text="The gateway's x-request-id, or the client's."
    )
    outcome = forms.ChoiceField(required=False, choices=[("", "any")] + [(o, o) for o in OUTCOMES])
    priority = forms.ChoiceField(required=False, choices=[("", "any"), *Priority.choices], label="Class")
    batch = forms.CharField(
        required=False,
        max_length=40,
        label="Batch id",
        help_text="A Batch API batch's lines: its id, or the start of it.",
    )
    hours = forms.IntegerField(required=False, min_value=1, max_value=24 * 30, initial=24, label="Last hours")
    NOT_FILTERS = frozenset({"page"})  # the page's own parameter, beside the filters

    def clean(self) -> dict[str, object]:
        """A filter name the log does not know is refused, not ignored: a trial's ``?batch_id=`` exported every
        row, where ``?batch=`` picks a batch's."""
        cleaned = super().clean() or {}
        unknown = sorted(set(self.data) - set(self.fields) - self.NOT_FILTERS)
        if unknown:
            names = ", ".join(self.fields)
            self.add_error(None, f"No filter is named {', '.join(unknown)[:200]}; the filters are {names}.")
        return cleaned

    def problems(self) -> str:
        """The filters' errors as one line of text, each after its field's label ("Last hours: Ensure this value is
        less than or equal to 720."); "" when they are valid."""
        return " ".join(
            f"{error}" if name == NON_FIELD_ERRORS else f"{self[name].label}: {error}"
            for name, errors in self.errors.items()
            for error in errors
        )


class MappingForm(forms.ModelForm):  # type: ignore[type-arg]
    canonical = forms.ChoiceField(choices=[(k, f"{k} ({c.kind}, {c.unit})") for k, c in CANONICAL.items()])

    class Meta:
        model = MetricMapping
        fields = ("flavor", "engine", "canonical", "metric", "label", "min_version", "max_version", "source")


class PriceForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = PriceSetting
        fields = ("gpu_model", "usd_per_gpu_hour", "source")
        labels: ClassVar[dict[str, str]] = {
            "gpu_model": "GPU model",
            "usd_per_gpu_hour": "USD per GPU-hour",
            "source": "Source of the price",
        }

    def clean_usd_per_gpu_hour(self) -> object:
        value = self.cleaned_data["usd_per_gpu_hour"]
        if value < 0:
            raise forms.ValidationError("A price cannot be negative.")
        return value


class DeploymentPriceForm(forms.Form):
    """An admin's price per million tokens for a deployment; both empty: back to the price from its capacity."""

    deployment = forms.ModelChoiceField(queryset=Deployment.objects.order_by("name"))
    input_usd = forms.DecimalField(
        required=False, min_value=0, max_digits=12, decimal_places=4, label="USD per million input tokens"
    )
    output_usd = forms.DecimalField(
        required=False,
        min_value=0,
        max_digits=12,
        decimal_places=4,
        label="USD per million output tokens",
        help_text="Empty: the input price. Both empty: the price from the deployment's capacity.",
    )

    def clean(self) -> dict[str, object]:
        data = super().clean() or {}
        given = "input_usd" not in self.errors  # one refused already says why (a trial's -1 was told to give one)
        if given and data.get("input_usd") is None and data.get("output_usd") is not None:
            self.add_error("input_usd", "Give the input price too (or neither, for the price from capacity).")
        elif data.get("output_usd") is None:
            data["output_usd"] = data.get("input_usd")
        return data


class SloForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = ServiceLevel
        fields = ("ttft_seconds", "itl_seconds")
        labels = {"ttft_seconds": "TTFT target (s)", "itl_seconds": "ITL target (s)"}  # noqa: RUF012 - Django's Meta

    def clean(self) -> dict[str, object]:
        """The same range as the Capacity page and the API (console.observability.service_level.out_of_range)."""
        data = super().clean() or {}
        if why := out_of_range(data.get("ttft_seconds"), data.get("itl_seconds")):
            self.add_error(None, why)
        return data
