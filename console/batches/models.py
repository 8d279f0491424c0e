"""The Files and Batches API's tables: files (uploaded JSONL inputs, and the output and error files a batch writes),
their content in 1 MiB chunks, batches, and one row per input line with its answer.

Content lives in the database (``BatchFileChunk``), not under HEARTH_DATA_DIR: a file's row and its bytes are
written in one transaction (together or not at all), and ``manage.py backup`` carries them with every other row
(console.backup archives every table of the installed apps; 1 MiB chunks keep each archived line small).
Public ids are OpenAI's: ``file-…`` and ``batch_…``; the objects' shapes are gateway.batch_api's.
"""

import secrets

from django.db import models
from django.utils import timezone

from console.access.models import ApiKey

CHUNK_BYTES = 1024 * 1024  # a file's content is stored in chunks of this many bytes (the last one shorter)


def file_id() -> str:
    """A new public file id, ``file-`` and 24 hex digits."""
    return "file-" + secrets.token_hex(12)


def batch_id() -> str:
    """A new public batch id, ``batch_`` and 24 hex digits."""
    return "batch_" + secrets.token_hex(12)


class Purpose(models.TextChoices):
    BATCH = "batch"  # uploaded as a batch's input
    BATCH_OUTPUT = "batch_output"  # written by a batch: its output file or its error file (OpenAI's one purpose)


class BatchFile(models.Model):
    """One file of the Files API, owned by the API key that uploaded it (or whose batch wrote it); only that key
    sees it. Its content is the ``chunks`` in ``index`` order."""

    public_id = models.CharField(
        max_length=40, unique=True, default=file_id, help_text="OpenAI's file id, 'file-' and 24 hex digits."
    )
    key = models.ForeignKey(
        ApiKey, on_delete=models.CASCADE, related_name="batch_files", help_text="The API key that owns the file."
    )
    filename = models.CharField(max_length=255, help_text="The name it was uploaded under, or batch_…_output.jsonl.")
    purpose = models.CharField(max_length=20, choices=Purpose.choices, help_text="'batch' (input) or 'batch_output'.")
    bytes = models.BigIntegerField(help_text="The content's size in bytes.")
    lines = models.IntegerField(default=0, help_text="JSONL lines in the content.")
    sha256 = models.CharField(max_length=64, help_text="The content's SHA-256, hex.")
    created_at = models.DateTimeField(default=timezone.now, help_text="When it was uploaded or written.")

    def __str__(self) -> str:
        return self.public_id


class BatchFileChunk(models.Model):
    """Up to CHUNK_BYTES of a file's content, its ``index``-th piece from 0."""

    file = models.ForeignKey(BatchFile, on_delete=models.CASCADE, related_name="chunks")
    index = models.IntegerField(help_text="The chunk's place in the file, from 0.")
    data = models.BinaryField(help_text="The chunk's bytes (at most CHUNK_BYTES).")

    class Meta:
        constraints = (models.UniqueConstraint(fields=["file", "index"], name="one_chunk_per_place"),)

    def __str__(self) -> str:
        return f"{self.file_id} chunk {self.index}"


class Status(models.TextChoices):
    """OpenAI's batch statuses."""

    VALIDATING = "validating"  # created; its lines not yet read from the input file
    IN_PROGRESS = "in_progress"  # lines being run (or waiting for a deployment asleep)
    FINALIZING = "finalizing"  # every line answered; output and error files being written
    COMPLETED = "completed"
    FAILED = "failed"  # the input file could not be read: ``errors`` says why
    EXPIRED = "expired"  # not done within its completion window: what finished is in its files
    CANCELLING = "cancelling"  # cancel asked; the runner stops and writes what finished
    CANCELLED = "cancelled"


ENDED = (Status.COMPLETED, Status.FAILED, Status.EXPIRED, Status.CANCELLED)
RUNNING = (Status.VALIDATING, Status.IN_PROGRESS, Status.FINALIZING, Status.CANCELLING)


