"""What one job costs, counted (NFR-15): SQL statements, row versions, index entries, WAL bytes,
Redis commands and broker messages per job, through the whole service, beside a bare Celery
task's Redis commands. ``make bench BENCH=budget`` prints it; tests/test_job_budget.py runs a
small version and fails when an exact count per job moves either way from the budget committed in
tests/budget.json, when a meter reports nothing, or when a background count passes its ceiling
(docs/benchmarks.md, the `budget` benchmark).

Counts, not seconds, so that they are the same on any machine: everything runs on servers of its
own (server-wide statistics see nothing else), and the periodic work runs by hand, once per phase,
with fixed batch sizes, instead of beat's ticks and the nudges:

1. ``intake``   a web process; the jobs POSTed one by one (spaced, so each intake nudge is sent);
2. ``publish``  the outbox publisher's task body, once (batches of ``publish_batch``);
3. ``work``     a scrape worker takes every message, fetches a local target, stores the body and
                submits its receipt; stopped once every receipt is in the stream;
4. ``fold``     the receipts writer, once (batches of ``writer_batch``, one connection);
5. ``announce`` the end-of-job outbox (final jobs stamped announced), once.

Where each figure comes from:
- SQL statements: the server's own statement log (``log_statement=all``, csvlog), so every
  statement of every process is seen, BEGIN and COMMIT included, with no hook in the service;
  kind = the verb and the first table it names.
- Rows inserted / updated / HOT-updated / deleted: ``pg_stat_user_tables`` deltas (read after
  the phase's processes exited, so their statistics are flushed).
- Index entries: PostgreSQL does not count index insertions, so they are derived. A trigger on the
  ledger tables (installed for the measurement only, writing to an unlogged table) records, for
  every new row version, whether an indexed column changed and which index predicates the new
  version meets. An insert, or an update that changed an indexed column (never HOT), enters every
  index whose predicate it meets. An update that changed none was HOT unless its page had no room;
  the statistics' HOT count says how many were not, and those are counted at the mean entries of
  such versions.
- WAL bytes: ``pg_current_wal_lsn()`` deltas (autovacuum off, a checkpoint before the start).
- Redis: ``INFO commandstats`` deltas of the state server and of the broker (two servers, so
  they are told apart), the measuring client's own commands taken out. Broker messages: the
  broker's LPUSHes (kombu sends a message with one).
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    ROOT,
    Proc,
    celery_ready,
    create_tenant,
    figure,
    free_port,
    http_ok,
    note,
    service_env,
    start_target,
    wait_until,
)

JOBS = int(os.environ.get("BENCH_BUDGET_JOBS", "200"))
PUBLISH_BATCH = int(os.environ.get("BENCH_BUDGET_PUBLISH_BATCH", "100"))
WRITER_BATCH = int(os.environ.get("BENCH_BUDGET_WRITER_BATCH", "100"))
WORKER_CONCURRENCY = int(os.environ.get("BENCH_BUDGET_WORKER_CONCURRENCY", "1"))
# "off": no second measurement with tracing on (the smoke run: tests/test_job_budget.py measures it).
TRACED = os.environ.get("BENCH_BUDGET_TRACED", "on") != "off"
BODY_BYTES = 4096
PHASES = ("intake", "publish", "work", "fold", "announce")
LEDGER_TABLES = ("jobs_job", "jobs_attempt", "jobs_inflightfetch")
METER = "budget-meter"  # application_name of the measuring connection: left out of the counts
RECEIPTS_STREAM = "sj:receipts"  # apps/writer/streams.py STREAM

# The server's statement log, machine-readable (a statement may span lines).
LOG_SETTINGS = {
    "log_statement": "all",
    "logging_collector": "on",
    "log_destination": "csvlog",
    "log_filename": "budget.log",
    "log_rotation_size": "0",
    "autovacuum": "off",  # its WAL and its statistics would land in some phase by chance
}


@dataclass
class Budget:
    """One measurement: ``totals[key]`` over the run (all phases), ``phases[phase][key]`` per
    phase, and the ledger tables' indexes. Keys: ``sql:<kind>``, ``rows:<table>:<what>``,
    ``index_entries:<table>[:<index>]``, ``wal_bytes``, ``redis_state:<cmd>``,
    ``redis_broker:<cmd>``, ``broker_messages``."""

    jobs: int
    totals: dict[str, float] = field(default_factory=dict)
    phases: dict[str, dict[str, float]] = field(default_factory=dict)
    indexes: dict[str, list[str]] = field(default_factory=dict)
    succeeded: int = 0
    # With tracing on (measure(tracing=True)): spans exported, jobs that kept a trace context.
    spans: int = 0
    traced_jobs: int = 0

    def per_job(self) -> dict[str, float]:
        return {k: v / self.jobs for k, v in sorted(self.totals.items())}

    def table(self) -> str:
        """The counts per job, by phase, as a text table."""
        keys = sorted(self.totals)
        width = max(len(k) for k in keys) + 2
        head = f"{'per job':<{width}}" + "".join(f"{p:>10}" for p in PHASES) + f"{'total':>11}"
        lines = [head, "-" * len(head)]
        for k in keys:
            cells = "".join(f"{self.phases.get(p, {}).get(k, 0) / self.jobs:>10.3f}" for p in PHASES)
            lines.append(f"{k:<{width}}{cells}{self.totals[k] / self.jobs:>11.3f}")
        lines.append("")
        for table, defs in self.indexes.items():
            lines.append(f"indexes on {table} ({len(defs)}):")
            lines += [f"  {d}" for d in defs]
        return "\n".join(lines)


# --- the statement log -------------------------------------------------------------------

_PREFIX = re.compile(r"^(?:statement|execute [^:]*|bind [^:]*):\s*", re.S)
_COMMENT = re.compile(r"--[^\n]*|/\*.*?\*/", re.S)
_TABLE = re.compile(r"\b(?:FROM|INTO|UPDATE|JOIN|TABLE)\s+(?:ONLY\s+)?\"?([A-Za-z_][\w]*)\"?", re.I)
_WRITE = re.compile(r"\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(?:ONLY\s+)?\"?([A-Za-z_]\w*)\"?", re.I)


def statement_kind(sql: str) -> str:
    """``SELECT jobs_job``, ``UPDATE jobs_job``, ``WITH UPDATE jobs_job`` (a statement whose main
    work is a data-modifying CTE: named by its first write), ``COMMIT``..."""
    text = _COMMENT.sub(" ", sql).strip().rstrip(";")
    verb = text.split(None, 1)[0].upper() if text else "?"
    if verb in ("SELECT", "WITH"):
        write = _WRITE.search(text)
        if verb == "WITH" and write:
            return f"WITH {write.group(1).split()[0].upper()} {write.group(2)}"
        table = _TABLE.search(text)
        if verb == "SELECT" and table is None:
            # pg_notify, set_config, advisory locks: name the function called.
            call = re.search(r"\b(pg_\w+|set_config|count)\s*\(", text)
            return f"SELECT {call.group(1)}()" if call else "SELECT"
        return f"{verb} {table.group(1)}" if table else verb
    if verb in ("INSERT", "UPDATE", "DELETE"):
        write = _WRITE.search(text)
        return f"{verb} {write.group(2)}" if write else verb
    return verb


def _statements(log_dir: Path) -> list[tuple[str, str, str]]:
    """(database, application_name, statement text) of every statement logged, in order."""
    out = []
    for path in sorted(log_dir.glob("*.csv")):
        with open(path, newline="", errors="replace") as f:
            for row in csv.reader(f):
                if len(row) < 23 or row[11] != "LOG":
                    continue
                m = _PREFIX.match(row[13])
                if m and not row[13].startswith("bind"):
                    out.append((row[2], row[22], row[13][m.end() :]))
    return out


def _marker(name: str) -> str:
    return f"SELECT 'budget-phase:{name}'"


def statements_by_phase(log_dir: Path, database: str) -> dict[str, Counter[str]]:
    """Statements of every process but the meter, by phase (the meter's markers split them)."""
    phases: dict[str, Counter[str]] = defaultdict(Counter)
    current: str | None = None
    for db, app, text in _statements(log_dir):
        if db != database:
            continue
        if app == METER:
            m = re.match(r"SELECT 'budget-phase:(\w+)'", text.strip())
            if m:
                current = None if m.group(1) == "end" else m.group(1)
            continue
        if current is not None:
            phases[current][f"sql:{statement_kind(text)}"] += 1
    return phases


# --- index entries -----------------------------------------------------------------------

_VERSIONS_TABLE = "budget_versions"


def _indexes(cur: Any, table: str) -> list[tuple[str, str, str | None]]:
    """(name, definition, predicate or None) of the table's indexes."""
    cur.execute(
        """
        SELECT c.relname, pg_get_indexdef(i.indexrelid), pg_get_expr(i.indpred, i.indrelid)
          FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid
         WHERE i.indrelid = %s::regclass
         ORDER BY c.relname
        """,
        [table],
    )
    return list(cur.fetchall())


def _columns(cur: Any, table: str) -> list[str]:
    cur.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
        [table],
    )
    return [r[0] for r in cur.fetchall()]


