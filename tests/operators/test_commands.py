"""Management commands for operators and for ``make run``: create_tenant, ensure_demo_tenant,
ensure_admin."""

from __future__ import annotations

import io
import re
import stat
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from apps.tenants.models import ApiToken, Tenant
from apps.tenants.services import token_authenticate

pytestmark = pytest.mark.django_db


def run(*args: str) -> dict[str, str]:
    out = io.StringIO()
    call_command(*args, stdout=out)
    lines = out.getvalue().splitlines()
    assert all(re.fullmatch(r"[a-z_]+: \S.*", line) for line in lines), lines
    return dict(line.split(": ", 1) for line in lines)


def test_create_tenant_prints_token_and_webhook_secret_lines_and_the_token_works() -> None:
    printed = run("create_tenant", "acme")
    assert re.fullmatch(r"sj_[A-Za-z0-9_-]{40,}", printed["token"])
    # Standard Webhooks form: standard base64 of 32 random bytes (FR-23).
    assert re.fullmatch(r"whsec_[A-Za-z0-9+/]{43}=", printed["webhook_secret"])
    tenant = Tenant.objects.get(name="acme")
    assert printed["tenant"] == str(tenant.pk) and tenant.webhook_secret == printed["webhook_secret"]
    assert not ApiToken.objects.filter(token_hash=printed["token"]).exists()  # stored hashed

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {printed['token']}")
    assert client.get("/api/v1/jobs").status_code == 200
    client.credentials(HTTP_AUTHORIZATION="Bearer sj_not-a-real-token")
    assert client.get("/api/v1/jobs").status_code in (401, 403)


def test_create_tenant_sets_the_tenants_rate_limit_when_asked() -> None:
    run("create_tenant", "slowco", "--rate-limit", "3")
    assert Tenant.objects.get(name="slowco").rate_limit_per_second == 3


def test_create_tenant_refuses_a_name_that_is_taken() -> None:
    run("create_tenant", "acme")
    with pytest.raises(CommandError, match="already exists"):
        call_command("create_tenant", "acme", stdout=io.StringIO())
    assert Tenant.objects.filter(name="acme").count() == 1


def test_the_demo_tenant_is_created_once_and_its_token_is_printed_again_on_the_next_run(
    tmp_path: Path,
) -> None:
    token_file = tmp_path / "run" / "demo-token"
    first = run("ensure_demo_tenant", "--token-file", str(token_file))
    second = run("ensure_demo_tenant", "--token-file", str(token_file))
    assert first == second
    assert Tenant.objects.filter(name="demo").count() == 1
    assert ApiToken.objects.filter(tenant__name="demo").count() == 1
    assert token_file.read_text().strip() == first["token"]
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    found = token_authenticate(raw=first["token"])
    assert found is not None and found[0].name == "demo"


def test_the_demo_tenant_gets_a_fresh_working_token_when_the_stored_one_is_lost(tmp_path: Path) -> None:
    token_file = tmp_path / "demo-token"
    first = run("ensure_demo_tenant", "--token-file", str(token_file))
    token_file.unlink()
    second = run("ensure_demo_tenant", "--token-file", str(token_file))
    assert second["token"] != first["token"] and token_authenticate(raw=second["token"]) is not None

    token_file.write_text("sj_garbage\n")  # e.g. a database reset under a kept run folder
    third = run("ensure_demo_tenant", "--token-file", str(token_file))
    assert token_authenticate(raw=third["token"]) is not None
    assert Tenant.objects.filter(name="demo").count() == 1


def test_the_admin_user_is_created_with_a_generated_password_that_is_printed_again(tmp_path: Path) -> None:
    password_file = tmp_path / "admin-password"
    first = run("ensure_admin", "--password-file", str(password_file))
    second = run("ensure_admin", "--password-file", str(password_file))
    assert first == second and first["username"] == "admin" and len(first["password"]) >= 12
    user = User.objects.get(username="admin")
    assert user.is_superuser and user.check_password(first["password"])
    assert stat.S_IMODE(password_file.stat().st_mode) == 0o600


def test_an_existing_admin_password_is_never_changed(tmp_path: Path) -> None:
    User.objects.create_superuser("admin", "", "chosen-by-operator")
    printed = run("ensure_admin", "--password-file", str(tmp_path / "admin-password"))
    assert "changepassword" in printed["password"]
    assert User.objects.get(username="admin").check_password("chosen-by-operator")
