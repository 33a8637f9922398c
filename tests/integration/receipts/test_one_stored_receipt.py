"""One stored receipt, one truth, on the real cluster (issue 37): a receipt is stored once,
by its hash, and its chain link names it; `receipts verify` checks that copy, the one the
gateway and `receipt get` serve, and that each call's `receiptRef` is the receipt its chain
holds at its status's sequence.

The held-out attack: a receipt rewritten under its own new hash, the original removed, and
the call's `receiptRef` pointed at the forgery, verified with exit 0; so did removing the
newest receipt's hash copy. Both are breaks now. The operator is this module's own (the
chain tests' settings: keys and heads of its own), so its live store can be tampered with."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from tests.integration.cli.test_cli import Cli, explain
from tests.integration.objects import pretty
from tests.integration.receipts.test_chain import (  # noqa: F401 (fixtures)
    SCOPE,
    calls,
    chain_operator,
    content_path,
    keys_file,
    link_path,
    namespace_uid,
    put_content,
    signing_objects,
    verify,
)
from tooladapter.devtools import Namespace, OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]


def invocation_named(api: client.ApiClient, namespace: str, receipt_ref: str) -> str:
    items = cast(
        dict[str, Any],
        client.CustomObjectsApi(api).list_namespaced_custom_object(
            "tooladapter.dev", "v1alpha1", namespace, "toolinvocations"
        ),
    )["items"]
    return next(
        i["metadata"]["name"]
        for i in items
        if (i.get("status") or {}).get("receiptRef") == receipt_ref
    )


def test_a_rewritten_re_pointed_receipt_and_a_removed_newest_receipt_fail_verify(
    api: client.ApiClient,
    chain_operator: OperatorProcess,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    ns = Namespace(api, prefix=SCOPE)
    try:
        agent, statuses = calls(api, ns, 3)
        uid = namespace_uid(api, ns.name)
        by_seq = {s["receipt"]["sequence"]: s for s in statuses}
        assert sorted(by_seq) == [1, 2, 3], pretty(statuses)
        live = chain_operator.artifacts
        gateway = chain_operator.gateway_url
        keys = keys_file(gateway, tmp_path / "keys.json")
        cli = Cli(tmp_path, api, agent)

        # Stored once: the link names the receipt; no second copy anywhere.
        for seq, status in by_seq.items():
            assert link_path(live, ns.name, uid, seq).read_text() == status["receiptRef"]
            assert content_path(live, status["receiptRef"]).is_file()
        code, (report,), err = verify(cli, "--store", str(live), "--gateway", gateway)
        assert code == 0 and report["checked"] == 3, (err, report)

        # The newest receipt's one copy removed (in a copy of the store): a break, even
        # offline and without a head, since its link still names it.
        newest = tmp_path / "newest"
        shutil.copytree(live, newest)
        content_path(newest, by_seq[3]["receiptRef"]).unlink()
        for args in (
            ("-n", ns.name, "--store", str(newest), "--keys", str(keys), "--offline"),
            ("--store", str(newest), "--gateway", gateway),
        ):
            code, (report,), err = verify(cli, *args)
            assert code == 13, (args, err, report)
            first = report["firstBreak"]
            assert (first["sequence"], first["kind"]) == (3, "missing"), report

        # The held-out attack, on the live store the gateway serves: receipt 2 rewritten
        # (its outcome changed) under its own new hash, the original removed, and the
        # call's receiptRef moved to the forgery (auditRef left alone).
        victim = by_seq[2]["receiptRef"]
        original = content_path(live, victim)
        envelope = json.loads(original.read_bytes())
        statement = json.loads(base64.b64decode(envelope["payload"]))
        statement["predicate"]["state"] = "Failed"
        envelope["payload"] = base64.b64encode(
            json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
        ).decode()
        forged = f"sha256:{put_content(live, json.dumps(envelope, sort_keys=True).encode())}"
        original.unlink()
        name = invocation_named(api, ns.name, victim)
        client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
            "tooladapter.dev",
            "v1alpha1",
            ns.name,
            "toolinvocations",
            name,
            {"status": {"receiptRef": forged}},
        )

        code, (report,), err = verify(cli, "--store", str(live), "--gateway", gateway)
        assert code == 13, (err, report)
        breaks = {(b["sequence"], b["kind"]) for b in report["breaks"]}
        assert (2, "missing") in breaks and (2, "not-in-chain") in breaks, report
        assert forged in json.dumps(report["breaks"]), report

        # The forgery is no receipt: neither the gateway nor `receipt get` serves it.
        for source in (("--gateway", gateway), ("--artifact-dir", str(live))):
            done = cli("receipt", "get", forged, *source)
            assert done.returncode == 8, explain(done)
        # The untouched receipts still are.
        done = cli("receipt", "get", by_seq[1]["receiptRef"], "--gateway", gateway)
        assert done.returncode == 0, explain(done)
    finally:
        ns.delete()
