"""Hostile input's costs: ``make bench BENCH=hostile``.

Log masking (apps.runtime.logs.secrets_masked, apps.admin_mixins.error_readable) of one long word
with no separator, a request path or a reason phrase an attacker sends: milliseconds at 100 KiB
and 1 MiB, and the pattern before its fix (a name tried from every character, quadratic) side by
side at 8 and 16 KiB, where it still ends. Each figure is the least of three timings. No database
or Redis is used.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable

from bench.common import figure, note

# The pattern before the fix, for the side-by-side (apps/runtime/logs.py has the current one).
_BEFORE = re.compile(
    r"""(?P<name>[\w-]+)(?P<sep>["']?\s*[:=]\s*)(?P<q>["']?)(?P<value>(?:Bearer\s+|Basic\s+)?[^"'\s,;&?}]+)"""
)


def _least_ms(fn: Callable[[str], object], text: str, rounds: int = 3) -> float:
    timings = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn(text)
        timings.append(time.perf_counter() - started)
    return min(timings) * 1000


def run() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings.base")
    import django  # noqa: PLC0415

    django.setup()
    from apps.admin_mixins import error_readable  # noqa: PLC0415
    from apps.runtime.logs import secrets_masked  # noqa: PLC0415

    note("hostile: masking one word with no separator; the least of three timings")
    for size in (100 * 1024, 1024 * 1024):
        text = "a" * size
        figure(f"hostile_mask_{size // 1024}k_ms", _least_ms(secrets_masked, text), "ms")
        figure(f"hostile_error_readable_{size // 1024}k_ms", _least_ms(error_readable, text), "ms")
    for size in (8 * 1024, 16 * 1024):
        text = "a" * size
        now, before = _least_ms(secrets_masked, text), _least_ms(lambda t: _BEFORE.sub("", t), text, rounds=1)
        figure(f"hostile_mask_{size // 1024}k_ms", now, "ms")
        figure(f"hostile_mask_before_fix_{size // 1024}k_ms", before, "ms")
        figure(f"hostile_mask_{size // 1024}k_speedup_x", before / max(now, 1e-6), "x")
