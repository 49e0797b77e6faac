"""The client's ``submit_batch(callback_url=…)`` and ``scrapejobs batch --callback-url`` (FR-10),
against the API in this process (httpx's WSGI transport into Django): the callback travels as
POST /batches' query parameter and is refused as the API refuses it."""

from __future__ import annotations

import httpx
import pytest
from click.testing import CliRunner
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.test import override_settings
from scrapejobs_client import Client, cli
from scrapejobs_client.errors import ApiError, InvalidRequest

from apps.batches.models import Batch
from tests.batches.test_batches import _results_here  # noqa: F401 - autouse: results on local disk

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("keep_the_test_connection")]

HOOK = "http://hooks.example/batch?kind=done&x=1"


@pytest.fixture
def keep_the_test_connection():
    """As Django's test client does: a request must not close the test's connection (and its
    transaction) when it ends."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def _client(token: str) -> Client:
    return Client("http://testserver", token, transport=httpx.WSGITransport(app=get_wsgi_application()))


def test_submit_batch_sends_the_callback_url_and_the_api_keeps_it(make_tenant):
    _, token, _ = make_tenant()
    with _client(token) as api:
        receipt = api.submit_batch([{"url": "http://t.example/1"}], callback_url=HOOK)
        plain = api.submit_batch([{"url": "http://t.example/2"}])
    assert Batch.objects.get(id=receipt.id).callback_url == HOOK
    assert Batch.objects.get(id=plain.id).callback_url is None


@override_settings(SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=False)
def test_a_refused_callback_url_raises_with_its_field_and_creates_nothing(make_tenant):
    _, token, _ = make_tenant()
    with _client(token) as api, pytest.raises((InvalidRequest, ApiError)) as raised:
        api.submit_batch([{"url": "http://t.example/1"}], callback_url="http://10.0.0.1/hook")
    assert "callback_url" in (getattr(raised.value, "fields", None) or {})
    assert Batch.objects.count() == 0


def test_the_cli_batch_command_takes_a_callback_url(make_tenant, tmp_path, monkeypatch):
    _, token, _ = make_tenant()
    rows = tmp_path / "rows.csv"
    rows.write_text("url\nhttp://t.example/1\nhttp://t.example/2\n")
    monkeypatch.setattr(cli, "Client", lambda *a, **kw: _client(token))
    result = CliRunner().invoke(cli.main, ["batch", str(rows), "--callback-url", HOOK, "--json"])
    assert result.exit_code == 0, result.output
    assert Batch.objects.get().callback_url == HOOK
