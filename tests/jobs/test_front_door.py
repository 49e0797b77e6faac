"""apps/jobs's front door: its package docstring names, at the head of a line, the module that
owns each step of a job's life, grouped by step. A module added to apps/jobs without a line there,
or a line left behind by a module removed or renamed, fails here; so does a module that
docs/design/code-map.md's ``jobs/`` paragraph does not name.

The docstring is parsed, not imported: a line ``- ``name``: what it owns`` lists module ``name``.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
JOBS = ROOT / "apps" / "jobs"
# The package itself, Django's AppConfig and the migrations are no step of a job's life.
NOT_LISTED = {"__init__", "apps", "migrations"}
LISTED = re.compile(r"^- ``(\w+)``:", re.MULTILINE)


def package_modules(package: Path) -> set[str]:
    """Module files and subpackages of ``package``, by name, save ``NOT_LISTED``."""
    files = {p.stem for p in package.glob("*.py")}
    subpackages = {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}
    return (files | subpackages) - NOT_LISTED


def docstring_modules(package: Path) -> list[str]:
    """The modules the package docstring lists, in order (a name listed twice appears twice)."""
    tree = ast.parse((package / "__init__.py").read_text(encoding="utf-8"))
    return LISTED.findall(ast.get_docstring(tree) or "")


def front_door_faults(package: Path) -> list[str]:
    listed = docstring_modules(package)
    present = package_modules(package)
    where = f"{package.relative_to(package.parent.parent)}/__init__.py"
    faults = [f"{where} does not list module {name!r}" for name in sorted(present - set(listed))]
    faults += [f"{where} lists {name!r}, which is no module there" for name in sorted(set(listed) - present)]
    faults += [f"{where} lists {name!r} {n} times" for name, n in sorted(Counter(listed).items()) if n > 1]
    return faults


def test_the_jobs_docstring_lists_every_module_and_nothing_else() -> None:
    faults = front_door_faults(JOBS)
    assert not faults, "\n".join(faults)
    assert len(docstring_modules(JOBS)) > 15  # the parse found the lines


def test_the_code_map_names_every_jobs_module() -> None:
    lines = (ROOT / "docs" / "design" / "code-map.md").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  jobs/"))
    end = next(i for i in range(start + 1, len(lines)) if re.match(r"  \S", lines[i]))
    paragraph = " ".join(lines[start:end])
    missing = [name for name in sorted(package_modules(JOBS)) if not re.search(rf"\b{name}\b", paragraph)]
    assert not missing, f"docs/design/code-map.md's jobs/ paragraph does not name {missing}"


def test_the_check_finds_a_module_missing_and_one_left_behind(tmp_path: Path) -> None:
    package = tmp_path / "apps" / "shop"
    (package / "migrations").mkdir(parents=True)
    (package / "migrations" / "__init__.py").touch()
    (package / "apps.py").touch()
    (package / "orders.py").touch()
    (package / "refunds.py").touch()
    (package / "__init__.py").write_text(
        '"""The shop.\n\n- ``orders``: orders;\n- ``invoices``: gone;\n- ``orders``: again.\n"""\n'
    )
    assert front_door_faults(package) == [
        "apps/shop/__init__.py does not list module 'refunds'",
        "apps/shop/__init__.py lists 'invoices', which is no module there",
        "apps/shop/__init__.py lists 'orders' 2 times",
    ]
