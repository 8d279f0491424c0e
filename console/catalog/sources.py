"""Adding and removing model sources: a local checkpoint folder, a Hugging Face repo read without
downloading its weights, or an entry of the demo catalog. Errors a user can fix raise ConsoleError."""

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from console.audit.recording import record
from console.catalog.demo import demo_model
from console.catalog.hub import HubError, read_hub_model
from console.catalog.models import ModelSource
from console.errors import ConsoleError
from console.names import check_name
from engines.modelconfig import ModelConfigError, parse_config, read_checkpoint

MAX_PATH = 500  # ModelSource.path's column


@dataclass(frozen=True)
class SourceFacts:
    """A checkpoint as read, before it is saved: ModelSource's fields less its name. ``kind`` (ModelSource.Kind),
    where it lives (``path``, or ``repo_id`` at ``revision``, a commit sha for a Hugging Face repo), ``config`` (the
    config.json dict, checked readable by engines.modelconfig.parse_config), ``weights_bytes`` (bytes, from the
    safetensors headers), ``tensor_dtypes`` stored (e.g. ["BF16"]), ``license`` and the ``chat_template`` text."""

    kind: str
    config: dict[str, Any]
    weights_bytes: int
    path: str = ""
    repo_id: str = ""
    revision: str = ""
    tensor_dtypes: list[str] = field(default_factory=list)
    license: str = ""
    chat_template: str = ""


def check_model_name(name: str) -> str:
    """The model name, stripped. Raises ConsoleError when it breaks the naming rule (console.names) or another
    model has it."""
    name = check_name(name, "Model name")
    if ModelSource.objects.filter(name=name).exists():
        raise ConsoleError(_taken(name))
    return name


def local_source(path: str) -> SourceFacts:
    """Read the local checkpoint folder at ``path`` (absolute, at most MAX_PATH characters) without saving it.
    Raises ConsoleError when it is not such a folder or cannot be read."""
    if len(path) > MAX_PATH:
        raise ConsoleError(f"Model path is too long: {len(path):,} characters, at most {MAX_PATH}.")
    if "\x00" in path:
        raise ConsoleError("Model path may not contain a NUL character.")
    folder = Path(path).expanduser()
    if not folder.is_absolute():
        raise ConsoleError(f"Model path {path!r} must be an absolute path on the appliance.")
    try:
        ckpt = read_checkpoint(folder)
    except ModelConfigError as exc:
        raise ConsoleError(str(exc)) from None
    except OSError as exc:  # a name too long for the file system, a folder it may not read
        raise ConsoleError(f"Cannot read {path[:200]!r}: {exc.strerror or exc}.") from None
    return _checked(
        SourceFacts(
            kind=ModelSource.Kind.LOCAL,
            path=str(folder),
            config=ckpt.raw_config,
            weights_bytes=ckpt.weights_bytes,
            tensor_dtypes=ckpt.tensor_dtypes,
            chat_template=ckpt.chat_template,
        )
    )


def hf_source(repo_id: str, revision: str) -> SourceFacts:
    """Read the Hugging Face repo ``repo_id`` at ``revision`` (branch, tag or sha), pinned to its commit sha,
    without saving it: config.json and the safetensors headers, read remotely; no weights are downloaded.
    Raises ConsoleError when the hub cannot be reached or the repo is not a safetensors checkpoint."""
    try:
        model = read_hub_model(repo_id, revision)
    except HubError as exc:
        raise ConsoleError(str(exc)) from None
    return _checked(
        SourceFacts(
            kind=ModelSource.Kind.HF,
            repo_id=repo_id,
            revision=model.revision,
            config=model.config,
            weights_bytes=model.weights_bytes,
            tensor_dtypes=model.tensor_dtypes,
            license=model.license,
            chat_template=model.chat_template,
        )
    )


def add_local_model(name: str, path: str) -> ModelSource:
    """Register a local checkpoint folder. Raises ConsoleError when it is unreadable or the name is taken."""
    return add_source(check_model_name(name), local_source(path))


