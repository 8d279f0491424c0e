"""``manage.py gpu_check``: what Hearth reads of this box's GPUs and how it would size models on them, in words.

For the day a GPU machine is at hand (scripts/gpu-check.sh runs it with ``HEARTH_GPU_INVENTORY=nvml``): the
inventory read through appliance.hardware (each GPU's name, UUID, total and used memory in GiB, compute
capability), the driver's version and the processes holding the GPUs (NVML only), then the plan
engines.planner.plan_gpu makes for a few catalog models (console/catalog/demo) on that inventory, with the numbers
the console's plan shows: tensor parallel size, max_model_len (tokens), KV cache capacity (tokens) and
concurrent sequences at the typical context. Needs no database. Exit status 1 when the inventory cannot be read.
"""

import sys
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from appliance.hardware import InventoryError, compute_processes, driver_version, local_inventory
from console.catalog.demo import demo_model
from engines.gpus import Inventory
from engines.planner import PlanRequest, plan_gpu

GIB = 1024**3
MODELS = ("qwen3-0.6b", "llama-3.1-8b-instruct", "gpt-oss-20b", "llama-3.1-70b-instruct-fp8", "llama-3.3-70b-instruct")


class Command(BaseCommand):
    help = (
        "Print the GPU inventory Hearth reads here (HEARTH_GPU_INVENTORY) and its plans for a few catalog models "
        "on it; exit status 1 when no inventory can be read."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("models", nargs="*", default=list(MODELS), help="catalog names (console/catalog/demo)")

    def handle(self, *args: Any, **opts: Any) -> None:
        began = time.monotonic()
        try:
            inventory = local_inventory()
        except InventoryError as exc:
            self.stderr.write(f"No GPU inventory: {exc}")
            sys.exit(1)
        self._inventory(inventory)
        for name in opts["models"]:
            self._plan(name, inventory)
        self.stdout.write(f"gpu_check took {time.monotonic() - began:.1f} s")

    def _inventory(self, inventory: Inventory) -> None:
        self.stdout.write(
            f"Inventory: {inventory.describe()} ({inventory.source}, {inventory.provenance(time.time())})"
        )
        for gpu in inventory.devices:
            cc = ".".join(map(str, gpu.compute_capability))
            self.stdout.write(
                f"  GPU {gpu.index}: {gpu.name}, {gpu.uuid}, {gpu.memory_total_bytes / GIB:.1f} GiB total, "
                f"{gpu.memory_used_bytes / GIB:.2f} GiB used by other processes, compute capability {cc}, "
                f"FP8 KV cache {'yes' if gpu.supports_fp8_kv else 'no'}"
            )
        if inventory.source != "nvml":
            return
        try:
            self.stdout.write(f"Driver: {driver_version()}")
            held = compute_processes()
        except InventoryError as exc:
            self.stdout.write(f"Driver: {exc}")
            return
        for proc in held:
            used = "unknown" if proc.used_memory_bytes is None else f"{proc.used_memory_bytes / GIB:.2f} GiB"
            self.stdout.write(f"  process {proc.pid} ({proc.name}) on GPU {proc.gpu_index}: {used}")
        if not held:
            self.stdout.write("  no other process holds a GPU")

    def _plan(self, name: str, inventory: Inventory) -> None:
        model = demo_model(name)
        if model is None:
            self.stdout.write(f"{name}: not in the catalog (console/catalog/demo)")
            return
        try:
            plan = plan_gpu(model.facts, model.weights_bytes, inventory, PlanRequest())
        except ValueError as exc:
            self.stdout.write(f"{name}: {exc}")
            return
        weights = f"{model.weights_bytes / GIB:.1f} GiB of weights"
        if not plan.fits:
            reason = plan.reasons[-1].removeprefix("Does not fit: ") if plan.reasons else "there are no GPUs."
            self.stdout.write(f"{name} ({weights}): does not fit: {reason}")
            return
        gpus = f"GPU{'s' if len(plan.gpu_indices) > 1 else ''} {', '.join(map(str, plan.gpu_indices))}"
        self.stdout.write(
            f"{name} ({weights}): fits at tensor parallel {plan.tensor_parallel_size} on {gpus}, max_model_len "
            f"{plan.max_model_len:,} tokens, KV cache {plan.kv_capacity_tokens:,} tokens, "
            f"{plan.concurrency_at_typical_context:.1f} concurrent sequences at {plan.typical_context:,} tokens"
        )
