"""Every write of a job row bumps its version (apps/jobs/models.py, the read cache's
compare-and-set in apps/query/cache.py): each UPDATE of jobs_job in the code, raw SQL or ORM,
sets it in the same statement. Read from the source, so a new statement without it fails here."""

from __future__ import annotations

import re
from pathlib import Path

APPS = Path(__file__).resolve().parents[2] / "apps"

# From "UPDATE jobs_job" to the end of its SET list (the next WHERE/FROM/RETURNING or the end of
# the string literal).
_RAW = re.compile(r"UPDATE jobs_job\b(?! *_)(.*?)(?:\bWHERE\b|\bFROM\b|\bRETURNING\b|\"\"\"|\"\s*,)", re.S)
_ORM = re.compile(r"Job\.objects(?:\.\w+\([^)]*\))*\.update\((.*?)\)\n", re.S)


def _sources() -> list[tuple[Path, str]]:
    return [(p, p.read_text()) for p in APPS.rglob("*.py") if "migrations" not in p.parts]


def test_every_raw_update_of_jobs_job_bumps_the_version():
    found, missing = 0, []
    for path, text in _sources():
        for m in _RAW.finditer(text):
            found += 1
            if not re.search(r"\bversion\s*=\s*(\w+\.)?version\s*\+\s*1", m.group(1)):
                missing.append(f"{path.relative_to(APPS.parent)}:{text.count(chr(10), 0, m.start()) + 1}")
    assert found >= 16
    assert missing == [], "UPDATE jobs_job without version = version + 1"


def test_every_orm_update_of_a_job_bumps_the_version():
    found, missing = 0, []
    for path, text in _sources():
        for m in _ORM.finditer(text):
            found += 1
            if 'version=F("version") + 1' not in m.group(1):
                missing.append(f"{path.relative_to(APPS.parent)}:{text.count(chr(10), 0, m.start()) + 1}")
    assert found >= 2
    assert missing == [], "Job.objects….update() without version=F('version') + 1"