def version_triggers_install(cur: Any, tables: tuple[str, ...] = LEDGER_TABLES) -> dict[str, list[str]]:
    """Install the row-version triggers (module docstring); returns each table's index names in
    the order of the flags the triggers record."""
    cur.execute(
        f"CREATE UNLOGGED TABLE IF NOT EXISTS {_VERSIONS_TABLE} "
        "(seq bigserial PRIMARY KEY, tbl text NOT NULL, changed bool NOT NULL, flags bool[] NOT NULL)"
    )
    names: dict[str, list[str]] = {}
    for table in tables:
        indexes = _indexes(cur, table)
        columns = _columns(cur, table)
        # The columns an index reads, its predicate's included: a HOT update changes none of them.
        indexed = sorted(
            {c for _, definition, _ in indexes for c in columns if re.search(rf"\b{c}\b", definition)}
        )
        changed = " OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in indexed) or "false"
        flags = ", ".join(f"COALESCE(({pred}), false)" if pred else "true" for _, _, pred in indexes)
        cur.execute(
            f"""
            CREATE OR REPLACE FUNCTION budget_version_{table}() RETURNS trigger AS $$
            DECLARE f bool[]; c bool;
            BEGIN
                IF TG_OP = 'UPDATE' THEN c := {changed}; ELSE c := true; END IF;
                SELECT ARRAY[{flags}]::bool[] INTO f FROM (SELECT NEW.*) AS t;
                INSERT INTO {_VERSIONS_TABLE} (tbl, changed, flags) VALUES (TG_TABLE_NAME, c, f);
                RETURN NULL;
            END $$ LANGUAGE plpgsql
            """
        )
        cur.execute(
            f"CREATE OR REPLACE TRIGGER budget_version AFTER INSERT OR UPDATE ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION budget_version_{table}()"
        )
        names[table] = [name for name, _, _ in indexes]
    return names


