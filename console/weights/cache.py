"""What the weights cache holds, and freeing the space of a model no deployment needs (huggingface_hub's
``scan_cache_dir`` and ``HFCacheInfo.delete_revisions``, utils/_cache_manager.py)."""

from dataclasses import dataclass
from pathlib import Path

from django.db import transaction

from console.audit.recording import record
from console.catalog.models import ModelSource
from console.errors import ConsoleError
from console.weights.fetching import PARTIAL, complete_marker, hub_cache


@dataclass(frozen=True)
class CachedModel:
    """One repo in the weights cache: ``size_bytes`` its complete files on disk (a blob shared by two revisions
    counted once), ``partial_bytes`` those of downloads under way or interrupted (kept for a resume),
    ``revisions`` its commits on disk, ``used_by`` the names of the deployments whose model is one of those
    commits (any state: a stopped one needs its weights to launch again), ``last_used`` a Unix time (the newest
    access huggingface_hub saw, seconds)."""

    repo_id: str
    size_bytes: int
    partial_bytes: int
    revisions: tuple[str, ...]
    used_by: tuple[str, ...]
    last_used: float

    @property
    def freeable(self) -> bool:
        return not self.used_by


@dataclass(frozen=True)
class CacheReport:
    """The cache's models, newest use first; ``problems`` what huggingface_hub could not read there, in its words."""

    models: list[CachedModel]
    problems: list[str]

    @property
    def total_bytes(self) -> int:
        return sum(m.size_bytes + m.partial_bytes for m in self.models)


def scan() -> CacheReport:
    """Read the weights cache (HEARTH_WEIGHTS_DIR/hub); an empty report when nothing was ever downloaded."""
    from huggingface_hub import scan_cache_dir

    folder = hub_cache()
    if not folder.is_dir():
        return CacheReport([], [])
    info = scan_cache_dir(folder)
    models = [
        CachedModel(
            repo_id=repo.repo_id,
            size_bytes=repo.size_on_disk,
            partial_bytes=_partial_bytes(repo.repo_path),
            revisions=tuple(sorted(r.commit_hash for r in repo.revisions)),
            used_by=_users(repo.repo_id, {r.commit_hash for r in repo.revisions}),
            last_used=repo.last_accessed,
        )
        for repo in info.repos
        if repo.repo_type == "model"
    ]
    models.sort(key=lambda m: m.last_used, reverse=True)
    return CacheReport(models, [str(w) for w in info.warnings])


def _partial_bytes(repo_path: Path) -> int:
    return sum(p.stat().st_size for p in (repo_path / "blobs").glob(f"*{PARTIAL}"))


def _users(repo_id: str, commits: set[str]) -> tuple[str, ...]:
    sources = ModelSource.objects.filter(kind=ModelSource.Kind.HF, repo_id=repo_id, revision__in=commits)
    names = {name for source in sources for name in source.deployments.values_list("name", flat=True)}
    return tuple(sorted(names))


def free(repo_id: str) -> int:
    """Delete every revision of ``repo_id`` from the weights cache, with its partial downloads, and return the bytes
    freed. Raises ConsoleError when it is not in the cache or a deployment uses it (naming them)."""
    report = scan()
    model = next((m for m in report.models if m.repo_id == repo_id), None)
    if model is None:
        raise ConsoleError(f"The weights cache holds no model {repo_id!r}.")
    if model.used_by:
        raise ConsoleError(f"{repo_id} is used by {', '.join(model.used_by)}; delete those deployments first.")
    from huggingface_hub import scan_cache_dir

    with transaction.atomic():
        record(None, "weights.free", repo_id, {"revisions": list(model.revisions), "bytes": model.size_bytes})
        scan_cache_dir(hub_cache()).delete_revisions(*model.revisions).execute()
        for revision in model.revisions:
            complete_marker(repo_id, revision).unlink(missing_ok=True)
    return model.size_bytes + model.partial_bytes
