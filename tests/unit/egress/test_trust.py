"""The operator's trust anchors (issue 44): the system's CAs plus every bundle its settings
name; one that cannot be read or holds no certificate stops it, naming the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from tooladapter.devtools.tls import make_certificates
from tooladapter.egress.core.trust import settings_context


def test_each_named_bundle_is_trusted_besides_the_systems(tmp_path: Path) -> None:
    one = make_certificates(tmp_path / "one", ["a.example.test"])
    two = make_certificates(tmp_path / "two", ["b.example.test"])
    base = settings_context({})
    both = settings_context(
        {"TOOLADAPTER_EGRESS_CA_FILE": str(one.ca), "TOOLADAPTER_CA_BUNDLE": two.ca}
    )
    assert both.cert_store_stats()["x509_ca"] == base.cert_store_stats()["x509_ca"] + 2
    unset = settings_context({"TOOLADAPTER_EGRESS_CA_FILE": None, "TOOLADAPTER_CA_BUNDLE": None})
    assert unset.cert_store_stats() == base.cert_store_stats()


def test_a_missing_or_empty_bundle_is_refused_naming_its_variable(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^TOOLADAPTER_CA_BUNDLE=.*/absent\.pem: "):
        settings_context({"TOOLADAPTER_CA_BUNDLE": tmp_path / "absent.pem"})
    empty = tmp_path / "empty.pem"
    empty.write_text("not a certificate\n")
    with pytest.raises(ValueError, match=r"^TOOLADAPTER_CA_BUNDLE=.*/empty\.pem: "):
        settings_context({"TOOLADAPTER_CA_BUNDLE": empty})