def index_entries(
    cur: Any, *, names: dict[str, list[str]], seq_from: int, seq_to: int, hot: dict[str, float]
) -> dict[str, float]:
    """Index entries written by the row versions recorded in (seq_from, seq_to]; ``hot``: the HOT
    updates per table in the same span (pg_stat_user_tables)."""
    out: dict[str, float] = defaultdict(float)
    for table, indexes in names.items():
        cur.execute(
            f"SELECT changed, flags FROM {_VERSIONS_TABLE} WHERE tbl = %s AND seq > %s AND seq <= %s",
            [table, seq_from, seq_to],
        )
        candidates: list[list[bool]] = []
        for changed, flags in cur.fetchall():
            if changed:
                for name, met in zip(indexes, flags, strict=True):
                    if met:
                        out[f"index_entries:{table}:{name}"] += 1
                        out[f"index_entries:{table}"] += 1
            else:
                candidates.append(flags)
        not_hot = max(0.0, len(candidates) - hot.get(table, 0))
        if candidates and not_hot:
            for i, name in enumerate(indexes):
                share = sum(1 for f in candidates if f[i]) / len(candidates) * not_hot
                if share:
                    out[f"index_entries:{table}:{name}"] += share
                    out[f"index_entries:{table}"] += share
    return dict(out)


