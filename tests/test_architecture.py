"""The import graph keeps the design's layers: no cycle between apps, and no import
from a forbidden direction.

Every module under apps/, scrapejobs/ and settings/ is parsed (not imported), and every import
statement counts, at the top of a module or inside a function. Forbidden:

- a cycle between apps: apps.X importing apps.Y importing ... apps.X (modules of one app may
  import each other);
- a model, service or selector module (``models``, ``services*``, ``selectors*``, the modules
  named for the one kind of work they do that were once services modules, ``LOWER_MODULES``, and
  every module of apps.jobs) importing a views, serializers or urls module;
- any module of apps/ importing the project package (``scrapejobs``: the Celery app, the
  processes, the web entry points sit above every app, so an import of it is a cycle in waiting);
- apps.jobs importing another app: it is the bottom;
- a neutral module (a single file directly under apps/: apps/admin_mixins.py, apps/tracing.py,
  apps/redis_clients.py, apps/db_failures.py) importing apps or the project package: every app
  may use it, apps.jobs included, so it sits below them;
- settings importing apps or the project package.

A failure prints each offending chain, one import per line with its file and line.

And sizes: no module of apps/ or scrapejobs/ over 400 lines, no function over 60 (migrations and
the declarative beat schedule exempt; settings/ is a table of settings).
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("apps", "scrapejobs", "settings")
BOTTOM = "apps.jobs"
UPPER_KINDS = ("views", "serializers", "urls")
# The lower layer's modules whose names say what they hold rather than "services": each was an
# app's services module, and is held to the same rule.
LOWER_MODULES = (
    "apps.batches.formats",
    "apps.batches.parquet_rows",
    "apps.crawls.expansion",
    "apps.crawls.pages",
    "apps.exports.export",
    "apps.politeness.limiter",
    "apps.politeness.robots_rules",
    "apps.publishing.fair_order",
    "apps.publishing.publisher",
    "apps.scraping.attempt",
    "apps.scraping.fetch_and_store",
    "apps.webhooks.delivering",
    "apps.writer.flush",
)
# What a newcomer reads without scrolling (docs/development.md): no module of apps/ or scrapejobs/
# over MODULE_MAX_LINES, no function over FUNCTION_MAX_LINES (its whole body, docstring and SQL
# included). Migrations are generated; SIZE_EXEMPT are declarative tables, read as tables.
MODULE_MAX_LINES = 400
FUNCTION_MAX_LINES = 60
SIZE_EXEMPT = {"scrapejobs/celery.py:_beat_schedule"}


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name
    imported: str  # dotted module name, inside PACKAGES
    path: str  # the importer's file, relative to the root
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.importer} imports {self.imported}"


def _module_name(root: Path, file: Path) -> str:
    parts = list(file.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in packages:
        for file in sorted((root / package).rglob("*.py")):
            found[_module_name(root, file)] = file
    return found


def _imports_of(name: str, file: Path, tree: ast.AST) -> Iterator[tuple[str, list[str], int]]:
    """(dotted source, names imported from it, line) for every import statement in the module,
    relative ones resolved."""
    package = name if file.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([source] if source else []))
            yield source, [alias.name for alias in node.names], node.lineno


def import_graph(root: Path, packages: Iterable[str] = PACKAGES) -> list[Import]:
    """Every import of one of our modules by one of our modules. ``from X import Y`` counts as an
    import of the module X.Y when there is one, else of X."""
    modules = _modules(root, packages)
    edges: set[Import] = set()
    for name, file in modules.items():
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
        for source, names, line in _imports_of(name, file, tree):
            submodules = [f"{source}.{n}" for n in names if f"{source}.{n}" in modules]
            targets = submodules if submodules and len(submodules) == len(names) else [source, *submodules]
            for target in targets:
                if target in modules and target != name:
                    edges.add(Import(name, target, str(file.relative_to(root)), line))
    return sorted(edges, key=lambda i: (i.path, i.line, i.imported))


def app_of(module: str) -> str | None:
    """apps.X for a module of apps/ (a single-file module is its own node), else None."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "apps" and len(parts) > 1 else None


