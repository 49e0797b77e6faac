"""``pip install ./clients/python`` into a fresh virtualenv works with nothing of the service
(FR-24). Offline and bounded: the client's wheel is built here from the source tree, and its
dependencies' wheels are made from the copies this virtualenv holds (all pure Python), so pip
installs with ``--no-index``."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as md
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "python"


def _requirements(name: str, extras: set[str]) -> set[str]:
    """``name`` and everything it needs (with ``extras``) on this Python, by distribution name."""
    seen: set[str] = set()
    todo = [(name, frozenset(extras))]
    while todo:
        dist_name, wanted = todo.pop()
        key = re.sub(r"[-_.]+", "-", dist_name).lower()
        if key in seen:
            continue
        seen.add(key)
        for raw in md.requires(dist_name) or []:
            req = Requirement(raw)
            env_ok = any(req.marker is None or req.marker.evaluate({"extra": e}) for e in (wanted or {""}))
            if env_ok:
                todo.append((req.name, frozenset(req.extras)))
    return seen


def _wheel_from_installed(dist_name: str, out: Path) -> Path:
    """A py3-none-any wheel of an installed pure-Python distribution, from its RECORD."""
    dist = md.distribution(dist_name)
    base = Path(str(dist.locate_file("")))
    info_dir = next(
        str(f).split("/")[0] for f in dist.files or [] if str(f).split("/")[0].endswith(".dist-info")
    )
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    wheel = out / f"{name}-{dist.version}-py3-none-any.whl"
    record: list[str] = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for f in dist.files or []:
            rel = str(f)
            if (
                rel.startswith("..")
                or "__pycache__" in rel
                or rel.endswith((".pyc", "/RECORD", "/INSTALLER"))
            ):
                continue
            if rel.endswith("/direct_url.json") or rel.endswith("/REQUESTED"):
                continue
            data = (base / rel).read_bytes()
            z.writestr(rel, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{rel},sha256={digest},{len(data)}")
        record.append(f"{info_dir}/RECORD,,")
        z.writestr(f"{info_dir}/RECORD", "\n".join(record) + "\n")
    return wheel


@pytest.mark.e2e  # a fresh virtualenv and pip: the whole suite's, not the fast loop's
@pytest.mark.timeout(600)
def test_the_client_installs_into_a_fresh_virtualenv_with_nothing_of_the_service(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_", "VIRTUAL_ENV"))}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    # Built from a copy: setuptools writes build/ and *.egg-info next to the sources, and a
    # stale build/ left there would be packaged instead of the sources.
    source = tmp_path / "source"
    shutil.copytree(
        CLIENT, source, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__")
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(source),
        ],
        check=True,
        env=env,
        timeout=180,
        capture_output=True,
    )
    [built] = list(wheels.glob("scrapejobs_client-*.whl"))
    needed = _requirements("httpx", set()) | _requirements("click", set()) | _requirements("rich", set())
    for dist_name in needed:
        _wheel_from_installed(dist_name, wheels)

    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120, env=env)
    py, pip = venv / "bin" / "python", venv / "bin" / "pip"
    subprocess.run(
        [str(pip), "install", "-q", "--no-index", "--find-links", str(wheels), f"{built}[cli]"],
        check=True,
        env=env,
        timeout=180,
    )

    probe = subprocess.run(
        [
            str(py),
            "-c",
            "import importlib.util as u, scrapejobs_client, httpx;"
            "print(scrapejobs_client.__version__, [m for m in ('django', 'scrapejobs', 'apps', 'celery')"
            " if u.find_spec(m)])",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "0.1.0 []"  # imports, and nothing of the service is there
    helped = subprocess.run(
        [str(venv / "bin" / "scrapejobs"), "--help"], env=env, capture_output=True, text=True
    )
    assert helped.returncode == 0 and "submit" in helped.stdout and "batch" in helped.stdout
    unreachable = subprocess.run(
        [
            str(venv / "bin" / "scrapejobs"),
            "--url",
            "http://127.0.0.1:9",
            "--token",
            "t",
            "--retries",
            "0",
            "get",
            "x",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unreachable.returncode == 6, unreachable.stderr