class Batch(models.Model):
    """One batch: the lines of ``input_file_id`` sent to ``endpoint`` as ``key``, at the batch priority class.

    ``total``, ``completed`` and ``failed`` are OpenAI's ``request_counts`` (lines in all, answered with a 2xx,
    answered otherwise), and the ``…_tokens`` its ``usage`` (summed from the answers' own usage), kept by the runner
    in the same transaction as each line's answer. The ``…_at`` times are when the batch entered each status (None:
    not yet)."""

    public_id = models.CharField(
        max_length=40, unique=True, default=batch_id, help_text="OpenAI's batch id, 'batch_' and 24 hex digits."
    )
    key = models.ForeignKey(
        ApiKey, on_delete=models.CASCADE, related_name="batches", help_text="The API key that owns and runs it."
    )
    endpoint = models.CharField(max_length=40, help_text="The /v1 endpoint every line goes to.")
    instance = models.CharField(
        max_length=100,
        blank=True,
        default="",
        help_text="The HEARTH_INSTANCE that runs it: its Redis holds the runner's lease and the lines' kept answers, "
        "so only that appliance's workers resume it (another adopts it once its runner_seen_at is ADOPT_SECONDS old).",
    )
    runner_seen_at = models.DateTimeField(
        null=True, blank=True, help_text="When its runner last said it runs (every few seconds while it does)."
    )
    input_file_id = models.CharField(max_length=40, help_text="The input file's public id (it may be deleted since).")
    completion_window = models.CharField(max_length=8, default="24h", help_text="Only '24h' is accepted.")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.VALIDATING, db_index=True)
    output_file = models.ForeignKey(
        BatchFile, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", help_text="Lines answered 2xx."
    )
    error_file = models.ForeignKey(
        BatchFile, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", help_text="Lines that failed."
    )
    metadata = models.JSONField(default=dict, blank=True, help_text="The client's metadata: up to 16 string pairs.")
    waiting_reason = models.TextField(
        blank=True,
        default="",
        help_text='Why its lines wait, written by the runner ("deployment llama is stopped"); blank while none waits.',
    )
    errors = models.JSONField(null=True, blank=True, help_text="Why the batch failed: OpenAI's errors list object.")
    model = models.CharField(
        max_length=255, blank=True, default="", help_text="The model every line names; blank when they name several."
    )
    input_tokens = models.BigIntegerField(default=0, help_text="usage.input_tokens: prompt tokens of the answers.")
    cached_tokens = models.BigIntegerField(default=0, help_text="usage.input_tokens_details.cached_tokens.")
    output_tokens = models.BigIntegerField(default=0, help_text="usage.output_tokens: tokens the answers generated.")
    reasoning_tokens = models.BigIntegerField(default=0, help_text="usage.output_tokens_details.reasoning_tokens.")
    total = models.IntegerField(default=0, help_text="request_counts.total: lines in the batch.")
    completed = models.IntegerField(default=0, help_text="request_counts.completed: lines answered with a 2xx.")
    failed = models.IntegerField(default=0, help_text="request_counts.failed: lines answered with an error.")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(help_text="created_at plus the completion window: expired after it.")
    in_progress_at = models.DateTimeField(null=True, blank=True)
    finalizing_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)
    cancelling_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at", "-id")
        verbose_name_plural = "batches"

    def __str__(self) -> str:
        return self.public_id


class LineState(models.TextChoices):
    PENDING = "pending"  # not answered yet
    DONE = "done"  # answered with a 2xx: ``answer`` is its output-file line
    FAILED = "failed"  # answered otherwise: ``answer`` is its error-file line


class BatchLine(models.Model):
    """One line of a batch's input file: the request it asks for and, once answered, its line of the output or
    error file (``answer``, OpenAI's shape: ``{"id", "custom_id", "response", "error"}``)."""

    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="lines")
    index = models.IntegerField(help_text="The line's place in the input file, from 0 (blank lines not counted).")
    custom_id = models.CharField(max_length=512, help_text="The client's id of the line, unique in its batch.")
    method = models.CharField(max_length=8, default="POST", help_text="Always POST.")
    url = models.CharField(max_length=40, help_text="The /v1 endpoint, the batch's own.")
    body = models.JSONField(help_text="The request body sent to the endpoint.")
    state = models.CharField(max_length=8, choices=LineState.choices, default=LineState.PENDING)
    answer = models.JSONField(null=True, blank=True, help_text="Its output- or error-file line once answered.")
    answered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = (
            models.UniqueConstraint(fields=["batch", "index"], name="one_line_per_place"),
            models.UniqueConstraint(fields=["batch", "custom_id"], name="custom_id_unique_in_batch"),
        )
        indexes = (models.Index(fields=["batch", "state", "index"], name="batch_line_todo"),)

    def __str__(self) -> str:
        return f"{self.batch_id} line {self.index} ({self.custom_id})"
