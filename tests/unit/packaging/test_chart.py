"""The Helm chart: in sync with crds/ and manifests/, and rendered (`helm template`) with
default, s3 and gateway values it installs what the README promises, and nothing a value
does not control."""

from __future__ import annotations

import base64
import copy
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tooladapter.kube.leases import renew_deadline, retry_period

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "tooladapter"
MANIFESTS = ROOT / "manifests"
Doc = dict[str, Any]

S3 = [
    "--set=artifacts.backend=s3",
    "--set=artifacts.s3.endpoint=http://s3.storage:8333",
    "--set=artifacts.s3.bucket=receipts",
    "--set=artifacts.s3.existingSecret=s3-credentials",
]
NO_GATEWAY = ["--set=gateway.enabled=false"]
#: helm template's default Kubernetes version depends on how helm was built.
KUBE = ["--kube-version=1.34.0"]


def _sync() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sync_chart", ROOT / "hack" / "sync_chart.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def helm() -> str:
    found = os.environ.get("HELM") or shutil.which("helm")
    local = ROOT / ".cluster" / "bin" / "helm"
    if not found and local.exists():
        found = str(local)
    if not found:
        pytest.fail("no helm binary: the local cluster's build puts one in .cluster/bin")
    return found


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm(), *args], capture_output=True, text=True, check=False)


@cache
def _render_cached(namespace: str, args: tuple[str, ...]) -> str:
    done = run_helm("template", "tooladapter", str(CHART), "--namespace", namespace, *KUBE, *args)
    if done.returncode:
        raise RenderError(done.stderr.strip())
    return done.stdout


class RenderError(Exception):
    pass


def render(*args: str, namespace: str = "tooladapter-system") -> list[Doc]:
    text = _render_cached(namespace, tuple(args))
    return [d for d in yaml.safe_load_all(text) if d]


def one(docs: list[Doc], kind: str, name: str | None = None) -> Doc:
    found = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, (kind, name, [d["metadata"]["name"] for d in found])
    return found[0]


def kinds(docs: list[Doc]) -> set[str]:
    return {d["kind"] for d in docs}


def env_of(container: Doc) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def operator_container(docs: list[Doc]) -> Doc:
    deployment = one(docs, "Deployment", "tooladapter-operator")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


# --- the chart's copies of crds/ and manifests/ ------------------------------------------


def test_chart_copies_match_their_sources() -> None:
    sync = _sync()
    pairs = sync.sources()
    assert pairs, "nothing to sync"
    stale = [
        str(dst.relative_to(ROOT))
        for dst, src in pairs.items()
        if not dst.exists() or dst.read_text() != sync.expected(dst, src)
    ]
    assert not stale, f"run `make crds`: chart copies drifted: {stale}"
    assert sync.carried() == set(pairs), "the chart carries files that have no source"


def test_the_chart_renders_exactly_the_objects_of_manifests() -> None:
    """Object for object, with default values: only the chart's labels are added."""
    rendered = {(d["kind"], d["metadata"]["name"]): d for d in render()}
    for path in sorted(MANIFESTS.rglob("*.yaml")):
        if path.name == "kustomization.yaml" or "examples" in path.parts:
            continue
        for doc in (d for d in yaml.safe_load_all(path.read_text()) if d):
            key = (doc["kind"], doc["metadata"]["name"])
            if doc["kind"] == "Namespace" and key[1] == "tooladapter-system":
                assert key not in rendered, "helm install --create-namespace makes it"
                continue
            assert key in rendered, f"{path.name}: {key} missing from the chart"
            ours = copy.deepcopy(rendered[key])
            labels = ours["metadata"].pop("labels")
            theirs = copy.deepcopy(doc)
            assert labels.items() >= theirs["metadata"].pop("labels").items()
            assert labels["app.kubernetes.io/managed-by"] == "Helm"
            assert ours == theirs, key


