"""Observability's tables: the request log the gateway writes (spooled through Redis, request_spool), the metric
history the scraper keeps, each replica's scrape health, the editable metric mappings, GPU prices and the
service levels goodput is measured against."""

from django.db import models
from django.utils import timezone

CAPPED_BY_WORDS = {  # RequestLog.max_tokens_capped_by, as the Requests page says it
    "key": "the key's max_tokens cap",
    "deployment": "the deployment's max_tokens cap",
    "limit": "what the key's token limits left",
    "budget": "what the key's budget left",
}


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
    cost_usd = models.DecimalField(
        max_digits=18,
        decimal_places=9,
        null=True,
        help_text="USD charged to the key's budgets: tokens × the deployment's price per token; None: no price.",
    )
    key_prefix = models.CharField(
        max_length=20,
        blank=True,
        help_text="The public prefix of the secret the request used: during a rotation's grace, the old one's.",
    )
    request_id = models.CharField(  # noqa: DJ001 - NULL for rows written before requests had an id (NULLs never clash)
        max_length=32,
        null=True,
        unique=True,
        help_text="The gateway's id of the request: whoever writes its row, and however often, it is written once.",
    )
    client_request_id = models.CharField(  # noqa: DJ001 - NULL: the client sent no id, which "" would blur
        max_length=128,
        null=True,
        db_index=True,
        help_text="The client's own x-request-id, when it sent a usable one (gateway.request_ids); not unique.",
    )
    woke_engine = models.BooleanField(
        default=False,
        help_text="Held for its deployment's wake first: the model was asleep or stopped to save (gateway.holding).",
    )
    wake_seconds = models.FloatField(
        null=True, help_text="How long it was held for the wake (in its TTFT and duration too); None: not held."
    )
    priority = models.CharField(
        max_length=12,
        default="standard",
        db_index=True,
        help_text="The class it ran at: interactive, standard or batch (console.access.models.Priority).",
    )
    batch_id = models.CharField(
        max_length=40, blank=True, db_index=True, help_text="The Batch (batch_...) it was a line of; blank: none."
    )
    max_tokens_fitted = models.PositiveIntegerField(
        null=True,
        help_text=(
            "The output limit (tokens) the gateway sent after lowering the client's to fit the context left "
            "(gateway.context_fit; the answer said so in x-hearth-max-tokens-fitted); None: sent as asked."
        ),
    )
    max_tokens_capped = models.PositiveIntegerField(
        null=True,
        help_text=(
            "The output limit (tokens) the gateway sent after lowering the client's, or setting one it did not ask, "
            "to a cap: the key's or the deployment's max_tokens cap, or what the key's token limits or budgets left "
            "(max_tokens_capped_by; the answer said so in x-hearth-max-tokens-capped); None: no cap applied."
        ),
    )
    max_tokens_capped_by = models.CharField(
        max_length=12, blank=True, default="", help_text="Whose cap: key, deployment, limit or budget; blank: none."
    )
    error = models.CharField(
        max_length=500,
        blank=True,
        help_text=(
            "Why it failed, as its client was told: the gateway's message or the engine's (gateway.errors, at most"
            " 500 characters, nothing that looks like a secret); blank: it did not fail."
        ),
    )

    class Meta:
        indexes = (models.Index(fields=["api_key", "created_at"]),)

    def __str__(self) -> str:
        return f"{self.endpoint} {self.model} {self.status}"

    @property
    def max_tokens_capped_words(self) -> str:
        """Whose cap set the output limit, in words ("the key's max_tokens cap"); "" when none did."""
        return CAPPED_BY_WORDS.get(self.max_tokens_capped_by, self.max_tokens_capped_by)


class Resolution(models.IntegerChoices):
    """A sample's resolution: one scrape (kept 24 h), or a 5-minute rollup (kept 30 days)."""

    SCRAPE = 0
    FIVE_MINUTES = 300


class MetricSample(models.Model):
    """One point of a deployment's history.

    With a replica: that engine's scrape. ``values`` = ``{"v": {canonical: value}, "h": {canonical: [bounds id,
    sum, cumulative count per bound…, +Inf count]}}`` (cumulative, as scraped; console.observability.history
    reads it). A rollup holds the period's deltas instead: ``{"v": gauge means, "d": counter deltas, "h": …}``.
    Without a replica: the gateway's requests of the deployment that ended in the period (deltas), from the
    request log. ``at`` is the scrape's time, or a rollup period's start.
    """

    deployment = models.ForeignKey("deployments.Deployment", on_delete=models.CASCADE, related_name="samples")
    replica = models.ForeignKey("deployments.Replica", null=True, on_delete=models.CASCADE, related_name="samples")
    at = models.DateTimeField()
    resolution = models.PositiveSmallIntegerField(choices=Resolution.choices, default=Resolution.SCRAPE)
    values = models.JSONField()

    class Meta:
        indexes = (
            models.Index(fields=["deployment", "resolution", "at"]),
            models.Index(fields=["replica", "resolution", "at"]),
            models.Index(fields=["resolution", "at"]),
        )

    def __str__(self) -> str:
        return f"{self.deployment_id}/{self.replica_id} at {self.at:%Y-%m-%d %H:%M:%S}"


