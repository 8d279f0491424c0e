"""A model from an archive for an offline box (console.weights.archives, ``manage.py import_model``): unpacked into
the weights cache and added as a local model that a container engine reads from its weights volume; an unsafe or
unreadable archive, or one that holds no checkpoint, is refused and leaves nothing behind."""

import io
import json
import struct
import tarfile
from collections.abc import Mapping
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from console.catalog.models import ModelSource
from console.deployments import admin_actions, lifecycle
from console.deployments.models import Replica
from console.errors import ConsoleError
from console.weights.archives import import_archive

pytestmark = pytest.mark.django_db
CONFIG = (Path(__file__).parent / "data" / "smollm2-135m-config.json").read_bytes()


def _safetensors() -> bytes:
    """A safetensors file of one BF16 tensor of 4 values (8 bytes): an 8-byte little-endian header length, the JSON
    header, the data (the format as safetensors' README gives it)."""
    header = json.dumps({"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}}).encode()
    return struct.pack("<Q", len(header)) + header + bytes(8)


def _archive(path: Path, members: Mapping[str, bytes | str], compress: bool = True) -> Path:
    """A tar of ``members``: name → the file's bytes, or a str: a symbolic link to it."""
    with tarfile.open(path, "w:gz" if compress else "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            if isinstance(data, str):
                info.type, info.linkname = tarfile.SYMTYPE, data
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def weights_dir(settings: object, tmp_path: Path) -> Path:
    settings.HEARTH_WEIGHTS_DIR = tmp_path / "weights"  # type: ignore[attr-defined]
    return tmp_path / "weights"


def test_an_archive_of_a_folder_becomes_a_local_model_a_container_reads_from_the_weights_volume(
    weights_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    members = {"Tiny-1/config.json": CONFIG, "Tiny-1/model.safetensors": _safetensors()}
    call_command("import_model", "tiny", str(_archive(tmp_path / "tiny.tgz", members)))
    model = ModelSource.objects.get(name="tiny")
    assert (model.kind, model.path, model.weights_bytes) == ("local", str(weights_dir / "imported" / "tiny"), 8)
    assert (Path(model.path) / "config.json").read_bytes() == CONFIG
    assert capsys.readouterr().out == f"Added tiny: {model.path}, 8 bytes of weights.\n"
    assert [p.name for p in (weights_dir / "imported").iterdir()] == ["tiny"]  # no staging folder left

    dep = admin_actions.create_deployment(name="tiny", model=model, engine="vllm-cpu", max_model_len=2048)
    replica = Replica(deployment=dep, runtime="docker", host="h", port=8000, engine_api_key="hek-test")
    spec = lifecycle.launch_spec(dep, replica)
    assert spec.args[spec.args.index("--model") + 1] == "/root/.cache/huggingface/imported/tiny"
    assert spec.mounts == {}  # the engine's weights volume holds it: no bind of a path the host does not have


@pytest.mark.parametrize(
    ("members", "said"),
    [
        ({"../evil/config.json": CONFIG}, "holds '../evil/config.json', which may not be unpacked"),
        ({"Tiny-1/config.json": "/etc/hostname"}, "holds 'Tiny-1/config.json', which may not be unpacked"),
        ({"Tiny-1/README.md": b"no checkpoint"}, "config.json"),
    ],
)
def test_an_archive_that_is_unsafe_or_holds_no_checkpoint_is_refused_and_leaves_nothing(
    weights_dir: Path, tmp_path: Path, members: dict[str, bytes | str], said: str
) -> None:
    with pytest.raises(ConsoleError) as refused:
        import_archive("tiny", str(_archive(tmp_path / "bad.tar", members, compress=False)))
    assert said in str(refused.value)
    assert list((weights_dir / "imported").iterdir()) == [] and not ModelSource.objects.exists()


def test_a_file_that_is_no_tar_or_not_there_is_a_command_error(weights_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "model.zip").write_bytes(b"PK\x03\x04 not a tar")
    with pytest.raises(CommandError, match=r"model.zip is not a tar archive Hearth can read"):
        call_command("import_model", "tiny", str(tmp_path / "model.zip"))
    with pytest.raises(CommandError, match=r"Cannot unpack .*/missing.tgz: No such file or directory."):
        call_command("import_model", "tiny", str(tmp_path / "missing.tgz"))
    with pytest.raises(CommandError, match=r"Model name"):
        call_command("import_model", "bad name!", str(tmp_path / "model.zip"))
