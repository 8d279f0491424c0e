"""The shared test world: real PostgreSQL and Redis, and real web and Celery processes when asked.

Tests that talk to the live processes use ``@pytest.mark.django_db(transaction=True)`` so their rows
are committed and visible to those processes.
"""

import importlib
import itertools
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
import redis
from django.conf import settings
from django.core.management.base import CommandError
from django.db import OperationalError, connection
from django.test import TransactionTestCase

from appliance.celery_queues import LONG_QUEUE, UPKEEP_QUEUE
from appliance.redis_keys import instance_prefix
from console.observability import step_cache
from tests.orphans import end_orphans, run_database
from tests.ports import free_port

if TYPE_CHECKING:
    from django.test import Client

    from appliance.runtimes.process import ProcessRuntime
    from tests.simworld import Served

ROOT = Path(__file__).resolve().parent.parent


# Fixtures that start processes (a web server, a Celery worker, simulators): a test using one is marked
# ``process`` (pyproject.toml's markers), so `make check` can leave it out. Session- and module-scoped ones
# start before processes_are_marked can see them, so they are named here.
PROCESS_FIXTURES = frozenset({"live_env", "web", "worker", "served", "sim_factory", "sim"})
# Markers of the tests that may start processes; `make check` runs the tests without any of them.
SLOW_MARKERS = ("process", "engine", "docker", "browser")


def pytest_sessionstart(session: pytest.Session) -> None:
    """End what an earlier run killed mid-way left on this run's test database (tests.orphans), before
    pytest-django makes it again."""
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("postgresql"):
        end_orphans(run_database(db["NAME"], os.environ.get("PYTEST_XDIST_WORKER", "")))


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> Iterator[None]:
    """Tests using PROCESS_FIXTURES are marked ``process`` and each test gets its pytest-xdist group (xdist_group),
    before the other plugins' hooks (pytest-xdist's reads the groups into node ids). After them (pytest-django's puts
    the tests using the database in its own order): the engines' queue comes first, so it starts at once (make test
    keeps this order: --no-loadscope-reorder), its ``heavy`` tests first within it, and tests marked ``last`` after
    all the others (tests/test_secrets_kept.py reads what they left).

    The heavy tests' engine (tests/ledgerworld.py) is one Hearth did not launch, in their database: the session's
    Celery worker, which engine tests start (the ``worker`` fixture) and which lives as long as its pytest-xdist
    worker, would reconcile it as an engine that exited and take its route away (the gateway then answers 503). So
    they run before any other test of the queue."""
    for item in items:
        if PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.process)
        item.add_marker(pytest.mark.xdist_group(xdist_group(item)))
    yield
    items.sort(
        key=lambda item: (
            item.get_closest_marker("last") is not None,
            xdist_group(item) != ENGINES_QUEUE,
            item.get_closest_marker("heavy") is None,
        )
    )


ENGINES_QUEUE = "engines"
# Seconds a real CPU engine gets to be ready: a bound for CI's slowest box beside three busy workers, not a target.
# Alone on an idle 2-core box vLLM is ready in ~30 s and SGLang in 28-151 s; a CI box ~2.5× slower than that one
# missed 180 and 300 s once an engine left loading by a failed test shared the cores (engines_end_with_their_test).
ENGINE_READY_WITHIN = 600


def xdist_group(item: pytest.Item) -> str:
    """Where `make test` (pytest-xdist's ``--dist loadgroup``) runs ``item``: a real CPU engine's test, or one marked
    ``heavy``, in one queue, one after the other (two engines starting at once on 2 cores beside the other workers
    missed their 180-300 s bounds in CI, and a heavy test's deadlines beside an engine's start); any other test with
    its file, so a module's fixtures start once and its tests keep their order."""
    if item.get_closest_marker("engine") or item.get_closest_marker("heavy"):
        return ENGINES_QUEUE
    return item.nodeid.split("::")[0]


