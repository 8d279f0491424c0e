"""Every environment variable Hearth reads is in the settings table ("Configuration", docs/configuration.md).

Read where it is read: the Python of appliance/, console/, gateway/ and engines/ (the typed readers of
appliance/env.py and os.environ / os.getenv), the bring-up scripts (``${NAME:-default}``, ``${NAME:?why}``) and
compose.yaml's interpolations. A secret read through envsecret may also be given as NAME_FILE (the table says so).
"""

import re

from tests.conftest import ROOT
from tests.docs import section

PYTHON_READS = re.compile(
    r"""\b(?:envstr|envint|envfloat|envbool|envsecret)\(\s*["']([A-Z][A-Z0-9_]*)["']"""
    r"""|os\.environ\.get\(\s*["']([A-Z][A-Z0-9_]*)["']"""
    r"""|os\.environ\[\s*["']([A-Z][A-Z0-9_]*)["']\s*\]"""
    r"""|os\.getenv\(\s*["']([A-Z][A-Z0-9_]*)["']"""
)
SHELL_READS = re.compile(r"\$\{([A-Z][A-Z0-9_]*)(?::?[-?])")  # ${NAME:-...}, ${NAME-...}, ${NAME:?...}
# Read, but not settings of Hearth's: what the engine simulator reads as vLLM does (Hearth sets it per launch),
# the interpreter the Makefile hands the scripts, what appliance.web_server tells its own processes, make test's
# own bookkeeping, and the system's temporary folder.
NOT_SETTINGS = {
    "VLLM_API_KEY": "engines/simulator/config.py",
    "PY": "Makefile → scripts",
    "HEARTH_CONSOLE_SOCKET": "appliance/web_server.py",
    "HEARTH_STAGES": "Makefile → scripts/timed.sh (the file make test lists its stages' times in)",
    "TMPDIR": "Makefile (the system's temporary folder, where make soak leaves its tests' files)",
}


def read_in_python() -> dict[str, str]:
    found: dict[str, str] = {}
    for folder in ("appliance", "console", "gateway", "engines"):
        for path in (ROOT / folder).rglob("*.py"):
            for match in PYTHON_READS.finditer(path.read_text()):
                found.setdefault(next(g for g in match.groups() if g), str(path.relative_to(ROOT)))
    return found


def read_in_scripts() -> dict[str, str]:
    found: dict[str, str] = {}
    for path in [*(ROOT / "scripts").glob("*.sh"), ROOT / "compose.yaml", ROOT / "Makefile"]:
        for name in SHELL_READS.findall(path.read_text()):
            found.setdefault(name, str(path.relative_to(ROOT)))
    return found


def settings_table() -> set[str]:
    """The names in the first column of the Configuration table (docs/configuration.md)."""
    rows = [line for line in section("Configuration").splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]*)`", row.split("|")[1])}


def test_the_readers_are_found_where_they_are() -> None:
    python, scripts = read_in_python(), read_in_scripts()
    assert python["HEARTH_GPU_INVENTORY"] == "appliance/settings.py" and python["SECRET_KEY"] == "appliance/settings.py"
    assert python["VLLM_API_KEY"] == "engines/simulator/config.py"
    assert scripts["HEARTH_PORT"] == "scripts/up.sh" and scripts["KEEP_ENGINES"] == "scripts/down.sh"
    assert scripts["DOCKER_GID"] == "compose.yaml"
    assert scripts["HEARTH_ENGINE_PYTHON"] in {"scripts/setup-vllm-cpu.sh", "scripts/setup-sglang-cpu.sh"}  # both


def test_every_environment_variable_the_code_reads_is_in_the_readme_s_settings_table() -> None:
    table = settings_table()
    read = {**read_in_scripts(), **read_in_python()}
    missing = {
        name: where
        for name, where in read.items()
        if name not in table and name not in NOT_SETTINGS and not (name.endswith("_FILE") and name[:-5] in table)
    }
    assert missing == {}, "add these to the Configuration table in docs/configuration.md"


def test_the_table_names_no_variable_nothing_reads() -> None:
    read = {*read_in_scripts(), *read_in_python()}
    assert settings_table() - read == set()
