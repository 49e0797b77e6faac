"""Decode a batch file the way POST /batches does (apps.batches.formats.rows_open, every chunk
checked), in a process of its own, and print how its peak resident memory grew: a test of a
hostile file's cost that another test's memory cannot blur.

    python -m tests.support.decode_probe <format> <path>

Prints one JSON object: ``outcome`` (``read``, or the refusal's class), ``reason``, ``rows``
(rows read when read whole), ``grown_mb`` (the peak resident size while decoding, less the resident size before)."""

from __future__ import annotations

import json
import os
import sys


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def main(fmt: str, path: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings.test")
    import django  # noqa: PLC0415

    django.setup()
    from apps.batches.formats import rows_open  # noqa: PLC0415

    # The peak is reset here (Linux: clear_refs 5), so that start-up's own peak (imports, Django)
    # is not what the decoding is compared with.
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
    before = _status_kb("VmRSS")
    outcome, reason, rows = "read", "", 0
    try:
        with open(path, "rb") as fh:
            source = rows_open(fh, format=fmt)
            for chunk in source.chunks:
                rows += chunk.rows
    except Exception as e:  # noqa: BLE001 - the refusal is what is reported
        outcome, reason = type(e).__name__, str(e)
    grown_kb = _status_kb("VmHWM") - before
    print(json.dumps({"outcome": outcome, "reason": reason, "rows": rows, "grown_mb": grown_kb / 1024}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
