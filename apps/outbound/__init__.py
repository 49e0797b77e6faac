"""Outbound HTTP to hosts we do not trust: what the fetcher (``apps.scraping``) and webhook
delivery (``apps.webhooks``) share.

- ``addresses``: which addresses may be connected to (the SSRF guard), and bounded resolution.
- ``connections``: urllib3 connections that connect only to allowed addresses, trying each
  resolved one in turn, and the process's pool manager built on them.
- ``interrupt``: stopping a request from another thread (even one blocked in a read), and the
  per-request context (interrupt, deadline) the connections read.

No models, not a Django app.
"""