def app_cycles(edges: Iterable[Import]) -> list[list[Import]]:
    """One cycle (as its chain of imports) for every group of apps that import each other."""
    between: dict[str, dict[str, Import]] = {}
    for edge in edges:
        a, b = app_of(edge.importer), app_of(edge.imported)
        if a and b and a != b:
            between.setdefault(a, {}).setdefault(b, edge)  # the first import shows the way
    cycles: list[list[Import]] = []
    seen: set[str | None] = set()
    for start in sorted(between):
        if start in seen:
            continue
        chain = _shortest_way_back(start, between)
        if chain:
            cycles.append(chain)
            seen.update(app_of(edge.importer) for edge in chain)
    return cycles


def _shortest_way_back(start: str, between: dict[str, dict[str, Import]]) -> list[Import]:
    came_by: dict[str, Import] = {}
    queue = deque([start])
    while queue:
        app = queue.popleft()
        for nxt, edge in sorted(between.get(app, {}).items()):
            if nxt == start:
                chain = [edge]
                while app != start:
                    chain.append(came_by[app])
                    app = app_of(came_by[app].importer) or ""
                return chain[::-1]
            if nxt not in came_by:
                came_by[nxt] = edge
                queue.append(nxt)
    return []


def _is_lower(module: str) -> bool:
    tail = module.split(".")[2:]
    return (
        module == BOTTOM
        or module.startswith(BOTTOM + ".")
        or module in LOWER_MODULES
        or any(part == "models" or part.startswith(("services", "selectors")) for part in tail)
    )


def _is_upper(module: str) -> bool:
    return any(part.startswith(UPPER_KINDS) for part in module.split(".")[2:])


def forbidden_imports(edges: Iterable[Import], root: Path) -> list[tuple[Import, str]]:
    """Each import against the layers, with the rule it breaks."""
    neutral = {f"apps.{f.stem}" for f in (root / "apps").glob("*.py") if f.name != "__init__.py"}
    found: list[tuple[Import, str]] = []
    for edge in edges:
        src, dst = edge.importer, edge.imported
        dst_top = dst.split(".")[0]
        if src.split(".")[0] == "settings" and dst_top in ("apps", "scrapejobs"):
            found.append((edge, "settings import neither apps nor the project package"))
        elif src in neutral and dst_top in ("apps", "scrapejobs"):
            found.append((edge, f"{src} is neutral: it imports no app, so that every app may use it"))
        elif src.split(".")[0] == "apps" and dst_top == "scrapejobs":
            found.append((edge, "apps import nothing of the project package: it sits above them"))
        elif app_of(src) == BOTTOM and app_of(dst) not in (BOTTOM, None) and dst not in neutral:
            found.append((edge, f"{BOTTOM} is the bottom: it imports no other app"))
        elif _is_lower(src) and _is_upper(dst):
            found.append((edge, "models, services and selectors import no views, serializers or urls"))
    return found


def report(cycles: list[list[Import]], forbidden: list[tuple[Import, str]]) -> str:
    lines = []
    for chain in cycles:
        apps = [app_of(edge.importer) for edge in chain] + [app_of(chain[0].importer)]
        lines.append("cycle between apps: " + " -> ".join(a or "?" for a in apps))
        lines.extend(f"    {edge}" for edge in chain)
    for edge, rule in forbidden:
        lines.append(f"forbidden import ({rule}):\n    {edge}")
    return "\n".join(lines)


# --- The project -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def edges() -> list[Import]:
    return import_graph(ROOT)


def test_the_walk_sees_the_apps_and_their_imports(edges: list[Import]) -> None:
    importers = {edge.importer for edge in edges}
    assert {"apps.intake.views", "apps.query.views", "scrapejobs.urls"} <= importers
    assert len(edges) > 50
    # A renamed or removed lower module would drop out of the rule unnoticed.
    assert set(LOWER_MODULES) <= set(_modules(ROOT, PACKAGES))


def test_no_two_apps_import_each_other_through_any_chain(edges: list[Import]) -> None:
    cycles = app_cycles(edges)
    assert not cycles, "\n" + report(cycles, [])


def test_no_module_imports_from_a_forbidden_direction(edges: list[Import]) -> None:
    forbidden = forbidden_imports(edges, ROOT)
    assert not forbidden, "\n" + report([], forbidden)