# --- snapshots ---------------------------------------------------------------------------


class CountingRedis:
    """A Redis client that counts its own commands, so that they can be taken out."""

    def __init__(self, url: str):
        import redis

        self.client = redis.Redis.from_url(url)
        self.sent: Counter[str] = Counter()

    def commandstats(self) -> Counter[str]:
        stats = self.client.info("commandstats")
        return Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()})

    def xlen(self, key: str) -> int:
        self.sent["xlen"] += 1
        return int(self.client.xlen(key))


@dataclass
class Snapshot:
    sql_seq: int
    wal_lsn: str
    tables: dict[str, tuple[int, int, int, int]]
    state: Counter[str]
    broker: Counter[str]


class Meter:
    def __init__(self, pg: Any, state: CountingRedis, broker: CountingRedis):
        import psycopg

        self.conn = psycopg.connect(pg.url, autocommit=True, application_name=METER)
        self.state, self.broker = state, broker
        self.names: dict[str, list[str]] = {}

    def sql(self, query: str, params: Any = ()) -> list[tuple[Any, ...]]:
        cur = self.conn.execute(query, params)
        return cur.fetchall() if cur.description else []

    def quiet(self, timeout: float = 30) -> None:
        """Wait until no other client is connected: their statistics are flushed on exit."""
        wait_until(
            lambda: (
                self.sql(
                    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
                    " AND pid <> pg_backend_pid()"
                )[0][0]
                == 0
            ),
            timeout,
            "the service's connections to close",
        )
        time.sleep(0.2)

    def snapshot(self, phase: str) -> Snapshot:
        self.quiet()
        self.sql("SELECT pg_stat_clear_snapshot()")
        tables = {
            name: (ins, upd, hot, dele)
            for name, ins, upd, hot, dele in self.sql(
                "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables"
            )
        }
        seq = self.sql(f"SELECT COALESCE(max(seq), 0) FROM {_VERSIONS_TABLE}")[0][0]
        lsn = self.sql("SELECT pg_current_wal_lsn()::text")[0][0]
        self.sql(_marker(phase))
        return Snapshot(seq, lsn, tables, self._redis(self.state), self._redis(self.broker))

    @staticmethod
    def _redis(r: CountingRedis) -> Counter[str]:
        stats = r.commandstats()
        stats -= r.sent
        stats.pop("info", None)
        return stats

    def delta(self, a: Snapshot, b: Snapshot) -> dict[str, float]:
        out: dict[str, float] = {}
        hot: dict[str, float] = {}
        for table, now in b.tables.items():
            if table == _VERSIONS_TABLE:
                continue
            was = a.tables.get(table, (0, 0, 0, 0))
            for i, what in enumerate(("inserted", "updated", "hot_updated", "deleted")):
                if d := now[i] - was[i]:
                    out[f"rows:{table}:{what}"] = d
            hot[table] = now[2] - was[2]
        with self.conn.cursor() as cur:
            out.update(index_entries(cur, names=self.names, seq_from=a.sql_seq, seq_to=b.sql_seq, hot=hot))
        out["wal_bytes"] = self.sql("SELECT pg_wal_lsn_diff(%s, %s)", [b.wal_lsn, a.wal_lsn])[0][0]
        out["wal_bytes"] = float(out["wal_bytes"])
        for prefix, x, y in (("redis_state", a.state, b.state), ("redis_broker", a.broker, b.broker)):
            for cmd, n in (y - x).items():
                out[f"{prefix}:{cmd}"] = n
        if lpush := (b.broker - a.broker).get("lpush"):
            out["broker_messages"] = lpush
        return out


