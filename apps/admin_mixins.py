"""Building blocks the apps' admin modules share. Imports Django only, so that any app may use it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.http import HttpRequest

if TYPE_CHECKING:
    from django.contrib.admin.options import BaseModelAdmin

    _AdminBase = BaseModelAdmin[Any]
else:
    _AdminBase = object


class ReadOnlyAdminMixin(_AdminBase):
    """View-only pages whose actions still change data, through the services, for staff who hold
    the model's change permission. Put it before ``admin.ModelAdmin`` (or an inline class).

    Nothing is added or deleted, and no object is edited in a form: asked about one object,
    ``has_change_permission`` says no, so its page has no Save and a POST to it is refused. Asked
    about the model as a whole (no object), which is how Django checks an action declared with
    ``@admin.action(permissions=["change"])``, it answers with the user's change permission: such
    actions are offered to, and run for, operators who hold it, and no one else.
    """

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None:
            return False
        return super().has_change_permission(request)
