"""Why an engine ended, in the words its deployment's reason and the crash alert carry
(console.deployments.lifecycle): an exit code read says what it means; one that cannot be read (the engine was
started by a worker before the last restart, as `make up` again leaves it) says so, and what a SIGKILL would mean,
instead of leaving only an old line of its log (a trial: "exited while serving with an unknown code: RuntimeError:
cancelled" for an engine killed with SIGKILL)."""

from console.deployments.lifecycle import _explain
from console.deployments.models import Deployment

CPU = Deployment(name="smol", engine="vllm-cpu")


def test_a_sigkill_read_says_who_kills_so() -> None:
    words = _explain(CPU, -9, False, "", "while serving")
    assert words.startswith("The engine exited while serving with code -9.") and "killed (SIGKILL)" in words


def test_an_exit_code_not_read_says_so_and_what_a_kill_would_mean() -> None:
    words = _explain(CPU, None, False, "RuntimeError: cancelled", "while serving")
    assert words.startswith("The engine exited while serving with an unknown code: RuntimeError: cancelled.")
    assert "Its exit code cannot be read (a worker before this one started it)" in words
    assert "it was killed: by an admin, or by the kernel's OOM killer" in words


def test_an_ordinary_exit_says_its_code_and_cause_alone() -> None:
    assert _explain(CPU, 1, False, "ValueError: bad flag", "while loading") == (
        "The engine exited while loading with code 1: ValueError: bad flag."
    )
