"""``make run``: the whole service on one machine, in one terminal.

    python -m scrapejobs.supervise        (``make run`` wraps it in scrapejobs.embedded)

1. prepares the database and the newcomer's credentials: ``migrate``, ``collectstatic``, the demo
   tenant (``ensure_demo_tenant``: its token is kept in ``<run dir>/demo-token`` because tokens are
   stored hashed) and the ``admin`` superuser (``ensure_admin``: its generated password is kept in
   ``<run dir>/admin-password``); the same token and password are printed on every run;
2. starts web, worker, control, beat and Flower (and the browser component when a Chromium is
   found, saying so either way) with the command lines of scrapejobs/processes.py,
   each in its own process group, and prefixes every line they print with their name;
3. prints the URLs and credentials once the web answers ``/healthz``;
4. restarts a child that dies on its own, after 1, 2, 4 … up to 30 s, as docker's
   ``restart: unless-stopped`` does in production: a Celery process can exit on a broker
   reconnect (a Redis restart) and the service must come back by itself. A child that dies more
   than ``CRASH_LIMIT`` times within ``CRASH_WINDOW_S`` is crash-looping: everything is stopped
   and the exit code is 1, since a half-running service that looks healthy is worse than none;
5. on Ctrl-C or SIGTERM stops every child (SIGTERM, then SIGKILL after
   ``SCRAPEJOBS_SHUTDOWN_TIMEOUT_S``) and exits 0.

Everything comes from the environment: the Django settings, plus PORT, FLOWER_PORT and the sizes
read by ``processes.from_env``, and SCRAPEJOBS_RUN_DIR (default ``.run/dev``). Development
defaults, unless set: ``SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=true``, so a local target can be fetched;
``SCRAPEJOBS_WORKER_NICE=10``, so that on this one machine the web's requests come before the
worker's when the cores are busy.

It imports nothing from Django: setup runs through ``manage.py`` in subprocesses, so this process
holds no database connection while it supervises.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from scrapejobs import processes

ROOT = processes.ROOT
CRASH_LIMIT = 5
CRASH_WINDOW_S = 60.0
RESTART_BACKOFF_MAX_S = 30.0
# Loaded here, in the parent: the forked child must not dlopen (another thread may hold the
# loader's lock at fork time), it only calls prctl through this handle.
_LIBC = ctypes.CDLL(None) if sys.platform.startswith("linux") else None
_COLORS = ("36", "32", "33", "35", "34", "31")
_print_lock = threading.Lock()


def _say(name: str, text: str, color: str = "1") -> None:
    _write(name, (text + "\n").encode(), color)


def _write(name: str, line: bytes, color: str) -> None:
    label = f"{name:<7}|"
    if sys.stdout.isatty():
        label = f"\x1b[{color}m{label}\x1b[0m"
    with _print_lock:
        sys.stdout.buffer.write(label.encode() + b" " + line)
        sys.stdout.buffer.flush()


def _manage(*args: str, env: dict[str, str]) -> dict[str, str]:
    """Run a management command; echo its output; return its ``key: value`` lines."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        check=False,
    )
    out = done.stdout.decode(errors="replace")
    if done.returncode != 0:
        for line in out.splitlines():
            _say("setup", line)
        raise SystemExit(f"manage.py {args[0]} failed with exit code {done.returncode}")
    values: dict[str, str] = {}
    for line in out.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key.isidentifier():
            values[key] = value.strip()
    return values


def _die_with_parent() -> None:
    """In the child, before exec: its own process group (a terminal's Ctrl-C reaches only this
    supervisor, which then stops the children in order) and, on Linux, SIGTERM when the
    supervisor dies, so even a SIGKILLed supervisor leaves no orphans."""
    os.setpgid(0, 0)
    if _LIBC is not None:
        pr_set_pdeathsig = 1
        _LIBC.prctl(pr_set_pdeathsig, signal.SIGTERM)


@dataclass
class Child:
    name: str
    argv: list[str]
    color: str
    proc: subprocess.Popen[bytes] | None = None
    reader: threading.Thread | None = field(default=None, repr=False)
    crashes: list[float] = field(default_factory=list)  # monotonic times of unexpected exits
    restart_at: float | None = None

    def start(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            self.argv,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - no threads exist yet when children start
        )

    def pump(self) -> None:
        """Copy the child's output to ours, a line at a time, behind its name."""
        assert self.proc is not None and self.proc.stdout is not None
        stream: IO[bytes] = self.proc.stdout

        def run() -> None:
            for line in iter(stream.readline, b""):
                _write(self.name, line, self.color)

        self.reader = threading.Thread(target=run, name=f"pump-{self.name}", daemon=True)
        self.reader.start()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()