class HistogramBounds(models.Model):
    """A histogram's bucket bounds (seconds), stored once and referred to by id from every sample."""

    bounds = models.JSONField(unique=True)

    def __str__(self) -> str:
        return f"{len(self.bounds)} bounds"


class ScrapeHealth(models.Model):
    """How scraping a replica goes: the last attempt and the last good one, the series it exposed, the
    mapping flavor chosen, and the last error (the panel flags a replica whose scrapes fail)."""

    replica = models.OneToOneField("deployments.Replica", on_delete=models.CASCADE, related_name="scrape_health")
    last_attempt_at = models.DateTimeField(null=True)
    last_success_at = models.DateTimeField(null=True)
    failures_in_row = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    series = models.PositiveIntegerField(default=0, help_text="Samples in the last good scrape.")
    flavor = models.CharField(max_length=30, blank=True, help_text="The metric mapping chosen.")

    def __str__(self) -> str:
        return f"scrapes of replica {self.replica_id}"


class MetricMapping(models.Model):
    """One engine series for one canonical name (engines.metrics.CANONICAL), for an engine flavor over a version
    range; seeded from engines.metrics.DEFAULT_MAPPINGS, editable by an admin on the Metric mappings page."""

    flavor = models.CharField(max_length=30, help_text="e.g. vllm, vllm-v0, sglang, llamacpp")
    engine = models.CharField(max_length=30, help_text="Engine family: vllm, sglang, llamacpp.")
    canonical = models.CharField(max_length=60)
    metric = models.CharField(max_length=200, help_text="Sample name as exposed; a histogram's base name.")
    label = models.CharField(max_length=100, blank=True, help_text="For an info gauge: the label holding the number.")
    min_version = models.CharField(max_length=20, blank=True, help_text="Inclusive; blank: any.")
    max_version = models.CharField(max_length=20, blank=True, help_text="Exclusive; blank: any.")
    source = models.CharField(max_length=300, help_text="Where the name comes from (a source file, a doc).")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = (models.UniqueConstraint(fields=["flavor", "canonical"], name="one_series_per_canonical"),)

    def __str__(self) -> str:
        return f"{self.flavor}: {self.canonical} ← {self.metric}"


class PriceSetting(models.Model):
    """What one GPU of a model costs per hour (USD), by the GPU name NVML reports."""

    gpu_model = models.CharField(max_length=100, unique=True, help_text="As NVML names it, e.g. NVIDIA H100 80GB HBM3.")
    usd_per_gpu_hour = models.DecimalField(max_digits=10, decimal_places=4)
    source = models.CharField(max_length=300, blank=True, help_text="Where the price comes from.")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.gpu_model}: ${self.usd_per_gpu_hour}/GPU-hour"


class DeploymentPrice(models.Model):
    """What a deployment charges per million tokens (console.observability.pricing): an admin's price (input and
    output tokens may differ), else the throughput its last capacity check measured at its SLO."""

    deployment = models.OneToOneField("deployments.Deployment", on_delete=models.CASCADE, related_name="price")
    usd_per_million_input = models.DecimalField(
        max_digits=12, decimal_places=4, null=True, blank=True, help_text="Set by an admin; None: from capacity."
    )
    usd_per_million_output = models.DecimalField(
        max_digits=12, decimal_places=4, null=True, blank=True, help_text="Set by an admin; None: from capacity."
    )
    measured_tokens_per_second = models.FloatField(
        null=True, help_text="Prompt + output tokens/s at the most load its last capacity check held its SLO at."
    )
    measured_run_id = models.PositiveIntegerField(null=True, help_text="That capacity check (kept as a number).")
    measured_at = models.DateTimeField(null=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"price of {self.deployment_id}"


class ServiceLevel(models.Model):
    """A deployment's SLO: a request meets it when it succeeded with a user-visible TTFT and ITL (seconds) at
    or under the targets (a target left empty is not checked). Goodput is the share of requests that met it."""

    deployment = models.OneToOneField("deployments.Deployment", on_delete=models.CASCADE, related_name="slo")
    ttft_seconds = models.FloatField(null=True, blank=True)
    itl_seconds = models.FloatField(null=True, blank=True)

    def __str__(self) -> str:
        return f"SLO of {self.deployment_id}"
