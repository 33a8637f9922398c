"""Signed, chained receipts on the real cluster (issue 30): five calls verify offline from a
copy of the store; a receipt rewritten (its status pointed at it), one removed from the
middle and the newest removed are each named by sequence number; a key rotation keeps
earlier receipts verifiable; two operators writing one namespace's receipts (leader
election off) leave one unbroken chain.

The operators here serve `rch-<SESSION>-*` and sign with keys of their own (a Secret and
ConfigMaps named for the session), so a rotation here touches no other operator."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from tests.integration.cli.test_cli import Cli
from tests.integration.gateway_client import http_json
from tests.integration.objects import Agent, descriptor, get, pretty, status_of
from tooladapter.devtools import SESSION, Namespace, OperatorProcess, kubeconfig, wait_for
from tooladapter.devtools.s3 import S3Server

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]

SCOPE = f"rch-{SESSION}"
SYSTEM = "tooladapter-system"
SIGNING = f"{SCOPE}-receipt-signing"
KEYS = f"{SCOPE}-receipt-keys"
HEADS = f"{SCOPE}-receipt-heads"
CHAIN_ENV = {
    "TOOLADAPTER_NAMESPACES": f"{SCOPE}-*",
    "TOOLADAPTER_RECEIPT_SIGNING_SECRET": f"{SYSTEM}/{SIGNING}",
    "TOOLADAPTER_RECEIPT_KEYS_CONFIGMAP": f"{SYSTEM}/{KEYS}",
    "TOOLADAPTER_RECEIPT_HEADS_CONFIGMAP": f"{SYSTEM}/{HEADS}",
    "TOOLADAPTER_RECEIPT_HEADS_PUBLISH_SECONDS": "1",
}


@pytest.fixture(scope="module")
def signing_objects(api: client.ApiClient) -> Iterator[None]:
    yield
    core = client.CoreV1Api(api)
    for delete, name in (
        (core.delete_namespaced_secret, SIGNING),
        (core.delete_namespaced_config_map, KEYS),
        (core.delete_namespaced_config_map, HEADS),
    ):
        try:
            delete(name, SYSTEM)
        except client.ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture(scope="module")
def chain_operator(
    api: client.ApiClient, signing_objects: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    op = OperatorProcess(tmp_path_factory.mktemp("chain-operator"), CHAIN_ENV)
    op.start()
    yield op
    op.stop()


def calls(api: client.ApiClient, ns: Namespace, count: int) -> tuple[Agent, list[dict[str, Any]]]:
    agent = Agent.create(api, ns.name, "agent-1")
    descriptor(api, ns.name, "list-tools", kind="native", native={"name": "list-tools"})
    agent.grant(["list-tools"], ["read"])
    names = [agent.invoke("list-tools", {}) for _ in range(count)]
    statuses = [status_of(agent.wait(name)) for name in names]
    for status in statuses:
        assert status["state"] == "Observed", pretty(status)
    return agent, statuses


def namespace_uid(api: client.ApiClient, name: str) -> str:
    return str(client.CoreV1Api(api).read_namespace(name).metadata.uid)


def published_head(api: client.ApiClient, namespace: str, uid: str, at_least: int) -> str:
    """The head the operator published for the chain, once it reaches `at_least`."""

    def head() -> str | None:
        found = client.CoreV1Api(api).read_namespaced_config_map(HEADS, SYSTEM)
        value = (found.data or {}).get(f"{namespace}.{uid}")
        return value if value and int(value.split(":", 1)[0]) >= at_least else None

    return wait_for(head, timeout=60, what=f"chain head of {namespace} at {at_least}")


def keys_file(gateway: str, path: Path) -> Path:
    status, _, keys = http_json("GET", f"{gateway}/receipt-keys")  # public: no token
    assert status == 200 and keys["keys"], keys
    assert "privateKey" not in json.dumps(keys)
    path.write_text(json.dumps(keys))
    return path


def chain_dir(store: Path, namespace: str, uid: str) -> Path:
    return store / "index" / "ns" / namespace / uid / "chain"


def link_path(store: Path, namespace: str, uid: str, seq: int) -> Path:
    return chain_dir(store, namespace, uid) / f"{seq:012d}"


class AdminCli(Cli):
    """The command line as the cluster's administrator (the session's kubeconfig)."""

    def __init__(self) -> None:
        self.path = Path(kubeconfig())


def content_path(store: Path, ref: str) -> Path:
    """Where a file artifact store keeps the receipt `ref` (its one copy)."""
    digest = ref.removeprefix("sha256:")
    return store / "sha256" / digest[:2] / digest


def put_content(store: Path, data: bytes) -> str:
    """`data` written into a file artifact store under its own sha256, as a store writer
    can; its digest."""
    digest = hashlib.sha256(data).hexdigest()
    (store / "sha256" / digest[:2]).mkdir(exist_ok=True)
    (store / "sha256" / digest[:2] / digest).write_bytes(data)
    return digest


def verify(cli: Cli, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    done = cli("receipts", "verify", *args, "-o", "json")
    reports = json.loads(done.stdout) if done.stdout.strip() else []
    return done.returncode, reports, done.stderr


def test_five_calls_verify_offline_and_each_tampering_is_named_by_its_sequence(
    api: client.ApiClient, chain_operator: OperatorProcess, tmp_path: Path
) -> None:
    ns = Namespace(api, prefix=SCOPE)
    try:
        agent, statuses = calls(api, ns, 5)
        uid = namespace_uid(api, ns.name)
        by_seq = {s["receipt"]["sequence"]: s for s in statuses}
        assert sorted(by_seq) == [1, 2, 3, 4, 5], pretty(statuses)
        head = published_head(api, ns.name, uid, 5)
        assert head == f"5:{by_seq[5]['receiptRef']}"

        keys = keys_file(chain_operator.gateway_url, tmp_path / "keys.json")
        cli = Cli(tmp_path, api, agent)

        # A copy of the store, checked with no cluster at all.
        copy = tmp_path / "copy"
        shutil.copytree(chain_operator.artifacts, copy)
        code, (report,), err = verify(
            cli, "-n", ns.name, "--store", str(copy), "--keys", str(keys),
            "--head", head, "--offline",
        )  # fmt: skip
        assert code == 0, err
        assert report["verified"] and report["checked"] == 5 and report["begins"] == 1, report
        assert report["head"]["ref"] == by_seq[5]["receiptRef"]
        # Against the cluster (the agent's own view: statuses, the gateway's head).
        code, (report,), err = verify(
            cli, "--store", str(copy), "--gateway", chain_operator.gateway_url
        )
        assert code == 0 and report["incarnation"] == uid, (err, report)
        # One receipt, signature included.
        one = cli.json(
            "receipt", "verify", by_seq[3]["receiptRef"], "--gateway", chain_operator.gateway_url
        )
        assert one["verified"] and one["signature"] == "valid" and one["sequence"] == 3, one

        # The middle receipt removed: sequence 3 named, exit 13.
        middle = tmp_path / "middle"
        shutil.copytree(chain_operator.artifacts, middle)
        link_path(middle, ns.name, uid, 3).unlink()
        code, (report,), err = verify(
            cli, "-n", ns.name, "--store", str(middle), "--keys", str(keys), "--offline"
        )
        assert code == 13, err
        assert report["firstBreak"]["sequence"] == 3, report
        assert report["firstBreak"]["kind"] == "missing", report
        assert "sequence 3" in cli(
            "receipts", "verify", "-n", ns.name, "--store", str(middle), "--keys", str(keys),
            "--offline",
        ).stderr  # fmt: skip

        # The newest receipt removed: the published head, or the statuses, name 5.
        newest = tmp_path / "newest"
        shutil.copytree(chain_operator.artifacts, newest)
        link_path(newest, ns.name, uid, 5).unlink()
        code, _, _ = verify(
            cli, "-n", ns.name, "--store", str(newest), "--keys", str(keys), "--offline"
        )
        assert code == 0  # offline, without a head, nothing says there was a fifth
        code, (report,), err = verify(
            cli, "-n", ns.name, "--store", str(newest), "--keys", str(keys), "--offline",
            "--head", head,
        )  # fmt: skip
        assert code == 13 and report["firstBreak"]["sequence"] == 5, (err, report)
        code, (report,), err = verify(
            cli, "--store", str(newest), "--gateway", chain_operator.gateway_url
        )
        assert code == 13 and report["firstBreak"]["sequence"] == 5, (err, report)

        # A receipt rewritten under its own (new) hash, its link and the status pointed at
        # it (a link names its receipt; the receipt is stored once, under its hash).
        rewritten = tmp_path / "rewritten"
        shutil.copytree(chain_operator.artifacts, rewritten)
        victim = by_seq[2]
        link = link_path(rewritten, ns.name, uid, 2)
        assert link.read_text() == victim["receiptRef"]
        envelope = json.loads(content_path(rewritten, victim["receiptRef"]).read_bytes())
        statement = json.loads(base64.b64decode(envelope["payload"]))
        statement["predicate"]["state"] = "Failed"
        envelope["payload"] = base64.b64encode(
            json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
        ).decode()
        forged = json.dumps(envelope, sort_keys=True, separators=(",", ":")).encode()
        digest = put_content(rewritten, forged)
        link.write_text(f"sha256:{digest}")
        name = next(
            n
            for n in (
                i["metadata"]["name"]
                for i in cast(
                    dict[str, Any],
                    client.CustomObjectsApi(api).list_namespaced_custom_object(
                        "tooladapter.dev", "v1alpha1", ns.name, "toolinvocations"
                    ),
                )["items"]
            )
            if status_of(get(api, ns.name, "toolinvocations", n)).get("receiptRef")
            == victim["receiptRef"]
        )
        client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
            "tooladapter.dev",
            "v1alpha1",
            ns.name,
            "toolinvocations",
            name,
            {"status": {"receiptRef": f"sha256:{digest}", "auditRef": f"sha256:{digest}"}},
        )
        code, (report,), err = verify(
            cli, "--store", str(rewritten), "--gateway", chain_operator.gateway_url
        )
        assert code == 12, (err, report)
        assert report["firstBreak"]["sequence"] == 2, report
        assert report["firstBreak"]["kind"] == "signature", report

        def verify_one(digest: str) -> subprocess.CompletedProcess[str]:
            return cli(
                "receipt", "verify", f"sha256:{digest}", "--artifact-dir", str(rewritten),
                "--keys", str(keys),
            )  # fmt: skip

        assert verify_one(digest).returncode == 12
        # The same rewrite without an envelope: unsigned, so no receipt (every one is signed),
        # and no chain holds it: the store's bytes are never taken for a receipt.
        plain = json.dumps(statement["predicate"], sort_keys=True).encode()
        unsigned = verify_one(put_content(rewritten, plain))
        assert unsigned.returncode == 8, (unsigned.stdout, unsigned.stderr)
        assert "is no receipt of a chain" in unsigned.stderr
        # ... and as an envelope without a signature: no receipt either.
        bare = json.dumps({**envelope, "signatures": []}, sort_keys=True).encode()
        unsigned = verify_one(put_content(rewritten, bare))
        assert unsigned.returncode == 8, (unsigned.stdout, unsigned.stderr)
        assert "is no receipt of a chain" in unsigned.stderr
    finally:
        ns.delete()


def test_a_key_rotation_keeps_earlier_receipts_verifiable(
    api: client.ApiClient, chain_operator: OperatorProcess, tmp_path: Path
) -> None:
    ns = Namespace(api, prefix=SCOPE)
    try:
        agent, before = calls(api, ns, 2)
        uid = namespace_uid(api, ns.name)
        admin = AdminCli()
        rotated = admin.json(
            "keys", "rotate", "--secret", f"{SYSTEM}/{SIGNING}",
            "--config-map", f"{SYSTEM}/{KEYS}",
        )  # fmt: skip
        assert rotated["active"] != rotated["previous"], rotated
        chain_operator.wait_log(f"receipts signed with key {rotated['active']}", timeout=60)
        agent_names = [agent.invoke("list-tools", {}) for _ in range(2)]
        after = [status_of(agent.wait(n)) for n in agent_names]
        head = published_head(api, ns.name, uid, 4)

        keys = keys_file(chain_operator.gateway_url, tmp_path / "keys.json")
        published = json.loads(keys.read_text())["keys"]
        assert {k["keyid"] for k in published} >= {rotated["active"], rotated["previous"]}
        previous = next(k for k in published if k["keyid"] == rotated["previous"])
        assert previous["notAfter"], previous
        cli = Cli(tmp_path, api, agent)
        copy = tmp_path / "copy"
        shutil.copytree(chain_operator.artifacts, copy)
        code, (report,), err = verify(
            cli, "-n", ns.name, "--store", str(copy), "--keys", str(keys), "--offline",
            "--head", head,
        )  # fmt: skip
        assert code == 0, err
        assert set(report["keys"]) == {rotated["previous"], rotated["active"]}, report
        for status in before:
            one = cli.json(
                "receipt", "verify", status["receiptRef"], "--artifact-dir", str(copy),
                "--keys", str(keys),
            )  # fmt: skip
            assert one["signature"] == "valid" and one["keyid"] == rotated["previous"], one
        assert all(s["receipt"]["sequence"] in (3, 4) for s in after), after
    finally:
        ns.delete()


@pytest.fixture
def two_operators(
    api: client.ApiClient, signing_objects: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[OperatorProcess, OperatorProcess]]:
    shared = tmp_path_factory.mktemp("shared-store")
    scope = f"rch2-{SESSION}"
    env = {
        **CHAIN_ENV,
        "TOOLADAPTER_NAMESPACES": f"{scope}-*",
        "TOOLADAPTER_LEADER_ELECTION": "false",
        "TOOLADAPTER_ARTIFACT_DIR": str(shared),
    }
    first = OperatorProcess(tmp_path_factory.mktemp("first"), env)
    second = OperatorProcess(tmp_path_factory.mktemp("second"), env)
    first.start()
    try:
        second.start()
    except BaseException:
        first.stop()
        raise
    yield first, second
    second.stop()
    first.stop()


def test_two_operators_writing_one_namespaces_receipts_leave_one_unbroken_chain(
    api: client.ApiClient,
    two_operators: tuple[OperatorProcess, OperatorProcess],
    tmp_path: Path,
) -> None:
    first, _second = two_operators
    ns = Namespace(api, prefix=f"rch2-{SESSION}")
    try:
        agent, statuses = calls(api, ns, 12)
        uid = namespace_uid(api, ns.name)
        store = Path(first.env["TOOLADAPTER_ARTIFACT_DIR"])
        keys = keys_file(first.gateway_url, tmp_path / "keys.json")
        cli = Cli(tmp_path, api, agent)
        # Links may still be appended after the calls' statuses ended (under load the
        # chain's writer runs behind them): verify until a listing made after the verify
        # holds no link it did not check, so every link is checked at least once.
        for _ in range(10):
            code, (report,), err = verify(
                cli, "--store", str(store), "--keys", str(keys), "--gateway", first.gateway_url
            )
            assert code == 0, (err, report)
            links = sorted(p.name for p in chain_dir(store, ns.name, uid).iterdir())
            if report["checked"] == len(links):
                break
        assert links == [f"{n:012d}" for n in range(1, len(links) + 1)], links
        assert report["checked"] == len(links) >= 12, report
        sequences = [s["receipt"]["sequence"] for s in statuses]
        assert len(set(sequences)) == len(sequences), sequences  # never one number twice
    finally:
        ns.delete()


def allowed(api: client.ApiClient, user: str, groups: list[str], **attributes: str) -> bool:
    review = client.AuthorizationV1Api(api).create_subject_access_review(
        {"spec": {"user": user, "groups": groups, "resourceAttributes": attributes}}  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    return bool(review.status.allowed)


def test_only_the_operator_reads_the_signing_key_and_anyone_the_public_keys(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    """The installed RBAC (make install): the egress proxy and agents cannot read the
    signing Secret; every authenticated user reads the public keys, not the heads."""
    secret = {"namespace": SYSTEM, "verb": "get", "resource": "secrets"}
    proxy = f"system:serviceaccount:{SYSTEM}:tooladapter-egress-proxy"
    sa_groups = ["system:authenticated", "system:serviceaccounts"]
    for user, groups in (
        (proxy, [*sa_groups, f"system:serviceaccounts:{SYSTEM}"]),
        (agent.user, [*sa_groups, f"system:serviceaccounts:{ns.name}"]),
    ):
        for verb in ("get", "list", "watch"):
            assert not allowed(
                api, user, groups, **{**secret, "verb": verb, "name": "tooladapter-receipt-signing"}
            ), (user, verb)
    operator = f"system:serviceaccount:{SYSTEM}:tooladapter-operator"
    operator_groups = [*sa_groups, f"system:serviceaccounts:{SYSTEM}"]
    assert allowed(api, operator, operator_groups, **secret, name="tooladapter-receipt-signing")
    for name in ("tooladapter-receipt-keys", "tooladapter-receipt-heads"):
        assert allowed(
            api, operator, operator_groups,
            namespace=SYSTEM, verb="update", resource="configmaps", name=name,
        )  # fmt: skip
    reader = ["system:authenticated", "system:serviceaccounts"]
    maps = {"namespace": SYSTEM, "verb": "get", "resource": "configmaps"}
    assert allowed(api, agent.user, reader, **maps, name="tooladapter-receipt-keys")
    assert not allowed(api, agent.user, reader, **maps, name="tooladapter-receipt-heads")
    assert not allowed(
        api, agent.user, reader, **{**maps, "verb": "update"}, name="tooladapter-receipt-keys"
    )


def test_no_private_key_reaches_the_log_the_keys_or_the_receipts(
    api: client.ApiClient, chain_operator: OperatorProcess, tmp_path: Path
) -> None:
    ns = Namespace(api, prefix=SCOPE)
    try:
        calls(api, ns, 1)
        secret = client.CoreV1Api(api).read_namespaced_secret(SIGNING, SYSTEM)
        assert secret.data is not None
        keyring = json.loads(base64.b64decode(secret.data["keyring.json"]))
        privates = [k["privateKey"] for k in keyring["keys"]]
        assert privates
        log = chain_operator.log_path.read_text()
        published = client.CoreV1Api(api).read_namespaced_config_map(KEYS, SYSTEM).data
        _, _, served = http_json("GET", f"{chain_operator.gateway_url}/receipt-keys")
        stored = b"".join(
            p.read_bytes() for p in chain_operator.artifacts.rglob("*") if p.is_file()
        )
        for private in privates:
            raw = base64.b64decode(private)
            assert private not in log and private not in json.dumps(published)
            assert private not in json.dumps(served)
            assert private.encode() not in stored and raw not in stored
            assert raw.hex() not in log
    finally:
        ns.delete()


def test_the_page_shows_a_receipts_signature_and_the_chain_head(
    api: client.ApiClient, chain_operator: OperatorProcess
) -> None:
    from tests.integration.gateway_client import token_of
    from tests.integration.receipts.test_index import signed_in

    ns = Namespace(api, prefix=SCOPE)
    try:
        agent = Agent.create(api, ns.name, "agent-1")
        descriptor(api, ns.name, "list-tools", kind="native", native={"name": "list-tools"})
        agent.grant(["list-tools"], ["read"])
        names = [agent.invoke("list-tools", {}, runId="run-page") for _ in range(2)]
        refs = [status_of(agent.wait(n))["receiptRef"] for n in names]
        uid = namespace_uid(api, ns.name)
        head = published_head(api, ns.name, uid, 2)
        browser = signed_in(chain_operator.gateway_url, token_of(agent))

        def page() -> str | None:
            url = (
                f"{chain_operator.gateway_url}/ui/runs?namespace={ns.name}&run=run-page"
                f"&verify={refs[0]}"
            )
            text = browser.open(url, timeout=60).read().decode()
            # The gateway caches the published heads for 10 s.
            return text if "head at sequence 2" in text else None

        text = wait_for(page, timeout=60, interval=1, what="the page's chain head")
        assert head.split(":", 1)[1] in text
        assert "Signature valid, by ed25519:" in text, text
        assert "sequence 1" in text or "sequence 2" in text
    finally:
        ns.delete()


@pytest.fixture
def two_operators_on_s3(
    api: client.ApiClient, signing_objects: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[OperatorProcess, OperatorProcess, S3Server]]:
    server = S3Server(tmp_path_factory.mktemp("s3"), buckets=("receipts",))
    server.start()
    env = {
        **CHAIN_ENV,
        "TOOLADAPTER_NAMESPACES": f"rch3-{SESSION}-*",
        "TOOLADAPTER_LEADER_ELECTION": "false",
        **server.operator_env("receipts", f"{SESSION}/"),
    }
    first = OperatorProcess(tmp_path_factory.mktemp("s3-first"), env)
    second = OperatorProcess(tmp_path_factory.mktemp("s3-second"), env)
    try:
        first.start()
        second.start()
        yield first, second, server
    finally:
        second.stop()
        first.stop()
        server.stop()


def test_two_operators_on_one_bucket_leave_one_chain_an_auditor_reads_from_the_bucket(
    api: client.ApiClient,
    two_operators_on_s3: tuple[OperatorProcess, OperatorProcess, S3Server],
    tmp_path: Path,
) -> None:
    """If-None-Match on the bucket decides who claims each number."""
    first, _second, server = two_operators_on_s3
    ns = Namespace(api, prefix=f"rch3-{SESSION}")
    try:
        agent, statuses = calls(api, ns, 10)
        uid = namespace_uid(api, ns.name)
        keys = keys_file(first.gateway_url, tmp_path / "keys.json")
        cli = Cli(tmp_path, api, agent)
        s3_env = server.operator_env("receipts", f"{SESSION}/")
        cli_env = cli.env
        cli.env = lambda: {  # type: ignore[method-assign]
            **cli_env(),
            **{k: v for k, v in s3_env.items() if k.startswith(("AWS_", "TOOLADAPTER_S3_"))},
        }
        code, (report,), err = verify(
            cli, "--store", f"s3://receipts/{SESSION}/", "--keys", str(keys),
            "--gateway", first.gateway_url,
        )  # fmt: skip
        assert code == 0, (err, report)
        assert report["incarnation"] == uid and report["checked"] >= 10, report
        sequences = sorted(s["receipt"]["sequence"] for s in statuses)
        assert len(set(sequences)) == len(sequences), sequences
    finally:
        ns.delete()