def add_hf_model(name: str, repo_id: str, revision: str) -> ModelSource:
    """Register a Hugging Face repo, pinning ``revision`` (branch, tag or sha) to its commit sha (hf_source).
    Raises ConsoleError when the name is taken, the hub cannot be reached or the repo is not a safetensors
    checkpoint."""
    return add_source(check_model_name(name), hf_source(repo_id, revision))


def add_demo_model(name: str) -> tuple[ModelSource, bool]:
    """Add the demo catalog's entry ``name`` (e.g. ``llama-3.1-70b``, or its repo id) under its own name: the model,
    and whether it was added now (False: the one already added from it). Raises ConsoleError for an unknown entry or
    a name another model has."""
    entry = demo_model(name)
    if entry is None:
        raise ConsoleError(
            f"The demo catalog has no model {name!r}: name one of GET /api/models/demo's names (e.g. qwen3-8b) or "
            "repo ids (Qwen/Qwen3-8B)."
        )
    existing = ModelSource.objects.filter(name=entry.name).first()
    if existing is not None and existing.kind == ModelSource.Kind.DEMO and existing.repo_id == entry.repo_id:
        return existing, False
    facts = SourceFacts(
        kind=ModelSource.Kind.DEMO, repo_id=entry.repo_id, config=entry.config, weights_bytes=entry.weights_bytes
    )
    return add_source(entry.name, _checked(facts)), True


def add_source(name: str, source: SourceFacts) -> ModelSource:
    """Save ``source`` (local_source, hf_source) as the model ``name`` and record it in the audit log. Raises
    ConsoleError when the name breaks the naming rule or another model has it."""
    name = check_name(name, "Model name")
    fields = {**asdict(source), "name": name}
    try:
        with transaction.atomic():
            model = ModelSource.objects.create(**fields)
            facts = {k: fields[k] for k in ("kind", "path", "repo_id", "revision") if fields.get(k)}
            record(None, "model.add", model, {**facts, "weights_bytes": model.weights_bytes})
            return model
    except IntegrityError:
        raise ConsoleError(_taken(name)) from None


def _checked(source: SourceFacts) -> SourceFacts:
    """``source``, once its config.json reads as a model Hearth can size; ConsoleError naming what it lacks if not."""
    try:
        parse_config(source.config)
    except ModelConfigError as exc:
        raise ConsoleError(str(exc)) from None
    return source


def _taken(name: str) -> str:
    return f"A model named {name!r} already exists."


def delete_model(model: ModelSource) -> None:
    """Forget a model no deployment uses (its files stay where they are). Raises ConsoleError otherwise."""
    if names := list(model.deployments.values_list("name", flat=True)):
        raise ConsoleError(f"{model.name} is used by {', '.join(names)}; delete those deployments first.")
    with transaction.atomic():
        record(None, "model.delete", model, {"kind": model.kind, "path": model.path, "repo_id": model.repo_id})
        model.delete()


@dataclass(frozen=True)
class FoundFolder:
    """A checkpoint folder on this box not added yet: ``path`` (absolute) and ``name``, the one its Add offers."""

    path: str
    name: str


def found_folders() -> list[FoundFolder]:
    """The folders under ``HEARTH_CACHE_DIR/models`` holding a config.json that no model names as its path, by
    name: where ``make up`` (scripts/setup-vllm-cpu.sh) puts SmolLM2-135M-Instruct, so a first run's Models page
    offers it. Offered as the folder's name in lower case; [] when the folder is missing or unreadable."""
    try:
        folders = sorted(p.parent for p in (settings.HEARTH_CACHE_DIR / "models").glob("*/config.json"))
    except OSError:
        return []
    added = set(ModelSource.objects.filter(kind=ModelSource.Kind.LOCAL).values_list("path", flat=True))
    return [FoundFolder(str(f), f.name.lower()) for f in folders if str(f) not in added and len(str(f)) <= MAX_PATH]
