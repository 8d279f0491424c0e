"""How Hearth starts SGLang's server without its API key in the process's argv or in SGLang's log.

SGLang takes its key only as ``--api-key`` (ServerArgs.api_key has no environment fallback in 0.5.15.post1)
and logs its whole ServerArgs at start, key included (srt/entrypoints/engine.py:
``logger.info(f"{server_args=}")``). The launcher, a few lines the engine's own Python runs with ``-c``,
takes the key from the environment variable API_KEY_ENV, adds it to ``sys.argv`` (``/proc/<pid>/cmdline``
keeps the argv the process was started with, without it), makes ServerArgs' repr print ``api_key='<hidden>'``,
and runs ``python -m sglang.launch_server`` as it would have run. tests/test_sglang_cpu.py checks both on a
real SGLang.
"""

API_KEY_ENV = "HEARTH_ENGINE_API_KEY"
LAUNCHER = f"""\
import os, runpy, sys
key = os.environ.pop({API_KEY_ENV!r})
sys.argv[1:1] = ["--api-key", key]
from sglang.srt import server_args
shown = server_args.ServerArgs.__repr__
server_args.ServerArgs.__repr__ = lambda self: shown(self).replace(repr(key), "'<hidden>'")
runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)
"""


def launcher_program(python: str) -> list[str]:
    """The argv prefix that runs SGLang's server through the launcher with ``python`` (a path or
    ``python3`` in SGLang's image); the spec's environment must carry the key as API_KEY_ENV."""
    return [python, "-c", LAUNCHER]