def stop_all(children: Sequence[Child], *, timeout: float) -> None:
    """SIGTERM every child (gunicorn and Celery shut down gracefully on it), wait up to
    ``timeout``, then SIGKILL each child's whole process group (gunicorn's workers included)."""
    for c in children:
        if c.returncode() is None:
            _say("run", f"stopping {c.name} (pid {c.pid})")
            try:
                os.kill(c.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + timeout
    for c in children:
        if c.proc is None:
            continue
        try:
            c.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _say("run", f"{c.name} did not stop within {timeout:.0f}s; killing it")
    for c in children:
        if c.proc is None:
            continue
        try:
            os.killpg(c.pid, signal.SIGKILL)  # stragglers left in the child's group
        except (ProcessLookupError, PermissionError):
            pass
        c.proc.wait()
        if c.reader is not None:
            c.reader.join(timeout=2)


def _web_is_up(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=1) as r:
            return 200 <= r.status < 300
    except urllib.error.HTTPError as e:
        return e.code < 500  # it answers: up, whatever the route says
    except OSError:
        return False


def _restart_dead(children: Sequence[Child], env: dict[str, str]) -> int:
    """Schedule a restart of each child that exited on its own, start those whose backoff has
    passed; 1 when one of them is crash-looping (the caller then stops everything)."""
    now = time.monotonic()
    for c in children:
        if c.restart_at is not None:
            if now >= c.restart_at:
                c.restart_at = None
                # A fork while pump threads run: safe because _die_with_parent only calls
                # setpgid and an already-loaded prctl before exec.
                c.start(env)
                c.pump()
                _say("run", f"{c.name} started (pid {c.pid})")
            continue
        code = c.returncode()
        if code is None:
            continue
        c.crashes = [t for t in c.crashes if now - t < CRASH_WINDOW_S] + [now]
        if len(c.crashes) > CRASH_LIMIT:
            _say(
                "run",
                f"{c.name} exited unexpectedly with code {code}, {len(c.crashes)} times "
                f"within {CRASH_WINDOW_S:.0f}s; stopping everything",
            )
            return 1
        delay = min(RESTART_BACKOFF_MAX_S, 2.0 ** (len(c.crashes) - 1))
        _say("run", f"{c.name} exited unexpectedly with code {code}; restarting it in {delay:.0f}s")
        if c.reader is not None:
            c.reader.join(timeout=1)
        c.restart_at = now + delay
    return 0


def _dev_secret_ensure(path: Path) -> None:
    """A random secret key for this checkout, made once and kept (mode 0600) in the run dir, where
    settings/base.py reads it when DJANGO_SECRET_KEY is not set: development needs no variable,
    and its links are not signed with a public default."""
    if path.exists():
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_urlsafe(48) + "\n")


def _taken_ports(wanted: Sequence[tuple[str, str, int]]) -> list[str]:
    """For each (variable, address, port) that cannot be bound now, a line naming the variable:
    a component that cannot bind would die and be restarted until make run gives up."""
    taken = []
    for variable, address, port in wanted:
        bind_to = "127.0.0.1" if address in ("", "localhost") else address
        family = socket.AF_INET6 if ":" in bind_to else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((bind_to, port))
            except OSError as e:
                taken.append(
                    f"port {port} on {bind_to} is not free ({e.strerror}): set {variable} to a free port"
                )
    return taken


def _dev_env() -> tuple[dict[str, str], Path]:
    """The children's environment, with development's defaults, and the run directory (its
    secret key made on first use)."""
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "settings.base")
    env.setdefault("SCRAPEJOBS_ALLOW_PRIVATE_TARGETS", "true")  # development: local targets work
    env.setdefault("SCRAPEJOBS_LOG_FORMAT", "text")  # development: readable lines, not JSON
    env.setdefault("SCRAPEJOBS_WORKER_NICE", "10")  # one machine: the web's requests go first (NFR-2)
    env["PYTHONUNBUFFERED"] = "1"  # children's lines appear as they are printed
    run_dir = Path(env.get("SCRAPEJOBS_RUN_DIR", ".run/dev"))
    if not run_dir.is_absolute():
        run_dir = ROOT / run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    env.setdefault("SCRAPEJOBS_BEAT_SCHEDULE", str(run_dir / "celerybeat-schedule"))
    _dev_secret_ensure(run_dir / "secret-key")
    return env, run_dir


