"""A scrape worker's CPU priority on a machine it shares (``SCRAPEJOBS_WORKER_NICE``,
docs/settings.md).

On one machine the web, control, PostgreSQL and Redis compete with the workers for the cores. The
intake has a latency aim (NFR-2: p99 ≤ 200 ms) that a request feels at once; a worker's CPU goes
to jobs whose fetch waits on the target for hundreds of ms to seconds, and whose start has a
minute (NFR-8). A nice value above 0 lets the scheduler serve the others first when the cores are
busy and changes nothing while they are not. Containers each get their own share from the
orchestrator instead (CPU requests, ``cpu_shares``); there this is left at 0.

Linux keeps a nice value per thread, and a new thread inherits its creator's: every thread the
process has is lowered, the one running this first, so those it starts later inherit it."""

from __future__ import annotations

import logging
import os
import threading

logger = logging.getLogger(__name__)


def process_nice_set(nice: int) -> int:
    """Lower every thread of this process to ``nice`` (0..19; never raised: that needs
    privileges, and a value already higher is kept). Returns how many threads were changed."""
    if nice <= 0:
        return 0
    changed = 0
    own = threading.get_native_id()
    try:
        others = [int(t) for t in os.listdir("/proc/self/task") if int(t) != own]
    except OSError:  # no /proc: the calling thread only
        others = []
    # 0, the calling thread, first: the threads it starts meanwhile inherit its value.
    for tid in [0, *others]:
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) < nice:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
                changed += 1
        except (ProcessLookupError, PermissionError) as e:  # a thread that ended meanwhile, or no right
            logger.debug("thread %s kept its priority: %s", tid, e)
    return changed
