"""A deployment's stored plan: one typed model of what Hearth planned for it, kept as versioned JSON (pure).

The console plans a model with engines.sizing.plan_cpu (the CPU engines) or engines.planner.plan_gpu (the GPU
engines and the simulator), adds where it planned (the inventory, the GPUs its replicas hold) and what coding
agents need (the parsers, which agents its context serves), and stores the lot as JSON on the deployment
(console.deployments.models.Deployment.plan). Readers go through StoredPlan.from_json, writers through to_json.

The JSON is one flat object, the shape the JSON API has always answered as a deployment's ``"plan"``:

- version 2 (PLAN_VERSION, what to_json writes): ``"version": 2``, ``"kind"`` (PlanKind) and every key of its kind:

  - "cpu": SizingPlan's fields, ``"remedies"`` (always empty), ``"inventory"``, ``"parsers"``, ``"agents"``;
  - "gpu": GpuPlan's fields (``"split"`` a MemorySplit's), with ``"gpu_indices"`` every replica's GPUs (TP
    each, in replica order) rather than one replica's, and ``"inventory"``, ``"gpu_count"``,
    ``"inventory_origin"``, ``"gpu_name"``, ``"parsers"``, ``"agents"``;
  - "none": nothing more (an engine Hearth did not launch: it planned nothing).

- no ``"version"`` (version 1, every plan stored before versions): the same keys, less those added since it was
  stored, which read as empty (0, "", [], None). By commit: 1569688 a CPU plan is SizingPlan's fields alone;
  033be24 adds "remedies" and "inventory" to it and stores GPU plans (GpuPlan's fields and "inventory");
  dd75c16 adds the split's "graphs_in_budget"; 4434a5d "gpu_count" and every replica's "gpu_indices";
  7ef1622 "inventory_origin"; 28b3fc7 "gpu_name"; f26463f "parsers" and "agents"; df629a1 stores ``{}`` for
  an external deployment. Its kind is the deployment's engine's (``engine`` given), else read from its keys.

A version above PLAN_VERSION (a newer Hearth's) raises PlanVersionError rather than being half read.
"""

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from enum import StrEnum
from typing import Any

from engines.agent_clients import Verdict, agents_verdict
from engines.external import EXTERNAL_ENGINE
from engines.launch import CPU_ENGINES
from engines.planner import GpuPlan, MemorySplit
from engines.sizing import SizingPlan

PLAN_VERSION = 2
CPU_ONLY_KEYS = ("kv_budget_bytes", "block_size", "max_concurrency")  # a version 1 CPU plan has these
GPU_ONLY_KEYS = ("tensor_parallel_size", "gpu_indices", "gpu_memory_utilization", "split")  # a GPU plan these


class PlanKind(StrEnum):
    """Which planner made the plan: engines.sizing.plan_cpu, engines.planner.plan_gpu, or none (external)."""

    CPU = "cpu"
    GPU = "gpu"
    NONE = "none"


class PlanVersionError(ValueError):
    """A stored plan this Hearth cannot read: a newer Hearth's version, or a version that is not a number."""


