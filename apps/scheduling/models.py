"""Dead letters (FR-8): a dead letter is a ``failed`` job. Nothing is copied: the proxy
model is the operators' view of the jobs ledger, and a discard is a small row of its own, so the
ledger (owned by apps.jobs) stays untouched."""

from __future__ import annotations

from django.db import models
from django.db.models import Exists, OuterRef

from apps.jobs.models import Job, JobStatus


class DeadLetterQuerySet(models.QuerySet["DeadLetter"]):
    def open(self) -> DeadLetterQuerySet:
        """Failed jobs whose current failure nobody discarded."""
        discarded = DiscardedDeadLetter.objects.filter(job_id=OuterRef("pk"), attempts=OuterRef("attempts"))
        return self.filter(status=JobStatus.FAILED).exclude(Exists(discarded))


class DeadLetterManager(models.Manager["DeadLetter"]):
    def get_queryset(self) -> DeadLetterQuerySet:
        return DeadLetterQuerySet(self.model, using=self._db).open()


class DeadLetter(Job):
    """A failed job, as the dead-letter queue shows it."""

    objects = DeadLetterManager()  # type: ignore[misc]

    class Meta:
        proxy = True
        verbose_name = "dead letter"
        verbose_name_plural = "dead letters"


class DiscardedDeadLetter(models.Model):
    """An operator looked at a failed job and set it aside. ``attempts`` is the job's attempt
    count at that moment: if the job is requeued and fails again it has more attempts, and the
    new failure is a dead letter again."""

    job = models.OneToOneField(Job, on_delete=models.CASCADE, primary_key=True, related_name="+")
    attempts = models.PositiveSmallIntegerField()
    discarded_at = models.DateTimeField()
    discarded_by = models.CharField(max_length=150, blank=True, default="")

    def __str__(self) -> str:
        return f"discarded {self.job_id} at attempt {self.attempts}"
