"""The newcomer's documents stay true to the code: every setting is in docs/settings.md, the README's
command lines are those of scrapejobs/processes.py, and REQUIREMENTS.md has every id that code and
tests refer to."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from scrapejobs import processes

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
SETTINGS_DOC = (ROOT / "docs" / "settings.md").read_text()
REQUIREMENTS = (ROOT / "REQUIREMENTS.md").read_text()


def variables_read(path: str, pattern: str) -> set[str]:
    return set(re.findall(pattern, (ROOT / path).read_text()))


SETTINGS_VARS = variables_read("settings/base.py", r'(?:\benv(?:\.\w+)?|_\w+)\(\s*"([A-Z][A-Z0-9_]+)"')
PROCESS_VARS = variables_read("scrapejobs/processes.py", r'\b(?:e|environ)\.get\(\s*"([A-Z][A-Z0-9_]+)"')
SUPERVISE_VARS = variables_read("scrapejobs/supervise.py", r'env\.(?:get|setdefault)\(\s*"([A-Z][A-Z0-9_]+)"')


def test_the_settings_scan_finds_the_settings() -> None:
    assert {"DATABASE_URL", "SCRAPEJOBS_LEASE_S", "AWS_ACCESS_KEY_ID"} <= SETTINGS_VARS
    assert {"PORT", "FLOWER_PORT"} <= PROCESS_VARS and "SCRAPEJOBS_RUN_DIR" in SUPERVISE_VARS


def test_every_environment_variable_the_project_reads_is_in_the_settings_reference() -> None:
    documented = set(re.findall(r"^\| `([A-Z][A-Z0-9_]+)`", SETTINGS_DOC, re.M))
    documented |= set(re.findall(r"`([A-Z][A-Z0-9_]+)`, `([A-Z][A-Z0-9_]+)`", SETTINGS_DOC)[0])
    missing = (SETTINGS_VARS | PROCESS_VARS | SUPERVISE_VARS) - documented - {"DJANGO_SETTINGS_MODULE"}
    assert not missing, f"add to docs/settings.md: {sorted(missing)}"


def test_every_page_of_docs_is_linked_from_the_readme() -> None:
    pages = {str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md")}
    unlinked = {page for page in pages if f"]({page})" not in README}
    assert not unlinked, f"link from the README: {sorted(unlinked)}"


@pytest.mark.parametrize("component", processes.COMPONENTS)
def test_the_readme_gives_the_command_line_of_each_component(component: str) -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "scrapejobs.processes", component, "--print"],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k not in PROCESS_VARS},  # the defaults
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    argv = shlex.split(printed)
    argv[0] = Path(argv[0]).name  # the README shows programs by name, not by virtualenv path
    argv = [a.replace(str(ROOT) + "/", "") for a in argv]
    assert f"`{shlex.join(argv)}`" in README, shlex.join(argv)


IDS = [
    *(f"FR-{n}" for n in range(1, 10)),
    *(f"FR-W{n}" for n in range(1, 5)),
    *(f"NFR-{n}" for n in range(1, 9)),
    "NFR-W1",
]


@pytest.mark.parametrize("rid", IDS)
def test_requirements_define_each_id_once(rid: str) -> None:
    assert len(re.findall(rf"^\| {re.escape(rid)} \|", REQUIREMENTS, re.M)) == 1


def test_the_non_functional_requirements_carry_the_seed_targets() -> None:
    rows = {m[0]: m[1] for m in re.findall(r"^\| (NFR-[\w]+) \|(.*)$", REQUIREMENTS, re.M)}
    assert "99.9 %" in rows["NFR-1"] and "30 days" in rows["NFR-1"]
    assert "200 ms" in rows["NFR-2"] and "p99" in rows["NFR-2"]
    assert "99 %" in rows["NFR-3"]
    assert "95 %" in rows["NFR-8"] and "1 minute" in rows["NFR-8"]
    # Each property says what breaks without it: the last column is not empty.
    assert all(row.rstrip(" |").rsplit("|", 1)[-1].strip() for row in rows.values())


def test_the_code_map_matches_the_tree() -> None:
    """The map in docs/design/code-map.md names every package under apps/ and nothing else."""
    code_map = (ROOT / "docs" / "design" / "code-map.md").read_text()
    block = code_map[code_map.index("```\napps/\n") :]
    block = block[: block.index("\n```", 4)]
    mapped = set(re.findall(r"^  (\w+)/ ", block, re.M)) | set(re.findall(r"^  (\w+\.py) ", block, re.M))
    on_disk = {p.name for p in (ROOT / "apps").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    on_disk |= {p.name for p in (ROOT / "apps").glob("*.py") if p.name != "__init__.py"}
    assert mapped == on_disk


def test_the_readme_stays_a_front_page() -> None:
    """Reference goes to docs/: the README stays short enough to read as a front page."""
    assert len(README) < 25_000, f"README is {len(README):,} characters: move reference to docs/"
    assert "## Contents" in README


def test_every_relative_link_in_the_readme_and_docs_resolves() -> None:
    broken = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken


CLIENT_VARS = variables_read(
    "clients/python/src/scrapejobs_client/_core.py", r'\benviron\.get\(\s*"([A-Z][A-Z0-9_]+)"'
)


def test_the_clients_variables_are_documented_with_the_client_and_are_no_service_setting() -> None:
    """SCRAPEJOBS_URL / SCRAPEJOBS_TOKEN are read by the client package (clients/python), never by
    the service: docs/client.md and the package's README document them, docs/settings.md does not."""
    assert CLIENT_VARS == {"SCRAPEJOBS_URL", "SCRAPEJOBS_TOKEN"}
    assert not CLIENT_VARS & (SETTINGS_VARS | PROCESS_VARS | SUPERVISE_VARS)
    client_doc = (ROOT / "docs" / "client.md").read_text()
    client_readme = (ROOT / "clients" / "python" / "README.md").read_text()
    for name in CLIENT_VARS:
        assert f"`{name}`" in client_doc and name in client_readme
        assert f"`{name}`" not in SETTINGS_DOC


def test_code_and_docs_cite_the_requirements_not_documents_outside_the_repository() -> None:
    """A comment or page says what it means or cites REQUIREMENTS.md's numbers: "contract §6" or
    "seed 004" names a text a reader of the repository does not have."""
    outside = re.compile(r"\bcontract\b|\bseed 00\d", re.I)
    cited = []
    for top in ("apps", "scrapejobs", "docs", "templates"):
        for path in sorted((ROOT / top).rglob("*")):
            if (
                path.suffix not in (".py", ".md", ".html")
                or "migrations" in path.parts
                or "static" in path.parts
            ):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if outside.search(line):
                    cited.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}")
    assert not cited, "\n".join(cited)
