from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator

import pytest
import redis
from django.conf import settings
from rest_framework.test import APIClient

from scrapejobs import processes
from tests.support import durations
from tests.support.net import free_port
from tests.support.private_pg import private_pg  # noqa: F401 - a fixture, for every test
from tests.support.procs import Proc, service_env, stop_all, wait_for, wait_for_web
from tests.support.target import TargetServer

_names = itertools.count(1)


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """Each test database (one per parallel process) is created as a copy of a template migrated
    once per tree on the server (bench/common.py ``migrated_template``): Django's ``migrate`` then
    finds nothing to apply. Four processes each migrating their own took seconds of CPU apiece
    at the start of every run (make test-fast's two minutes included)."""
    server = os.environ.get("DATABASE_URL")
    if not server:
        return  # settings' default server: each test database migrated as Django does it
    from bench.common import migrated_template  # noqa: PLC0415 - the benchmarks' helper, shared

    settings.DATABASES["default"].setdefault("TEST", {})["TEMPLATE"] = migrated_template(server)


@pytest.fixture(autouse=True)
def _no_settings_left_overridden() -> Iterator[None]:
    """Every test ends with the settings it started with. Overrides undone out of order (a
    ``settings`` fixture set up before an ``override_settings`` fixture but changed after it) leave
    the inner override in force for every later test: a results storage left pointing at one
    test's temporary directory made every later end-to-end test read results where none were
    written. Set up before any other fixture, so this checks after all of them are undone."""
    from django.conf import settings as django_settings
    from django.test.signals import storages_changed

    before = vars(django_settings)["_wrapped"]
    yield
    after = vars(django_settings)["_wrapped"]
    if after is not before:
        leaked = sorted(set(vars(after)) - {"default_settings", "_deleted", "SETTINGS_MODULE"})
        setattr(django_settings, "_wrapped", before)  # noqa: B010 - LazySettings' private slot
        storages_changed(setting="STORAGES")  # built anew from the restored settings
        pytest.fail(f"this test left settings overridden: {leaked}")


@pytest.fixture(autouse=True)
def _clean_redis() -> Iterator[None]:
    """Each test starts with empty service state and an empty broker (both are real Redis)."""
    for url in {settings.REDIS_URL, settings.CELERY_BROKER_URL}:
        redis.Redis.from_url(url).flushdb()
    from apps.redis_clients import state_redis

    state_redis.cache_clear()
    yield


@pytest.fixture(autouse=True)
def _clean_process_caches() -> Iterator[None]:
    """Each test starts with empty process-local caches too: the domain policies, the tenants'
    robots.txt switches and the robots.txt copies a worker keeps in memory (30 s). A copy kept by
    an earlier test is found by a later one whose target server got the same port: a target that
    was down had its robots.txt cached as unavailable, and the later test's job came back queued
    for a retry (CI, test_grouping's redirect chain)."""
    from apps.politeness.robots import robots_local_cache_clear
    from apps.politeness.selectors import domain_limits_cache_clear

    domain_limits_cache_clear()
    robots_local_cache_clear()
    yield
    domain_limits_cache_clear()
    robots_local_cache_clear()


@pytest.fixture(scope="session", autouse=True)
def _lease_renewals_by_hand() -> None:
    """In the test process the lease keeper renews only when a test calls ``renew_all()``. Its
    thread renews on a connection of its own, which does not see the rows of a test that runs in
    a transaction, so a tick (every SCRAPEJOBS_LEASE_S / 3) that landed during such a test's
    attempt refused the lease of the job it was running: ``lease_lost`` (seen in CI,
    tests/politeness/test_robots.py). The cancel watcher keeps its half-second; the worker
    processes that tests start keep their own keepers."""
    from apps.scraping import leases

    with leases._keeper_lock:
        leases._keeper = (os.getpid(), leases.LeaseKeeper(interval_s=24 * 3600))


@pytest.fixture
def local_results(tmp_path) -> Iterator[object]:
    """Results (and the default storage) on the local filesystem under this test's tmp_path:
    the directory, whatever the settings under test name."""
    from django.test import override_settings

    backend = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(tmp_path), "allow_overwrite": True},
    }
    with override_settings(
        STORAGES={
            "default": backend,
            "results": backend,
            "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
        }
    ):
        yield tmp_path