@pytest.fixture(autouse=True)
def processes_are_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test without one of SLOW_MARKERS that starts a process fails, naming the marker it needs: so the
    markers stay true, and `make check` stays fast."""
    if any(request.node.get_closest_marker(name) for name in SLOW_MARKERS):
        return

    def refuse(self: subprocess.Popen[bytes], args: object, *rest: object, **kwargs: object) -> None:
        raise AssertionError(f"this test starts a process ({str(args)[:100]}): mark it process (pyproject.toml)")

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)


def _flush_again_after_a_deadlock(teardown: Callable[[TransactionTestCase], None]) -> Callable[..., None]:
    """TransactionTestCase's teardown empties every table with one TRUNCATE while the session's Celery worker (its
    scrapes and reconciles every second or two) and a test's web server may be reading them: PostgreSQL can then
    find a deadlock and end the TRUNCATE. It is tried again after a growing pause, eight times in all (a flush
    failed in CI beside a browser test's polling page, when it was tried three times without a pause and the
    cause went unprinted); anything else is raised, with the database's own words."""

    def flush(case: TransactionTestCase) -> None:
        for attempt in range(8):
            try:
                return teardown(case)
            except (OperationalError, CommandError) as exc:
                cause = str(exc.__cause__ or exc)
                if "deadlock detected" not in cause or attempt == 7:
                    raise AssertionError(f"the flush after the test failed (attempt {attempt + 1}): {cause}") from exc
                time.sleep(0.2 * (attempt + 1))
        return None

    return flush


TransactionTestCase._fixture_teardown = _flush_again_after_a_deadlock(  # type: ignore[method-assign]
    TransactionTestCase._fixture_teardown
)