# --- The checker itself, on a tree made for it ------------------------------------------------


def _tree(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in PACKAGES:
        (root / package).mkdir(exist_ok=True)
        (root / package / "__init__.py").touch()
    return root


def test_the_checker_finds_a_cycle_through_three_apps_and_prints_its_chain(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "apps/jobs/__init__.py": "",
            "apps/jobs/models.py": "from django.db import models\n",
            "apps/a/__init__.py": "",
            "apps/a/views.py": "from apps.b import helpers\nfrom apps.jobs.models import Job\n",
            "apps/b/__init__.py": "",
            "apps/b/helpers.py": "def f():\n    from apps.c.tasks import run  # inside a function\n",
            "apps/c/__init__.py": "",
            "apps/c/tasks.py": "import apps.a.views\n",
            "apps/d/__init__.py": "",
            "apps/d/views.py": "from . import forms\nfrom apps.a import views\n",
            "apps/d/forms.py": "",
        },
    )
    edges = import_graph(root)
    assert Import("apps.d.views", "apps.d.forms", "apps/d/views.py", 1) in edges  # relative import
    cycles = app_cycles(edges)
    assert len(cycles) == 1
    text = report(cycles, [])
    assert "cycle between apps: apps.a -> apps.b -> apps.c -> apps.a" in text
    assert "apps/a/views.py:1: apps.a.views imports apps.b.helpers" in text
    assert "apps/b/helpers.py:2: apps.b.helpers imports apps.c.tasks" in text
    assert "apps/c/tasks.py:1: apps.c.tasks imports apps.a.views" in text
    assert not forbidden_imports(edges, root)


def test_the_checker_finds_imports_from_a_forbidden_direction(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "apps/jobs/__init__.py": "",
            "apps/jobs/models.py": "",
            "apps/jobs/admin.py": "from apps.kit import Mixin\n",
            "apps/jobs/claims.py": "from apps.shop import selectors\n",
            "apps/kit.py": "class Mixin: ...\n",
            "apps/glue.py": "from apps.jobs import models\n",
            "apps/shop/__init__.py": "",
            "apps/shop/serializers.py": "from apps.jobs.models import Job\n",
            "apps/shop/selectors.py": "def f():\n    from apps.shop.serializers import Out\n",
            "apps/shop/services/__init__.py": "",
            "apps/shop/services/close.py": "from ..urls import urlpatterns\n",
            "apps/shop/urls.py": "",
            "apps/shop/views.py": "from apps.shop import selectors, serializers\n",
            "apps/shop/tasks.py": "def f():\n    from scrapejobs.celery import app\n",
            "settings/base.py": "import scrapejobs.celery\n",
            "scrapejobs/__init__.py": "",
            "scrapejobs/celery.py": "",
        },
    )
    forbidden = forbidden_imports(import_graph(root), root)
    text = report([], forbidden)
    assert {str(edge) for edge, _ in forbidden} == {
        "apps/jobs/claims.py:1: apps.jobs.claims imports apps.shop.selectors",
        "apps/glue.py:1: apps.glue imports apps.jobs.models",
        "apps/shop/selectors.py:2: apps.shop.selectors imports apps.shop.serializers",
        "apps/shop/services/close.py:1: apps.shop.services.close imports apps.shop.urls",
        "apps/shop/tasks.py:2: apps.shop.tasks imports scrapejobs.celery",
        "settings/base.py:1: settings.base imports scrapejobs.celery",
    }, text
    assert "apps.jobs is the bottom" in text and "settings import neither" in text
    assert "apps import nothing of the project package" in text


# --- Background threads ------------------------------------------------------------------------


def thread_names(root: Path, packages: Iterable[str] = ("apps", "scrapejobs")) -> dict[str, str]:
    """The name every ``threading.Thread(name=…)`` and ``BackgroundNudge(name=…)`` under the
    packages is started with (an f-string's literal head, a prefix), with where it is started."""
    found: dict[str, str] = {}
    for name, file in _modules(root, packages).items():
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if callee not in ("Thread", "BackgroundNudge"):
                continue
            value = next((k.value for k in node.keywords if k.arg == "name"), None)
            where = f"{file.relative_to(root)}:{node.lineno}"
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found[value.value] = where
            elif isinstance(value, ast.JoinedStr) and isinstance(value.values[0], ast.Constant):
                found[str(value.values[0].value)] = where
            elif isinstance(value, ast.Attribute) and getattr(value.value, "id", "") == "self":
                continue  # a thread named by its class's caller (BackgroundNudge): seen there
            elif callee == "Thread" and name != "scrapejobs.supervise":
                found[f"<unnamed or computed at {where}>"] = where
    return found