@pytest.fixture
def make_tenant(db: None) -> Callable[..., tuple[object, str, APIClient]]:
    """Create a tenant; returns (tenant, token, an API client authenticated with the token)."""
    from apps.tenants.services import tenant_create

    def make(name: str | None = None, **kw: object) -> tuple[object, str, APIClient]:
        created = tenant_create(name=name or f"tenant-{next(_names)}", **kw)  # type: ignore[arg-type]
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {created.token}")
        return created.tenant, created.token, client

    return make


@pytest.fixture
def api(make_tenant: Callable[..., tuple[object, str, APIClient]]) -> APIClient:
    return make_tenant()[2]


@pytest.fixture
def tenant(make_tenant: Callable[..., tuple[object, str, APIClient]]) -> object:
    """A tenant of its own for the test (its token and client: ``make_tenant``)."""
    return make_tenant()[0]


@pytest.fixture
def target() -> Iterator[TargetServer]:
    server = TargetServer().start()
    yield server
    server.stop()


class Services:
    """The real processes of the service, started against the test database."""

    def __init__(self, env: dict[str, str]):
        self.env = env
        self.procs: list[Proc] = []

    def start(self, kind: str, *, env: dict[str, str] | None = None, **kw: object) -> Proc:
        """Start one process; ``env`` adds to (or overrides) this process's environment only."""
        argv = getattr(processes, kind)(**kw)
        if kind == "beat":
            argv = processes.beat(schedule_file=f"/tmp/sj-beat-{next(_names)}")
        proc = Proc(kind, argv, {**self.env, **(env or {})}).start()
        self.procs.append(proc)
        return proc

    def start_all(self, *, worker_concurrency: int = 20) -> Services:
        self.start("control")
        self.start("beat")
        self.start("worker", concurrency=worker_concurrency)
        return self

    def stop(self) -> None:
        stop_all(list(reversed(self.procs)))

    def logs(self) -> str:
        return "\n".join(f"----- {p.name} ({p.log})\n{p.tail()}" for p in self.procs)


@pytest.fixture
def services(transactional_db: None, request: pytest.FixtureRequest) -> Iterator[Callable[..., Services]]:
    """Factory: ``services(**env_overrides).start_all()``; everything is stopped after the test and
    the processes' last log lines are printed when the test failed."""
    started: list[Services] = []

    def make(**overrides: str) -> Services:
        s = Services(service_env(**overrides))
        started.append(s)
        return s

    yield make
    # The test is over: a process still finishing a slow fetch or waiting on a server the test
    # broke is not waited for past a short grace (its own shutdown has tests of its own).
    stop_all([p for s in started for p in reversed(s.procs)], timeout=3)
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        for s in started:
            print(s.logs())


@pytest.fixture(scope="module")
def module_web(django_db_setup: None) -> Iterator[tuple[int, Proc]]:
    """(port, process) of one web process (one uvicorn worker) shared by a module's tests that
    only send requests and read the answers, each test with a tenant of its own (``make_tenant``):
    started once per module rather than once per test (a start is about 1.3 CPU-seconds, and make
    test's parallel phase is bound by CPU). Its database is the test database, emptied between
    tests as every transactional test's is; its Redis databases are the tests' own, flushed before
    each test (``_clean_redis``): nothing of one test's is left for the next."""
    port = free_port()
    proc = Proc("web", processes.web(port=port, workers=1), service_env()).start()
    try:
        wait_for_web(proc, port)
        yield port, proc
    finally:
        stop_all([proc], timeout=3)


@pytest.fixture
def shared_web(module_web: tuple[int, Proc], request: pytest.FixtureRequest) -> Iterator[int]:
    """The port of the module's web process (``module_web``) for one test; the process's last log
    lines are printed when the test failed."""
    port, proc = module_web
    yield port
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(f"----- web ({proc.log})\n{proc.tail()}")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        action="store_true",
        help="merge each test's seconds into tests/durations.json (the parallel phase's order)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("record_durations") and not os.environ.get("PYTEST_XDIST_WORKER"):
        config.pluginmanager.register(durations.Recorder(), "scrapejobs-durations")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In parallel runs (make test's first phase) the longest tests start first, as the last
    recorded run measured them (tests/support/durations.py), instead of leaving one process busy
    at the end; one process keeps the files' order."""
    if not getattr(config.option, "numprocesses", None) and not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    durations.longest_first(items, durations.load())


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    rep = yield
    setattr(item, "rep_" + rep.when, rep)
    return rep


__all__ = ["wait_for"]