@pytest.fixture(autouse=True, scope="session")
def clean_redis() -> None:
    """The session's Hearth instance's keys removed (appliance.redis_keys), key by key: a FLUSHDB is announced to
    every client tracking keys on the server (RESP3 client-side caching), so the gateways of other sessions and
    xdist workers would all read their keys and routes again. Only this instance's: a pytest run without xdist
    shares Redis database 15 with a full run's first worker, whose keys it once removed mid-run."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    for batch in itertools.batched(client.scan_iter(match=f"{instance_prefix()}*", count=1000), 1000):
        client.unlink(*batch)


@pytest.fixture(autouse=True)
def fresh_step_cache() -> None:
    """Each test's history starts unknown to this process (a rolled-back test's sample ids come back on SQLite)."""
    step_cache.clear()


@pytest.fixture
def seeded_gpu_prices(transactional_db: None) -> None:
    """The $/GPU-hour rows migration observability 0005 seeds, made again where missing: a transactional test run
    before this one on the same worker emptied every table, seeds too (a price-less box charges nothing)."""
    from console.observability.models import PriceSetting

    seeded = importlib.import_module("console.observability.migrations.0005_seed_mappings_and_prices")
    for gpu, price, source in seeded.DEFAULT_PRICES:
        PriceSetting.objects.get_or_create(gpu_model=gpu, defaults={"usd_per_gpu_hour": price, "source": source})


@pytest.fixture(scope="session")
def live_env(django_db_setup: None, django_db_blocker: pytest.FixtureRequest) -> dict[str, str]:
    """Environment for child processes: the test database pytest-django created, and test settings."""
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        db = connection.settings_dict
    url = f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    # the test process's instance name: its Redis keys (appliance.redis_keys) are the children's
    return {**os.environ, "DATABASE_URL": url, "HEARTH_INSTANCE": settings.HEARTH_INSTANCE, "PYTHONUNBUFFERED": "1"}


class Proc:
    """A child process whose output goes to a file, for assertions and for the failure report."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.argv, self.env, self.log = argv, env, log
        self.proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
        )

    def restart(self) -> None:
        """Start the same command again (after stop), its output appended to the same file."""
        self.proc = subprocess.Popen(
            self.argv,
            cwd=ROOT,
            env=self.env,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def crash(self) -> None:
        """SIGKILL the process and its children (a Celery worker's pool and beat), as a host crash would."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_web(env: dict[str, str], log: Path) -> tuple[Proc, str]:
    """The appliance's web server as `make up` runs it (appliance.web_server: a relay process, HEARTH_WEB_WORKERS
    unless ``env`` says, and the console's own process behind it), once it answers; returns it and its base URL."""
    port = free_port()
    argv = [sys.executable, "-m", "appliance.web_server", "--host", "127.0.0.1", "--port", str(port)]
    # its own metrics folder: web_server empties the one it is given, which another server may be using
    defaults = {"HEARTH_WEB_WORKERS": "1", "PROMETHEUS_MULTIPROC_DIR": str(log.parent / f"prometheus-{port}")}
    proc = Proc(argv, {**defaults, **env}, log)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90  # the console's process first, then the relay
    while time.monotonic() < deadline:
        try:
            httpx.get(base + "/login/", timeout=1)
            return proc, base
        except httpx.TransportError:
            assert proc.proc.poll() is None, proc.output()
            time.sleep(0.2)
    proc.stop()
    pytest.fail("web server did not come up:\n" + proc.output())


@pytest.fixture(scope="session")
def web(live_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The appliance's web server as a real process (start_web); yields its base URL."""
    proc, base = start_web(live_env, tmp_path_factory.mktemp("web") / "web.log")
    yield base
    proc.stop()


WORKER_READY = re.compile(r"@\S+ ready\.")  # a Celery worker's line once it takes tasks


class Workers:
    """The appliance's two Celery workers as real processes, as `make up` runs them (appliance.celery_queues):
    ``upkeep`` takes the default queue, with beat embedded unless ``beat`` is false; ``long`` the long tasks.
    Proc's interface over both."""

    def __init__(self, env: dict[str, str], folder: Path, beat: bool = True) -> None:
        celery = [sys.executable, "-m", "celery", "-A", "appliance", "worker", "--loglevel", "INFO"]
        embedded = ["-B", "-s", str(folder / "schedule")] if beat else []
        self.upkeep = Proc([*celery, "-Q", UPKEEP_QUEUE, "-c", "3", *embedded], env, folder / "worker.log")
        self.long = Proc([*celery, "-Q", LONG_QUEUE, "-n", "long@%h", "-c", "2"], env, folder / "worker-long.log")
        self.ready()

    @property
    def procs(self) -> tuple[Proc, Proc]:
        return self.upkeep, self.long

    def ready(self, before: int = 0) -> None:
        """Wait until each says it is ready ("celery@host ready.") for the ``before + 1``-th time (its log keeps
        every start's lines)."""
        deadline = time.monotonic() + 60
        for proc in self.procs:
            while len(WORKER_READY.findall(proc.output())) <= before:
                assert proc.proc.poll() is None and time.monotonic() < deadline, self.output()
                time.sleep(0.3)

    def restart(self) -> None:
        """Start both again (after stop or crash), once each says it is ready."""
        before = len(WORKER_READY.findall(self.upkeep.output()))
        for proc in self.procs:
            proc.restart()
        self.ready(before)

    def crash(self) -> None:
        """SIGKILL both and their pools (and beat), as a host crash would."""
        for proc in self.procs:
            proc.crash()

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()

    def output(self) -> str:
        """Both logs, the upkeep worker's first, each under a line naming it."""
        return "".join(f"==> {proc.log.name} <==\n{proc.output()}" for proc in self.procs)


def start_worker(env: dict[str, str], folder: Path) -> Workers:
    """The appliance's Celery workers (Workers), once each says it is ready."""
    return Workers(env, folder)


@pytest.fixture(scope="session")
def worker(live_env: dict[str, str], web: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    """The session's Celery workers (process runtime), sending capacity checks to the session's web server."""
    proc = start_worker({**live_env, "HEARTH_GATEWAY_URL": web}, tmp_path_factory.mktemp("worker"))
    yield proc
    proc.stop()
    _stop_engines_left_running()


def _engines() -> "ProcessRuntime":
    from appliance.runtimes.process import ProcessRuntime

    return ProcessRuntime(settings.DATA_DIR / "engines")


def _stop_engines_left_running(kept: frozenset[str] = frozenset()) -> None:
    """A failed test can leave an engine running: end every process-runtime engine of this test run but ``kept``."""
    runtime = _engines()
    for name in runtime.names() - kept:
        runtime.stop(name, grace_seconds=5)


@pytest.fixture(autouse=True)
def engines_end_with_their_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """The engines an ``engine`` test started (not its module's) end with it: one that failed waiting for its
    engine to load left it loading beside the next test's, which then missed its bound too (CI, one failed vLLM
    start and then every engine test after it)."""
    if request.node.get_closest_marker("engine") is None:
        yield
        return
    before = frozenset(_engines().names())
    yield
    _stop_engines_left_running(kept=before)


def login(base: str, username: str = "admin", password: str = "admin-password-1") -> httpx.Client:
    """An httpx client logged in to the console, sending the CSRF token the JSON API wants."""
    client = httpx.Client(base_url=base, timeout=30)
    client.get("/login/")
    token = client.cookies["csrftoken"]
    resp = client.post("/login/", data={"username": username, "password": password, "csrfmiddlewaretoken": token})
    assert resp.status_code == 302, resp.text
    client.headers["X-CSRFToken"] = client.cookies["csrftoken"]
    client.headers["Referer"] = base + "/"
    return client


def serving(*names: str) -> None:
    """Deployments serving ``names``, stopped and never launched: the names a key's or a member's allowed_models
    may hold (console.access.served_models)."""
    from console.deployments.models import Deployment, DeploymentState

    for name in names:
        Deployment.objects.create(
            name=name,
            engine="simulator",
            served_model_name=name,
            max_model_len=0,
            kv_space_gib=0,
            plan={},
            state=DeploymentState.STOPPED,
        )


MEMBER_PASSWORD = "a-long-password-1"


@pytest.fixture
def member(django_user_model: type) -> object:
    """The member "mia" (role member), password MEMBER_PASSWORD."""
    from console.access.models import Member

    user = django_user_model.objects.create_user("mia", "", MEMBER_PASSWORD)  # type: ignore[attr-defined]
    Member.objects.create(user=user, role="member")
    return user


@pytest.fixture
def root(client: "Client", django_user_model: type) -> "Client":
    """Django's test client, signed in through the login page (from 10.1.2.3, which the audit log records) as the
    superuser "root", password MEMBER_PASSWORD."""
    django_user_model.objects.create_superuser("root", "", MEMBER_PASSWORD)  # type: ignore[attr-defined]
    signed_in = client.post("/login/", {"username": "root", "password": MEMBER_PASSWORD}, REMOTE_ADDR="10.1.2.3")
    assert signed_in.status_code == 302
    return client


@pytest.fixture
def admin_user(django_user_model: type) -> object:
    return django_user_model.objects.create_superuser("admin", "", "admin-password-1")  # type: ignore[attr-defined]


@pytest.fixture
def admin(client: "Client", admin_user: object) -> "Client":
    """Django's test client, logged in as the admin."""
    client.force_login(admin_user)  # type: ignore[arg-type]
    return client


@pytest.fixture
def served(web: str, worker: Proc, admin_user: object) -> Iterator["Served"]:
    """A ready simulator deployment "llama" behind the gateway, and a key for it (tests/simworld.py)."""
    from tests.simworld import Served, deploy, wait_state  # simworld imports this module

    client = login(web)
    dep_id = deploy(web, client, "llama")
    dep = wait_state(client, dep_id, {"ready", "failed"})
    assert dep["state"] == "ready", (dep, worker.output()[-3000:])
    assert dep["plan"]["inventory"].startswith("8× NVIDIA H100") and dep["plan"]["tensor_parallel_size"] == 1
    yield Served(web, client, dep_id, client.post("/api/keys", json={"name": "sim"}).json()["key"])
    client.post(f"/api/deployments/{dep_id}/stop")
    wait_state(client, dep_id, {"stopped", "failed"})
