"""``manage.py plan MODEL --gpus PROFILE``: the sizing plan for a model on a GPU box, in words or JSON.

MODEL is a local checkpoint folder, a config.json (weights from a sibling model.safetensors.index.json
or *.safetensors, or --weights-bytes), or ``org/name@revision`` on Hugging Face.
"""

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from appliance.hardware import InventoryError, current_inventory
from console.catalog.hub import HubError, read_hub_model
from engines.gpus import SIM_PROFILES, Inventory, simulated_inventory
from engines.modelconfig import ModelConfigError, parse_config, read_checkpoint, safetensors_tensor_bytes
from engines.planner import PlanRequest, plan_gpu


def load_model(spec: str, weights_bytes: int | None) -> tuple[dict[str, Any], int]:
    """(config dict, weight bytes) for MODEL. Raises CommandError when either cannot be read."""
    path = Path(spec).expanduser()
    try:
        if path.is_dir():
            ckpt = read_checkpoint(path)
            return ckpt.raw_config, ckpt.weights_bytes
        if path.is_file():
            raw = json.loads(path.read_text())
            if isinstance(raw.get("config"), dict) and raw.get("total_size"):  # console/catalog/demo
                return raw["config"], weights_bytes or int(raw["total_size"])
            return raw, weights_bytes or _sibling_weights(path)
    except (ModelConfigError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    if "/" in spec and not spec.startswith((".", "/")) and not path.parent.exists():
        repo, _, revision = spec.partition("@")
        try:
            model = read_hub_model(repo, revision or "main")
        except HubError as exc:
            raise CommandError(str(exc)) from None
        return model.config, model.weights_bytes
    raise CommandError(f"{spec}: no such folder or file, and not an org/name@revision repo id")


def _sibling_weights(config_path: Path) -> int:
    index = config_path.with_name("model.safetensors.index.json")
    if index.is_file():
        return int(json.loads(index.read_text())["metadata"]["total_size"])
    files = sorted(config_path.parent.glob("*.safetensors"))
    if files:
        return sum(safetensors_tensor_bytes(f) for f in files)
    raise CommandError(f"no weights beside {config_path}: give --weights-bytes")


class Command(BaseCommand):
    help = (
        "Print the sizing plan for a model on a GPU box (a simulated profile or the inventory in force); "
        "exit status 1 when it does not fit."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("model", help="checkpoint folder, config.json, or org/name@revision")
        parser.add_argument("--gpus", default="current", help=f"one of {', '.join(SIM_PROFILES)}, or current")
        parser.add_argument("--max-model-len", type=int, default=0)
        parser.add_argument("--kv-cache-dtype", choices=["auto", "fp8"], default="auto")
        parser.add_argument("--gpu-memory-utilization", type=float, default=0.0)
        parser.add_argument("--tensor-parallel-size", type=int, default=0)
        parser.add_argument("--weights-bytes", type=int, help="checkpoint bytes when MODEL is a bare config.json")
        parser.add_argument("--json", action="store_true", help="print the plan's fields as JSON")

    def handle(self, *args: Any, **opts: Any) -> None:
        raw, weights = load_model(opts["model"], opts["weights_bytes"])
        try:
            config = parse_config(raw)
            inventory = self._inventory(opts["gpus"])
            request = PlanRequest(
                max_model_len=opts["max_model_len"],
                kv_cache_dtype=opts["kv_cache_dtype"],
                gpu_memory_utilization=opts["gpu_memory_utilization"],
                tensor_parallel_size=opts["tensor_parallel_size"],
            )
            plan = plan_gpu(config, weights, inventory, request)
        except (ModelConfigError, ValueError, InventoryError) as exc:
            raise CommandError(str(exc)) from None
        if opts["json"]:
            self.stdout.write(json.dumps(dataclasses.asdict(plan), indent=2))
        else:
            verdict = "FITS" if plan.fits else "DOES NOT FIT"
            self.stdout.write(f"{config.architecture} on {inventory.describe()}")
            tp = plan.tensor_parallel_size
            self.stdout.write(f"{verdict} at tensor parallel {tp}" if tp else verdict)
            for line in plan.reasons:
                self.stdout.write(f"  - {line}")
            for line in plan.remedies:
                self.stdout.write(f"  * {line}")
        if not plan.fits:
            sys.exit(1)  # scripts can tell "does not fit" apart

    @staticmethod
    def _inventory(name: str) -> Inventory:
        if name == "current":
            return current_inventory()
        try:
            return simulated_inventory(name)
        except KeyError as exc:
            raise CommandError(str(exc.args[0])) from None
