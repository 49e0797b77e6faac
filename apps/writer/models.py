"""No tables: the writer's state lives in Redis. ``WriterDeadLetter`` is an unmanaged model
only so that the Django admin lists a page for the writer's status and dead receipts
(apps/writer/admin.py) with the usual permissions; it is never queried. Its class name keeps the
old "dead letter" wording: it is the admin's URL (/admin/writer/writerdeadletter/) and the
permission codenames; the page is named for what it lists, the writer's dead receipts."""

from __future__ import annotations

from django.db import models


class WriterDeadLetter(models.Model):
    id = models.CharField(primary_key=True, max_length=64)

    class Meta:
        managed = False
        verbose_name = "writer dead receipt"
        verbose_name_plural = "writer dead receipts"
        default_permissions = ("view", "change")

    def __str__(self) -> str:
        return self.id