def test_another_namespace_and_prefix_leave_no_trace_of_the_defaults() -> None:
    """A second release beside the first: its own cluster-scoped names, its namespace."""
    docs = render("--set=prefix=tachart", namespace="ta-chart")
    text = yaml.safe_dump_all(docs)
    assert "tooladapter-system" not in text
    for doc in docs:
        name = doc["metadata"]["name"]
        assert name.startswith("tachart-"), (doc["kind"], name)
        if doc["kind"] in ("ServiceAccount", "Deployment", "Service", "PersistentVolumeClaim"):
            assert doc["metadata"]["namespace"] == "ta-chart"
    binding = one(docs, "ClusterRoleBinding", "tachart-operator")
    assert binding["roleRef"]["name"] == "tachart-operator"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "tachart-operator", "namespace": "ta-chart"}
    ]
    for policy in (d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"):
        assert policy["spec"]["policyName"].startswith("tachart-")
    status = one(docs, "ValidatingAdmissionPolicy", "tachart-invocation-status")
    assert "system:serviceaccount:ta-chart:tachart-operator" in yaml.safe_dump(status)


# --- default values -------------------------------------------------------------------


def test_default_release_runs_two_operators_with_failover_and_probes() -> None:
    docs = render()
    # The release namespace comes from --create-namespace; the chart makes only the grants'.
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"] == [
        "tooladapter-egress"
    ]
    deployment = one(docs, "Deployment", "tooladapter-operator")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    selector = spec["selector"]["matchLabels"]
    assert selector["app.kubernetes.io/name"] == "tooladapter"
    assert selector["app.kubernetes.io/component"] == "operator"
    assert selector.items() <= spec["template"]["metadata"]["labels"].items()
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "tooladapter-operator"
    container = operator_container(docs)
    assert container["image"] == "localhost/tooladapter-operator:dev"
    assert container["args"] == ["run"], "no --standalone peering flags: the Lease decides"
    env = env_of(container)
    assert env["TOOLADAPTER_LEADER_ELECTION"] == "true"
    assert env["TOOLADAPTER_LEASE_NAMESPACE"] == "tooladapter-system"
    assert env["TOOLADAPTER_LEASE_SECONDS"] == "10"
    assert env["TOOLADAPTER_NAMESPACES"] == ""
    assert env["TOOLADAPTER_ARTIFACT_BACKEND"] == "file"
    assert env["TOOLADAPTER_GATEWAY_PORT"] == "8080", "every replica serves the gateway"
    assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert "KUBERNETES_SERVICE_HOST" not in env
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert env["TOOLADAPTER_HEALTH_PORT"] == str(ports["health"])
    assert env["TOOLADAPTER_METRICS_PORT"] == str(ports["metrics"])
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    pdb = one(docs, "PodDisruptionBudget", "tooladapter-operator")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == selector
    metrics = one(docs, "Service", "tooladapter-metrics")
    assert metrics["spec"]["selector"] == selector
    assert metrics["spec"]["ports"][0]["targetPort"] == "metrics"
    assert not {"ServiceMonitor"} & kinds(docs)
    assert sorted(d["metadata"]["name"] for d in docs if d["kind"] == "Service") == [
        "tooladapter-egress-proxy",
        "tooladapter-gateway",
        "tooladapter-metrics",
    ]


