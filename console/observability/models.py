"""The request log: one row per gateway request (the gateway writes them in batches, gateway.accounting):
who asked what, how it ended, and the tokens it used."""

from django.db import models
from django.utils import timezone


class RequestLog(models.Model):
    """A finished /v1 request. Times in seconds; tokens as the engine counted them (None: not reported)."""

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    api_key = models.ForeignKey("access.ApiKey", null=True, on_delete=models.SET_NULL, related_name="requests")
    model = models.CharField(max_length=200)
    surface = models.CharField(max_length=10, help_text="openai or anthropic")
    endpoint = models.CharField(max_length=50)
    stream = models.BooleanField(default=False)
    status = models.PositiveSmallIntegerField()
    finish_reason = models.CharField(max_length=50, blank=True)
    prompt_tokens = models.IntegerField(null=True)
    completion_tokens = models.IntegerField(null=True)
    cached_tokens = models.IntegerField(null=True)
    ttft_seconds = models.FloatField(null=True, help_text="Until the first generated token reached the client.")
    duration_seconds = models.FloatField()
    truncated = models.BooleanField(default=False, help_text="The engine ended the stream without its terminal event.")
    client_cancelled = models.BooleanField(default=False)
    usage_estimated = models.BooleanField(
        default=False, help_text="The engine gave no usage (a stream cut or left): the gateway counted the tokens."
    )
    reasoning_tokens = models.IntegerField(null=True, help_text="Hidden reasoning tokens; None: no reasoning seen.")
    tool_call_failures = models.PositiveSmallIntegerField(
        default=0, help_text="Tool calls whose arguments were not a JSON object, or a call written as text."
    )
    length_cut = models.BooleanField(default=False, help_text="The answer hit its output-token limit.")
    empty_answer = models.BooleanField(default=False, help_text="A finished answer with no text and no tool call.")

    class Meta:
        indexes = (models.Index(fields=["api_key", "created_at"]),)

    def __str__(self) -> str:
        return f"{self.endpoint} {self.model} {self.status}"
