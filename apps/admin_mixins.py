"""Building blocks the apps' admin modules share: read-only pages whose actions need the change
permission, lists that do not count a whole table, and masking of credentials. Imports Django
only, so that any app (and the log filters of apps.runtime) may use it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from django.core.paginator import Paginator
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


# --- Lists that stay fast on a ledger of millions ---------------------------------

# How far a filtered list counts its rows. Django's paginator counts every matching row for each
# page (a COUNT(*) over a million jobs is seconds); counting the first few thousand through the
# list's index costs milliseconds, and nobody pages past page 200 of a list.
COUNT_CAP = 10_000


class CappedCountPaginator(Paginator):
    """A paginator that counts at most ``COUNT_CAP`` rows: a list with more says it has that many
    (the pager shows "10000 ...", and the last pages are reached by narrowing the filters)."""

    @cached_property
    def count(self) -> int:
        object_list: Any = self.object_list
        # Without the list's ORDER BY: the planner is free to count through the filter's index
        # (a domain's 400 dead letters) instead of walking the sort index until the cap.
        return int(object_list.order_by().values("pk")[:COUNT_CAP].count())


class ScaledListMixin(_AdminBase):
    """List pages that never count the whole table: no full result count next to the search box,
    and a paginator that stops counting at ``COUNT_CAP``. Put it before ``admin.ModelAdmin``."""

    show_full_result_count = False
    paginator: ClassVar[type] = CappedCountPaginator
    list_per_page = 50  # half of Django's 100: the page renders in half the time


# --- Secrets in what operators and logs see ---------------------------------------

MASK = "********"

# Header names that carry credentials: the usual ones by name, anything else by a telling word.
_SECRET_HEADER_NAMES = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key"}
)
# Words that give a credential away anywhere in a name ("X-Access-Token", "client_secret"), and
# words that do only as a whole part of it ("X-Api-Key", "X-Auth-User", not "Keyboard" or
# "Unauthorized").
_SECRET_HEADER_WORDS = re.compile(r"token|secret|passw|apikey|credential", re.I)
_SECRET_HEADER_PARTS = re.compile(r"(?:^|[-_.])(?:key|auth|session|signature|sig)(?:$|[-_.])", re.I)


def header_is_secret(name: str) -> bool:
    """Whether a request header's (or a parameter's) name suggests it carries a credential."""
    name = name.strip().lower()
    return (
        name in _SECRET_HEADER_NAMES
        or bool(_SECRET_HEADER_WORDS.search(name))
        or bool(_SECRET_HEADER_PARTS.search(name))
    )


def headers_masked(headers: Mapping[str, Any] | None) -> dict[str, Any]:
    """The headers with the value of every credential-like header replaced by ``MASK``."""
    return {name: MASK if header_is_secret(name) else value for name, value in (headers or {}).items()}


def body_masked(body: str | bytes | None) -> str:
    """A request body is never shown (it may hold a login form or a token): only its size."""
    if not body:
        return "(none)"
    return f"{MASK} ({len(body)} bytes, hidden)"


# --- Error messages an operator can read ------------------------------------------

# urllib3 names the connection object in its messages: "_GuardedHTTPConnection(host='a', port=1)"
# or "<...HTTPConnection object at 0x7f...>". The reader needs the address, not our class names.
# From a word's start only (the lookbehind): linear in a long run of word characters.
_CONNECTION_REPR = re.compile(r"(?<!\w)\w*HTTPS?Connection(?:Pool)?\(host='([^']*)', port=(\w+)\)")
_OBJECT_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-f]+>")


def error_readable(message: str | None) -> str:
    """An attempt's stored error text with internal class names replaced by what they stand for:
    ``_GuardedHTTPConnection(host='a.example', port=443): failed ...`` reads ``a.example:443:
    failed ...``. Display only: the stored text keeps every detail."""
    if not message:
        return ""
    text = _CONNECTION_REPR.sub(lambda m: m.group(1) if m.group(2) == "None" else f"{m[1]}:{m[2]}", message)
    return _OBJECT_REPR.sub("the connection", text)


def last_error_readable(last_error: Mapping[str, Any] | None) -> str:
    """A job's ``last_error`` JSON as one line: ``http_404 (HTTP 404): target answered 404``."""
    if not last_error:
        return ""
    error_class = last_error.get("class") or last_error.get("error_class") or "error"
    status = last_error.get("http_status")
    head = f"{error_class} (HTTP {status})" if status else str(error_class)
    message = error_readable(last_error.get("message"))
    return f"{head}: {message}" if message else head
