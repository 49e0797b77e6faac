"""Real service processes for end-to-end tests: started, killed and restarted by the tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def service_env(**overrides: str) -> dict[str, str]:
    """The environment of a service process that talks to the current test database."""
    s = connection.settings_dict
    env = dict(os.environ)
    host = s.get("HOST") or (s.get("OPTIONS") or {}).get("host") or ""
    from urllib.parse import quote

    if host.startswith("/"):
        db_url = f"postgres://{s['USER']}@:{s.get('PORT') or 5432}/{quote(host, safe='')}/{s['NAME']}"
    else:
        db_url = f"postgres://{s['USER']}@{host or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"
    env.update(
        DATABASE_URL=db_url,
        DJANGO_SETTINGS_MODULE="settings.test",
        SCRAPEJOBS_DB_POOL="true",
        PYTHONUNBUFFERED="1",
    )
    env.update(overrides)
    return env


class Proc:
    """One service process; its output goes to a log file shown when a test fails."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str]):
        self.name, self.argv, self.env = name, argv, env
        self.log = Path(tempfile.mkstemp(prefix=f"sj-{name}-", suffix=".log")[1])
        self.p: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        with open(self.log, "ab") as out:
            self.p = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.p is not None
        return self.p.pid

    def alive(self) -> bool:
        return self.p is not None and self.p.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group: a crash, not a shutdown."""
        if self.alive():
            assert self.p is not None
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait(10)

    def stop(self, timeout: float = 20) -> None:
        stop_all([self], timeout=timeout)

    def terminate(self) -> None:
        """SIGTERM the whole process group: a shutdown, not waited for."""
        if self.alive():
            assert self.p is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.p.pid, signal.SIGTERM)

    def tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def stop_all(procs: list[Proc], timeout: float = 20) -> None:
    """Stop processes together: every one is sent SIGTERM first, then all shut down at once within
    one ``timeout`` (SIGKILL for any still running), instead of one grace after another."""
    for proc in procs:
        proc.terminate()
    deadline = time.monotonic() + timeout
    for proc in procs:
        if proc.p is None:
            continue
        try:
            proc.p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()


def wait_for(
    pred: Callable[[], object], timeout: float = 30, interval: float = 0.1, what: str = ""
) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        # time is the subject: the polling interval of the shared wait
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or pred}")


def wait_for_web(proc: Proc, port: int, timeout: float = 60) -> None:
    """Wait until the web process ``proc`` answers /healthz on ``port``; fail at once, with its
    log, if it died."""
    import requests  # noqa: PLC0415 - only the tests that start a web process need it

    def up() -> bool:
        assert proc.alive(), proc.tail()
        try:
            return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    wait_for(up, timeout=timeout, what="the web process")
