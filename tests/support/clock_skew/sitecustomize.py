"""A skewed clock for one test process, without libfaketime.

Put this directory first on the PYTHONPATH of a service process and set
``SCRAPEJOBS_TEST_CLOCK_SKEW_S`` (seconds, may be negative): at interpreter start, before Django or
Celery is imported, ``time.time``/``time.time_ns`` and ``datetime.datetime.now``/``utcnow`` (so
``django.utils.timezone.now``) run that far ahead of (or behind) the machine's clock. Monotonic
clocks are left alone: durations stay true, only the wall clock lies, as on a host whose NTP is off.

It prints one line with the skewed readings so a test can check that the skew took effect.
Without the variable it does nothing.
"""

from __future__ import annotations

import os

_SKEW = os.environ.get("SCRAPEJOBS_TEST_CLOCK_SKEW_S")

if _SKEW:
    import datetime as _dt
    import sys
    import time as _time

    _skew_s = float(_SKEW)
    _skew_ns = int(_skew_s * 1_000_000_000)
    _delta = _dt.timedelta(seconds=_skew_s)
    _real_time = _time.time
    _real_time_ns = _time.time_ns

    def _time_skewed() -> float:
        return _real_time() + _skew_s

    def _time_ns_skewed() -> int:
        return _real_time_ns() + _skew_ns

    _time.time = _time_skewed
    _time.time_ns = _time_ns_skewed

    class _SkewedDatetime(_dt.datetime):
        @classmethod
        def now(cls, tz=None):  # type: ignore[no-untyped-def,override]
            return super().now(tz) + _delta

        @classmethod
        def utcnow(cls):  # type: ignore[no-untyped-def,override]
            return super().utcnow() + _delta

        @classmethod
        def today(cls):  # type: ignore[no-untyped-def,override]
            return cls.now()

    _dt.datetime = _SkewedDatetime  # type: ignore[misc]

    print(
        f"clock-skew: {_skew_s:+.1f}s real={_real_time():.3f} time.time={_time.time():.3f} "
        f"datetime.now={_dt.datetime.now(_dt.UTC).timestamp():.3f}",
        file=sys.stderr,
        flush=True,
    )