# --- the run -----------------------------------------------------------------------------


@contextmanager
def private_servers() -> Iterator[tuple[Any, str, str]]:
    """A private PostgreSQL (statement log on) migrated, and two private Redis servers (state,
    broker): (pg, state url, broker url)."""
    from scrapejobs.embedded import embedded_redis
    from tests.support.private_pg import PrivatePostgres

    pg = PrivatePostgres(server_settings=LOG_SETTINGS, migrated=True)
    redis_dir = Path(tempfile.mkdtemp(prefix="sj-budget-redis-"))
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, redis_dir, True)
        stack.callback(pg.destroy)
        pg.start()
        pg.wait_ready()
        state = stack.enter_context(embedded_redis(redis_dir / "state"))
        broker = stack.enter_context(embedded_redis(redis_dir / "broker"))
        yield pg, state, broker


def _step(name: str, env: dict[str, str]) -> None:
    """Run one periodic task's body once, in a process of its own (``python -m bench.budget step
    NAME``)."""
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "bench.budget", "step", name],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"step {name} failed:\n{done.stdout}\n{done.stderr}")


def _post(base: str, token: str, url: str) -> None:
    request = urllib.request.Request(
        f"{base}/api/v1/jobs",
        data=json.dumps({"url": url}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 202, response.status


def measure(
    *,
    jobs: int = JOBS,
    publish_batch: int = PUBLISH_BATCH,
    writer_batch: int = WRITER_BATCH,
    worker_concurrency: int = WORKER_CONCURRENCY,
    target: str | None = None,
    tracing: bool = False,
) -> Budget:
    """Run ``jobs`` jobs through the service phase by phase (module docstring) and count. With
    ``tracing``, every process exports its spans to a file (``OTEL_TRACES_EXPORTER=file``), so a
    job keeps its request's trace context and every step is a span (FR-29): what tracing adds to a
    job's counts; ``Budget.spans`` is how many spans were written. Without it, tracing is off
    whatever this process's environment says."""
    from scrapejobs import processes

    results = Path(tempfile.mkdtemp(prefix="sj-budget-results-"))
    spans_file = results / "spans.jsonl"
    tracing_env = (
        {"OTEL_TRACES_EXPORTER": "file", "SCRAPEJOBS_TRACE_FILE": str(spans_file)}
        if tracing
        else {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": ""}
    )
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, results, True)
        if target is None:
            target_proc, target = start_target()
            stack.callback(target_proc.stop)
        pg, state_url, broker_url = stack.enter_context(private_servers())
        env = _defaults_env(
            pg.url,
            REDIS_URL=state_url,
            CELERY_BROKER_URL=broker_url,
            SCRAPEJOBS_RESULTS_DIR=str(results),
            SCRAPEJOBS_PUBLISH_BATCH_SIZE=str(publish_batch),
            SCRAPEJOBS_DISPATCH_DEPTH="100000",
            SCRAPEJOBS_DATABASE_WRITER_BATCH_SIZE=str(writer_batch),
            # One applying connection: how a round splits over several depends on the job ids.
            SCRAPEJOBS_DATABASE_WRITER_CONCURRENCY="1",
            SCRAPEJOBS_WORKER_CONCURRENCY=str(worker_concurrency),
            **tracing_env,
        )
        _tenant, token = create_tenant(env)
        state, broker = CountingRedis(state_url), CountingRedis(broker_url)
        meter = Meter(pg, state, broker)
        stack.callback(meter.conn.close)
        meter.names = version_triggers_install(meter.conn.cursor())
        budget = Budget(jobs=jobs)
        with meter.conn.cursor() as cur:
            budget.indexes = {t: [d for _, d, _ in _indexes(cur, t)] for t in LEDGER_TABLES}
        meter.sql("CHECKPOINT")
        snaps = [meter.snapshot("intake")]

        # 1. intake: POST /jobs, one at a time, spaced past the nudge's 50 ms coalescing.
        port = free_port()
        web = Proc("web", processes.web(port=port, workers=1), env)
        try:
            wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), 60, "the web process")
            for i in range(jobs):
                _post(f"http://127.0.0.1:{port}", token, f"{target}/bytes/{BODY_BYTES}?n={i}")
                time.sleep(0.1)
            time.sleep(0.3)
        finally:
            web.stop()
        snaps.append(meter.snapshot("publish"))

        # 2. publish, once.
        _step("publish", env)
        snaps.append(meter.snapshot("work"))

        # 3. work: the worker takes every message; stopped once every receipt is in.
        worker = Proc("worker", processes.worker(concurrency=worker_concurrency), env)
        try:
            wait_until(lambda: state.xlen(RECEIPTS_STREAM) >= jobs or not _alive(worker), 300, "the receipts")
            if not _alive(worker):
                raise RuntimeError(worker.output()[-3000:])
        finally:
            worker.stop()
        snaps.append(meter.snapshot("fold"))

        # 4. fold, once; 5. announce, once.
        _step("fold", env)
        snaps.append(meter.snapshot("announce"))
        _step("announce", env)
        snaps.append(meter.snapshot("end"))

        statements = statements_by_phase(pg.data / "log", "postgres")
        for phase, a, b in zip(PHASES, snaps, snaps[1:], strict=False):
            counts = meter.delta(a, b)
            counts.update(statements.get(phase, {}))
            budget.phases[phase] = counts
            for k, v in counts.items():
                budget.totals[k] = budget.totals.get(k, 0) + v
        budget.succeeded = meter.sql("SELECT count(*) FROM jobs_job WHERE status = 'succeeded'")[0][0]
        if tracing:
            budget.spans = len(spans_file.read_text().splitlines()) if spans_file.exists() else 0
            budget.traced_jobs = meter.sql("SELECT count(*) FROM jobs_job WHERE trace_context IS NOT NULL")[
                0
            ][0]
        return budget


