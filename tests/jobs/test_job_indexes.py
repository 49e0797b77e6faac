"""Every index and constraint on ``jobs_job`` comes from apps/jobs, and is declared on the model.

Each index on the ledger is paid by every write that moves a job (the Job model's Meta says so),
so the ledger's owner decides them: its migrations build them, its model's Meta names them with
the query that needs each, and a reader finds them all in one place. An index the publisher or
the dead-letter pages need is added to ``Job.Meta.indexes`` and migrated in apps/jobs (built
CONCURRENTLY with ``AddIndexConcurrently`` where a live ledger must not be locked), never in the
needing app's own migrations.

Two checks:

- the migrations of every other app, read operation by operation (raw SQL by its ``CREATE INDEX``
  and ``ADD CONSTRAINT`` statements, forwards and backwards; model operations by the table their
  model lives in), build nothing on ``jobs_job`` but the grandfathered ones below;
- the migrated database has no index or constraint on ``jobs_job`` that the Job model does not
  declare (its Meta, its fields' own), but the grandfathered raw-SQL ones.

Past migrations are never edited (they have run on deployed databases), hence the lists.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import connection, migrations
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.operations.base import Operation
from django.db.migrations.state import ProjectState

TABLE = "jobs_job"

# Indexes other apps' migrations built on jobs_job. They predate the rule above and stay where
# they are: (app, migration) -> the index names it creates, forwards or backwards.
GRANDFATHERED_MIGRATIONS: dict[tuple[str, str], set[str]] = {
    # The fair dispatcher's two indexes (apps/jobs/outbox.py), then rebuilt leading with render.
    ("publishing", "0001_outbox_fair_index"): {"jobs_outbox_fair"},
    ("publishing", "0002_fair_outbox_due_index"): {"jobs_outbox_due"},
    ("publishing", "0003_browser_outbox_render"): {
        "jobs_outbox_fair_next",
        "jobs_outbox_due_next",
        "jobs_outbox_fair",  # its reverse brings the old ones back
        "jobs_outbox_due",
    },
    # The dead-letter pages (apps/scheduling/selectors.py).
    ("scheduling", "0002_admin_dead_letter_index"): {"jobs_dead_letter_newest"},
}

# Indexes on jobs_job built by raw SQL (in apps/jobs's migrations or the ones above), so the Job
# model's state does not know them. They predate the rule that Meta declares every index.
GRANDFATHERED_UNDECLARED = {
    "jobs_outbox_fair",  # apps/publishing/migrations/0001, 0003
    "jobs_outbox_due",  # apps/publishing/migrations/0002, 0003
    "jobs_dead_letter_newest",  # apps/scheduling/migrations/0002
    "jobs_queued_backlog",  # apps/jobs/migrations/0010, 0012 (queue_snapshot, apps/jobs/rollups.py)
    "jobs_admin_rare_status_newest",  # apps/jobs/migrations/0013 (the admin's status filter)
    "jobs_admin_rare_priority_newest",  # apps/jobs/migrations/0013 (the admin's priority filter)
}

_CREATE_INDEX = re.compile(
    r"\bCREATE\s+(?:UNIQUE\s+)?INDEX\s+(?:CONCURRENTLY\s+)?(?:IF\s+NOT\s+EXISTS\s+)?"
    r"(?:(?P<name>[\w\"]+)\s+)?ON\s+(?:ONLY\s+)?(?P<table>[\w.\"]+)",
    re.IGNORECASE,
)
_ADD_CONSTRAINT = re.compile(
    r"\bALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?(?:ONLY\s+)?(?P<table>[\w.\"]+)\s+(?:[^;]*?\s)??"
    r"ADD\s+CONSTRAINT\s+(?P<name>[\w\"]+)",
    re.IGNORECASE | re.DOTALL,
)


@dataclass(frozen=True)
class Built:
    migration: tuple[str, str]
    name: str
    how: str

    def __str__(self) -> str:
        app, name = self.migration
        return f"apps/{app}/migrations/{name}.py: {self.how} builds {self.name!r} on {TABLE}"


def _bare(identifier: str) -> str:
    return identifier.replace('"', "").rpartition(".")[2]


def _statements(sql: object) -> Iterator[str]:
    """RunSQL's sql or reverse_sql: a string, or a list of strings or (sql, params) pairs."""
    if isinstance(sql, str):
        yield sql
    elif isinstance(sql, list | tuple):
        for item in sql:
            yield item[0] if isinstance(item, list | tuple) else item


