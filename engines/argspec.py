"""The engines' own argument parsers, replayed: which of an engine's options a list of flags sets, read as the
engine's parser reads it (an unambiguous prefix, ``--flag=value``, aliases such as ``-tp``, vLLM's ``_`` for ``-``).

The engines are not importable from Hearth's venv, so scripts/dump_engine_parser.py, run with an engine's own
Python, dumps its real parser to ``engines/argspecs/<engine>-<version>.json``: every option's strings (its
aliases), dest and nargs, the values it accepts where the engine names a fixed set (``ArgSpec.choices``), and the
parser's allow_abbrev. ``ArgSpec.read`` rebuilds a standard-library
``argparse`` parser from that data, one recording action per option with the engine's nargs, and replays the
flags through it: argparse itself decides what is a prefix, what is a value and what is ambiguous, as it does in
the engine. vLLM's parser (``FlexibleArgumentParser``, vllm/utils/argparse_utils.py in 0.32.0) first rewrites its
argv: ``_`` becomes ``-`` in a long flag's name, ``-O3`` is ``--optimization-level 3``, and ``--json-arg.key
value`` becomes ``--json-arg '{"key": value}'``; ``read`` does the same for a dump marked ``flexible``.

Not replayed: vLLM's ``--config FILE`` (the file's flags are on the engine's host) and value checks (types,
choices), which stay the engine's. One reading is Hearth's own: ``_`` is read as ``-`` in a long flag's name for
SGLang too, whose plain argparse refuses such a flag outright (sglang#5032); reading ``--context_length`` as
``--context-length`` only keeps Hearth from adding a second one to a command that fails either way.
tests/test_engine_parsers.py runs the installed engines' parsers on the same flags and checks they agree.

Pure: the dumps are read from this package's folder, once each.
"""

import argparse
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, NoReturn

from engines.engine_version import parse_version

ARGSPEC_DIR = Path(__file__).with_name("argspecs")
_SEEN = "hearth seen"  # the namespace attribute the recording actions append to (no dest has a space)
_NAME = re.compile(r"(?<=--)[^.]*")  # vLLM's: a long flag's name, from "--" to the first "."

type Nargs = int | str | None  # argparse's: None one value, 0 a switch, "?", "*", "+" or a count


class FlagError(ValueError):
    """The engine's parser would refuse these flags (an ambiguous prefix, a flag missing its value)."""


@dataclass(frozen=True)
class Option:
    """One option of an engine's parser: ``strings`` its option strings (aliases and ``--no-`` forms
    included), ``dest`` what it sets, ``nargs`` how many values it takes (argparse's), ``choices`` the values the
    engine accepts (None: any)."""

    strings: tuple[str, ...]
    dest: str
    nargs: Nargs = None
    choices: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class Given:
    """An option found in the flags: its dest, the option string the parser matched (a prefix expanded)
    and its value(s) as given (None for a switch)."""

    dest: str
    flag: str
    value: str | tuple[str, ...] | None


@dataclass(frozen=True)
class Reading:
    """What the flags set, in order (``given``), and what the parser did not know (``unknown``, passed on
    as they are: the engine decides)."""

    spec: "ArgSpec" = field(repr=False, compare=False)
    given: tuple[Given, ...]
    unknown: tuple[str, ...]

    def sets(self, flag: str) -> bool:
        """Whether the flags set ``flag``'s dest (``flag`` exactly one of the spec's option strings: any alias
        or ``--no-`` form of it counts). Raises KeyError for a flag the spec does not have."""
        dest = self.spec.dest_of(flag)
        return any(g.dest == dest for g in self.given)

    def flags(self) -> frozenset[str]:
        """The canonical flag (ArgSpec.canonical) of every option the flags set."""
        return frozenset(self.spec.canonical(g.dest) for g in self.given)


@dataclass(frozen=True)
class ArgSpec:
    """An engine's argument parser as dumped (scripts/dump_engine_parser.py): ``engine`` "vllm" or "sglang",
    its ``version``, ``flexible`` for vLLM's FlexibleArgumentParser, ``allow_abbrev`` as the engine's parser
    has it, and its ``options``."""

    engine: str
    version: str
    flexible: bool
    allow_abbrev: bool
    options: tuple[Option, ...]

    def dest_of(self, flag: str) -> str:
        """The dest of the option with option string ``flag`` exactly. Raises KeyError if there is none."""
        return _dests(self)[flag]

    def choices(self, flag: str) -> tuple[Any, ...] | None:
        """The values the engine accepts for ``flag`` (one of its option strings exactly), in the engine's order;
        None where it takes any. Raises KeyError for a flag the spec does not have."""
        dest = self.dest_of(flag)
        return next(o.choices for o in self.options if o.dest == dest and flag in o.strings)

    def canonical(self, dest: str) -> str:
        """The name a person knows ``dest``'s option by: its first ``--`` string (``--tensor-parallel-size``,
        not ``-tp``). Raises KeyError for a dest the spec does not have."""
        return _canonical(self)[dest]

    def with_options(self, extra: Iterable[Option]) -> "ArgSpec":
        """This spec and the ``extra`` options whose strings it lacks (flags of other releases of the engine,
        or of the simulator, that Hearth emits and must recognise)."""
        have = _dests(self)
        added = tuple(o for o in extra if not any(s in have for s in o.strings))
        return ArgSpec(self.engine, self.version, self.flexible, self.allow_abbrev, self.options + added)

    def read(self, args: Sequence[str]) -> Reading:
        """Replay ``args`` through the engine's parser. Raises FlagError where that parser would refuse them."""
        parser = _parser(self)
        namespace = argparse.Namespace()
        setattr(namespace, _SEEN, [])
        _, unknown = parser.parse_known_args(vllm_argv(args) if self.flexible else _dashed(args), namespace)
        return Reading(self, tuple(getattr(namespace, _SEEN)), tuple(unknown))