def _component_names(env: dict[str, str]) -> list[str]:
    """The components to start: all of them, the browser only when a Chromium is there."""
    names = ["web", "worker", "control", "beat", "flower"]
    # Rendered jobs (FR-30) need a Chromium; without one their component is not started, and
    # rendered jobs wait on their queue (jobs.browser) until one runs somewhere.
    chromium = processes.chromium_executable(env)
    if chromium is not None:
        names.append("browser")
        # Chromium cannot sandbox itself as root: a root development machine runs it without.
        if os.geteuid() == 0:
            env.setdefault("SCRAPEJOBS_BROWSER_SANDBOX", "false")
        _say("setup", f'Chromium found at {chromium}: starting the browser component (render: "browser")')
    else:
        _say(
            "setup",
            f"no Chromium at {processes.chromium_path(env)} (SCRAPEJOBS_BROWSER_EXECUTABLE): the browser "
            'component is not started; jobs with render "browser" wait until one runs',
        )
    return names


def _running_announce(*, base: str, admin: dict[str, str], demo: dict[str, str], flower_port: int) -> None:
    for line in (
        "scrapejobs is running. Ctrl-C stops everything.",
        f"  API:          {base}/api/v1/jobs",
        f"  API docs:     {base}/api/v1/docs",
        f"  admin:        {base}/admin/   login {admin.get('username')} / {admin.get('password')}",
        f"  demo tenant:  {demo.get('tenant')}   token {demo.get('token')}",
        f"  Flower:       http://127.0.0.1:{flower_port}/",
        f"  try:          curl -s -X POST {base}/api/v1/jobs -H 'Authorization: Bearer {demo.get('token')}'"
        " -H 'Content-Type: application/json' -d '{\"url\": \"https://example.com/\"}'",
        # The same with the client's command line (clients/python, docs/client.md).
        f"  or:           SCRAPEJOBS_URL={base} SCRAPEJOBS_TOKEN={demo.get('token')}"
        " scrapejobs submit https://example.com/ --wait",
    ):
        _say("run", line)


def _stop_signals_catch(children: list[Child]) -> list[int]:
    """SIGINT and SIGTERM from now on: each is added to the list returned (stop, after waiting for
    the children); a second one kills every child at once."""
    stop_signal: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        if stop_signal:  # a second Ctrl-C: no more waiting
            for c in children:
                if c.proc is not None and c.returncode() is None:
                    try:
                        os.killpg(c.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        stop_signal.append(signum)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    return stop_signal


def main() -> int:
    env, run_dir = _dev_env()
    port = int(env.get("PORT", "8000"))
    host = env.get("SCRAPEJOBS_WEB_HOST", "127.0.0.1")
    base = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::', '') else host}:{port}"
    flower_port = int(env.get("FLOWER_PORT", "5555"))
    shutdown_timeout = float(env.get("SCRAPEJOBS_SHUTDOWN_TIMEOUT_S", "30"))
    taken = _taken_ports(
        [("PORT", host, port), ("FLOWER_PORT", env.get("FLOWER_ADDRESS", "127.0.0.1"), flower_port)]
    )
    for line in taken:
        _say("run", line)
    if taken:
        return 2

    children: list[Child] = []
    stop_signal = _stop_signals_catch(children)

    _say("setup", "migrating the database")
    _manage("migrate", "--noinput", "-v", "0", env=env)
    _manage("collectstatic", "--noinput", "-v", "0", env=env)
    demo = _manage("ensure_demo_tenant", "--token-file", str(run_dir / "demo-token"), env=env)
    admin = _manage("ensure_admin", "--password-file", str(run_dir / "admin-password"), env=env)
    if stop_signal:
        return 0

    for i, name in enumerate(_component_names(env)):
        children.append(Child(name, processes.from_env(name, env), _COLORS[i % len(_COLORS)]))
    # Every child is forked before any pump thread exists (preexec_fn and threads do not mix).
    for c in children:
        c.start(env)
    for c in children:
        c.pump()
        _say("run", f"{c.name} started (pid {c.pid})")

    announced = False
    exit_code = 0
    while not stop_signal and not exit_code:
        exit_code = _restart_dead(children, env)
        if not announced and _web_is_up(base):
            announced = True
            _running_announce(base=base, admin=admin, demo=demo, flower_port=flower_port)
        time.sleep(0.25)
    if stop_signal:
        _say("run", f"got {signal.Signals(stop_signal[0]).name}; stopping")
    stop_all(children, timeout=shutdown_timeout)
    _say("run", "stopped")
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