def sql_builds(sql: str) -> Iterator[str]:
    """The names of the indexes and constraints a piece of SQL builds on jobs_job."""
    for match in _CREATE_INDEX.finditer(sql):
        if _bare(match["table"]) == TABLE:
            yield _bare(match["name"] or "<unnamed>")
    for match in _ADD_CONSTRAINT.finditer(sql):
        if _bare(match["table"]) == TABLE:
            yield _bare(match["name"])


def _table_of(state: ProjectState, app_label: str, model_name: str) -> str:
    model = state.models.get((app_label, model_name.lower()))
    if model is None:
        return f"{app_label}_{model_name.lower()}"
    if model.options.get("proxy"):
        base = next((b for b in model.bases if isinstance(b, str)), None)
        if base:
            base_app, _, base_model = base.partition(".")
            return _table_of(state, base_app, base_model)
    return str(model.options.get("db_table") or f"{app_label}_{model_name.lower()}")


def _indexed(field: object) -> bool:
    return bool(getattr(field, "db_index", False) or getattr(field, "unique", False))


def _operations(operations: Iterable[Operation]) -> Iterator[Operation]:
    for operation in operations:
        if isinstance(operation, migrations.SeparateDatabaseAndState):
            yield from _operations(operation.database_operations)
        else:
            yield operation


def migration_builds(
    key: tuple[str, str], migration: migrations.Migration, state: ProjectState
) -> list[Built]:
    """Every index or constraint the migration builds on jobs_job, forwards or backwards."""
    app_label = key[0]
    found: list[Built] = []
    for op in _operations(migration.operations):
        kind = type(op).__name__
        if isinstance(op, migrations.RunSQL):
            for sql in (*_statements(op.sql), *_statements(op.reverse_sql)):
                found += [Built(key, name, "RunSQL") for name in sql_builds(sql)]
        elif isinstance(op, migrations.RunPython):
            for code in (op.code, op.reverse_code):
                if code is not None and TABLE in inspect.getsource(code):
                    found.append(Built(key, f"<{getattr(code, '__name__', 'code')}>", "RunPython"))
        elif isinstance(op, migrations.AddIndex):
            if _table_of(state, app_label, op.model_name) == TABLE:
                found.append(Built(key, op.index.name, kind))
        elif isinstance(op, migrations.AddConstraint):
            added: Any = op  # django-stubs know neither its model_name nor its constraint
            if _table_of(state, app_label, added.model_name) == TABLE:
                found.append(Built(key, added.constraint.name, kind))
        elif isinstance(op, migrations.CreateModel):
            if _table_of(state, app_label, op.name) == TABLE:
                items = [*op.options.get("indexes", []), *op.options.get("constraints", [])]
                found += [Built(key, item.name, kind) for item in items]
                found += [Built(key, f"<field {name}>", kind) for name, field in op.fields if _indexed(field)]
        elif isinstance(op, migrations.AddField | migrations.AlterField):
            if _table_of(state, app_label, op.model_name) == TABLE and _indexed(op.field):
                found.append(Built(key, f"<field {op.name}>", kind))
        elif isinstance(op, migrations.AlterUniqueTogether | migrations.AlterIndexTogether):
            if _table_of(state, app_label, op.name) == TABLE:
                found.append(Built(key, f"<{op.option_name}>", kind))
    return found


def builds_outside_jobs(loader: MigrationLoader) -> list[Built]:
    state = loader.project_state()
    found: list[Built] = []
    for key, migration in sorted(loader.disk_migrations.items()):
        if key[0] != "jobs":
            found += migration_builds(key, migration, state)
    return found


@pytest.fixture(scope="module")
def loader() -> MigrationLoader:
    return MigrationLoader(None, ignore_no_migrations=True)


