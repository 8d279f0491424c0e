"""compose.yaml on day one (issue 34, part 2): it reads with .env.example copied as it is, .env.example names every
variable it reads, the Hugging Face token is a secret and the weights volume is declared, the engine images are the
supported releases; and each service's health check, read from compose.yaml, run against the real process started
as compose starts it (web, worker, beat): it passes while the process runs, and fails once the process is gone.

``docker-compose config`` is Debian's docker-compose 1.29 (scripts/test-services.sh installs it; tests/test_image.py
runs it on docs/gpu-server.md's .env too).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import redis
import yaml
from django.conf import settings
from django.test import override_settings

from appliance import celery_heartbeats, healthcheck
from appliance.redis_keys import redis_key
from appliance.runtimes.docker import container_config
from appliance.settings import PLACEHOLDER_SECRETS
from engines.argspec import ARGSPEC_DIR
from engines.launch import EngineKind, LaunchSpec, image_version
from engines.supported import SUPPORTED_ENGINES
from tests.conftest import ROOT, Proc, start_web
from tests.docs import section

COMPOSE = yaml.safe_load((ROOT / "compose.yaml").read_text())
INTERPOLATION = re.compile(r"\$\{([A-Z][A-Z0-9_]*)(?::([-?])([^}]*))?\}")  # ${NAME}, ${NAME:-default}, ${NAME:?why}


def env_example() -> dict[str, str]:
    """.env.example's assignments, NAME → value (comments and blank lines out)."""
    lines = (ROOT / ".env.example").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def health_argv(service: str) -> list[str]:
    """The service's health check command as compose.yaml gives it (exec form), run with this test's Python."""
    test = COMPOSE["services"][service]["healthcheck"]["test"]
    assert test[0] == "CMD" and test[1] == "python", test
    return [sys.executable, *test[2:]]


def healthy(argv: list[str], env: dict[str, str]) -> tuple[bool, str]:
    """Run a health check command as Docker does (exit 0: healthy); whether it passed, and what it said."""
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    return done.returncode == 0, (done.stdout + done.stderr).strip()


def until(seconds: float, check: Any, want: bool) -> str:
    """Run ``check()`` (→ (passed, words)) until it passes (``want``) or fails; its words then. Fails after
    ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        passed, words = check()
        if passed == want:
            return str(words)
        assert time.monotonic() < deadline, f"still {'failing' if want else 'passing'} after {seconds} s: {words}"
        time.sleep(0.5)


@pytest.mark.process
def test_compose_config_passes_with_env_example_copied_as_it_is(tmp_path: Path) -> None:
    shutil.copy(ROOT / "compose.yaml", tmp_path / "compose.yaml")
    shutil.copy(ROOT / ".env.example", tmp_path / ".env")
    argv = ["docker-compose", "--project-name", "hearth-example", "config"]
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load(done.stdout)
    services = config["services"]
    checked = {name for name, service in services.items() if "healthcheck" in service}
    assert checked >= {"web", "worker", "worker-long", "beat"}
    assert services["migrate"]["healthcheck"] == {"test": ["NONE"]}  # `disable: true`, as docker-compose writes it
    for worker in ("worker", "worker-long"):
        assert services[worker]["secrets"] == [{"source": "hf_token"}]
        assert services[worker]["environment"]["HEARTH_HF_TOKEN_FILE"] == "/run/secrets/hf_token"  # the default
    assert "HEARTH_HF_TOKEN_FILE" not in services["web"]["environment"]  # its system check would want the file
    assert config["secrets"]["hf_token"]["file"] == str(tmp_path / "hf_token")
    assert config["volumes"]["weights"]["name"] == settings.HEARTH_WEIGHTS_VOLUME  # the volume engines mount


def test_env_example_names_every_variable_compose_reads_with_compose_s_default_or_a_refused_placeholder() -> None:
    example = env_example()
    reads = {m[0]: (m[1], m[2]) for m in INTERPOLATION.findall((ROOT / "compose.yaml").read_text())}
    assert set(example) == set(reads)
    defaults = {name: default for name, (how, default) in reads.items() if how == "-"}
    assert {name: example[name] for name in defaults} == defaults
    required = {name for name, (how, _) in reads.items() if how == "?"}
    assert required == {"SECRET_KEY", "POSTGRES_PASSWORD", "DOCKER_GID"}
    assert example["SECRET_KEY"] in PLACEHOLDER_SECRETS  # appliance.settings refuses to start with it
    assert not example["DOCKER_GID"].isdigit()  # no group of the image: the worker cannot start until it is set
    header = (ROOT / "compose.yaml").read_text().split("\n\n", 1)[0]
    assert "cp .env.example .env" in header


def test_the_dockerfile_s_health_check_is_the_web_s_in_compose() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text().replace("\\\n", "")
    [command] = re.findall(r"^HEALTHCHECK .*? CMD (.*)$", dockerfile, re.M)
    web = COMPOSE["services"]["web"]["healthcheck"]["test"]
    assert command == f'{web[1]} {web[2]} "{web[3]}"'


def test_the_supported_engines_are_the_default_images_the_readme_names_with_their_parsers_dumped() -> None:
    gpu_server = section("On a GPU server")
    for engine, supported in SUPPORTED_ENGINES.items():
        assert image_version(supported.image) == f"v{supported.version}"
        assert (ARGSPEC_DIR / f"{engine}-{supported.version}.json").is_file()
        assert f"`{supported.image}`" in gpu_server
        if f"HEARTH_IMAGE_{engine.upper()}" not in os.environ:
            assert settings.HEARTH_ENGINE_IMAGES[engine] == supported.image


def test_an_empty_token_file_gives_engines_no_token(tmp_path: Path) -> None:
    """compose's hf_token secret is an empty file while there is no token."""
    (tmp_path / "hf_token").write_text("\n")
    spec = LaunchSpec(
        engine=EngineKind.VLLM, program=[], args=[], env={}, host="h", port=8000, api_key="k", served_model_name="m"
    )
    with override_settings(HEARTH_HF_TOKEN_FILE=str(tmp_path / "hf_token")):
        assert "HF_TOKEN" not in container_config("r", spec, {})["environment"]


