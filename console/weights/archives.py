"""Models for offline boxes from an archive: a tar (plain, gzip, bzip2 or xz) of a checkpoint folder, copied onto the
appliance, is unpacked into the weights cache (HEARTH_WEIGHTS_DIR/imported/<name>) and added as a local model.

Unpacked with tarfile's ``data`` filter (Python 3.12, PEP 706): no absolute paths, no ``..``, no links out of the
folder, no devices; into a hidden staging folder first, moved into place only once the checkpoint reads, so a bad
archive leaves nothing behind. An archive of one folder (``tar czf smol.tgz SmolLM2-135M/``) gives that folder.
"""

import shutil
import tarfile
import tempfile
from pathlib import Path

from django.conf import settings

from console.catalog.models import ModelSource
from console.catalog.sources import add_local_model, check_model_name
from console.errors import ConsoleError


def imported_dir() -> Path:
    """Where archives are unpacked: inside the weights cache, so a container engine reads them from its volume."""
    return Path(settings.HEARTH_WEIGHTS_DIR) / "imported"


def import_archive(name: str, archive: str) -> ModelSource:
    """Unpack ``archive`` (a path on the appliance) and add it as the local model ``name``. Raises ConsoleError when
    the name is taken, the archive cannot be read or holds something unsafe, or its folder is not a checkpoint."""
    name = check_model_name(name)
    target = imported_dir() / name
    if target.exists():
        raise ConsoleError(f"{target} exists already; remove it, or import under another name.")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        _unpack(Path(archive), staging)
        _root(staging).rename(target)
        try:
            return add_local_model(name, str(target))
        except ConsoleError:
            shutil.rmtree(target)
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _unpack(archive: Path, into: Path) -> None:
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(into, filter="data")
    except tarfile.FilterError as exc:
        raise ConsoleError(f"{archive} holds {exc.tarinfo.name!r}, which may not be unpacked: {exc}.") from None
    except tarfile.TarError as exc:
        raise ConsoleError(f"{archive} is not a tar archive Hearth can read: {exc}.") from None
    except OSError as exc:
        raise ConsoleError(f"Cannot unpack {archive}: {exc.strerror or exc}.") from None


def _root(staging: Path) -> Path:
    """The checkpoint's folder: the archive's only top-level folder when it has one and nothing else, else all of it."""
    entries = list(staging.iterdir())
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else staging