def _defaults_env(database_url: str, **overrides: str) -> dict[str, str]:
    """``service_env`` without the SCRAPEJOBS_ settings this process inherited (settings/test.py
    sets test-friendly ones in the test process): the budget is that of the defaults, whether the
    bench or a test measures it."""
    inherited = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("SCRAPEJOBS_")}
    try:
        return service_env(database_url, **overrides)
    finally:
        os.environ.update(inherited)


def _alive(proc: Proc) -> bool:
    return proc.p.poll() is None


def bare_task_redis(*, jobs: int, target: str) -> dict[str, float]:
    """The bare Celery task (bench/naive_app.py) on a Redis of its own: its Redis commands per
    job, every one of them a broker command."""
    from scrapejobs.embedded import embedded_redis

    with ExitStack() as stack:
        work = Path(tempfile.mkdtemp(prefix="sj-budget-bare-"))
        stack.callback(shutil.rmtree, work, True)
        url = stack.enter_context(embedded_redis(work / "redis"))
        env = dict(os.environ, NAIVE_BROKER_URL=url, PYTHONUNBUFFERED="1")
        argv = [
            str(Path(sys.executable).parent / "celery"),
            *("-A", "bench.naive_app", "worker", "--loglevel", "INFO", "--queues", "naive"),
            *("--pool", "threads", "--concurrency", str(WORKER_CONCURRENCY)),
            *("--without-mingle", "--without-gossip"),
        ]
        r = CountingRedis(url)
        before = Meter._redis(r)
        worker = Proc("bare-worker", argv, env)
        try:
            wait_until(lambda: celery_ready(worker), 60, "the bare worker")
            os.environ["NAIVE_BROKER_URL"] = url
            from bench.naive_app import app, fetch

            # Its own connection: bench/e2e.py may have used the app with another broker already.
            with app.connection_for_write(url) as conn:
                for i in range(jobs):
                    fetch.apply_async(
                        (f"{target}/bytes/{BODY_BYTES}?n={i}", str(work / f"{i}.body")),
                        connection=conn,  # type: ignore[call-arg]
                    )
            wait_until(
                lambda: sum(1 for p in work.iterdir() if p.suffix == ".body") >= jobs, 300, "the bare jobs"
            )
        finally:
            worker.stop()
        after = Meter._redis(r)
        return {f"redis_broker:{cmd}": n / jobs for cmd, n in sorted((after - before).items())}


