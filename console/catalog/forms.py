"""Forms of the model pages."""

from django import forms


class LocalModelForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="Letters, digits, '.', '-', '_'.")
    path = forms.CharField(max_length=500, help_text="Absolute path of a folder with config.json and *.safetensors.")


class HfModelForm(forms.Form):
    name = forms.CharField(max_length=100)
    repo_id = forms.CharField(max_length=200, help_text="e.g. HuggingFaceTB/SmolLM2-135M-Instruct")
    revision = forms.CharField(max_length=100, initial="main", help_text="Branch, tag or commit; pinned to its commit.")
