"""``manage.py import_model NAME ARCHIVE``: a checkpoint folder packed as a tar, unpacked into the weights cache and
added as a local model (console.weights.archives), for a box that cannot reach Hugging Face."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from console.errors import ConsoleError
from console.templatetags.byte_units import iec
from console.weights.archives import import_archive


class Command(BaseCommand):
    help = (
        "Unpack ARCHIVE (a .tar, .tar.gz, .tar.bz2 or .tar.xz of a checkpoint folder: config.json, safetensors, "
        "tokenizer) into the weights cache and add it as the local model NAME."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="the model's name in Hearth (letters, digits, '.', '-', '_')")
        parser.add_argument("archive", help="the archive's path on this machine")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            model = import_archive(opts["name"], opts["archive"])
        except ConsoleError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Added {model.name}: {model.path}, {iec(model.weights_bytes)} of weights.")