# --- the budget --------------------------------------------------------------------------

# Every meter of a measurement, by the prefix of the keys it reports: one that reports nothing
# (its log unread, its statistics not flushed, its server not the one the service used) would
# make its keys vanish, and a budget that only caps what it sees would pass.
METERS = {
    "sql": "the server's statement log",
    "rows": "pg_stat_user_tables",
    "index_entries": "the row-version triggers",
    "wal_bytes": "pg_current_wal_lsn()",
    "redis_state": "the state server's INFO commandstats",
    "redis_broker": "the broker's INFO commandstats",
    "broker_messages": "the broker's LPUSHes",
}


def budget_load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def noise_ceiling(entry: dict[str, Any]) -> float:
    """A background count's ceiling: the largest seen over the runs it was set from, plus its
    stated margin (both per job)."""
    return float(entry["largest_seen"]) + float(entry["margin"])


def budget_problems(measured: Budget, budget: dict[str, Any]) -> list[str]:
    """Every way ``measured`` differs from the budget (docs/benchmarks.md, the `budget` benchmark):

    - a meter (``METERS``) that reported nothing;
    - an exact count (``per_job``: statements, row versions, index entries, the job's own Redis
      commands, broker messages) that rose or fell, a budgeted one missing included; a count the
      budget does not name has a budget of 0;
    - WAL bytes outside the budget by more than ``wal_bytes_tolerance`` (the spread measured);
    - a background count (``noise``: kombu's polling, ticks of a thread) over its ceiling;
    - a ledger table with more indexes than budgeted."""
    exact: dict[str, float] = dict(budget["per_job"])
    noise: dict[str, dict[str, Any]] = budget.get("noise", {})
    tolerance = float(budget.get("wal_bytes_tolerance", 0.0))
    per_job = measured.per_job()
    problems = []
    for meter, source in METERS.items():
        if not any(v for k, v in per_job.items() if k == meter or k.startswith(f"{meter}:")):
            problems.append(f"meter {meter} ({source}) reported nothing")
    for key in sorted(set(per_job) | set(exact)):
        value = per_job.get(key, 0.0)
        if key in noise:
            if value > noise_ceiling(noise[key]) + 1e-9:
                problems.append(
                    f"{key}: {value:.4f} per job, over its ceiling {noise_ceiling(noise[key]):.4f}"
                )
            continue
        want = exact.get(key, 0.0)
        slack = want * tolerance if key == "wal_bytes" else 1e-9
        if key not in per_job and want:
            problems.append(f"{key}: missing, budget {want:.4f}")
        elif value > want + slack:
            problems.append(f"{key}: rose to {value:.4f} per job, budget {want:.4f}")
        elif value < want - slack:
            problems.append(f"{key}: fell to {value:.4f} per job, budget {want:.4f}")
    for table, defs in measured.indexes.items():
        if len(defs) != budget["indexes"].get(table, 0):
            problems.append(f"indexes on {table}: {len(defs)}, budget {budget['indexes'].get(table, 0)}")
    for table in budget["indexes"]:
        if table not in measured.indexes:
            problems.append(f"indexes on {table}: not measured, budget {budget['indexes'][table]}")
    return problems


