"""How an engine family's flag rules (engines.vllm_flags, engines.sglang_flags) become a command's flags: the
flags Hearth wants, less the ones the user set (read by the engine's own parser, engines.argspec) and the ones
the engine's version does not take. The tables, and the sources they were read in, live in the families.

Pure: a version, the wanted flags and a Reading of the user's flags in, flags out.
"""

from collections.abc import Mapping, Sequence

from engines.argspec import Reading
from engines.engine_version import parse_version
from engines.planner import GpuPlan

type Gate = tuple[str, str | None]  # (flag, value), the value None for a switch or for any value
type Span = tuple[str, str | None]  # [first version that accepts it, first that no longer does), None: still does
type Wanted = tuple[str, str | None, bool]  # (flag, value or None for a switch, required?)


def accepts(version: tuple[int, ...], spans: Sequence[Span]) -> bool:
    """Whether ``version`` (a parse_version key) lies in one of ``spans``."""
    return any(parse_version(a) <= version and (b is None or version < parse_version(b)) for a, b in spans)


def gated(
    engine: str, version: str, wanted: Sequence[Wanted], gates: Mapping[Gate, Sequence[Span]], user: Reading
) -> list[str]:
    """``(flag, value, required)`` the user did not set (by any alias, prefix or spelling ``user``'s parser
    takes) and ``engine`` ``version`` accepts (``gates``: a gate not listed, every version), flattened in order.
    A required flag the version refuses raises ValueError (the plan would not hold without it); an optional one
    is left out. Every wanted flag must be one of the parser's option strings (KeyError otherwise)."""
    parsed = parse_version(version)
    added: list[str] = []
    for flag, value, required in wanted:
        if user.sets(flag):
            continue
        spans = gates.get((flag, value)) or gates.get((flag, None))
        if spans and not accepts(parsed, spans):
            if required:
                shown = f"{flag} {value}" if value else flag
                where = " and ".join(f"{a} or newer" if b is None else f"{a} to before {b}" for a, b in spans)
                raise ValueError(f"{engine} {version} does not take {shown}; {engine} takes it in {where}.")
            continue
        added += [flag] if value is None else [flag, value]
    return added


def check_floor(engine: str, version: str, minimum: str) -> None:
    """Raises ValueError for a ``version`` older than ``minimum`` (or unparseable)."""
    if parse_version(version) < parse_version(minimum):
        raise ValueError(f"{engine} {version} is older than the oldest {engine} Hearth builds flags for ({minimum}).")


def refuse_owned(user: Reading, owned: Sequence[str]) -> None:
    """Raises ValueError naming the flags of ``owned`` (Hearth's: the gateway reaches the engine by them) that
    the user set, in ``owned``'s order."""
    if taken := [flag for flag in owned if user.sets(flag)]:
        raise ValueError(f"{', '.join(taken)}: Hearth sets these itself (the gateway relies on them).")


def checked_plan(plan: GpuPlan) -> GpuPlan:
    """``plan``, if it fits on at least one GPU; else ValueError with its last reason."""
    if not plan.fits or plan.tensor_parallel_size < 1:
        raise ValueError("This plan does not fit, so there is nothing to launch: " + " ".join(plan.reasons[-1:]))
    return plan


def kv_dtype(plan: GpuPlan, table: Mapping[str, str], engine: str) -> str | None:
    """The engine's KV cache dtype for the plan's (``table``), None for "auto"; ValueError for one it lacks."""
    if plan.kv_cache_dtype == "auto":
        return None
    if plan.kv_cache_dtype not in table:
        raise ValueError(f"{engine} takes no KV cache dtype {plan.kv_cache_dtype!r} from Hearth ({', '.join(table)}).")
    return table[plan.kv_cache_dtype]
