"""The admin's sidebar names each page for what it lists."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_the_admin_index_says_batches_and_writer_dead_receipts(admin_client: Client) -> None:
    page = admin_client.get("/admin/").content.decode()
    assert ">Batches<" in page and "Batchs" not in page
    assert ">Writer dead receipts<" in page and "Writer dead letters" not in page
