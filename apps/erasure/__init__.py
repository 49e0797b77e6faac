"""Erasure (FR-52, FR-53, FR-54; docs/erasure.md): a tenant's job, a batch's jobs, or a whole
tenant removed on request. Above the other apps: it calls the ledger's tombstone (apps.jobs), the
result storage (apps.results), webhook deliveries (apps.webhooks), dead receipts (apps.writer),
crawl pages (apps.crawls) and batches (apps.batches); nothing below imports it but the views that
answer DELETE."""
