"""Tenant weights: an operator sets them in the admin, validated > 0. Their
effect on the fair dispatch is tested in tests/publishing/test_dispatch.py."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.test import Client

from apps.tenants.models import Tenant


def _admin() -> Client:
    browser = Client()
    browser.force_login(get_user_model().objects.create_superuser("root", "root@example.test", "pw"))
    return browser


def _form(tenant: Tenant, **changes: object) -> dict[str, object]:
    return {
        "name": tenant.name,
        "rate_limit_per_second": "",
        "weight": tenant.weight,
        "is_active": "on",
        "tokens-TOTAL_FORMS": "1",
        "tokens-INITIAL_FORMS": "1",
        "tokens-0-id": tenant.tokens.get().pk,
        "tokens-0-tenant": tenant.pk,
        **changes,
    }


@pytest.mark.django_db
def test_a_new_tenant_weighs_one(make_tenant):
    tenant, _, _ = make_tenant()
    assert Tenant.objects.get(pk=tenant.pk).weight == 1


@pytest.mark.django_db
def test_an_operator_sets_a_tenants_weight_in_the_admin(make_tenant):
    tenant, _, _ = make_tenant()
    r = _admin().post(f"/admin/tenants/tenant/{tenant.pk}/change/", _form(tenant, weight=3))
    assert r.status_code == 302, r.content.decode()[:2000]
    assert Tenant.objects.get(pk=tenant.pk).weight == 3


@pytest.mark.django_db
def test_a_tenant_added_in_the_admin_keeps_the_weight_given(make_tenant):
    r = _admin().post(
        "/admin/tenants/tenant/add/",
        {
            "name": "heavy",
            "rate_limit_per_second": "",
            "weight": 4,
            "is_active": "on",
            "tokens-TOTAL_FORMS": "0",
            "tokens-INITIAL_FORMS": "0",
        },
    )
    assert r.status_code == 302, r.content.decode()[:2000]
    assert Tenant.objects.get(name="heavy").weight == 4


@pytest.mark.parametrize("weight", [0, -1, "a"])
@pytest.mark.django_db
def test_a_weight_that_is_not_positive_is_refused_and_changes_nothing(make_tenant, weight):
    tenant, _, _ = make_tenant()
    r = _admin().post(f"/admin/tenants/tenant/{tenant.pk}/change/", _form(tenant, weight=weight))
    assert r.status_code == 200 and "weight" in r.context["adminform"].form.errors
    assert Tenant.objects.get(pk=tenant.pk).weight == 1


@pytest.mark.django_db
def test_the_database_refuses_a_zero_weight_too(make_tenant):
    tenant, _, _ = make_tenant()
    with pytest.raises(IntegrityError), transaction.atomic():
        Tenant.objects.filter(pk=tenant.pk).update(weight=0)
