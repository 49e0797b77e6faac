"""deploy/kubernetes/ is checked by reading it (no cluster here), as tests/test_docker.py checks
docker/: the core manifests against Kubernetes' own schemas (kubernetes-validate, offline), the
KEDA ScaledObject against KEDA's CRD schema kept in tests/deploy/schemas/, the commands and
settings against scrapejobs/processes.py and docs/settings.md, and every PromQL expression (KEDA,
prometheus-adapter, alert rules) parsed, naming only metrics and labels a live /metrics has."""

from __future__ import annotations

import copy
import ipaddress
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import promql_parser
import pytest
import yaml
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from apps.operators.rollup_runner import rollup_run
from apps.outbound.addresses import is_public_address
from scrapejobs import processes
from tests.query import helpers
from tests.test_docker import variables_read_by_the_project

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
KEDA_CRD = Path(__file__).resolve().parent / "schemas" / "keda.sh_scaledobjects.yaml"
K8S_VERSION = "1.33.0"
DEPLOYMENTS = {"web", "worker", "control", "browser", "beat", "flower"}


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def objects(*folders: str) -> list[tuple[Path, dict[str, Any]]]:
    return [
        (p, d) for folder in folders for p in sorted((KUBE / folder).glob("*.yaml")) for d in documents(p)
    ]


def core() -> list[tuple[Path, dict[str, Any]]]:
    """The objects of Kubernetes' own kinds (everything but KEDA's and Prometheus Operator's)."""
    found = [
        (p, d)
        for p, d in objects("base", "hpa", "overlays/s3-external-services")
        if d.get("kind") != "Kustomization"
        and not d["apiVersion"].startswith(("keda.sh/", "monitoring.coreos.com/"))
    ]
    return found


def base(kind: str, name: str) -> dict[str, Any]:
    for _, d in objects("base"):
        if d["kind"] == kind and d["metadata"]["name"] == name:
            return d
    raise AssertionError(f"no {kind} {name} in base/")


def deployment(component: str) -> dict[str, Any]:
    return base("Deployment", f"scrapejobs-{component}")


def pod(component: str) -> dict[str, Any]:
    return deployment(component)["spec"]["template"]["spec"]


def config() -> dict[str, str]:
    return base("ConfigMap", "scrapejobs-config")["data"]


def scaled_object() -> dict[str, Any]:
    (so,) = documents(KUBE / "keda" / "scaledobject.yaml")
    return so


def browser_scaled_object() -> dict[str, Any]:
    (so,) = documents(KUBE / "keda" / "browser-scaledobject.yaml")
    return so


# --- Kubernetes' schemas ----------------------------------------------------------------------


