"""No tables: the writer's state lives in Redis. ``WriterDeadLetter`` is an unmanaged model
only so that the Django admin lists a page for the writer's status and dead receipts
(apps/writer/admin.py) with the usual permissions; it is never queried. Its class name, verbose
names and permissions keep their old "dead letter" wording: they are the admin's URL
(/admin/writer/writerdeadletter/), permission codenames and migration state."""

from __future__ import annotations

from django.db import models


class WriterDeadLetter(models.Model):
    id = models.CharField(primary_key=True, max_length=64)

    class Meta:
        managed = False
        verbose_name = "writer dead letter"
        verbose_name_plural = "writer dead letters"
        default_permissions = ("view", "change")

    def __str__(self) -> str:
        return self.id
