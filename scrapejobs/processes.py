"""The command lines of the service's processes, in one place.

``make run`` (scrapejobs/supervise.py), the end-to-end tests, the benchmarks and docker/ all start
the same components with these argv lists; the README shows them for running on several machines:

- web     gunicorn with uvicorn workers (ASGI) serving the API, admin, docs and signed result links
- worker  Celery worker on the scrape queues (threads: a fetch mostly waits on the network)
- browser Celery worker on the rendered jobs' queue ``jobs.browser``: a few threads, one page each,
          and one Chromium per process (apps/scraping/browser.py, docs/design/browser.md)
- control Celery worker on the control queue: outbox publisher, sweeper, receipt writer's flush,
          webhooks, and the batch loader (queue ``batches``); ``writer``, its old name, is still
          accepted (with a warning) for one release
- beat    Celery beat: the periodic tasks of scrapejobs/celery.py
- flower  Celery's monitoring UI
- migrate database migrations (before the others start; under a lock, so many may run at once)

``python -m scrapejobs.processes <component>`` runs one of them with its sizes from the
environment (``from_env``); docker/start.sh uses it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent


def _celery() -> list[str]:
    return [str(BIN / "celery"), "-A", "scrapejobs"]


def web(*, host: str = "127.0.0.1", port: int = 8000, workers: int = 2) -> list[str]:
    """gunicorn (process management, graceful stop) running uvicorn workers on the ASGI app: a
    ``?wait=`` caller is an asyncio task, not a thread (scrapejobs/asgi.py)."""
    return [
        str(BIN / "gunicorn"),
        "scrapejobs.asgi:application",
        "--bind",
        f"{host}:{port}",
        "--workers",
        str(workers),
        "--worker-class",
        "scrapejobs.web_worker.WebWorker",
        "--access-logfile",
        "-",
        # Signed result links (/results/<token>) and query strings are cut out of access lines.
        "--logger-class",
        "apps.runtime.logs.AccessLogWithoutSecrets",
        "--graceful-timeout",
        "20",
        # gunicorn 27's control socket has one default path per user: two servers on one machine
        # (make run next to a bench or a test) would fight over it, and nothing here uses it.
        "--no-control-socket",
    ]


def worker(*, concurrency: int | None = None, name: str = "worker") -> list[str]:
    conc = concurrency or int(os.environ.get("SCRAPEJOBS_WORKER_CONCURRENCY", "100"))
    return [
        *_celery(),
        "worker",
        "--loglevel",
        "INFO",
        "--queues",
        "jobs.high,jobs.normal,jobs.low",
        "--pool",
        "threads",
        "--concurrency",
        str(conc),
        "--hostname",
        f"{name}@%h",
        "--without-mingle",
        "--without-gossip",
    ]


def browser(*, concurrency: int | None = None, name: str = "browser") -> list[str]:
    """Rendered jobs (FR-30): pages at once per process (``SCRAPEJOBS_BROWSER_CONCURRENCY``, read
    by Django's settings too, which size the page slots to the same number), and no message
    reserved ahead (docs/design/dispatch.md): a render takes seconds, and a message held by a busy
    process is one another process could be rendering."""
    conc = concurrency or int(os.environ.get("SCRAPEJOBS_BROWSER_CONCURRENCY", "2"))
    return [
        *_celery(),
        "worker",
        "--loglevel",
        "INFO",
        "--queues",
        "jobs.browser",
        "--pool",
        "threads",
        "--concurrency",
        str(conc),
        "--prefetch-multiplier",
        "1",
        "--hostname",
        f"{name}@%h",
        "--without-mingle",
        "--without-gossip",
    ]


def chromium_path(environ: Mapping[str, str] | None = None) -> str:
    e = os.environ if environ is None else environ
    return e.get("SCRAPEJOBS_BROWSER_EXECUTABLE", "/usr/bin/chromium")


def chromium_executable(environ: Mapping[str, str] | None = None) -> str | None:
    """The Chromium the browser component would drive, when it is there and executable."""
    path = chromium_path(environ)
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def control(*, concurrency: int = 8, name: str = "control") -> list[str]:
    """The control queue's tasks (publisher, sweeper, receipt writer's flush, webhooks, the batch
    loader). Its node name is ``control@<host>`` (``writer@<host>`` before the rename:
    ``CONTROL_NODE_NAMES``)."""
    return [
        *_celery(),
        "worker",
        "--loglevel",
        "INFO",
        "--queues",
        "control,webhooks,batches",
        "--pool",
        "threads",
        "--concurrency",
        str(concurrency),
        "--hostname",
        f"{name}@%h",
        "--without-mingle",
        "--without-gossip",
    ]


def beat(*, schedule_file: str = ".run/celerybeat-schedule") -> list[str]:
    Path(schedule_file).parent.mkdir(parents=True, exist_ok=True)
    return [*_celery(), "beat", "--loglevel", "INFO", "--schedule", schedule_file]


def flower(*, host: str = "127.0.0.1", port: int = 5555, task_events: bool = False) -> list[str]:
    # Flower asks every worker to send task events unless told not to; they cost the scrape worker
    # three broker round trips per job (settings: SCRAPEJOBS_TASK_EVENTS), so it asks only when the
    # operator switched them on.
    return [*_celery(), "flower", f"--address={host}", f"--port={port}", f"--enable_events={task_events}"]


def migrate() -> list[str]:
    """Schema migrations; run before the other components of a release start, by as many pods at
    once as like (deploy/kubernetes/: an initContainer of each): one at a time under a database
    lock (apps/operators/management/commands/migrate_locked.py)."""
    return [sys.executable, str(ROOT / "manage.py"), "migrate_locked", "--noinput"]


COMPONENTS = ("web", "worker", "browser", "control", "beat", "flower", "migrate")
# Old component names, accepted for one release with a warning: old name -> component.
COMPONENT_ALIASES = {"writer": "control"}
# The node names (``--hostname``, before the ``@``) of a control component: its own, and the one
# it had before the rename, which a process of the previous release still has during a rollout.
# The healthchecks (docker/compose.yaml, deploy/kubernetes/base/control.yaml) ping both.
CONTROL_NODE_NAMES = ("control", "writer")


def node_names(component: str) -> tuple[str, ...]:
    """The node names a component's processes answer a ping to (its healthcheck's destinations,
    ``<name>@$HOSTNAME`` each): its own, and for control also its name before the rename."""
    return CONTROL_NODE_NAMES if component == "control" else (component,)


_warned: set[str] = set()


def _deprecated(old: str, new: str, what: str) -> None:
    """Say once per process that ``old`` is read as ``new`` (on stderr: nothing here has logging)."""
    if old not in _warned:
        _warned.add(old)
        print(f"warning: {what} {old} is deprecated, read as {new}: use {new}", file=sys.stderr)


def component_name(component: str) -> str:
    """The component a name given on the command line means: an old name is mapped, with a warning."""
    if component in COMPONENT_ALIASES:
        _deprecated(component, COMPONENT_ALIASES[component], "component name")
        return COMPONENT_ALIASES[component]
    return component


def control_concurrency(e: Mapping[str, str]) -> int:
    """SCRAPEJOBS_CONTROL_CONCURRENCY; SCRAPEJOBS_WRITER_CONCURRENCY, its old name, when only that
    one is set (with a warning)."""
    if e.get("SCRAPEJOBS_CONTROL_CONCURRENCY") is None and e.get("SCRAPEJOBS_WRITER_CONCURRENCY") is not None:
        _deprecated("SCRAPEJOBS_WRITER_CONCURRENCY", "SCRAPEJOBS_CONTROL_CONCURRENCY", "setting")
        return int(e.get("SCRAPEJOBS_WRITER_CONCURRENCY", "8"))
    return int(e.get("SCRAPEJOBS_CONTROL_CONCURRENCY", "8"))


# Every background thread a component's process starts besides the ones its server (gunicorn,
# Celery) runs, by the name it is started with (a name ending in "-" or " " is a prefix: one
# thread per slot, part or key). tests/test_architecture.py holds every ``threading.Thread`` and
# ``BackgroundNudge`` started under apps/ and scrapejobs/ to this table, and the README's process
# table to it; ``?wait=`` callers and their listener are asyncio tasks on the web's event loop, not
# threads (docs/design/waiting-and-read-cache.md).
BACKGROUND_THREADS: dict[str, dict[str, str]] = {
    "web": {
        "request-metrics": "sends the process's request counts to Redis every few seconds",
        "publisher nudge": "asks the control component to publish after an intake commit",
    },
    "worker": {
        "lease-keeper": "renews the leases of every running fetch in one statement",
        "cancel-watcher": "reads the cancel flags of the running fetches",
        "result-upload ": "one per body being stored, bounded by the storage allowance",
        "shutdown-watchdog": "on SIGTERM, gives back the fetches still running after the grace",
        "warm-up": "as the process starts, prepares the claim and opens its connections",
    },
    # The worker's task and attempt machinery, plus one Chromium driven from one event loop
    # (apps/scraping/browser.py; a page's requests are fetched on its "page-fetch" pool).
    "browser": {
        "lease-keeper": "renews the leases of every running render in one statement",
        "cancel-watcher": "reads the cancel flags of the running renders",
        "result-upload ": "one per body or screenshot being stored, bounded by the storage allowance",
        "shutdown-watchdog": "on SIGTERM, gives back the renders still running after the grace",
        "warm-up": "as the process starts, prepares the claim and opens its connections",
        "browser-loop": "owns Playwright and the process's Chromium; every page renders on its event loop",
    },
    "control": {
        "nudge-listener": "waits on the nudges' sorted set (BZPOPMIN) and wakes the runners",
        "nudge-": "one runner per kind (publisher, writer flush) running it at once when nudged",
        "writer-apply-": "the database writer's appliers, one connection each",
        "writer-lease": "renews the writer lease while this process holds it",
    },
}


def from_env(component: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """The argv of ``component`` with its host, port and sizes taken from the environment.

    These are process-level settings (read before Django starts), documented in the README next
    to the Django settings: PORT, SCRAPEJOBS_WEB_HOST, SCRAPEJOBS_WEB_WORKERS,
    SCRAPEJOBS_WORKER_CONCURRENCY, SCRAPEJOBS_BROWSER_CONCURRENCY, SCRAPEJOBS_CONTROL_CONCURRENCY
    (SCRAPEJOBS_WRITER_CONCURRENCY, its old name),
    SCRAPEJOBS_BEAT_SCHEDULE, FLOWER_ADDRESS, FLOWER_PORT, and SCRAPEJOBS_TASK_EVENTS (read by
    Django's settings too) for Flower.
    ``writer``, the control component's old name, is accepted with a warning.
    """
    e = os.environ if environ is None else environ
    component = component_name(component)
    if component == "web":
        return web(
            host=e.get("SCRAPEJOBS_WEB_HOST", "127.0.0.1"),
            port=int(e.get("PORT", "8000")),
            workers=int(e.get("SCRAPEJOBS_WEB_WORKERS", "2")),
        )
    if component == "worker":
        return worker(concurrency=int(e.get("SCRAPEJOBS_WORKER_CONCURRENCY", "100")))
    if component == "browser":
        return browser(concurrency=int(e.get("SCRAPEJOBS_BROWSER_CONCURRENCY", "2")))
    if component == "control":
        return control(concurrency=control_concurrency(e))
    if component == "beat":
        return beat(schedule_file=e.get("SCRAPEJOBS_BEAT_SCHEDULE", ".run/celerybeat-schedule"))
    if component == "flower":
        _flower_auth_check(e)
        return flower(
            host=e.get("FLOWER_ADDRESS", "127.0.0.1"),
            port=int(e.get("FLOWER_PORT", "5555")),
            task_events=e.get("SCRAPEJOBS_TASK_EVENTS", "false").strip().lower()
            in ("1", "true", "yes", "on"),
        )
    if component == "migrate":
        return migrate()
    raise ValueError(f"unknown component {component!r}; one of {', '.join(COMPONENTS)}")


def _flower_auth_check(e: Mapping[str, str]) -> None:
    """Flower lets anyone who reaches it see task arguments and stop workers: bound to anything but
    this machine (a deployment), it starts only with FLOWER_BASIC_AUTH (user:password, read by
    Flower itself) set."""
    local = e.get("FLOWER_ADDRESS", "127.0.0.1") in ("127.0.0.1", "localhost", "::1")
    if not local and not e.get("FLOWER_BASIC_AUTH"):
        raise SystemExit(
            "refusing to start Flower on a public address without FLOWER_BASIC_AUTH=user:password"
        )


def main(argv: list[str] | None = None) -> None:
    """``python -m scrapejobs.processes <component> [--print]``: replace this process with the
    component (docker/start.sh calls this, so containers and ``make run`` share one source)."""
    import argparse  # noqa: PLC0415
    import shlex  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="python -m scrapejobs.processes")
    parser.add_argument("component", choices=(*COMPONENTS, *COMPONENT_ALIASES))
    parser.add_argument("--print", action="store_true", help="print the command line instead of running it")
    args = parser.parse_args(argv)
    os.chdir(ROOT)  # relative paths (the beat schedule) are the project's
    command = from_env(args.component)
    if args.print:
        print(shlex.join(command))
        return
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
