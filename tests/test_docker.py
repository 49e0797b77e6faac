"""docker/ is checked by reading it (no Docker engine on CI): every command the Dockerfile, the
entry point and the compose file run exists in this project, and every variable they set is one
the project reads."""

from __future__ import annotations

import importlib
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import get_commands

from scrapejobs import processes

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
OUR_SERVICES = ("migrate", "web", "worker", "browser", "control", "beat", "flower")
# Our images: the app image, and the browser component's (the app image plus chromium).
OUR_IMAGES = ("scrapejobs:latest", "scrapejobs-browser:latest")


def compose() -> dict[str, Any]:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def dockerfile() -> str:
    return (DOCKER / "Dockerfile").read_text()


def start_script() -> str:
    return (DOCKER / "start.sh").read_text()


def variables_read_by_the_project() -> set[str]:
    """Environment variables read by settings/base.py (env.*(...), _bounded_int(...), ...) and by
    scrapejobs/processes.py (``e.get(...)``, ``os.environ.get(...)``)."""
    settings_src = (ROOT / "settings" / "base.py").read_text()
    names = set(re.findall(r'(?:\benv(?:\.\w+)?|_\w+)\(\s*"([A-Z][A-Z0-9_]+)"', settings_src))
    processes_src = (ROOT / "scrapejobs" / "processes.py").read_text()
    names |= set(re.findall(r'\b(?:e|environ)\.get\(\s*"([A-Z][A-Z0-9_]+)"', processes_src))
    return names


def start_components() -> set[str]:
    """The component names start.sh hands to ``python -m scrapejobs.processes``."""
    match = re.search(r"^\s*([a-z| ]+)\)\s*\n\s*exec python -m scrapejobs\.processes", start_script(), re.M)
    assert match, "start.sh has no component case"
    return {c.strip() for c in match.group(1).split("|")}


def our_services() -> dict[str, dict[str, Any]]:
    return {name: svc for name, svc in compose()["services"].items() if svc.get("image") in OUR_IMAGES}


def test_the_project_reads_variables_the_way_these_checks_expect() -> None:
    # Guards the regular expressions above: if they stop matching, every later check is hollow.
    names = variables_read_by_the_project()
    assert {"DATABASE_URL", "REDIS_URL", "SCRAPEJOBS_STORAGE", "SCRAPEJOBS_LEASE_S", "PORT"} <= names
    assert {"SCRAPEJOBS_WEB_HOST", "FLOWER_PORT"} <= names


def test_the_image_is_python_3_11_slim_runs_as_a_non_root_user_and_starts_through_start_sh() -> None:
    text = dockerfile()
    assert re.search(r"^FROM python:3\.11-slim\b", text, re.M)
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and users[-1] not in ("root", "0")
    assert "useradd" in text
    entry = re.search(r"^ENTRYPOINT (\[.*\])", text, re.M)
    assert entry
    script = yaml.safe_load(entry.group(1))[-1]  # a JSON list is YAML too
    assert script == "/app/docker/start.sh" and (DOCKER / "start.sh").exists()
    cmd = re.search(r"^CMD (\[.*\])", text, re.M)
    assert cmd and yaml.safe_load(cmd.group(1))[0] in start_components()


def test_the_image_compiles_every_package_of_the_project_it_runs_from_source() -> None:
    """PYTHONDONTWRITEBYTECODE: no process of the container writes bytecode, so the build does."""
    text = dockerfile()
    assert re.search(r"^ENV PYTHONDONTWRITEBYTECODE=1\b", text, re.M)
    compiled = re.search(r"python -m compileall -q ([^\\&\n]+)", text)
    assert compiled, "no compileall in the image"
    targets = set(compiled.group(1).split())
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "bench", "clients"}
    assert packages <= targets, packages - targets
    assert "manage.py" in targets and all((ROOT / t).exists() for t in targets)


def test_every_file_the_dockerfile_copies_exists() -> None:
    for line in re.findall(r"^COPY (.+)$", dockerfile(), re.M):
        *sources, _dest = shlex.split(line)
        for src in sources:
            if src != ".":
                assert (ROOT / src).exists(), src


def test_every_management_command_the_docker_files_run_is_real() -> None:
    commands = set(get_commands())
    used = re.findall(r"manage\.py (\w+)", dockerfile() + start_script())
    for svc in compose()["services"].values():
        command = svc.get("command") or []
        if command[:1] == ["manage"]:
            used.append(command[1])
    used += re.findall(r"start\.sh manage (\w+)", (DOCKER / "compose.yaml").read_text())
    assert "collectstatic" in used and "create_tenant" in used
    assert set(used) <= commands, set(used) - commands