def test_default_artifact_store_is_a_claim_kept_on_uninstall() -> None:
    docs = render()
    claim = one(docs, "PersistentVolumeClaim", "tooladapter-artifacts")
    assert claim["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    container = operator_container(docs)
    assert env_of(container)["TOOLADAPTER_ARTIFACT_DIR"] == "/var/lib/tooladapter/artifacts"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["artifacts"] == "/var/lib/tooladapter/artifacts"
    pod = one(docs, "Deployment", "tooladapter-operator")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["artifacts"]["persistentVolumeClaim"]["claimName"] == "tooladapter-artifacts"
    assert "affinity" not in pod, "a ReadWriteOnce claim keeps the replicas together"
    dropped = render("--set=artifacts.file.keepOnUninstall=false")
    assert "annotations" not in one(dropped, "PersistentVolumeClaim")["metadata"]


def test_every_pod_runs_restricted() -> None:
    docs = render("--set=egressProxy.enabled=true")
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    assert len(deployments) == 2
    for deployment in deployments:
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["readOnlyRootFilesystem"] is True
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert container["resources"]["limits"]


def test_default_lease_lets_a_standby_take_over_a_killed_leader_within_15s() -> None:
    """Worst case after a SIGKILL: the last renewal was just before the death, the Lease
    expires a duration later and the standby sees it one poll after that; kopf then primes
    its caches (a few seconds on a loaded 2-core node), inside the 15 s."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    seconds = values["leaderElection"]["leaseSeconds"]
    assert seconds + retry_period(seconds) <= 12
    # A leader gives up before a standby can take over: never two acting at once.
    assert renew_deadline(seconds) < seconds


# --- s3 and gateway -------------------------------------------------------------------


def test_s3_backend_takes_credentials_from_an_existing_secret_and_no_claim() -> None:
    docs = render(*S3)
    assert "PersistentVolumeClaim" not in kinds(docs)
    container = operator_container(docs)
    env = env_of(container)
    assert env["TOOLADAPTER_ARTIFACT_BACKEND"] == "s3"
    assert env["TOOLADAPTER_S3_ENDPOINT"] == "http://s3.storage:8333"
    assert env["TOOLADAPTER_S3_BUCKET"] == "receipts"
    assert "TOOLADAPTER_ARTIFACT_DIR" not in env
    assert env["AWS_ACCESS_KEY_ID"] == {
        "secretKeyRef": {"name": "s3-credentials", "key": "AWS_ACCESS_KEY_ID"}
    }
    assert env["AWS_SECRET_ACCESS_KEY"] == {
        "secretKeyRef": {"name": "s3-credentials", "key": "AWS_SECRET_ACCESS_KEY"}
    }
    secrets = [d["metadata"]["name"] for d in docs if d["kind"] == "Secret"]
    # The only Secret the chart makes is the gateway's certificate, never S3 credentials
    # (the operator makes the page's session key itself).
    assert secrets == ["tooladapter-gateway-tls"], "the chart never holds the credentials"
    assert env["TOOLADAPTER_S3_REGION"] == "us-east-1"
    assert env["TOOLADAPTER_S3_PATH_STYLE"] == "false"
    assert "AWS_CA_BUNDLE" not in env
    assert "artifacts" not in {m["name"] for m in container["volumeMounts"]}
    pod = one(docs, "Deployment", "tooladapter-operator")["spec"]["template"]["spec"]
    assert pod["affinity"]["podAntiAffinity"], "no shared volume: spread over nodes"


def test_s3_on_aws_needs_no_endpoint_and_a_private_ca_is_mounted() -> None:
    args = [a for a in S3 if ".endpoint=" not in a]
    docs = render(*args, "--set=artifacts.s3.caConfigMap=s3-ca")
    container = operator_container(docs)
    env = env_of(container)
    assert "TOOLADAPTER_S3_ENDPOINT" not in env
    assert env["AWS_CA_BUNDLE"] == "/etc/tooladapter/s3-ca/ca.crt"
    mount = next(m for m in container["volumeMounts"] if m["name"] == "s3-ca")
    assert mount == {"name": "s3-ca", "mountPath": "/etc/tooladapter/s3-ca", "readOnly": True}
    pod = one(docs, "Deployment", "tooladapter-operator")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "s3-ca")
    assert volume["configMap"]["name"] == "s3-ca"


@pytest.mark.parametrize("missing", ["bucket", "existingSecret"])
def test_s3_backend_without_a_required_value_fails_naming_it(missing: str) -> None:
    args = [a for a in S3 if f".{missing}=" not in a]
    with pytest.raises(RenderError, match=rf"artifacts\.s3\.{missing} is required"):
        render(*args)


def test_an_unknown_backend_is_refused() -> None:
    with pytest.raises(RenderError, match=r"artifacts/backend': value must be one of"):
        render("--set=artifacts.backend=nfs")


def test_gateway_serves_on_every_replica_behind_a_service() -> None:
    docs = render(*S3)
    container = operator_container(docs)
    env = env_of(container)
    assert env["TOOLADAPTER_GATEWAY_PORT"] == "8080"
    assert env["TOOLADAPTER_GATEWAY_APPROVAL_WAIT_SECONDS"] == "300"
    assert env["TOOLADAPTER_GATEWAY_TLS_CERT"] == "/etc/tooladapter/gateway-tls/tls.crt"
    assert {"name": "gateway", "containerPort": 8080} in container["ports"]
    service = one(docs, "Service", "tooladapter-gateway")
    assert service["spec"]["ports"] == [{"name": "https", "port": 8080, "targetPort": "gateway"}]
    selector = one(docs, "Deployment", "tooladapter-operator")["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"] == selector
    # The gateway checks callers' tokens and permissions with the operator's identity.
    rules = one(docs, "ClusterRole", "tooladapter-operator")["rules"]
    granted = {(r, v) for rule in rules for r in rule["resources"] for v in rule["verbs"]}
    assert ("tokenreviews", "create") in granted
    assert ("subjectaccessreviews", "create") in granted


def test_a_disabled_gateway_listens_nowhere() -> None:
    docs = render(*NO_GATEWAY)
    container = operator_container(docs)
    assert env_of(container)["TOOLADAPTER_GATEWAY_PORT"] == "0"
    assert "gateway" not in {p["name"] for p in container["ports"]}
    assert "tooladapter-gateway" not in {d["metadata"]["name"] for d in docs}


def test_gateway_tls_comes_from_a_secret_mounted_read_only() -> None:
    docs = render("--set=gateway.tls.secretName=gateway-tls")
    assert not [d for d in docs if d["metadata"]["name"] == "tooladapter-gateway-tls"]
    container = operator_container(docs)
    env = env_of(container)
    assert env["TOOLADAPTER_GATEWAY_TLS_CERT"] == "/etc/tooladapter/gateway-tls/tls.crt"
    assert env["TOOLADAPTER_GATEWAY_TLS_KEY"] == "/etc/tooladapter/gateway-tls/tls.key"
    mount = next(m for m in container["volumeMounts"] if m["name"] == "gateway-tls")
    assert mount["readOnly"] is True
    pod = one(docs, "Deployment", "tooladapter-operator")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "gateway-tls")
    assert volume["secret"] == {"secretName": "gateway-tls"}


def test_the_service_monitor_is_off_until_asked_for() -> None:
    assert not {"ServiceMonitor"} & kinds(render())
    docs = render(
        "--set=metrics.serviceMonitor.enabled=true",
        "--set=metrics.serviceMonitor.labels.release=prom",
    )
    monitor = one(docs, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"


def test_the_egress_proxy_runs_by_default_and_the_operator_finds_its_service() -> None:
    docs = render()
    proxy = one(docs, "Deployment", "tooladapter-egress-proxy")
    pod = proxy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "tooladapter-egress-proxy"
    (container,) = pod["containers"]
    assert container["args"] == ["egress-proxy"]
    env = env_of(container)
    assert env["TOOLADAPTER_EGRESS_PROXY_PORT"] == "3128"
    assert env["TOOLADAPTER_EGRESS_NAMESPACE"] == "tooladapter-egress"
    assert "TOOLADAPTER_EGRESS_HOSTS" not in env, "the test resolver is off by default"
    service = one(docs, "Service", "tooladapter-egress-proxy")
    assert service["spec"]["ports"][0]["port"] == 3128
    selector = proxy["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"] == selector
    # Its rights: the grants and its records in their own namespace, nothing cluster-wide,
    # nothing where the session key, S3 credentials and TLS keys live.
    role = one(docs, "Role", "tooladapter-egress-proxy")
    assert role["metadata"]["namespace"] == "tooladapter-egress"
    grants = one(docs, "Namespace", "tooladapter-egress")
    assert grants["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert proxy["metadata"]["namespace"] == "tooladapter-system"
    assert rights(role) == {
        ("secrets", "get", None),
        ("secrets", "list", None),
        ("secrets", "watch", None),
        ("configmaps", "create", None),
        ("configmaps", "patch", None),
    }
    binding = one(docs, "RoleBinding", "tooladapter-egress-proxy")
    assert binding["subjects"][0]["name"] == "tooladapter-egress-proxy"
    # The operator: the proxy pods' labels for the lease's NetworkPolicy, and the Service
    # whose ClusterIP it gives sandboxes, which it may `get` and nothing else of Services.
    operator_env = env_of(operator_container(docs))
    labels = dict(
        pair.split("=") for pair in operator_env["TOOLADAPTER_EGRESS_PROXY_POD_LABELS"].split(",")
    )
    assert labels == selector
    assert operator_env["TOOLADAPTER_EGRESS_PROXY_PORT"] == "3128"
    assert operator_env["TOOLADAPTER_EGRESS_PROXY_SERVICE"] == "tooladapter-egress-proxy"
    assert "TOOLADAPTER_EGRESS_PROXY_ADDRESS" not in operator_env
    assert "TOOLADAPTER_EGRESS_PROXY_ENABLED" not in operator_env
    assert operator_env["TOOLADAPTER_EGRESS_NAMESPACE"] == "tooladapter-egress"
    assert operator_env["TOOLADAPTER_EGRESS_PROXY_NAMESPACE"] == "tooladapter-system"
    own = one(docs, "Role", "tooladapter-operator-egress")
    assert own["metadata"]["namespace"] == "tooladapter-egress"
    assert rights(own) == {
        ("configmaps", "list", None),
        ("configmaps", "delete", None),
        ("secrets", "list", None),
        ("secrets", "delete", None),
    }
    service = one(docs, "Role", "tooladapter-operator-egress-service")
    assert service["metadata"]["namespace"] == "tooladapter-system"
    assert rights(service) == {("services", "get", "tooladapter-egress-proxy")}
    binding = one(docs, "RoleBinding", "tooladapter-operator-egress")
    assert binding["subjects"][0]["name"] == "tooladapter-operator"


def test_a_second_release_reads_its_own_proxy_service() -> None:
    docs = render("--set=prefix=tachart", namespace="ta-chart")
    operator = one(docs, "Deployment", "tachart-operator")
    env = env_of(operator["spec"]["template"]["spec"]["containers"][0])
    assert env["TOOLADAPTER_EGRESS_PROXY_SERVICE"] == "tachart-egress-proxy"
    assert env["TOOLADAPTER_EGRESS_NAMESPACE"] == "tachart-egress"
    assert env["TOOLADAPTER_EGRESS_PROXY_NAMESPACE"] == "ta-chart"
    one(docs, "Service", "tachart-egress-proxy")
    one(docs, "Namespace", "tachart-egress")
    own = one(docs, "Role", "tachart-operator-egress-service")
    assert ("services", "get", "tachart-egress-proxy") in rights(own)


def test_an_egress_address_or_a_disabled_proxy_never_falls_back_to_the_pod_address() -> None:
    fixed = env_of(operator_container(render("--set=egressProxy.address=10.0.0.77")))
    assert fixed["TOOLADAPTER_EGRESS_PROXY_ADDRESS"] == "10.0.0.77"
    assert "TOOLADAPTER_EGRESS_PROXY_SERVICE" not in fixed
    docs = render("--set=egressProxy.enabled=false")
    running = [d for d in docs if d["kind"] in ("Deployment", "Service")]
    assert "egress-proxy" not in yaml.safe_dump_all(running)
    off = env_of(operator_container(docs))
    assert off["TOOLADAPTER_EGRESS_PROXY_ENABLED"] == "false"
    assert not {"TOOLADAPTER_EGRESS_PROXY_SERVICE", "TOOLADAPTER_EGRESS_PROXY_POD_LABELS"} & set(
        off
    )


def test_the_test_resolver_and_cluster_ranges_reach_the_proxy() -> None:
    docs = render(
        "--set-string=egressProxy.hosts=api.example.test=192.0.2.9",
        "--set-string=egressProxy.clusterCidrs=10.244.0.0/16\\,10.0.0.0/24",
    )
    proxy = one(docs, "Deployment", "tooladapter-egress-proxy")
    env = env_of(proxy["spec"]["template"]["spec"]["containers"][0])
    assert env["TOOLADAPTER_EGRESS_HOSTS"] == "api.example.test=192.0.2.9"
    assert env["TOOLADAPTER_EGRESS_CLUSTER_CIDRS"] == "10.244.0.0/16,10.0.0.0/24"


def rights(role: Doc) -> set[tuple[str, str, str | None]]:
    """(resource, verb, resource name or None for any) of a Role's rules."""
    return {
        (resource, verb, name)
        for rule in role["rules"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        for name in rule.get("resourceNames") or [None]
    }


def test_the_api_server_workaround_sets_both_address_and_port() -> None:
    env = env_of(
        operator_container(
            render("--set=apiServer.host=192.0.2.2", "--set-string=apiServer.port=6443")
        )
    )
    assert env["KUBERNETES_SERVICE_HOST"] == "192.0.2.2"
    assert env["KUBERNETES_SERVICE_PORT"] == "6443"
    with pytest.raises(RenderError, match=r"apiServer\.port must be set"):
        render("--set=apiServer.host=192.0.2.2")


# --- every value does something ---------------------------------------------------------


def _leaves(values: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    if isinstance(values, dict) and values:
        return [leaf for k, v in values.items() for leaf in _leaves(v, (*path, k))]
    return [(path, values)]


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return f"{value}x" if value else "x"
    if isinstance(value, list):
        return [*value, "ReadWriteMany"] if value else [{"name": "X", "value": "y"}]
    if value == {}:
        return {"x": "y"}
    raise AssertionError(f"no change for {value!r}")


#: Values whose only effect is under another value's condition: changed under both bases
#: (values files, so that a change given with --set-json wins over them).
BASES: dict[str, dict[str, Any]] = {
    "file, everything on": {
        "gateway": {
            "tls": {"secretName": "gateway-tls"},
            "behindTlsProxy": True,
            "ingress": {"enabled": True, "host": "tools.example.com"},
            "httpRoute": {"enabled": True, "parentRefs": [{"name": "public"}]},
        },
        "egressProxy": {"enabled": True},
        "metrics": {"serviceMonitor": {"enabled": True}},
        "apiServer": {"host": "192.0.2.2", "port": "6443"},
    },
    "s3": {
        "artifacts": {
            "backend": "s3",
            "s3": {"endpoint": "http://s3:8333", "bucket": "r", "existingSecret": "s"},
        }
    },
}


@cache
def _base_file(name: str) -> str:
    path = Path(tempfile.mkdtemp(prefix="chart-base-")) / "values.yaml"
    path.write_text(yaml.safe_dump(BASES[name]))
    return str(path)


def _changes_something(path: tuple[str, ...], value: Any) -> bool:
    """Whether setting the value at `path` to another one changes (or refuses) the render
    under some base."""
    change = f"--set-json={'.'.join(path)}={json.dumps(_changed(value))}"
    for name in BASES:
        base = f"--values={_base_file(name)}"
        try:
            if _render_uncached(base, change) != _render_cached("tooladapter-system", (base,)):
                return True
        except RenderError:
            return True  # refused: the value is checked
    return False


def test_every_value_changes_what_is_rendered() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    leaves = _leaves(values)
    with ThreadPoolExecutor(max_workers=4) as pool:
        used = list(pool.map(lambda leaf: _changes_something(*leaf), leaves))
    unused = [".".join(path) for (path, _), ok in zip(leaves, used, strict=True) if not ok]
    assert not unused, f"values that change nothing (remove them or use them): {unused}"


def _render_uncached(*args: str) -> str:
    done = run_helm(
        "template", "tooladapter", str(CHART), "--namespace", "tooladapter-system", *KUBE, *args
    )
    if done.returncode:
        raise RenderError(done.stderr.strip())
    return done.stdout


def test_helm_lint_is_clean() -> None:
    for args in ([], S3 + NO_GATEWAY + ["--set=egressProxy.enabled=true"]):
        done = run_helm("lint", "--strict", str(CHART), *KUBE, *args)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "0 chart(s) failed" in done.stdout


def test_the_reviewers_page_shares_one_session_key_among_replicas() -> None:
    """The operator makes the key's Secret on first start: no render holds a key, so two
    renders are the same and `helm template | kubectl apply` never rotates it."""
    docs = render()
    assert not [d for d in docs if d["kind"] == "Secret" and "session" in d["metadata"]["name"]]
    env = env_of(operator_container(docs))
    assert env["TOOLADAPTER_UI_SESSION_SECRET"] == "tooladapter-system/tooladapter-ui-session-key"
    assert "TOOLADAPTER_UI_SESSION_KEY_FILE" not in env
    own = render("--set=gateway.uiSessionSecretName=mine")
    assert env_of(operator_container(own))["TOOLADAPTER_UI_SESSION_SECRET"] == (
        "tooladapter-system/mine"
    )
    args = ["--set=gateway.tls.secretName=gateway-tls"]
    assert _render_uncached(*args) == _render_uncached(*args), "a render holds a random value"


def test_the_gateway_speaks_tls_by_default_with_a_certificate_clients_can_trust() -> None:
    from cryptography import x509

    docs = render()
    secret = one(docs, "Secret", "tooladapter-gateway-tls")
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    pem = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    cert = x509.load_pem_x509_certificate(pem["tls.crt"])
    ca = x509.load_pem_x509_certificate(pem["ca.crt"])
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "tooladapter-gateway.tooladapter-system.svc" in names.get_values_for_type(x509.DNSName)
    pod = one(docs, "Deployment", "tooladapter-operator")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "gateway-tls")
    assert volume["secret"] == {"secretName": "tooladapter-gateway-tls"}
    # cert-manager instead: a Certificate into the same Secret, no Secret of the chart's.
    issued = render(
        "--set=gateway.tls.certManager.issuerRef.name=ca",
        "--set=gateway.tls.certManager.issuerRef.kind=ClusterIssuer",
    )
    certificate = one(issued, "Certificate")
    assert certificate["spec"]["secretName"] == "tooladapter-gateway-tls"
    assert certificate["spec"]["issuerRef"]["kind"] == "ClusterIssuer"
    assert not [d for d in issued if d["kind"] == "Secret" and "tls" in d["metadata"]["name"]]
    # Off: plain HTTP, no certificate, cookies Secure only behind a trusted TLS proxy.
    plain = render("--set=gateway.tls.enabled=false", "--set=gateway.behindTlsProxy=true")
    env = env_of(operator_container(plain))
    assert "TOOLADAPTER_GATEWAY_TLS_CERT" not in env
    assert env["TOOLADAPTER_UI_BEHIND_TLS_PROXY"] == "true"
    assert one(plain, "Service", "tooladapter-gateway")["spec"]["ports"][0]["name"] == "http"


def test_network_policies_guard_the_gateway_proxy_and_metrics_ports() -> None:
    docs = render()
    operator = one(docs, "NetworkPolicy", "tooladapter-operator")
    assert operator["spec"]["policyTypes"] == ["Ingress"]
    rules = {r["ports"][0]["port"]: r.get("from") for r in operator["spec"]["ingress"]}
    assert rules["gateway"] == [{"namespaceSelector": {}}]
    assert rules["metrics"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    assert rules["health"] is None  # the kubelet's probes
    proxy = one(docs, "NetworkPolicy", "tooladapter-egress-proxy")
    rules = {r["ports"][0]["port"]: r.get("from") for r in proxy["spec"]["ingress"]}
    assert rules["proxy"] == [
        {
            "namespaceSelector": {},
            "podSelector": {"matchLabels": {"app.kubernetes.io/managed-by": "tooladapter"}},
        }
    ]
    assert "NetworkPolicy" not in kinds(render("--set=networkPolicy.enabled=false"))


def test_the_grants_namespace_is_never_the_release_namespace() -> None:
    with pytest.raises(RenderError, match="must not be the release namespace"):
        render("--set=egressProxy.grantsNamespace=tooladapter-system")
    docs = render(
        "--set=egressProxy.grantsNamespace=grants", "--set=egressProxy.createGrantsNamespace=false"
    )
    assert "Namespace" not in kinds(docs)
    assert one(docs, "Role", "tooladapter-egress-proxy")["metadata"]["namespace"] == "grants"


# --- the chart's conventions (issue 32) -------------------------------------------------


@cache
def _chart_values() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chart_values", ROOT / "hack" / "chart_values.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["chart_values"] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def test_helm_template_renders_without_flags() -> None:
    """No --kube-version: the chart's kubeVersion (>=1.31) holds against helm's default."""
    done = run_helm("template", "tooladapter", str(CHART))
    assert done.returncode == 0, done.stderr
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == ">=1.31.0-0"
    too_old = run_helm("template", "tooladapter", str(CHART), "--kube-version=1.30.0")
    assert too_old.returncode and "kubeVersion" in too_old.stderr


@pytest.mark.parametrize(
    "typo", ["gateway.prot=1", "egressProxy.extraenv[0].name=A", "replica=3", "image.tags=x"]
)
def test_the_schema_refuses_a_value_typo(typo: str) -> None:
    with pytest.raises(RenderError, match="additional properties"):
        render(f"--set={typo}")


def test_the_schema_refuses_a_wrong_type_or_choice() -> None:
    with pytest.raises(RenderError, match="schema"):
        render("--set=gateway.service.type=Ingress")
    with pytest.raises(RenderError, match="schema"):
        render("--set=replicas=two")


def test_every_object_of_the_schema_refuses_unknown_keys() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    loose: list[str] = []

    def walk(node: dict[str, Any], path: str) -> None:
        if "properties" in node:
            if node.get("additionalProperties") is not False:
                loose.append(path)
            for key, child in node["properties"].items():
                walk(child, f"{path}.{key}" if path else key)

    walk(schema, "")
    assert not loose, loose


def test_every_value_is_commented_and_the_readme_table_and_schema_are_current() -> None:
    values = _chart_values()
    assert values.uncommented() == [], "comment these values in values.yaml"
    assert (CHART / "README.md").read_text() == values.readme((CHART / "README.md").read_text())
    assert (CHART / "values.schema.json").read_text() == values.schema_text(), (
        "run `python hack/chart_values.py`"
    )


def test_a_value_without_a_comment_is_named() -> None:
    text = "# Documented.\na: 1\nb:\n  # Also.\n  c: x\n  d: []\n"
    assert _chart_values().uncommented(text) == ["b.d"]


def test_helm_lint_strict_passes_without_flags() -> None:
    done = run_helm("lint", "--strict", str(CHART))
    assert done.returncode == 0, done.stdout + done.stderr


# Rendered objects against the Kubernetes 1.34 OpenAPI (hack/vendor_openapi.py), strictly:
# an object schema refuses fields it does not list (like kubeconform -strict).
OPENAPI = ROOT / "tests" / "unit" / "data" / "openapi-1.34"
#: Kinds of other projects' CRDs (cert-manager, Prometheus operator, Gateway API): not in
#: the Kubernetes OpenAPI.
FOREIGN = {"Certificate", "ServiceMonitor", "PrometheusRule", "HTTPRoute"}
EVERYTHING_ON = [
    "--set=gateway.ingress.enabled=true",
    "--set=gateway.ingress.host=tools.example.com",
    "--set=gateway.ingress.tlsSecretName=tools-tls",
    "--set=gateway.ingress.className=nginx",
    "--set=gateway.httpRoute.enabled=true",
    '--set-json=gateway.httpRoute.parentRefs=[{"name":"public","namespace":"gateways"}]',
    "--set=gateway.httpRoute.hostnames[0]=tools.example.com",
    "--set=serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::1:role/r",
    "--set=egressProxy.serviceAccount.annotations.iam\\.gke\\.io/gcp-service-account=a@b",
    "--set=egressProxy.caBundle.configMap=corp-ca",
    "--set=caBundle.secret=operator-ca",
    '--set-json=egressProxy.extraEnv=[{"name":"NO_PROXY","value":"internal"}]',
    '--set-json=egressProxy.tolerations=[{"key":"egress","operator":"Exists"}]',
    "--set=egressProxy.nodeSelector.pool=egress",
    "--set=monitoring.prometheusRule.enabled=true",
    "--set=monitoring.dashboard.enabled=true",
    "--set=metrics.serviceMonitor.enabled=true",
]


def _strict(node: Any) -> Any:
    if isinstance(node, dict):
        out = {k: _strict(v) for k, v in node.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


@cache
def _kube_schemas() -> tuple[dict[str, Any], dict[tuple[str, str], str]]:
    schemas: dict[str, Any] = {}
    for path in sorted(OPENAPI.glob("*.json")):
        schemas.update(json.loads(path.read_text())["components"]["schemas"])
    by_kind = {}
    for name, schema in schemas.items():
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            api = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
            by_kind[(api, gvk["kind"])] = name
    return {"components": {"schemas": _strict(schemas)}}, by_kind


@pytest.mark.parametrize(
    "args",
    [(), tuple(EVERYTHING_ON), tuple(S3 + NO_GATEWAY)],
    ids=["defaults", "everything-on", "s3-no-gateway"],
)
def test_rendered_objects_are_valid_kubernetes_1_34_objects(args: tuple[str, ...]) -> None:
    import jsonschema
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT7

    document, by_kind = _kube_schemas()
    registry: Registry[Any] = Registry().with_resource(
        "urn:k8s", Resource.from_contents(document, default_specification=DRAFT7)
    )
    problems: list[str] = []
    seen: set[str] = set()
    for doc in render(*args):
        kind = doc["kind"]
        seen.add(kind)
        if kind in FOREIGN:
            continue
        name = by_kind.get((doc["apiVersion"], kind))
        assert name, f"no vendored schema for {doc['apiVersion']} {kind}: hack/vendor_openapi.py"
        validator = jsonschema.Draft7Validator(
            {"$ref": f"urn:k8s#/components/schemas/{name}"}, registry=registry
        )
        for error in validator.iter_errors(doc):
            where = "/".join(str(p) for p in error.absolute_path)
            problems.append(f"{kind}/{doc['metadata']['name']} {where}: {error.message}")
    assert not problems, "\n".join(problems)
    assert "Deployment" in seen


def test_service_accounts_carry_their_annotations() -> None:
    docs = render(*EVERYTHING_ON)
    operator = one(docs, "ServiceAccount", "tooladapter-operator")
    assert operator["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/r"
    }
    proxy = one(docs, "ServiceAccount", "tooladapter-egress-proxy")
    assert proxy["metadata"]["annotations"] == {"iam.gke.io/gcp-service-account": "a@b"}
    assert "annotations" not in one(render(), "ServiceAccount", "tooladapter-operator")["metadata"]


def test_security_contexts_can_be_overridden() -> None:
    """Helm merges a given map into the default one: a key set to null is dropped."""
    docs = render(
        "--set=podSecurityContext.runAsUser=1000",
        "--set=podSecurityContext.fsGroup=null",
        "--set=securityContext.readOnlyRootFilesystem=false",
    )
    for deployment in (d for d in docs if d["kind"] == "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsUser"] == 1000
        assert "fsGroup" not in pod["securityContext"]
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in pod["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is False


def test_the_proxy_trusts_a_private_ca_and_takes_extra_env_and_scheduling() -> None:
    docs = render(*EVERYTHING_ON)
    pod = one(docs, "Deployment", "tooladapter-egress-proxy")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = env_of(container)
    assert env["TOOLADAPTER_EGRESS_CA_FILE"] == "/etc/tooladapter/egress-ca/ca.crt"
    assert env["NO_PROXY"] == "internal"
    volume = next(v for v in pod["volumes"] if v["name"] == "egress-ca")
    assert volume["configMap"]["name"] == "corp-ca"
    assert {"name": "egress-ca", "mountPath": "/etc/tooladapter/egress-ca", "readOnly": True} in (
        container["volumeMounts"]
    )
    assert pod["nodeSelector"] == {"pool": "egress"}
    assert pod["tolerations"] == [{"key": "egress", "operator": "Exists"}]
    pdb = one(docs, "PodDisruptionBudget", "tooladapter-egress-proxy")
    assert pdb["spec"]["minAvailable"] == 1
    secret = render("--set=egressProxy.caBundle.secret=corp-ca", "--set=egressProxy.caBundle.key=b")
    pod = one(secret, "Deployment", "tooladapter-egress-proxy")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "egress-ca")
    assert volume["secret"] == {"secretName": "corp-ca", "items": [{"key": "b", "path": "b"}]}
    # The operator trusts the same bundle for the APIs http tools call.
    for rendered, source in ((docs, {"configMap": {"name": "corp-ca"}}), (secret, None)):
        op = one(rendered, "Deployment", "tooladapter-operator")["spec"]["template"]["spec"]
        (operator,) = [c for c in op["containers"] if c["name"] == "operator"]
        volume = next(v for v in op["volumes"] if v["name"] == "egress-ca")
        if source is not None:
            assert volume["configMap"]["name"] == "corp-ca"
        else:
            assert volume["secret"]["secretName"] == "corp-ca"
        key = "ca.crt" if source is not None else "b"
        assert env_of(operator)["TOOLADAPTER_EGRESS_CA_FILE"] == f"/etc/tooladapter/egress-ca/{key}"
        assert {
            "name": "egress-ca",
            "mountPath": "/etc/tooladapter/egress-ca",
            "readOnly": True,
        } in operator["volumeMounts"]
    plain = one(render(), "Deployment", "tooladapter-operator")["spec"]["template"]["spec"]
    assert not [v for v in plain["volumes"] if v["name"] == "egress-ca"]


@pytest.mark.parametrize(
    ("args", "source"),
    [
        (
            ["--set=caBundle.configMap=corp-ca"],
            {"configMap": {"name": "corp-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        ),
        (
            ["--set=caBundle.secret=corp-ca", "--set=caBundle.key=bundle.pem"],
            {
                "secret": {
                    "secretName": "corp-ca",
                    "items": [{"key": "bundle.pem", "path": "bundle.pem"}],
                }
            },
        ),
    ],
)
def test_the_operator_trusts_its_own_ca_bundle_mounted_read_only(
    args: list[str], source: dict[str, Any]
) -> None:
    """Issue 44: a private CA for the operator's own outbound TLS (http tools, token
    endpoints) through the chart, not only through extraEnv without a volume."""
    docs = render(*args)
    pod = one(docs, "Deployment", "tooladapter-operator")["spec"]["template"]["spec"]
    (operator,) = [c for c in pod["containers"] if c["name"] == "operator"]
    volume = next(v for v in pod["volumes"] if v["name"] == "ca-bundle")
    assert volume == {"name": "ca-bundle", **source}
    mount = {"name": "ca-bundle", "mountPath": "/etc/tooladapter/ca-bundle", "readOnly": True}
    assert mount in operator["volumeMounts"]
    (item,) = next(iter(source.values()))["items"]
    assert env_of(operator)["TOOLADAPTER_CA_BUNDLE"] == f"/etc/tooladapter/ca-bundle/{item['path']}"
    # The proxy's trust is its own value: this bundle does not reach it.
    proxy = one(docs, "Deployment", "tooladapter-egress-proxy")["spec"]["template"]["spec"]
    assert not [v for v in proxy["volumes"] if v["name"] == "ca-bundle"]
    plain = one(render(), "Deployment", "tooladapter-operator")["spec"]["template"]["spec"]
    assert not [v for v in plain["volumes"] if v["name"] == "ca-bundle"]
    (container,) = [c for c in plain["containers"] if c["name"] == "operator"]
    assert "TOOLADAPTER_CA_BUNDLE" not in env_of(container)
    with pytest.raises(RenderError, match="caBundle: give configMap or secret, not both"):
        render("--set=caBundle.configMap=a", "--set=caBundle.secret=b")


def test_the_gateway_can_be_exposed_by_an_ingress_or_an_http_route() -> None:
    docs = render(*EVERYTHING_ON)
    ingress = one(docs, "Ingress", "tooladapter-gateway")
    assert ingress["spec"]["rules"][0]["host"] == "tools.example.com"
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "tooladapter-gateway", "port": {"number": 8080}}
    route = one(docs, "HTTPRoute", "tooladapter-gateway")
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["spec"]["parentRefs"] == [{"name": "public", "namespace": "gateways"}]
    assert route["spec"]["rules"][0]["backendRefs"] == [
        {"name": "tooladapter-gateway", "port": 8080}
    ]
    assert not kinds(render()) & {"Ingress", "HTTPRoute"}
    with pytest.raises(RenderError, match=r"gateway\.ingress\.host is required"):
        render("--set=gateway.ingress.enabled=true")
    with pytest.raises(RenderError, match="parentRefs"):
        render("--set=gateway.httpRoute.enabled=true")


def _notes(*args: str) -> str:
    """NOTES.txt as `helm install` prints it (helm template leaves it out; install needs a
    cluster): a copy of the chart renders it into an object."""
    with tempfile.TemporaryDirectory() as tmp:
        chart = Path(tmp) / "tooladapter"
        shutil.copytree(CHART, chart)
        notes = (chart / "templates" / "NOTES.txt").read_text()
        (chart / "templates" / "NOTES.txt").unlink()
        (chart / "templates" / "_notes.tpl").write_text(
            '{{- define "notes" }}' + notes + "{{- end }}"
        )
        (chart / "templates" / "notes.yaml").write_text('notes: {{ include "notes" . | toJson }}\n')
        done = run_helm("template", "tooladapter", str(chart), "-s", "templates/notes.yaml", *args)
        assert done.returncode == 0, done.stderr
        return str(yaml.safe_load(done.stdout)["notes"])


def test_notes_say_how_to_reach_the_gateway_and_warn_about_local_images() -> None:
    notes = _notes()
    assert "kubectl port-forward -n default service/tooladapter-gateway" in notes
    assert "https://localhost:8443/ui/" in notes
    assert "WARNING: an image is named localhost/" in notes
    pushed = _notes(
        "--set=image.repository=registry.example.com/tooladapter-operator",
        "--set=settings.sandboxImage=registry.example.com/tooladapter-sandbox:0.1.0",
    )
    assert "WARNING" not in pushed


def test_the_deploy_suites_values_meet_the_schema() -> None:
    """tests/deploy installs with these (conftest.py, registry.py, release.py, test_egress.py,
    test_upgrade.py)."""
    render(
        "--set=prefix=tachart",
        "--set=namespaces=tachart-*",
        "--set=image.repository=192.0.2.2:5000/tooladapter-operator",
        "--set=image.tag=",
        "--set=image.pullPolicy=Always",
        "--set=settings.sandboxImage=192.0.2.2:5000/tooladapter-sandbox:0.1.0",
        "--set=settings.imagePullPolicy=Always",
        "--set-string=egressProxy.hosts=api.example=192.0.2.9",
        "--set=settings.sandboxRetainSeconds=61",
        namespace="tachart-system",
    )
