"""The jobs ledger (``Job``, ``Attempt``). Every other part changes jobs through this package, one
module per step of the lifecycle (REQUIREMENTS.md):

- ``intake``: a new job (one INSERT, idempotency) and the publisher nudge;
- ``outbox``: the publisher's weighted-fair picks, its stamp, and a job deferred back into it;
- ``claims``: a worker claims a job and renews its leases;
- ``receipt_fold``: the writer folds finished attempts into the ledger (``lifecycle`` plans the
  next state, ``receipts`` is the receipt's format);
- ``sweeping``: attempts lost with their worker, published jobs nobody took;
- ``cancel_requeue``: cancel a job, requeue failed or cancelled ones;
- ``final_notices``: jobs that became final (``?wait=`` listeners, the webhooks' outbox);
- ``selectors``: the reads other parts need beyond the ORM (dead jobs, webhook secrets);
- ``rollups``: the operators' bounded reads (settled attempts by id, the queue now).

Claiming is a conditional UPDATE whose row count says who won (healthchecks' "another process got
there first"); no network I/O happens inside any transaction here. Nothing in this package
imports another app: everything else rests on it.
"""