def test_the_entry_point_is_strict_bash_and_execs_every_component_of_processes_py() -> None:
    text = start_script()
    assert text.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in text
    assert subprocess.run(["bash", "-n", str(DOCKER / "start.sh")], check=False).returncode == 0
    # The control component's old name is still accepted (with a warning) for one release.
    assert start_components() == set(processes.COMPONENTS) | set(processes.COMPONENT_ALIASES)
    # Every line that runs something replaces the shell (signals reach the program, PID 1).
    runs = [line.strip() for line in text.splitlines() if re.match(r"\s*(python|celery|gunicorn)\b", line)]
    assert runs == []
    for module in re.findall(r"python -m ([\w.]+)", text):
        importlib.import_module(module)


@pytest.mark.parametrize("component", processes.COMPONENTS)
def test_each_component_command_line_points_at_an_installed_program(component: str) -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "scrapejobs.processes", component, "--print"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    argv = shlex.split(printed)
    assert Path(argv[0]).exists(), argv[0]
    if "-A" in argv:  # a Celery app that imports, with the queues the command names
        app = importlib.import_module(argv[argv.index("-A") + 1] + ".celery").app
        known = {q.name for q in app.conf.task_queues}
        if "--queues" in argv:
            assert set(argv[argv.index("--queues") + 1].split(",")) <= known
    if component == "migrate":
        assert argv[2:4] == ["migrate_locked", "--noinput"] and Path(argv[1]).exists()
    if component == "web":
        # The ASGI application and the worker class gunicorn loads (scrapejobs/web_worker.py).
        assert getattr(importlib.import_module(argv[1].split(":")[0]), argv[1].split(":")[1])
        worker_module, _, worker_class = argv[argv.index("--worker-class") + 1].rpartition(".")
        assert getattr(importlib.import_module(worker_module), worker_class)


def test_compose_runs_the_whole_stack_with_healthchecks() -> None:
    services = compose()["services"]
    assert {"postgres", "redis", "minio", "createbucket", *OUR_SERVICES} <= set(services)
    assert services["postgres"]["image"].startswith("postgres:16")
    assert services["redis"]["image"].startswith("redis:7")
    assert "--appendonly" in services["redis"]["command"] and "yes" in services["redis"]["command"]
    for name in ("postgres", "redis", "minio", "web", "worker", "browser", "control", "flower"):
        assert "healthcheck" in services[name], name
    assert "mc mb" in " ".join(services["createbucket"]["command"])


def test_the_fetching_services_yield_the_cpu_to_the_web_and_control_on_a_busy_host() -> None:
    """NFR-2: the intake's p99 holds while the workers keep the cores busy. Outside containers
    the worker lowers its own nice value (SCRAPEJOBS_WORKER_NICE); across containers nice does not
    reach, so compose gives the scrape worker and the browser a smaller CPU weight than the
    services that answer requests or feed them (Docker's default weight is 1,024)."""
    services = compose()["services"]
    default = 1024
    for name in ("worker", "browser"):
        shares = services[name]["cpu_shares"]
        # Docker accepts 2..262144; an int, not a string a variable left unexpanded
        assert isinstance(shares, int) and 2 <= shares < default, name
    for name in ("web", "control", "beat", "migrate", "flower"):
        assert services[name].get("cpu_shares", default) >= default, name


