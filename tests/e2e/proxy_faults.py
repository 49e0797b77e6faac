"""Jobs run by real processes while a loopback TCP proxy (tests/support/tcp_proxy.py) in front of
one of their servers misbehaves, then forwards again (NFR-37): the run and the checks every such
test makes. A fault test adds its own (the stored objects of an S3 test, the attempts' classes).

``jobs_through_a_fault`` starts control, beat and a worker, submits ``len(delays)`` jobs (job i's
target answers after ``delays[i]`` seconds), applies the fault once the slow ones are fetching and
the fast ones done, keeps it for ``fault_s``, ends it, and checks: every job ``succeeded`` (the
exact final state of every job), no target fetched more often than its job's recorded attempts,
every process alive, every job final within ``recovery_bound_s`` of the fault's end, and a job
submitted then final within ``fresh_bound_s``: no process was left hanging on a connection the
fault took.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from apps.jobs.models import Attempt, Job, JobStatus
from tests.e2e.fault_support import attempt_history, submit, wait_all_final
from tests.support.procs import Proc, wait_for
from tests.support.target import TargetServer
from tests.support.tcp_proxy import TcpProxy


def redis_through_a_proxy(url: str) -> tuple[TcpProxy, str]:
    """A started loopback proxy in front of the Redis server of ``url``, and ``url`` with the
    proxy's address in place of the server's (its credentials and database kept)."""
    parts = urlsplit(url)
    proxy = TcpProxy(upstream_host=parts.hostname or "127.0.0.1", upstream_port=parts.port or 6379).start()
    credentials = parts.netloc.rpartition("@")[0]
    return proxy, parts._replace(netloc=f"{credentials}@127.0.0.1:{proxy.port}".lstrip("@")).geturl()


def heal(proxy: TcpProxy, *, strand: bool = False) -> None:
    """The proxy forwards again, at full speed, and resets nothing (``strand``: TcpProxy.restore's)."""
    proxy.reset_after_bytes = None
    proxy.bytes_per_s = None
    proxy.restore(strand=strand)


@dataclass(frozen=True)
class Fault:
    """What the proxy does during the fault, how a test knows it did it, and how it ends."""

    name: str
    apply: Callable[[TcpProxy], None]
    happened: Callable[[TcpProxy], bool]
    end: Callable[[TcpProxy], None] = heal


def black_hole(*, strand: bool = False) -> Fault:
    """Processes try to connect and are never answered (``held``). ``strand``: the connections
    open during it never carry anything again (a firewall that forgot them): a process gets past
    it only by its own timeouts, not by the black hole's end."""
    return Fault(
        "stranding black hole" if strand else "black hole",
        lambda p: p.black_hole(),
        lambda p: p.held >= 1,
        lambda p: heal(p, strand=strand),
    )


def reset_after(n_bytes: int, *, at_least: int = 2) -> Fault:
    """Every connection is reset once it carried ``n_bytes`` (the ones open when the fault starts
    count from then): connections reset mid-stream, again and again."""

    def apply(p: TcpProxy) -> None:
        p.reset_after_bytes = n_bytes

    return Fault(f"reset after {n_bytes} bytes", apply, lambda p: p.resets >= at_least)


def thin_pipe(bytes_per_s: float) -> Fault:
    def apply(p: TcpProxy) -> None:
        p.bytes_per_s = bytes_per_s

    return Fault(f"a pipe of {bytes_per_s:.0f} bytes/s", apply, lambda p: p.throttled > 0)


@dataclass(frozen=True)
class Run:
    ids: list[Any]  # the jobs submitted before the fault, then the fresh one
    paths: list[str]  # their targets' paths, in the same order


def _ready(proc: Proc) -> bool:
    assert proc.alive(), proc.tail()
    return "ready." in proc.log.read_text(errors="replace")


def jobs_through_a_fault(
    svc: Any,
    make_tenant: Any,
    target: TargetServer,
    proxy: TcpProxy,
    *,
    fault: Fault,
    fault_s: float,
    delays: Sequence[float],
    recovery_bound_s: float,
    fresh_bound_s: float,
    worker_env: dict[str, str] | None = None,
    body_bytes: int = 4000,
    **job: Any,
) -> Run:
    """Run the jobs through ``fault`` (see the module's docstring); ``job``: submit()'s options."""
    control = svc.start("control")
    beat = svc.start("beat")
    worker = svc.start("worker", concurrency=len(delays) + 10, env=worker_env)
    wait_for(lambda: _ready(control) and _ready(worker), 60, what="control and worker ready")

    tenant, _, _ = make_tenant()
    paths = [f"/bytes/{body_bytes + i}" for i in range(len(delays))]
    jobs = [
        submit(tenant, target.url(f"{p}?delay={d}"), **{"max_attempts": 5, **job})
        for p, d in zip(paths, delays, strict=True)
    ]
    ids = [j.id for j in jobs]
    slow = [j.id for j, d in zip(jobs, delays, strict=True) if d]
    fast = [j.id for j, d in zip(jobs, delays, strict=True) if not d]
    # The slow jobs are running (claimed, their targets fetching) when the fault starts, the fast
    # ones are done (a fast job caught by the fault could spend its attempts in it at once).
    wait_for(
        lambda: (
            Job.objects.filter(id__in=slow, status=JobStatus.RUNNING).count() == len(slow)
            and len(target.requests_for("/bytes/")) >= len(delays)
            and Job.objects.filter(id__in=fast, status=JobStatus.SUCCEEDED).count() == len(fast)
        ),
        60,
        what="every slow job claimed and fetching, every fast one succeeded",
    )

    fault.apply(proxy)
    # The fault itself: its duration is the subject of this sleep.
    time.sleep(fault_s)
    assert fault.happened(proxy), (
        f"{fault.name}: the proxy saw none of it (held {proxy.held}, resets {proxy.resets}, throttled {proxy.throttled} bytes)"
    )
    fault.end(proxy)
    back = time.monotonic()

    wait_all_final(ids, timeout=recovery_bound_s, what=f"jobs after the {fault.name}")
    # time is the subject: every component works again within a stated time after the fault ends
    assert time.monotonic() - back < recovery_bound_s

    # No process hung: each is alive, and a job submitted now is published, claimed, fetched,
    # stored, folded and final within the bound.
    for proc in (control, beat, worker):
        assert proc.alive(), proc.tail()
    fresh_path = f"/bytes/{body_bytes + len(delays)}"
    fresh = submit(tenant, target.url(fresh_path), **job)
    fresh_at = time.monotonic()
    wait_all_final([fresh.id], timeout=fresh_bound_s, what=f"a job submitted after the {fault.name}")
    # time is the subject: no process hung, so a new job goes through within a stated time
    assert time.monotonic() - fresh_at < fresh_bound_s

    statuses = Counter(Job.objects.filter(id__in=[*ids, fresh.id]).values_list("status", flat=True))
    unsucceeded = Job.objects.filter(id__in=[*ids, fresh.id]).exclude(status=JobStatus.SUCCEEDED)
    histories = {str(j.id): (j.status, attempt_history(j)) for j in unsucceeded}
    assert statuses == {JobStatus.SUCCEEDED: len(ids) + 1}, (statuses, histories)
    # Never fetched more often than recorded: each target request belongs to an attempt row.
    attempts = Counter(Attempt.objects.filter(job_id__in=ids).values_list("job_id", flat=True))
    fetched = Counter(r[1] for r in target.requests_for("/bytes/"))
    over = {p: (fetched[p], attempts[i]) for i, p in zip(ids, paths, strict=True) if fetched[p] > attempts[i]}
    assert not over, f"targets fetched more often than their jobs' attempts: {over}"
    assert all(fetched[p] >= 1 for p in paths)
    assert fetched[fresh_path] == 1
    return Run(ids=[*ids, fresh.id], paths=[*paths, fresh_path])
