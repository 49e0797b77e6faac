"""The models and the migrations agree: a model change without its migration fails here, not on a
deploy's `migrate`."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_every_model_change_has_its_migration() -> None:
    out = io.StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit as e:  # --check exits non-zero when a migration is missing
        pytest.fail(f"makemigrations --check wants a migration (run makemigrations):\n{out.getvalue()}")
        raise AssertionError from e
