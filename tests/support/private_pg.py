"""A private PostgreSQL for tests that stop the database.

The machine's PostgreSQL cannot be stopped from a test, so such a test runs its own server: the
PostgreSQL 16 binaries of the ``pgserver`` wheel (as scrapejobs/embedded.py uses them), with a
fresh data directory, on a free TCP port of 127.0.0.1. ``stop()`` stops the real server
(``pg_ctl stop -m fast``: connections are ended with "terminating connection due to administrator
command", 57P01; ``immediate`` is a crash), ``start()`` starts it again on the same port and data.

The service processes reach it through ``url`` (pass ``DATABASE_URL=pg.url`` to the ``services``
fixture), ``migrate()`` creates the schema, ``django(code)`` runs Django code against it in a
child process (to create tenants and jobs: the test process's own Django stays on the test
database), and ``connect()`` gives the test its own psycopg connection to read the final state.

As root (a container) initdb refuses to run, so the server runs as the ``pgserver`` user, as the
wheel itself does.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.net import free_port
from tests.support.procs import ROOT, wait_for

# Found without importing pgserver (its import sets up a lock file and a user runtime directory).
_SPEC = importlib.util.find_spec("pgserver")
assert _SPEC is not None and _SPEC.submodule_search_locations, "the pgserver wheel is not installed"
BIN = Path(next(iter(_SPEC.submodule_search_locations))) / "pginstall" / "bin"
RUN_AS = "pgserver"  # the wheel's own system user when running as root


def _system_user(name: str) -> pwd.struct_passwd:
    """The user's entry, created as the wheel creates it (``useradd``) where missing: with
    DATABASE_URL given, nothing has started the embedded server that would have created it."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "-s", "/bin/bash", name], check=True, capture_output=True, text=True)
        return pwd.getpwnam(name)


_TEMPLATE_PREFIX = "sj-pg-migrated-"


def _copy_migrated_data(dest: Path) -> None:
    """Copy to ``dest`` the data directory of a stopped server migrated with this tree's migrations
    (bench/common.py's digest names it), built the first time it is asked for: initdb and a whole
    ``migrate`` cost about 6 s a server, a copy a fraction of one. Built and copied under one file
    lock (make test's processes ask at once), so that another tree's build, which removes the
    directories of other digests, never removes one while it is being copied."""
    import fcntl

    from bench.common import migrations_digest

    root = Path(tempfile.gettempdir())
    done = root / f"{_TEMPLATE_PREFIX}{migrations_digest()}"
    with open(root / f"{_TEMPLATE_PREFIX}lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (done / "data" / "PG_VERSION").is_file():
            for old in root.glob(f"{_TEMPLATE_PREFIX}*"):
                if old.is_dir():
                    shutil.rmtree(old, ignore_errors=True)
            pg = PrivatePostgres()
            try:
                pg.start()
                pg.wait_ready()
                pg.migrate()
                pg.stop()
                (pg.dir / "postgres.log").unlink(missing_ok=True)
                pg.dir.rename(done)
            finally:
                if pg.dir.exists():
                    pg.destroy()
        subprocess.run(["cp", "-a", str(done / "data"), str(dest)], check=True, timeout=60)


class PrivatePostgres:
    def __init__(self, *, server_settings: dict[str, str] | None = None, migrated: bool = False) -> None:
        # Extra ``-c name=value`` settings of the server (bench/budget.py: the statement log).
        self.server_settings = dict(server_settings or {})
        # Under /tmp, not pytest's tmp_path: as root the server's user must reach the directory.
        self.dir = Path(tempfile.mkdtemp(prefix="sj-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "postgres.log"
        self.port = free_port()
        self.user = RUN_AS if os.geteuid() == 0 else None
        if self.user:
            entry = _system_user(self.user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        if migrated:  # a copy of a migrated server's data: as if initdb and migrate() had run
            _copy_migrated_data(self.data)
            return
        self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--encoding=utf8", "--no-sync"
        )

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, exe: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / exe), *args],
            user=self.user,
            cwd=self.dir,
            check=check,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def start(self) -> None:
        opts = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir} -c fsync=off -c max_connections=300"
        )
        opts += "".join(f" -c {name}={value}" for name, value in self.server_settings.items())
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server for real: ``fast`` (clients are told 57P01 and disconnected) or
        ``immediate`` (no goodbye: a crash)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def running(self) -> bool:
        return self._run("pg_ctl", "-D", str(self.data), "status", check=False).returncode == 0

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.url, autocommit=True)

    def env(self, **overrides: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(DATABASE_URL=self.url, DJANGO_SETTINGS_MODULE="settings.test", **overrides)
        return env

    def migrate(self) -> None:
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=ROOT,
            env=self.env(),
            check=True,
            timeout=300,
        )

    def django(self, code: str) -> str:
        """Run ``code`` in a child Python with Django set up against this server; its stdout."""
        prelude = "import django; django.setup()\n"
        done = subprocess.run(
            [sys.executable, "-c", prelude + code],
            cwd=ROOT,
            env=self.env(),
            check=True,
            capture_output=True,
            text=True,
            timeout=300,
        )
        return done.stdout

    def destroy(self) -> None:
        if self.running():
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with self.connect() as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                # time is the subject: the polling interval while the server comes up (a refused connect raises)
                time.sleep(0.1)
        raise AssertionError("the private PostgreSQL did not come up")


def wait_until(pred: Callable[[], object], timeout: float, what: str) -> None:
    """Poll ``pred`` (which may read the private server) until it is true."""
    wait_for(pred, timeout=timeout, interval=0.2, what=what)


def all_final(db: psycopg.Connection, count: int) -> bool:
    row = db.execute(
        "SELECT count(*) FROM jobs_job WHERE status IN ('succeeded', 'failed', 'cancelled')"
    ).fetchone()
    return row is not None and row[0] == count


def ledger_read(
    db: psycopg.Connection,
) -> tuple[dict[str, tuple[str, int, str | None]], dict[str, list[tuple[int, str, str | None]]]]:
    """Every job's (status, attempts, result key) and attempt history (number, outcome, error
    class), by job id: the exact final state an outage test asserts."""
    jobs = {
        str(i): (status, attempts, key)
        for i, status, attempts, key in db.execute("SELECT id, status, attempts, result_key FROM jobs_job")
    }
    history: dict[str, list[tuple[int, str, str | None]]] = {}
    for job_id, number, outcome, error_class in db.execute(
        "SELECT job_id, number, outcome, error_class FROM jobs_attempt ORDER BY job_id, number"
    ):
        history.setdefault(str(job_id), []).append((number, outcome, error_class))
    return jobs, history


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    """A migrated private PostgreSQL, running; stopped and deleted after the test."""
    pg = PrivatePostgres(migrated=True)
    try:
        pg.start()
        pg.wait_ready()
        yield pg
    finally:
        pg.destroy()
