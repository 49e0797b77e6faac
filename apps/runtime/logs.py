"""What the service's log lines carry, and what they must not.

- Every line logged while a job's attempt runs carries the job id, tenant, domain, attempt and URL
  (``job_log_context``: a context variable set by the scrape task, read by ``JobContextFilter``);
  with tracing on, every line logged inside a span carries its ``trace_id`` (FR-29).
- ``SCRAPEJOBS_LOG_FORMAT``: ``json`` (one object per line, for a log pipeline; the production
  default) or ``text`` (readable, for development), see ``JsonFormatter`` / ``TextFormatter``.
- Credentials never reach a log: header values whose names suggest a credential are masked
  (``SecretsFilter``), and signed result links are cut out of the web access log
  (``AccessLogWithoutSecrets``, gunicorn's logger class; ``UvicornAccessFilter`` for uvicorn).
- Housekeeping that did nothing logs nothing: beat's "Sending due task" line, several a second
  for the writer, publisher, sweeper and webhook ticks, is dropped (``BeatTickFilter``); the
  tasks themselves log when they did something.

Imports no Django at module level: gunicorn loads the logger class before the application.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any

from gunicorn.glogging import Logger as GunicornLogger

from apps.admin_mixins import MASK, error_readable, header_is_secret
from apps.tracing import trace_id_current


@dataclass(frozen=True)
class JobLogContext:
    job_id: str
    domain: str = ""
    tenant: str = ""
    attempt: int | None = None
    url: str = ""


_job: contextvars.ContextVar[JobLogContext | None] = contextvars.ContextVar("scrapejobs_job", default=None)


@contextmanager
def job_log_context(*, job_id: str, domain: str | None = None) -> Iterator[None]:
    """Lines logged inside the block (same thread) are about this job."""
    token = _job.set(JobLogContext(job_id=str(job_id), domain=domain or ""))
    try:
        yield
    finally:
        _job.reset(token)


def job_log_context_claimed(*, tenant_id: object, attempt: int, url: str) -> None:
    """Add what the claim taught (tenant, attempt number, URL) to the current job's context. The
    URL is masked as a message is (a ``?token=`` value): it is a field of every line logged."""
    current = _job.get()
    if current is not None:
        _job.set(replace(current, tenant=str(tenant_id or ""), attempt=attempt, url=secrets_masked(url)))


def job_attempt_failure_log(logger: logging.Logger, *, error_class: str | None, error: str | None) -> None:
    """One WARNING naming the job and its URL when an attempt failed (the ledger has the details;
    this is the line an operator watching ``make run`` sees)."""
    current = _job.get()
    if current is None:
        return
    logger.warning(
        "job %s %s: attempt %s failed: %s: %s",
        current.job_id,
        current.url,
        current.attempt,
        error_class or "error",
        error_readable(error),
    )


class JobContextFilter(logging.Filter):
    """Puts the current job's fields on every record (empty strings outside a job), and the
    current trace's id when tracing is on (FR-29, docs/tracing.md)."""

    def filter(self, record: logging.LogRecord) -> bool:
        current = _job.get()
        fields = asdict(current) if current is not None else {}
        for name in ("job_id", "tenant", "domain", "attempt", "url"):
            if not hasattr(record, name):
                setattr(record, name, fields.get(name) or "")
        if not hasattr(record, "trace_id"):
            record.trace_id = trace_id_current()
        return True


# /results/<signed token>: the token is the credential (anyone holding it downloads the body).
_RESULT_PATH = re.compile(r"(/results/)[^\s?\"']+")

# "Authorization: Bearer abc", "'X-Api-Key': 'abc'", "token=abc": a credential-like name, then a
# separator, then the value (quoted, or up to a separator). The name starts only where a word
# does (the lookbehind): tried at every character of a long run with no separator, it cost time
# quadratic in the run's length (a 30,000-character path took 18 s on the web's event loop).
_SECRET_PAIR = re.compile(
    r"""(?<![\w-])(?P<name>[\w-]+)(?P<sep>["']?\s*[:=]\s*)(?P<q>["']?)(?P<value>(?:Bearer\s+|Basic\s+)?[^"'\s,;&?}]+)"""
)


def secrets_masked(text: str) -> str:
    """``text`` with the value of every credential-like ``name: value`` / ``name=value`` masked,
    and the token of every signed result link (``/results/<token>``) cut out."""

    def mask(match: re.Match[str]) -> str:
        if not header_is_secret(match["name"]):
            return match[0]
        return f"{match['name']}{match['sep']}{match['q']}{MASK}"

    return _RESULT_PATH.sub(r"\1<link>", _SECRET_PAIR.sub(mask, text))


class SecretsFilter(logging.Filter):
    """Masks credential values in the rendered message (headers dumped by a library, a URL's
    ``?token=``): the record keeps its level and logger, its text loses the secret."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = secrets_masked(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


class BeatTickFilter(logging.Filter):
    """Drops celery beat's "Scheduler: Sending due task ..." lines: the housekeeping ticks run
    several times a second and say nothing; what a tick did is logged by its task."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Scheduler: Sending due task")


_JOB_FIELDS = ("job_id", "tenant", "domain", "attempt", "url", "trace_id")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the job's fields when set, and the
    traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update({name: getattr(record, name) for name in _JOB_FIELDS if getattr(record, name, "")})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """``time level logger message [job=… tenant=… domain=… attempt=…]`` for a person at a terminal."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = [
            f"{name}={getattr(record, name)}"
            for name in (*_JOB_FIELDS[:4], "trace_id")
            if getattr(record, name, "")
        ]
        if not fields:
            return line
        first, _, rest = line.partition("\n")
        return f"{first} [{' '.join(fields)}]" + (f"\n{rest}" if rest else "")


# --- Signed result links out of the web access log -------------------------------------------


def access_path_redacted(text: str) -> str:
    """A request path or line with the result link's token and any query string cut out."""
    return _RESULT_PATH.sub(r"\1<link>", re.sub(r"\?[^\s\"]*", "?<query>", text))


class AccessLogWithoutSecrets(GunicornLogger):
    """gunicorn's logger (``--logger-class``) whose access lines never show a signed link: the
    request line, path, query and referer are redacted before the format is applied."""

    def atoms(self, resp: Any, req: Any, environ: Any, request_time: Any) -> dict[str, Any]:
        atoms: dict[str, Any] = super().atoms(resp, req, environ, request_time)
        for name in ("r", "U", "f"):
            if isinstance(atoms.get(name), str):
                atoms[name] = access_path_redacted(atoms[name])
        if atoms.get("q"):
            atoms["q"] = "<query>"
        return atoms


class UvicornAccessFilter(logging.Filter):
    """The same for uvicorn's access log (``uvicorn.access``: args are client, method, path with
    query, HTTP version, status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], access_path_redacted(args[2]), *args[3:])
        return True


def log_handlers_configure(root: logging.Logger, *, log_format: str) -> None:
    """Give the handlers Celery installed on the root logger (it replaces Django's) the project's
    format and filters, so a worker's lines look like the web's and carry the job's fields."""
    formatter: logging.Formatter = JsonFormatter() if log_format == "json" else TextFormatter()
    for handler in root.handlers:
        handler.setFormatter(formatter)
        handler.addFilter(JobContextFilter())
        handler.addFilter(SecretsFilter())