def test_no_other_app_migrates_an_index_onto_jobs_job(loader: MigrationLoader) -> None:
    found = builds_outside_jobs(loader)
    new = [b for b in found if b.name not in GRANDFATHERED_MIGRATIONS.get(b.migration, set())]
    assert not new, (
        "indexes and constraints on jobs_job are declared in Job.Meta and migrated in apps/jobs:\n"
        + "\n".join(f"    {b}" for b in new)
    )
    # The grandfathered list is what the migrations hold (it shrinks, never drifts): each entry
    # is still seen, through the f-strings and helpers that build its SQL.
    seen = {(b.migration, b.name) for b in found}
    stale = {(key, name) for key, names in GRANDFATHERED_MIGRATIONS.items() for name in names} - seen
    assert not stale, f"grandfathered but no longer built: {sorted(stale)}"


@pytest.mark.django_db
def test_the_job_model_declares_every_index_on_jobs_job() -> None:
    from apps.jobs.models import Job

    with connection.cursor() as cursor:
        present = set(connection.introspection.get_constraints(cursor, TABLE))
    with connection.schema_editor(collect_sql=True) as editor:
        editor.create_model(Job)  # collects the SQL Django would run, runs nothing
    declared = {
        name
        for sql in editor.collected_sql
        for name in re.findall(r'(?:INDEX|CONSTRAINT) "?(\w+)"?', sql)
        if TABLE in sql
    }
    # What Django declares inline in CREATE TABLE, under the names PostgreSQL gives it: the
    # primary key, and the checks of positive integer fields.
    declared |= {f"{TABLE}_pkey"}
    declared |= {
        f"{TABLE}_{f.column}_check" for f in Job._meta.local_concrete_fields if f.db_check(connection)
    }
    undeclared = present - declared - GRANDFATHERED_UNDECLARED
    assert not undeclared, (
        f"{TABLE} has indexes or constraints the Job model does not declare: {sorted(undeclared)} "
        "(declare them in Job.Meta and migrate them in apps/jobs)"
    )
    gone = GRANDFATHERED_UNDECLARED - present
    assert not gone, f"grandfathered but not in the database: {sorted(gone)}"


# --- The checker itself ------------------------------------------------------------------------


def test_the_sql_scan_sees_the_forms_an_index_is_written_in() -> None:
    sql = """
        CREATE INDEX CONCURRENTLY IF NOT EXISTS a ON jobs_job (x);
        create unique index "b" on only public."jobs_job" (y);
        CREATE INDEX ON jobs_job (z);
        CREATE INDEX c ON jobs_attempt (x);
        ALTER TABLE jobs_job ADD CONSTRAINT d CHECK (attempts >= 0);
        ALTER TABLE IF EXISTS ONLY jobs_job VALIDATE CONSTRAINT e, ADD CONSTRAINT f UNIQUE (id);
    """
    assert list(sql_builds(sql)) == ["a", "b", "<unnamed>", "d", "f"]


def test_the_migration_scan_sees_sql_and_model_operations_on_jobs_job(loader: MigrationLoader) -> None:
    from django.db import models

    state = loader.project_state()

    class Scratch(migrations.Migration):
        operations = [
            migrations.RunSQL("SELECT 1", reverse_sql=["CREATE INDEX back ON jobs_job (domain)"]),
            migrations.SeparateDatabaseAndState(
                database_operations=[migrations.RunSQL("CREATE INDEX inner_one ON jobs_job (status)")]
            ),
            migrations.RunSQL("CREATE INDEX elsewhere ON publishing_thing (x)"),
        ]

    class DeadLetters(migrations.Migration):
        operations = [  # DeadLetter is a proxy of jobs.Job: its table is jobs_job
            migrations.AddIndex("deadletter", models.Index(fields=["finished_at"], name="by_proxy")),
            migrations.AddConstraint("deadletter", models.UniqueConstraint(fields=["url"], name="url_once")),
        ]

    scratch = Scratch("0099_scratch", "publishing")
    dead_letters = DeadLetters("0099_scratch", "scheduling")
    found = migration_builds(("publishing", "0099_scratch"), scratch, state)
    found += migration_builds(("scheduling", "0099_scratch"), dead_letters, state)
    assert [(b.name, b.how) for b in found] == [
        ("back", "RunSQL"),
        ("inner_one", "RunSQL"),
        ("by_proxy", "AddIndex"),
        ("url_once", "AddConstraint"),
    ]