def load(engine: str, version: str | None = None) -> ArgSpec:
    """The dump of ``engine``'s parser nearest ``version``: the newest dumped release not newer than it, else
    the oldest dumped; with no version, the newest. Raises ValueError for an engine with no dump or an
    unparseable version."""
    found = _dumps(engine)
    if not found:
        raise ValueError(f"No dumped argument parser for {engine} in {ARGSPEC_DIR}.")
    if version is None:
        return found[-1]
    key = parse_version(version)
    older = [spec for spec in found if parse_version(spec.version) <= key]
    return older[-1] if older else found[0]


@cache
def _dumps(engine: str) -> tuple[ArgSpec, ...]:
    specs = [_from_json(json.loads(path.read_text())) for path in ARGSPEC_DIR.glob(f"{engine}-*.json")]
    return tuple(sorted(specs, key=lambda spec: parse_version(spec.version)))


def _from_json(data: dict[str, Any]) -> ArgSpec:
    options = tuple(
        Option(tuple(o["strings"]), o["dest"], o["nargs"], tuple(o["choices"]) if "choices" in o else None)
        for o in data["options"]
    )
    return ArgSpec(data["engine"], data["version"], bool(data["flexible"]), bool(data["allow_abbrev"]), options)


@cache
def _dests(spec: ArgSpec) -> dict[str, str]:
    return {string: option.dest for option in spec.options for string in option.strings}


@cache
def _canonical(spec: ArgSpec) -> dict[str, str]:
    names: dict[str, str] = {}
    for option in spec.options:
        names.setdefault(option.dest, next((s for s in option.strings if s.startswith("--")), option.strings[0]))
    return names


class _Record(argparse.Action):
    """Notes the option, the string matched and its value on the namespace, instead of storing it."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        value = tuple(values) if isinstance(values, list) else values
        getattr(namespace, _SEEN).append(Given(self.dest, option_string or "", None if self.nargs == 0 else value))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise FlagError(message)


@cache
def _parser(spec: ArgSpec) -> _Parser:
    parser = _Parser(prog=spec.engine, add_help=False, allow_abbrev=spec.allow_abbrev)
    for option in spec.options:
        parser.add_argument(*option.strings, dest=option.dest, nargs=option.nargs, action=_Record, default=None)
    return parser


def _dash(arg: str) -> str:
    """A long flag with ``_`` for ``-`` in its name (up to a ``.``), its ``=value`` kept; anything else as it is."""
    if not arg.startswith("--"):
        return arg
    key, eq, value = arg.partition("=")
    return _NAME.sub(lambda m: m.group(0).replace("_", "-"), key, count=1) + eq + value


def _dashed(args: Sequence[str]) -> list[str]:
    """``args`` with ``_`` read as ``-`` in long flags' names (after a bare ``--`` argparse reads no flag)."""
    return [_dash(arg) for arg in args]


def vllm_argv(args: Sequence[str]) -> list[str]:
    """``args`` as vLLM 0.32.0's FlexibleArgumentParser.parse_args hands them to argparse (the simulator reads
    its flags the same way)."""
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            out.append(_dash(arg))
        elif arg.startswith("-O") and arg != "-O":
            out += ["--optimization-level", arg[3:] if arg[2] == "=" else arg[2:]]
        elif arg == "-O" and i + 1 < len(args) and args[i + 1] in {"0", "1", "2", "3"}:
            out.append("--optimization-level")
        else:
            out.append(arg)
    return _dotted(out)


def _dotted(args: list[str]) -> list[str]:
    """vLLM's ``--json-arg.key value`` (and ``--json-arg.key+ a,b``) merged into ``--json-arg JSON``, at the end."""
    skip: set[int] = set()
    merged: dict[str, dict[str, Any]] = {}
    for i, arg in enumerate(args):
        if i in skip or not arg.startswith("-") or "." not in arg:
            continue
        name, eq, value = arg.partition("=")
        if eq and "." not in name:
            continue  # the "." was in the value
        if not eq:
            if i + 1 >= len(args):
                raise FlagError(f"argument {arg}: expected one argument")
            value = args[i + 1]
            skip.add(i + 1)
        if name.endswith("+"):
            name, value = name[:-1], json.dumps(value.split(","))
        key, *keys = name.split(".")
        _merge(merged.setdefault(key, {}), keys, _json_or_text(value))
        skip.add(i)
    kept = [arg for i, arg in enumerate(args) if i not in skip]
    return kept + [item for key, value in merged.items() for item in (key, json.dumps(value))]


def _merge(into: dict[str, Any], keys: list[str], value: Any) -> None:
    """vLLM's recursive_dict_update for one dotted flag: lists extend, anything else is replaced."""
    for key in keys[:-1]:
        if not isinstance(into.get(key), dict):
            into[key] = {}
        into = into[key]
    last = keys[-1]
    into[last] = into[last] + value if isinstance(value, list) and isinstance(into.get(last), list) else value


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value