def test_every_background_thread_is_listed_by_process() -> None:
    from scrapejobs.processes import BACKGROUND_THREADS

    listed = {thread for threads in BACKGROUND_THREADS.values() for thread in threads}
    started = thread_names(ROOT)
    started.pop("pump-", None)  # make run's own output pumps (scrapejobs/supervise.py), no component's
    unlisted = {name: where for name, where in started.items() if name not in listed}
    assert not unlisted, f"add to scrapejobs/processes.py BACKGROUND_THREADS: {unlisted}"
    assert not listed - set(started), f"listed but started nowhere: {sorted(listed - set(started))}"


def test_the_readme_process_table_names_every_background_thread() -> None:
    from scrapejobs.processes import BACKGROUND_THREADS

    readme = (ROOT / "README.md").read_text()
    for component, threads in BACKGROUND_THREADS.items():
        row = next((line for line in readme.splitlines() if line.startswith(f"| {component} |")), "")
        assert row, f"README's process table has no row for {component}"
        missing = [t for t in threads if f"`{t.strip()}`" not in row]
        assert not missing, f"README's {component} row does not name {missing}"


def test_the_thread_scan_sees_named_and_prefixed_threads(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "apps/a/__init__.py": "",
            "apps/a/run.py": (
                "import threading\n"
                "threading.Thread(target=f, name='keeper').start()\n"
                "threading.Thread(target=f, name=f'slot-{i}').start()\n"
                "threading.Thread(target=f).start()\n"
                "BackgroundNudge(send, name='poke', min_interval_s=1)\n"
            ),
        },
    )
    names = thread_names(root)
    assert {"keeper", "slot-", "poke"} <= set(names)
    assert any(name.startswith("<unnamed") for name in names)


def oversized(root: Path) -> list[str]:
    """Modules over MODULE_MAX_LINES and functions over FUNCTION_MAX_LINES under ``root``'s
    apps/ and scrapejobs/, as ``path: N lines`` / ``path:line name: N lines``."""
    found = []
    for package in ("apps", "scrapejobs"):
        for file in sorted((root / package).rglob("*.py")):
            if "migrations" in file.parts:
                continue
            path = file.relative_to(root).as_posix()
            text = file.read_text(encoding="utf-8")
            if (lines := len(text.splitlines())) > MODULE_MAX_LINES:
                found.append(f"{path}: {lines} lines")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > FUNCTION_MAX_LINES and f"{path}:{node.name}" not in SIZE_EXEMPT:
                        found.append(f"{path}:{node.lineno} {node.name}: {length} lines")
    return found


def test_no_module_or_function_is_past_its_size() -> None:
    assert oversized(ROOT) == []


def test_the_size_check_finds_a_long_module_and_a_long_function(tmp_path: Path) -> None:
    (tmp_path / "apps" / "a" / "migrations").mkdir(parents=True)
    (tmp_path / "scrapejobs").mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(FUNCTION_MAX_LINES))
    (tmp_path / "apps" / "a" / "long.py").write_text(f"def long():\n{body}" + "\n" * MODULE_MAX_LINES)
    (tmp_path / "apps" / "a" / "fits.py").write_text(f"def fits():\n{body[: body.rindex('    x')]}")
    (tmp_path / "apps" / "a" / "migrations" / "0001_x.py").write_text("\n" * (MODULE_MAX_LINES + 1))
    (tmp_path / "scrapejobs" / "celery.py").write_text(f"def _beat_schedule():\n{body}")
    assert oversized(tmp_path) == [
        f"apps/a/long.py: {MODULE_MAX_LINES + FUNCTION_MAX_LINES + 1} lines",
        f"apps/a/long.py:1 long: {FUNCTION_MAX_LINES + 1} lines",
    ]