def test_every_core_manifest_validates_against_the_kubernetes_schemas_offline() -> None:
    found = core()
    kinds = {d["kind"] for _, d in found}
    assert {"Deployment", "Service", "ConfigMap", "Secret", "PodDisruptionBudget", "NetworkPolicy"} <= kinds
    assert "HorizontalPodAutoscaler" in kinds
    for path, d in found:
        try:
            kubernetes_validate.validate(d, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            raise AssertionError(
                f"{path.relative_to(ROOT)} {d['kind']}: {e.message} at {list(e.path)}"
            ) from e


def test_the_validator_refuses_a_manifest_kubernetes_would_refuse() -> None:
    # Guards the check above: a misspelt field and a wrong type both fail.
    broken = copy.deepcopy(deployment("worker"))
    broken["spec"]["template"]["spec"]["terminationGracePeriodSecond"] = 45
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)
    broken = copy.deepcopy(deployment("worker"))
    broken["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_every_file_a_kustomization_names_exists() -> None:
    for path in KUBE.rglob("kustomization.yaml"):
        k = yaml.safe_load(path.read_text())
        for entry in k.get("resources", []):
            target = path.parent / entry
            assert target.is_file() or (target / "kustomization.yaml").is_file(), (path, entry)
        for patch in k.get("patches", []):
            assert (path.parent / patch["path"]).is_file(), (path, patch)
        for gen in k.get("secretGenerator", []):
            for env in gen.get("envs", []):  # made by the operator from the committed example
                assert (path.parent / f"{env}.example").is_file(), (path, env)
    top = yaml.safe_load((KUBE / "kustomization.yaml").read_text())
    assert top["resources"] == ["base", "keda", "monitoring"]


# --- KEDA ---------------------------------------------------------------------------------------


def _closed(schema: Any) -> Any:
    """The CRD schema with unknown fields refused: the API server would prune them silently (a
    misspelt threshold dropped, not reported), so the test treats them as errors."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        if (
            out.get("type") == "object"
            and "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


def keda_schema() -> dict[str, Any]:
    (crd,) = documents(KEDA_CRD)
    assert crd["metadata"]["name"] == "scaledobjects.keda.sh"
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return _closed(version["schema"]["openAPIV3Schema"])


def test_the_scaled_object_validates_against_kedas_crd_schema() -> None:
    so = scaled_object()
    assert so["apiVersion"] == "keda.sh/v1alpha1" and so["kind"] == "ScaledObject"
    jsonschema.validate(so, keda_schema())
    assert so["spec"]["scaleTargetRef"]["name"] == deployment("worker")["metadata"]["name"]
    assert {t["type"] for t in so["spec"]["triggers"]} == {"prometheus"}
    # The overlay's patch is a valid ScaledObject too once merged over the base object.
    (patch,) = documents(KUBE / "overlays" / "s3-external-services" / "keda-prometheus.yaml")
    merged = copy.deepcopy(so)
    merged["spec"]["triggers"] = patch["spec"]["triggers"]
    jsonschema.validate(merged, keda_schema())
    assert [t["metadata"]["query"] for t in patch["spec"]["triggers"]] == [
        t["metadata"]["query"] for t in so["spec"]["triggers"]
    ]


def test_the_browser_component_scales_on_its_own_queue_not_on_the_workers() -> None:
    so = browser_scaled_object()
    jsonschema.validate(so, keda_schema())
    assert so["spec"]["scaleTargetRef"]["name"] == deployment("browser")["metadata"]["name"]
    queries = " ".join(t["metadata"]["query"] for t in so["spec"]["triggers"])
    assert "browser" in queries and "scrapejobs_dispatchable_jobs" not in queries
    slots = {t["name"]: t for t in so["spec"]["triggers"]}["renders-in-system"]["metadata"]["threshold"]
    argv = processes.browser()
    assert float(slots) == float(argv[argv.index("--concurrency") + 1])  # one pod per page slots
    (main,) = pod("browser")["containers"]
    assert main["image"] == "scrapejobs-browser:latest"  # docker/Dockerfile's browser target


def test_the_keda_schema_check_refuses_a_broken_scaled_object() -> None:
    schema = keda_schema()
    for breaking in (
        lambda s: s["spec"].pop("scaleTargetRef"),
        lambda s: s["spec"]["triggers"][0].pop("type"),
        lambda s: s["spec"].update(pollingIntervall=15),
        lambda s: s["spec"].update(minReplicaCount="two"),
    ):
        broken = copy.deepcopy(scaled_object())
        breaking(broken)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, schema)


def test_keda_and_the_hpa_alternative_scale_on_the_same_queries_and_numbers() -> None:
    so = scaled_object()
    triggers = {t["name"]: t for t in so["spec"]["triggers"]}
    (hpa,) = documents(KUBE / "hpa" / "hpa.yaml")
    (adapter,) = documents(KUBE / "hpa" / "prometheus-adapter-rules.yaml")
    rules = {
        r["name"]["as"]: r["metricsQuery"]
        for r in yaml.safe_load(adapter["data"]["config.yaml"])["externalRules"]
    }
    metrics = {m["external"]["metric"]["name"]: m["external"]["target"] for m in hpa["spec"]["metrics"]}

    def same(q: str) -> str:
        return promql_parser.parse(q).prettify()

    pairs = {
        "jobs-in-system": "scrapejobs_jobs_in_system",
        "oldest-dispatchable-age": "scrapejobs_oldest_dispatchable_job_age_seconds",
    }
    for trigger, external in pairs.items():
        assert same(triggers[trigger]["metadata"]["query"]) == same(rules[external])
        target = metrics[external]
        keda_type = triggers[trigger]["metricType"]
        assert target["type"] == keda_type
        value = target["averageValue"] if keda_type == "AverageValue" else target["value"]
        assert float(value) == float(triggers[trigger]["metadata"]["threshold"])
    assert hpa["spec"]["minReplicas"] == so["spec"]["minReplicaCount"]
    assert hpa["spec"]["maxReplicas"] == so["spec"]["maxReplicaCount"]
    assert hpa["spec"]["behavior"] == so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]


def test_the_depth_threshold_leaves_head_room_below_the_workers_threads() -> None:
    # Little's law (docs/kubernetes.md): jobs in the system per worker, at most the threads.
    threshold = float(
        {t["name"]: t for t in scaled_object()["spec"]["triggers"]}["jobs-in-system"]["metadata"]["threshold"]
    )
    threads = int(config()["SCRAPEJOBS_WORKER_CONCURRENCY"])
    assert 0.5 * threads <= threshold < threads
    age = float(
        {t["name"]: t for t in scaled_object()["spec"]["triggers"]}["oldest-dispatchable-age"]["metadata"][
            "threshold"
        ]
    )
    assert age < 60 / 2  # NFR-8's 60 s, with the reaction time inside it


# --- Commands and settings ---------------------------------------------------------------------


def test_each_deployment_runs_its_component_through_the_images_entry_point() -> None:
    found = {d["metadata"]["name"] for _, d in objects("base") if d["kind"] == "Deployment"}
    assert found == {f"scrapejobs-{c}" for c in DEPLOYMENTS}
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["/app/docker/start.sh"]' in dockerfile
    for component in DEPLOYMENTS:
        spec = pod(component)
        (main,) = spec["containers"]
        # No command: the image's entry point (start.sh -> python -m scrapejobs.processes).
        assert "command" not in main and main["args"] == [component], component
        assert component in processes.COMPONENTS
        if component != "flower":  # Flower touches no database
            (init,) = spec["initContainers"]
            assert init["args"] == ["migrate"] and "command" not in init
            assert init["image"] == main["image"]
    assert processes.migrate()[2] == "migrate_locked"  # many pods at once, one at a time


def test_beat_is_exactly_one_and_stops_before_its_successor_starts() -> None:
    beat = deployment("beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}
    assert not any(
        d["kind"] in ("PodDisruptionBudget",) and "beat" in d["metadata"]["name"] for _, d in objects("base")
    )


def test_every_setting_given_is_one_the_project_reads_and_documents() -> None:
    read = variables_read_by_the_project()
    documented = (ROOT / "docs" / "settings.md").read_text()
    secret = base("Secret", "scrapejobs-secrets")["stringData"]
    assert all(v == "" for v in secret.values())  # an example: nothing public to start with
    overlay_env = (KUBE / "overlays" / "s3-external-services" / "secrets.env.example").read_text()
    overlay_names = set(re.findall(r"^([A-Z][A-Z0-9_]+)=", overlay_env, re.M))
    (overlay_config,) = documents(KUBE / "overlays" / "s3-external-services" / "config.yaml")
    for name in {*config(), *secret, *overlay_names, *overlay_config["data"]}:
        assert f"`{name}`" in documented, f"{name} is not in docs/settings.md"
        if name == "FLOWER_BASIC_AUTH":
            continue  # read by Flower itself (tests/test_docker.py)
        assert name in read or name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"), name
    assert set(secret) == overlay_names
    assert {"DJANGO_SECRET_KEY", "DATABASE_URL", "REDIS_URL"} <= set(secret)
    for component in DEPLOYMENTS:
        for container in pod(component)["containers"] + pod(component).get("initContainers", []):
            refs = [e.get("configMapRef", e.get("secretRef"))["name"] for e in container["envFrom"]]
            # The browser pod names the secrets it needs instead (the test below).
            whole = (
                ["scrapejobs-config"]
                if component == "browser"
                else ["scrapejobs-config", "scrapejobs-secrets"]
            )
            assert refs == whole, component


def test_the_worker_is_given_the_time_its_graceful_stop_takes() -> None:
    grace_s = float(config()["SCRAPEJOBS_WORKER_SHUTDOWN_GRACE_S"])
    worker = pod("worker")
    # time is the subject (a configured period): the grace to finish fetches, then the hand-back of the rest
    # (apps/scheduling/shutdown_watchdog.py).
    assert grace_s + 10 <= worker["terminationGracePeriodSeconds"] <= grace_s + 30
    web = pod("web")
    argv = processes.web()
    assert web["terminationGracePeriodSeconds"] > int(argv[argv.index("--graceful-timeout") + 1])


def test_the_probes_are_the_services_own() -> None:
    (web,) = pod("web")["containers"]
    assert web["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert web["readinessProbe"]["httpGet"]["path"] == "/readyz"
    hosts = {
        h["value"]
        for p in ("startupProbe", "livenessProbe", "readinessProbe")
        for h in web[p]["httpGet"]["httpHeaders"]
    }
    assert hosts <= set(config()["DJANGO_ALLOWED_HOSTS"].split(","))
    assert web["ports"][0]["containerPort"] == int(config()["PORT"])
    for component in ("worker", "control"):
        (main,) = pod(component)["containers"]
        check = " ".join(main["livenessProbe"]["exec"]["command"])
        argv = getattr(processes, component)()
        hostname = argv[argv.index("--hostname") + 1]
        assert hostname == f"{component}@%h"
        destinations = {f"{name}@$HOSTNAME" for name in processes.node_names(component)}
        destination = re.search(r"inspect ping --destination (\S+)", check)
        assert destination and set(destination.group(1).split(",")) == destinations, check
        assert "-A scrapejobs" in check
    (beat,) = pod("beat")["containers"]
    assert "celerybeat-schedule" in " ".join(beat["livenessProbe"]["exec"]["command"])
    assert config()["SCRAPEJOBS_BEAT_SCHEDULE"].startswith("/app/.run/")
    (flower,) = pod("flower")["containers"]
    assert flower["livenessProbe"]["httpGet"]["path"] == "/healthcheck"


def test_every_container_runs_as_non_root_on_a_read_only_root_with_sized_resources() -> None:
    for component in DEPLOYMENTS:
        spec = pod(component)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == 10001  # docker/Dockerfile's app user
        assert spec["automountServiceAccountToken"] is False
        for container in spec["containers"] + spec.get("initContainers", []):
            mounts_needed = {"/tmp", "/app/.run"}
            if component == "browser" and container["name"] == "browser":
                mounts_needed.add("/dev/shm")  # Chromium's shared memory
            sc = container["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert {m["mountPath"] for m in container["volumeMounts"]} == mounts_needed
            for side in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(container["resources"][side]), (component, side)


def test_each_disruption_budget_and_service_selects_its_deployment() -> None:
    labels = {
        d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"]
        for _, d in objects("base")
        if d["kind"] == "Deployment"
    }
    budgets = [d for _, d in objects("base") if d["kind"] == "PodDisruptionBudget"]
    assert {b["metadata"]["name"] for b in budgets} == {
        "scrapejobs-web",
        "scrapejobs-worker",
        "scrapejobs-control",
        "scrapejobs-browser",
    }
    for b in budgets:
        assert b["spec"]["selector"]["matchLabels"].items() <= labels[b["metadata"]["name"]].items()
    for _, s in objects("base"):
        if s["kind"] == "Service":
            assert s["spec"]["selector"].items() <= labels[s["metadata"]["name"]].items()


# One address of each kind the address guard refuses (apps/outbound/addresses.py).
GUARD_REFUSES = [
    "10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.0.1", "169.254.169.254", "127.0.0.1",
    "0.0.0.1", "168.63.129.16", "192.0.0.1", "192.0.2.1", "198.18.0.1", "198.51.100.1",
    "203.0.113.1", "224.0.0.1", "240.0.0.1", "255.255.255.255",
    "fd00:ec2::254", "fc00::1", "fe80::1", "fec0::1", "ff02::1", "::1", "::", "::ffff:10.0.0.1",
    "64:ff9b::a00:1", "2002:a00:1::1", "2001:0:a00:1::1", "2001:db8::1", "100::1",
]  # fmt: skip


def test_the_workers_reach_the_internet_but_no_private_range() -> None:
    policies = [d for _, d in objects("base") if d["kind"] == "NetworkPolicy"]
    worker_labels = deployment("worker")["spec"]["template"]["metadata"]["labels"]
    egress = [
        rule
        for p in policies
        if p["spec"]["podSelector"]["matchLabels"].items() <= worker_labels.items()
        for rule in p["spec"]["egress"]
    ]
    blocks = [peer["ipBlock"] for rule in egress for peer in rule.get("to", []) if "ipBlock" in peer]
    v4 = next(b for b in blocks if b["cidr"] == "0.0.0.0/0")
    assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10"} <= set(
        v4["except"]
    )
    v6 = next(b for b in blocks if b["cidr"] == "::/0")
    assert {"fc00::/7", "fe80::/10"} <= set(v6["except"])
    # Every kind of address the guard refuses is outside the policy's internet too (literals only:
    # nothing is contacted).
    for ip in GUARD_REFUSES:
        assert not is_public_address(ip), ip
        block = v4 if ipaddress.ip_address(ip).version == 4 else v6
        assert any(ipaddress.ip_address(ip) in ipaddress.ip_network(c) for c in block["except"]), ip
    # Every other allowance names ports: DNS, PostgreSQL, Redis.
    for rule in egress:
        if not any("ipBlock" in peer for peer in rule.get("to", [])):
            assert {p["port"] for p in rule["ports"]} <= {53, 5432, 6379}


# --- PromQL against a live /metrics ------------------------------------------------------------


def _selectors(node: Any) -> list[Any]:
    if type(node).__name__ == "VectorSelector":
        return [node]
    found = []
    for attr in ("lhs", "rhs", "expr", "args", "param", "vector_selector"):
        value = getattr(node, attr, None)
        for child in value if isinstance(value, list) else [value]:
            if child is not None and not isinstance(child, (int, float, str)):
                found += _selectors(child)
    return found


def queries() -> list[tuple[str, str]]:
    """(where, expression) of every PromQL expression under deploy/kubernetes/."""
    found = [
        (f"keda {t['name']}", t["metadata"]["query"])
        for so in (scaled_object(), browser_scaled_object())
        for t in so["spec"]["triggers"]
    ]
    (adapter,) = documents(KUBE / "hpa" / "prometheus-adapter-rules.yaml")
    found += [
        (f"adapter {r['name']['as']}", r["metricsQuery"])
        for r in yaml.safe_load(adapter["data"]["config.yaml"])["externalRules"]
    ]
    (rules,) = documents(KUBE / "monitoring" / "prometheusrule.yaml")
    found += [(f"alert {r['alert']}", r["expr"]) for g in rules["spec"]["groups"] for r in g["rules"]]
    return found


@pytest.mark.django_db
def test_every_query_parses_and_names_only_metrics_and_labels_a_live_scrape_has(make_tenant) -> None:
    tenant, _, _ = make_tenant()
    helpers.failed(tenant)  # a dead letter, so that its counter has a sample
    rollup_run(settle_s=0)
    response = Client().get("/metrics")
    assert response.status_code == 200
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    found = queries()
    assert len([w for w, _ in found if w.startswith("alert ")]) >= 6
    names_used = set()
    for where, expr in found:
        tree = promql_parser.parse(expr)  # raises on a syntax error
        for selector in _selectors(tree):
            name = selector.name
            names_used.add(name)
            assert name in labels, f"{where}: {name} is not in /metrics"
            for matcher in selector.matchers.matchers:
                if matcher.name != "__name__":
                    assert matcher.name in labels[name], f"{where}: {name} has no label {matcher.name}"
    assert {
        "scrapejobs_oldest_dispatchable_job_age_seconds",
        "scrapejobs_dispatchable_jobs",
        "scrapejobs_writer_lag_seconds",
        "scrapejobs_jobs_running_past_lease",
        "scrapejobs_dead_letters_total",
        "scrapejobs_time_to_first_attempt_seconds_bucket",
        "scrapejobs_dispatchable_browser_jobs",
        "scrapejobs_oldest_dispatchable_browser_job_age_seconds",
    } <= names_used


def test_a_broken_expression_does_not_parse() -> None:
    with pytest.raises(Exception):  # noqa: B017 - the parser raises its own error type
        promql_parser.parse("max(scrapejobs_writer_lag_seconds > 30")


def test_every_alert_names_a_summary_and_a_severity() -> None:
    (rules,) = documents(KUBE / "monitoring" / "prometheusrule.yaml")
    alerts = [r for g in rules["spec"]["groups"] for r in g["rules"]]
    assert len({r["alert"] for r in alerts}) == len(alerts)
    for r in alerts:
        assert r["labels"]["severity"] in ("page", "ticket") and r["annotations"]["summary"], r["alert"]


def test_the_browser_pod_gets_only_the_secrets_rendering_needs() -> None:
    """A page's scripts run in the browser pod: it is given the secrets it needs by name, never
    the whole Secret (no metrics token, Flower login or webhooks' proxy)."""
    (secret,) = [d for _, d in objects("base") if d["kind"] == "Secret"]
    every = set(secret["stringData"])
    spec = pod("browser")
    for container in spec["initContainers"] + spec["containers"]:
        assert not any("secretRef" in source for source in container.get("envFrom", [])), container["name"]
        given = {
            e["valueFrom"]["secretKeyRef"]["key"]
            for e in container.get("env", [])
            if "secretKeyRef" in e.get("valueFrom", {})
        }
        assert given <= every, given - every  # every name is one the Secret has
        assert {"DJANGO_SECRET_KEY", "DATABASE_URL", "REDIS_URL"} <= given, container["name"]
        assert not given & {
            "SCRAPEJOBS_METRICS_TOKEN",
            "FLOWER_BASIC_AUTH",
            "SCRAPEJOBS_WEBHOOK_EGRESS_PROXY",
        }
    (browser,) = spec["containers"]
    assert {e["name"] for e in browser["env"]} >= {
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "SCRAPEJOBS_EGRESS_PROXY",
    }