def test_a_worker_s_health_is_its_own_host_s_not_another_worker_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each worker container answers for itself (its host name), as when compose runs several."""
    monkeypatch.setattr(celery_heartbeats, "REDIS_FRESH", 0.0)  # the suite's Redis may have started seconds ago
    with override_settings(HEARTH_INSTANCE=f"compose-health-{uuid.uuid4().hex[:8]}"):
        client, workers = redis.Redis.from_url(settings.REDIS_URL), redis_key("celery-workers")
        try:
            client.hset(workers, "another-host pid 7", json.dumps({"at": time.time(), "every": 2.0}))
            assert celery_heartbeats.stopped_here("worker") == "no worker has ever run here"
            celery_heartbeats.note_worker(SimpleNamespace(interval=2.0))  # as this host's worker's heartbeat does
            assert celery_heartbeats.stopped_here("worker") == ""
            assert healthcheck.main(["worker"]) == 0 and healthcheck.main(["web"]) == 1  # web's check is HTTP
        finally:
            client.delete(workers)


@pytest.fixture
def own_env(live_env: dict[str, str]) -> dict[str, str]:
    """The environment compose gives web, worker and beat alike (one instance, so the same Redis keys): the test's
    database and Redis, an instance name of its own, and beat's shortest period 1 s (so it is taken for stopped
    after limit_for(1) = 6 s of silence)."""
    periods = ("HEARTH_SCRAPE_INTERVAL", "HEARTH_RECONCILE_INTERVAL", "HEARTH_ACCOUNTING_CHECK_INTERVAL")
    quick = dict.fromkeys(periods, "1")
    instance = f"compose-health-{uuid.uuid4().hex[:8]}"
    return {**live_env, **quick, "HEARTH_INSTANCE": instance}


@pytest.mark.django_db(transaction=True)  # the processes read the test's database
def test_the_web_s_health_check_passes_whatever_allowed_hosts_names_and_fails_once_it_stops(
    own_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**own_env, "ALLOWED_HOSTS": "hearth.example.com"}  # as a .env for a named server sets it
    proc, base = start_web(env, tmp_path / "web.log")
    try:
        assert httpx.get(base + "/login/").status_code == 400  # why the check asks /ready, not a console page
        argv = health_argv("web")
        assert argv[-1].count("http://127.0.0.1:8000/") == 1
        argv[-1] = argv[-1].replace("http://127.0.0.1:8000/", base + "/")
        until(60, lambda: healthy(argv, env), want=True)
    finally:
        proc.stop()
    assert not healthy(argv, env)[0]


@pytest.mark.django_db(transaction=True)  # the processes read the test's database
def test_the_worker_s_and_beat_s_health_checks_pass_while_they_run_and_fail_once_they_are_killed(
    own_env: dict[str, str], tmp_path: Path
) -> None:
    names = ("worker", "worker-long", "beat")
    commands = {name: [sys.executable, *COMPOSE["services"][name]["command"][1:]] for name in names}
    commands["beat"][commands["beat"].index("-s") + 1] = str(tmp_path / "celerybeat-schedule")  # compose's /data
    checks = {name: health_argv(name) for name in commands}
    assert healthy(checks["worker"], own_env) == (False, "no worker has ever run here")
    assert healthy(checks["worker-long"], own_env) == (False, "no long-task worker has ever run here")
    assert healthy(checks["beat"], own_env) == (False, "Celery beat has never run here")
    procs = {name: Proc(argv, own_env, tmp_path / f"{name}.log") for name, argv in commands.items()}
    try:
        for name, proc in procs.items():
            assert until(90, partial(healthy, checks[name], own_env), want=True) == f"{name}: running", proc.output()
    finally:
        for proc in procs.values():
            proc.crash()  # SIGKILL: no word from the process, only its silence
    said = {name: until(30, partial(healthy, checks[name], own_env), want=False) for name in commands}
    assert said["worker"].startswith("no worker has answered for ")
    assert said["worker-long"].startswith("no long-task worker has answered for ")
    assert said["beat"].startswith("Celery beat has not run for ")