@dataclass(frozen=True)
class Parsers:
    """The tool-call and reasoning parsers a deployment runs with (None: off), the pair its model's ``family``
    chose (``chosen_*``, from ``source``), the ``reasons`` in words, and a ``warning`` when requests with tools
    would be refused (console.deployments.agent_support.parser_facts). JSON: the chosen pair is
    ``"chosen": {"tool_call_parser", "reasoning_parser"}``."""

    tool_call_parser: str | None
    reasoning_parser: str | None
    chosen_tool_call_parser: str | None = None
    chosen_reasoning_parser: str | None = None
    family: str | None = None
    source: str | None = None
    reasons: tuple[str, ...] = ()
    warning: str | None = None

    def to_json(self) -> dict[str, Any]:
        chosen = {"tool_call_parser": self.chosen_tool_call_parser, "reasoning_parser": self.chosen_reasoning_parser}
        return {
            "tool_call_parser": self.tool_call_parser,
            "reasoning_parser": self.reasoning_parser,
            "chosen": chosen,
            "family": self.family,
            "source": self.source,
            "reasons": list(self.reasons),
            "warning": self.warning,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Parsers":
        chosen = data.get("chosen") or {}
        return cls(
            tool_call_parser=data.get("tool_call_parser"),
            reasoning_parser=data.get("reasoning_parser"),
            chosen_tool_call_parser=chosen.get("tool_call_parser"),
            chosen_reasoning_parser=chosen.get("reasoning_parser"),
            family=data.get("family"),
            source=data.get("source"),
            reasons=tuple(str(r) for r in data.get("reasons") or ()),
            warning=data.get("warning"),
        )


@dataclass(frozen=True)
class AgentFact:
    """Whether the deployment's context serves one coding agent's first request (engines.agent_clients):
    ``needed`` tokens of context, and why in words; ``room``: served but tight, the tokens left after its prompt
    (AgentFit.room; None: not tight, or a plan stored before it; stored only when set)."""

    name: str
    serves: bool
    needed: int
    reason: str
    room: int | None = None


@dataclass(frozen=True)
class StoredPlan:
    """What Hearth planned for a deployment. Bytes for memory, tokens for lengths and capacity.

    ``sizing`` is the planner's result as the console kept it (its ``fits`` and ``reasons`` include what the
    console added: GPUs held by others, too few GPUs for the replicas, a remedy applied), None for an engine
    Hearth did not launch. A GPU plan's ``sizing.gpu_indices`` are its first replica's GPUs; ``gpu_indices``
    here are every replica's (TP each, in replica order). ``inventory`` says where it was planned ("CPU
    (VLLM_CPU_KVCACHE_SPACE)", "8× NVIDIA H100 80GB HBM3 (79.6 GiB each), simulated (8xH100-80GB)");
    ``gpu_count`` the GPUs free there then, ``inventory_origin`` how the inventory was read, ``gpu_name`` the
    held GPUs' name ("" in a plan stored before names). ``parsers`` None in a plan stored before them.
    """

    sizing: SizingPlan | GpuPlan | None
    inventory: str = ""
    gpu_indices: tuple[int, ...] = ()
    gpu_count: int = 0
    inventory_origin: str = ""
    gpu_name: str = ""
    parsers: Parsers | None = None
    agents: tuple[AgentFact, ...] = ()

    @property
    def kind(self) -> PlanKind:
        """Which planner made it, from the type of ``sizing``."""
        if isinstance(self.sizing, GpuPlan):
            return PlanKind.GPU
        return PlanKind.NONE if self.sizing is None else PlanKind.CPU

    @property
    def cpu(self) -> SizingPlan | None:
        """The CPU sizing view (what engines.vllm and engines.sglang launch a CPU engine with), None otherwise."""
        return self.sizing if isinstance(self.sizing, SizingPlan) else None

    @property
    def gpu(self) -> GpuPlan | None:
        """The GPU plan view, one replica's (what engines.adapters and the simulator launch with), None otherwise."""
        return self.sizing if isinstance(self.sizing, GpuPlan) else None

    def as_cpu(self) -> SizingPlan:
        """The CPU sizing view, for a launch. Raises ValueError for a plan of another kind."""
        if self.cpu is None:
            raise ValueError(f"This deployment's plan is a {self.kind} plan, not a CPU engine's.")
        return self.cpu

    def as_gpu(self) -> GpuPlan:
        """The GPU plan view (one replica's), for a launch. Raises ValueError for a plan of another kind."""
        if self.gpu is None:
            raise ValueError(f"This deployment's plan is a {self.kind} plan, not a GPU engine's.")
        return self.gpu

    @property
    def fits(self) -> bool:
        """Whether the planner found it fits (False for a plan of none)."""
        return self.sizing is not None and self.sizing.fits

    @property
    def reasons(self) -> list[str]:
        """The plan in sentences, shown as they are; the last one says why a plan that does not fit does not."""
        return list(self.sizing.reasons) if self.sizing else []

    @property
    def remedies(self) -> list[str]:
        """What would make a GPU plan that does not fit fit, in sentences (a CPU plan's reasons say it)."""
        return list(self.gpu.remedies) if self.gpu else []

    @property
    def max_model_len(self) -> int:
        """Tokens of context a sequence may hold (0: none planned)."""
        return self.sizing.max_model_len if self.sizing else 0

    @property
    def weights_bytes(self) -> int:
        """Bytes of the checkpoint's tensors (0: none planned)."""
        return self.sizing.weights_bytes if self.sizing else 0

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of KV cache one token holds, before any tensor-parallel split."""
        return self.sizing.kv_bytes_per_token if self.sizing else 0

    @property
    def kv_capacity_tokens(self) -> int:
        """Tokens of KV cache one replica holds (0: none planned)."""
        return self.sizing.kv_capacity_tokens if self.sizing else 0

    @property
    def tensor_parallel_size(self) -> int:
        """GPUs per replica; 0 for a CPU plan or none."""
        return self.gpu.tensor_parallel_size if self.gpu else 0

    @property
    def gpu_memory_utilization(self) -> float:
        """The share (0–1) of each GPU the engine may take; 0.0 for a CPU plan or none."""
        return self.gpu.gpu_memory_utilization if self.gpu else 0.0

    @property
    def max_num_seqs(self) -> int:
        """Sequences one replica runs at once; 0 for a CPU plan or none (the engine's own default)."""
        return self.gpu.max_num_seqs if self.gpu else 0

    @property
    def kv_cache_dtype(self) -> str:
        """The KV cache's dtype: "auto" (the model's) or "fp8"; a CPU plan's is always "auto"."""
        return self.gpu.kv_cache_dtype if self.gpu else "auto"

    @property
    def split(self) -> MemorySplit | None:
        """One GPU's memory, bytes, as the plan splits it; None for a CPU plan or none."""
        return self.gpu.split if self.gpu else None

    def replica_gpus(self, slot: int) -> tuple[int, ...]:
        """The GPU indices of the ``slot``-th replica (0-based): its TP-sized share of ``gpu_indices``."""
        tp = self.tensor_parallel_size or 1
        return self.gpu_indices[slot * tp : (slot + 1) * tp]

    @property
    def agents_verdict(self) -> Verdict | None:
        """Which coding agents this plan serves, in one sentence (engines.agent_clients.agents_verdict); None for a
        plan that did not judge them. An agent whose context fits but is not served was refused for its tools: the
        engine has no tool-call parser."""
        refused = self.parsers is not None and self.parsers.tool_call_parser is None
        refused = refused and any(not a.serves and a.needed <= self.max_model_len for a in self.agents)
        return agents_verdict(self.agents, self.max_model_len, refused)

    def noted(self, reason: str, *, first: bool = False) -> "StoredPlan":
        """This plan with one more reason, last (or ``first``). Raises ValueError for a plan of none."""
        if self.sizing is None:
            raise ValueError("An external deployment's plan holds no reasons.")
        reasons = [reason, *self.sizing.reasons] if first else [*self.sizing.reasons, reason]
        return replace(self, sizing=replace(self.sizing, reasons=reasons))

    def to_json(self) -> dict[str, Any]:
        """The plan as stored and as the JSON API answers it (version PLAN_VERSION, module docstring)."""
        head: dict[str, Any] = {"version": PLAN_VERSION, "kind": str(self.kind)}
        if self.sizing is None:
            return head
        body = asdict(self.sizing)
        if self.gpu is None:
            body |= {"remedies": [], "inventory": self.inventory}
        else:
            body |= {
                "gpu_indices": list(self.gpu_indices),
                "inventory": self.inventory,
                "gpu_count": self.gpu_count,
                "inventory_origin": self.inventory_origin,
                "gpu_name": self.gpu_name,
            }
        body["parsers"] = self.parsers.to_json() if self.parsers else None
        # "room" only where an agent is tight: a plan stored before it reads back as it was stored
        body["agents"] = [{k: v for k, v in asdict(a).items() if k != "room" or v is not None} for a in self.agents]
        return body | head

    @classmethod
    def from_json(cls, data: Mapping[str, Any], engine: str = "") -> "StoredPlan":
        """Read a stored plan of any version up to PLAN_VERSION (module docstring). ``engine`` (the deployment's,
        an EngineKind value or "external") decides a version 1 plan's kind; without it, its keys do.

        Raises PlanVersionError for a newer version, ValueError for a version 2 plan missing a key or a version 1
        plan whose kind neither ``engine`` nor its keys tell.
        """
        version = data.get("version", 1)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise PlanVersionError(f"A stored plan's version is a whole number from 1, not {version!r}.")
        if version > PLAN_VERSION:
            raise PlanVersionError(
                f"This plan was stored by a newer Hearth (plan version {version}); this one reads versions up to "
                f"{PLAN_VERSION}. Upgrade Hearth, or migrate the database back with the newer one first."
            )
        strict = version >= 2
        kind = PlanKind(_field(data, "kind", str, strict)) if strict else _legacy_kind(data, engine)
        if kind == PlanKind.NONE:
            return cls(None)
        common: dict[str, Any] = {
            "inventory": _field(data, "inventory", str, strict),
            "parsers": _field(data, "parsers", Parsers, strict),
            "agents": tuple(AgentFact(**a) for a in _field(data, "agents", list, strict)),
        }
        if kind == PlanKind.CPU:
            return cls(_read(SizingPlan, data, strict), **common)
        gpu = _read(GpuPlan, data, strict)
        indices = _field(data, "gpu_indices", list[int], strict)
        return cls(
            replace(gpu, gpu_indices=indices[: gpu.tensor_parallel_size]),
            gpu_indices=tuple(indices),
            gpu_count=_field(data, "gpu_count", int, strict),
            inventory_origin=_field(data, "inventory_origin", str, strict),
            gpu_name=_field(data, "gpu_name", str, strict),
            **common,
        )


def _legacy_kind(data: Mapping[str, Any], engine: str) -> PlanKind:
    if engine == EXTERNAL_ENGINE or (not engine and not data):
        return PlanKind.NONE
    if engine:
        return PlanKind.CPU if engine in CPU_ENGINES else PlanKind.GPU
    if any(key in data for key in GPU_ONLY_KEYS):
        return PlanKind.GPU
    if any(key in data for key in CPU_ONLY_KEYS):
        return PlanKind.CPU
    raise ValueError(
        f"A stored plan without a version whose kind neither its engine nor its keys tell: {sorted(data)}."
    )


# Per type of a stored field: how it is read from JSON, and what a version 1 plan that lacks it (or holds null)
# reads as. A split's own missing keys read 0 (graphs_in_budget, before dd75c16).
READERS: dict[Any, tuple[Callable[[Any], Any], Any]] = {
    int: (int, 0),
    float: (float, 0.0),
    bool: (bool, False),
    str: (str, ""),
    list: (list, ()),
    list[int]: (lambda v: [int(i) for i in v], ()),
    list[str]: (lambda v: [str(s) for s in v], ()),
    MemorySplit | None: (lambda v: _read(MemorySplit, v, strict=False), None),
    Parsers: (Parsers.from_json, None),
}


def _field(data: Mapping[str, Any], key: str, kind: Any, strict: bool) -> Any:
    """``data[key]`` read as ``kind`` (READERS). Raises ValueError when ``strict`` (version 2) and it is missing."""
    read, empty = READERS[kind]
    if strict and key not in data:
        raise ValueError(f"A version {data.get('version')} plan lacks {key!r}.")
    raw = empty if data.get(key) is None else data[key]
    return None if raw is None else read(raw)  # read even when empty: each list a new one


def _read(cls: Any, data: Mapping[str, Any], strict: bool) -> Any:
    """An instance of the planner's dataclass ``cls`` (SizingPlan, GpuPlan, MemorySplit) from the keys of
    ``data`` named as its fields, each read as its field's type."""
    return cls(**{f.name: _field(data, f.name, f.type, strict) for f in fields(cls)})