def test_every_service_of_ours_runs_a_real_component_after_migrations() -> None:
    services = compose()["services"]
    components = start_components()
    ours = our_services()
    assert set(ours) == set(OUR_SERVICES)
    for name, svc in ours.items():
        assert svc["build"]["dockerfile"] == "docker/Dockerfile"
        assert (DOCKER / svc["build"]["context"] / svc["build"]["dockerfile"]).resolve().exists()
        assert svc["command"][0] in components, name
        for dep in svc.get("depends_on", {}):
            assert dep in services, (name, dep)
        if name != "migrate":
            assert svc["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert {svc["command"][0] for svc in ours.values()} == components - set(processes.COMPONENT_ALIASES)


def test_every_variable_set_for_our_containers_is_read_by_the_project() -> None:
    read = variables_read_by_the_project()
    for name, svc in our_services().items():
        for var in svc.get("environment", {}):
            if name == "flower" and var.startswith("FLOWER_") and var not in read:
                continue  # Flower reads FLOWER_* options itself (FLOWER_BASIC_AUTH)
            assert var in read, (name, var)
    image_env = re.findall(r"^\s*(?:ENV\s+)?([A-Z][A-Z0-9_]+)=", dockerfile(), re.M)
    python_own = {
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONUNBUFFERED",
        "PIP_NO_CACHE_DIR",
        "PIP_DISABLE_PIP_VERSION_CHECK",
    }
    for var in image_env:
        assert var in read | python_own | {"DJANGO_SETTINGS_MODULE"}, var


def test_the_celery_healthchecks_name_workers_the_way_processes_py_names_them() -> None:
    services = compose()["services"]
    for component in ("worker", "browser", "control"):
        check = " ".join(services[component]["healthcheck"]["test"])
        argv = getattr(processes, component)()
        hostname = argv[argv.index("--hostname") + 1]
        assert hostname == f"{component}@%h"
        destinations = {f"{name}@$$HOSTNAME" for name in processes.node_names(component)}
        destination = re.search(r"--destination (\S+)", check)
        assert destination and set(destination.group(1).split(",")) == destinations, check
        assert "-A scrapejobs" in check


def test_every_flower_variable_is_an_option_flower_knows() -> None:
    # Flower turns every FLOWER_* variable of its environment into an option and dies on an
    # unknown one (flower.command.apply_env_options), so a FLOWER_HOST here would stop Flower.
    import flower.command  # noqa: F401 - defines Flower's options
    from tornado.options import options

    known = {name.replace("-", "_") for name in options._options}
    used = {v for v in variables_read_by_the_project() if v.startswith("FLOWER_")}
    used |= set(re.findall(r"\b(FLOWER_[A-Z_]+)=", dockerfile()))
    for svc in our_services().values():
        used |= {v for v in svc.get("environment", {}) if v.startswith("FLOWER_")}
    assert {"FLOWER_ADDRESS", "FLOWER_PORT", "FLOWER_BASIC_AUTH"} <= used
    unknown = {v for v in used if v.removeprefix("FLOWER_").lower() not in known}
    assert not unknown, unknown


def test_the_browser_image_adds_debians_chromium_and_runs_it_as_the_non_root_user_sandboxed() -> None:
    """FR-30, NFR-31: the browser component's image is the app image plus Debian's chromium
    (no browser downloaded by Playwright), its last user is not root, and compose runs it with
    Chromium's sandbox on and the shared memory it needs."""
    text = dockerfile()
    stage = text[text.index("FROM app AS browser") :]
    assert re.search(r"apt-get install [^\n]*\bchromium\b", stage)
    assert "playwright install" not in text
    users = re.findall(r"^USER (\S+)", stage, re.M)
    assert users and users[-1] not in ("root", "0")
    assert re.search(r'^CMD \["browser"\]', stage, re.M)
    browser = compose()["services"]["browser"]
    assert browser["build"]["target"] == "browser" and browser["command"] == ["browser"]
    assert browser["environment"]["SCRAPEJOBS_BROWSER_SANDBOX"] == "true"
    assert browser["shm_size"]
    # Every other service of ours runs the app image, without chromium.
    assert {svc["image"] for name, svc in our_services().items() if name != "browser"} == {
        "scrapejobs:latest"
    }


def test_compose_has_no_default_password_and_a_redis_that_asks_for_one() -> None:
    """Every secret has no default: compose refuses to start until it is set (``${VAR:?...}``),
    docker/env.example lists each, and Redis requires its password of every client."""
    text = (DOCKER / "compose.yaml").read_text()
    secrets = {
        "DJANGO_SECRET_KEY",
        "POSTGRES_PASSWORD",
        "REDIS_PASSWORD",
        "MINIO_ROOT_PASSWORD",
        "FLOWER_BASIC_AUTH",
    }
    required = set(re.findall(r"\$\{(\w+):\?", text))
    assert secrets <= required, secrets - required
    for name in secrets:
        assert not re.search(rf"\$\{{{name}:-", text), f"{name} has a default"
    example = {
        line.split("=", 1)[0] for line in (DOCKER / "env.example").read_text().splitlines() if "=" in line
    }
    assert required <= example, required - example
    services = compose()["services"]
    assert "--requirepass" in services["redis"]["command"]
    assert services["redis"]["environment"]["REDISCLI_AUTH"]  # the healthcheck's redis-cli authenticates
    assert "${REDIS_PASSWORD:?" in text.split("REDIS_URL:", 1)[1].splitlines()[0]
