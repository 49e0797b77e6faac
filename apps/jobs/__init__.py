"""The jobs ledger (``Job``, ``Attempt``): every other part reads and changes jobs through this
package, one module per step of a job's life (REQUIREMENTS.md). Each line below starts with the
module that owns that step (tests/jobs/test_front_door.py keeps the list and the files in step).

The ledger
- ``models``: Job, Attempt, InFlightFetch (a fetch key's one fetch) and their choices;
- ``ids``: time-ordered UUIDs (version 7): a job id sorts by creation time;
- ``admin``: read-only admin pages; cancel and requeue are actions calling ``cancel_requeue``.

In: intake (FR-1, NFR-1, NFR-2)
- ``intake``: a new job, one INSERT with an empty publish stamp, idempotent per tenant; key expiry;
- ``inserts``: that INSERT, built once from the model's fields instead of compiled per call;
- ``bulk``: a batch's part, COPY into an unlogged stage and one merge (FR-10); a batch's counts;
- ``nudges``: "run now" signals (members of one Redis sorted set) for the publisher and the writer.

Out: publishing and claiming
- ``outbox``: the publisher's weighted-fair picks, its publish stamp, a job deferred back into it;
- ``singleflight``: jobs asking for the same fetch share one: decide, park, settle;
- ``fetch_keys``: a job's fetch key, what "the same fetch" means (FR-15); crawls' URL spelling;
- ``claims``: a worker claims a job (a new attempt, a lease) and renews its leases;
- ``revalidation``: the tenant's previous success of a fetch key, its validators (FR-33, FR-34).

Back: receipts and the fold (FR-W1 to FR-W4)
- ``receipts``: what a worker reports after a claim, and its wire format;
- ``receipt_fold``: the writer folds receipts into the ledger, one statement per batch;
- ``lifecycle``: the retry planner (NFR-3), pure: an attempt's outcome to the job's next state;
- ``final_notices``: jobs that became final: the ``?wait=`` NOTIFY and the webhooks' outbox.

Repair and hands on
- ``sweeping``: attempts lost with their worker or given back by a stopping one; published jobs
  nobody took (NFR-4);
- ``cancel_requeue``: cancel a job or a batch's jobs; requeue failed or cancelled ones.

Reads and letting go
- ``selectors``: reads other parts need beyond the ORM (dead letters, webhook secrets, waits);
- ``rollups``: the operators' bounded reads (settled attempts by id, the queue now);
- ``export_reads``: the analytics export's keyset pages of finished jobs and their attempts;
- ``retention``: bodies due for deletion, marking them deleted, pruning old final jobs.
- ``erasure``: a job to erase, the objects another job still names, the tombstone (FR-52).

Claiming is a conditional UPDATE whose row count says who won (healthchecks' "another process got
there first"); no network I/O happens inside any transaction here. Nothing in this package
imports another app: everything else rests on it. The Redis clients and the database-failure
classes every app uses are below it, in apps/redis_clients.py and apps/db_failures.py.
"""