def budget_with_tracing(budget: dict[str, Any]) -> dict[str, Any]:
    """The budget of a job with tracing on (FR-29): every count as with tracing off, but for what
    the ``tracing`` entry names (the trace context kept with the job and carried by its receipt
    is WAL, not statements or commands)."""
    traced = json.loads(json.dumps(budget))
    for key, value in budget.get("tracing", {}).get("per_job", {}).items():
        traced["per_job"][key] = value
    return traced


def budget_propose(measured: Budget, budget: dict[str, Any]) -> dict[str, Any]:
    """``budget`` with its exact counts replaced by this measurement's (4 decimals per job): what
    to commit after a deliberate change. A background count's largest seen is kept, or raised to
    this run's, its margin kept."""
    per_job = measured.per_job()
    noise = {
        k: {**v, "largest_seen": max(float(v["largest_seen"]), math.ceil(per_job.get(k, 0) * 10000) / 10000)}
        for k, v in budget.get("noise", {}).items()
    }
    return {
        **budget,
        "indexes": {t: len(d) for t, d in measured.indexes.items()},
        "noise": noise,
        "per_job": {k: round(v, 4) for k, v in per_job.items() if k not in noise},
    }


def run() -> None:
    target_proc, target = start_target()
    try:
        note(
            f"budget: {JOBS} jobs phase by phase (publish batches of {PUBLISH_BATCH}, writer batches of "
            f"{WRITER_BATCH}, worker concurrency {WORKER_CONCURRENCY}), then the bare task"
        )
        measured = measure(target=target)
        bare = bare_task_redis(jobs=JOBS, target=target)
        traced = measure(target=target, tracing=True) if TRACED else None
    finally:
        target_proc.stop()
    print(measured.table(), flush=True)
    figure("budget_jobs", measured.jobs)
    figure("budget_succeeded", measured.succeeded)
    per_job = measured.per_job()
    for key, value in per_job.items():
        figure(f"budget_{key}", round(value, 4))
    for table, defs in measured.indexes.items():
        figure(f"budget_indexes:{table}", len(defs))
    sql = sum(v for k, v in per_job.items() if k.startswith("sql:"))
    state_cmds = sum(v for k, v in per_job.items() if k.startswith("redis_state:"))
    broker_cmds = sum(v for k, v in per_job.items() if k.startswith("redis_broker:"))
    figure("budget_sql_statements_per_job", round(sql, 3))
    figure("budget_index_entries_per_job", round(per_job.get("index_entries:jobs_job", 0), 3))
    figure("budget_redis_commands_per_job", round(state_cmds + broker_cmds, 3))
    for key, value in bare.items():
        figure(f"budget_bare_{key}", round(value, 4))
    bare_cmds = sum(bare.values())
    figure("budget_bare_redis_commands_per_job", round(bare_cmds, 3))
    figure("budget_redis_commands_to_bare_ratio", (state_cmds + broker_cmds) / bare_cmds)
    if traced is None:
        return
    # The same jobs with tracing on (FR-29): only the counts that differ from tracing off.
    traced_per_job = traced.per_job()
    figure("budget_tracing_spans_per_job", round(traced.spans / traced.jobs, 2))
    figure("budget_tracing_jobs_with_a_trace", traced.traced_jobs)
    for key in sorted(set(per_job) | set(traced_per_job)):
        if abs(traced_per_job.get(key, 0.0) - per_job.get(key, 0.0)) > 1e-9:
            figure(f"budget_tracing_{key}", round(traced_per_job.get(key, 0.0), 4))


def _run_step(name: str) -> None:
    import django

    django.setup()
    if name == "publish":
        from apps.publishing.tasks import outbox_publish

        outbox_publish()
    elif name == "fold":
        from apps.writer.flush import writer_flush_once

        writer_flush_once()
    elif name == "announce":
        from apps.webhooks.tasks import webhooks_enqueue_final

        webhooks_enqueue_final()
    else:
        raise SystemExit(f"unknown step {name}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["step"]:
        _run_step(sys.argv[2])
    else:
        run()
