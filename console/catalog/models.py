"""A model checkpoint the appliance knows: where it is and what its files say."""

from django.db import models
from django.utils import timezone

from engines.modelconfig import ModelConfig, parse_config


class ModelSource(models.Model):
    """A model checkpoint: a local folder, or a Hugging Face repo pinned to a commit."""

    class Kind(models.TextChoices):
        LOCAL = "local", "Local folder"
        HF = "hf", "Hugging Face"

    name = models.CharField(max_length=100, unique=True, help_text="Letters, digits, '.', '-', '_'.")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    path = models.CharField(max_length=500, blank=True, help_text="Local folder (kind local).")
    repo_id = models.CharField(max_length=200, blank=True)
    revision = models.CharField(max_length=64, blank=True, help_text="Pinned commit sha (kind hf).")
    config = models.JSONField(help_text="config.json as read.")
    weights_bytes = models.BigIntegerField(help_text="Real tensor bytes from the safetensors headers.")
    tensor_dtypes = models.JSONField(default=list, help_text="Dtypes the checkpoint actually stores.")
    license = models.CharField(max_length=100, blank=True, help_text="From the model card, when known.")
    chat_template = models.TextField(
        blank=True, help_text="The chat template's text, for the engine's tool-call and reasoning parsers."
    )
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.name

    @property
    def facts(self) -> ModelConfig:
        """config.json as sizing reads it (quantization, remote code, layer kinds...)."""
        return parse_config(self.config)

    @property
    def source(self) -> str:
        return self.path if self.kind == self.Kind.LOCAL else f"{self.repo_id}@{self.revision[:12]}"
