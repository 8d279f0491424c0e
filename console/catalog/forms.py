"""Forms of the model pages. Each field is checked on its own by the catalog's rules (console.catalog.sources), so
a form with several mistakes shows them all at once, each under its field, with the values typed kept."""

from collections.abc import Callable
from typing import Any

from django import forms

from console.catalog import sources
from console.errors import ConsoleError


class _SourceForm(forms.Form):
    """A model's name and where its checkpoint is; once valid, ``cleaned_data`` holds ``name`` (stripped, free)
    and ``source`` (sources.SourceFacts, the checkpoint as read), for sources.add_source."""

    name = forms.CharField(max_length=100, help_text="Letters, digits, '.', '-', '_'.")

    def clean_name(self) -> str:
        try:
            return sources.check_model_name(self.cleaned_data["name"])
        except ConsoleError as exc:
            raise forms.ValidationError(str(exc)) from None

    def read_source(self, field: str, read: Callable[..., sources.SourceFacts], *args: str) -> None:
        """Put ``read(*args)`` in ``cleaned_data["source"]``, or its ConsoleError's message under ``field``."""
        try:
            self.cleaned_data["source"] = read(*args)
        except ConsoleError as exc:
            self.add_error(field, str(exc))


class LocalModelForm(_SourceForm):
    path = forms.CharField(max_length=500, help_text="Absolute path of a folder with config.json and *.safetensors.")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "path" in data:  # absent when the field's own checks failed
            self.read_source("path", sources.local_source, data["path"])
        return data


class HfModelForm(_SourceForm):
    repo_id = forms.CharField(max_length=200, help_text="e.g. HuggingFaceTB/SmolLM2-135M-Instruct")
    revision = forms.CharField(max_length=100, initial="main", help_text="Branch, tag or commit; pinned to its commit.")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "repo_id" in data and "revision" in data:  # the hub's answer, whatever it is, is shown under the repo
            self.read_source("repo_id", sources.hf_source, data["repo_id"], data["revision"])
        return data
