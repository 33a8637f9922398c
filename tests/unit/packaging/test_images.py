"""The image builder without Docker: deterministic archives, the package closure, and
which cluster gets an import (hack/cluster/mkimage.py, hack/image/)."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import sys
import tarfile
from pathlib import Path, PurePosixPath
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


mkimage = _load("mkimage", ROOT / "hack" / "cluster" / "mkimage.py")
sys.path.insert(0, str(ROOT / "hack"))
from image import containerd, dpkg, python  # noqa: E402


def _tree(root: Path, order: list[str], mtime: int) -> Path:
    """A small root file system, its files created in `order`, all stamped `mtime`."""
    files = {
        "usr/bin/tool": b"#!tool\n",
        "etc/passwd": b"root:x:0:0::/root:/bin/sh\n",
        "usr/lib/libx.so.1": b"\x7fELF" + bytes(range(256)) * 8,
    }
    for rel in order:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(files[rel])
    (root / "bin").symlink_to("usr/bin")
    os.link(root / "usr/bin/tool", root / "usr/bin/tool-alias")
    (root / "usr/bin/tool").chmod(0o755)
    (root / "workspace").mkdir(mode=0o777)
    (root / "workspace").chmod(0o777)
    for path in [root, *root.rglob("*")]:
        os.utime(path, (mtime, mtime), follow_symlinks=False)
    return root


def _archive(tmp: Path, tree: Path, tag: str = "localhost/t:dev") -> tuple[str, bytes]:
    out = tmp / f"{tree.name}.tar"
    config = mkimage.image_config({"User": "65532:65532"}, "t")
    digest = mkimage.write_archive(out, tag, lambda f: mkimage.write_rootfs_layer(tree, f), config)
    return digest, out.read_bytes()


def _read(tar: tarfile.TarFile, name: str) -> bytes:
    member = tar.extractfile(name)
    assert member is not None, name
    return member.read()


def _layer(archive: bytes) -> tarfile.TarFile:
    outer = tarfile.open(fileobj=io.BytesIO(archive))
    blob = lambda d: _read(outer, "blobs/sha256/" + d.split(":")[1])  # noqa: E731
    index = json.loads(_read(outer, "index.json"))
    manifest = json.loads(blob(index["manifests"][0]["digest"]))
    return tarfile.open(fileobj=io.BytesIO(blob(manifest["layers"][0]["digest"])))


def test_same_tree_built_twice_in_another_order_and_time_gives_the_same_digest(
    tmp_path: Path,
) -> None:
    a = _tree(tmp_path / "a", ["usr/bin/tool", "etc/passwd", "usr/lib/libx.so.1"], 1_000)
    b = _tree(tmp_path / "b", ["usr/lib/libx.so.1", "usr/bin/tool", "etc/passwd"], 2_000_000)
    digest_a, bytes_a = _archive(tmp_path, a)
    digest_b, bytes_b = _archive(tmp_path, b)
    assert digest_a == digest_b
    assert hashlib.sha256(bytes_a).digest() == hashlib.sha256(bytes_b).digest()


def test_a_changed_file_changes_the_digest(tmp_path: Path) -> None:
    a = _tree(tmp_path / "a", ["usr/bin/tool", "etc/passwd", "usr/lib/libx.so.1"], 0)
    before, _ = _archive(tmp_path, a)
    (a / "etc/passwd").write_bytes(b"root:x:0:0::/root:/sbin/nologin\n")
    after, _ = _archive(tmp_path, a)
    assert before != after


def test_layer_is_sorted_with_fixed_times_numeric_owners_modes_and_links(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "a", ["usr/bin/tool", "etc/passwd", "usr/lib/libx.so.1"], 12345)
    os.chown(tree / "workspace", 65532, 65532)
    _, archive = _archive(tmp_path, tree)
    members = _layer(archive).getmembers()
    names = [m.name for m in members]
    assert names == sorted(names)
    assert all(m.mtime == 0 and m.uname == "" and m.gname == "" for m in members)
    by_name = {m.name: m for m in members}
    assert by_name["bin"].issym() and by_name["bin"].linkname == "usr/bin"
    assert by_name["usr/bin/tool"].isfile() and by_name["usr/bin/tool"].mode == 0o755
    alias = by_name["usr/bin/tool-alias"]
    assert alias.islnk() and alias.linkname == "usr/bin/tool"
    assert (by_name["workspace"].uid, by_name["workspace"].mode) == (65532, 0o777)


def test_archive_is_an_oci_layout_named_for_containerd(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "a", ["usr/bin/tool", "etc/passwd", "usr/lib/libx.so.1"], 0)
    digest, archive = _archive(tmp_path, tree, "localhost/tooladapter-sandbox:next")
    outer = tarfile.open(fileobj=io.BytesIO(archive))
    assert json.loads(_read(outer, "oci-layout")) == {"imageLayoutVersion": "1.0.0"}
    entry = json.loads(_read(outer, "index.json"))["manifests"][0]
    assert entry["digest"] == digest
    assert entry["annotations"]["io.containerd.image.name"] == (
        "localhost/tooladapter-sandbox:next"
    )
    manifest = _read(outer, "blobs/sha256/" + digest.split(":")[1])
    assert "sha256:" + hashlib.sha256(manifest).hexdigest() == digest


def test_a_binary_layer_given_as_bytes_packs_the_same_every_time(tmp_path: Path) -> None:
    # hack/cluster/addons/image.py packs CoreDNS and local-path-provisioner this way.
    binary = tmp_path / "coredns"
    binary.write_bytes(b"\x7fELF" + bytes(range(256)))
    config = mkimage.image_config({"Entrypoint": ["/coredns"]}, "addons/image.py coredns")
    digests = [
        mkimage.write_archive(str(tmp_path / f"{i}.tar"), "localhost/c:k", layer, config)
        for i, layer in enumerate([mkimage.binary_layer(str(binary), "coredns")] * 2)
    ]
    assert digests[0] == digests[1]
    members = {m.name: m for m in _layer((tmp_path / "0.tar").read_bytes()).getmembers()}
    assert members["coredns"].mode == 0o755
    assert members["workspace"].uid == 65532


STATUS = """\
Package: curl
Status: install ok installed
Version: 7.88.1-10+deb12u15
Architecture: amd64
Depends: libc6 (>= 2.34), libcurl4 (= 7.88.1-10+deb12u15), zlib1g (>= 1:1.1.4)

Package: libcurl4
Status: install ok installed
Architecture: amd64
Version: 7.88.1-10+deb12u15
Depends: libc6 (>= 2.34),
 libssl3 (>= 3.0.0) | libgnutls30
Pre-Depends: debconf-2.0 | awk

Package: libc6
Status: install ok installed
Architecture: amd64
Version: 2.36-9+deb12u14
Depends: libgcc-s1

Package: libgcc-s1
Status: install ok installed
Architecture: amd64
Version: 12.2.0-14+deb12u1

Package: libssl3
Status: install ok installed
Architecture: amd64
Version: 3.0.22-1~deb12u2

Package: zlib1g
Status: install ok installed
Architecture: amd64
Version: 1:1.2.13.dfsg-1
Provides: libz1

Package: debconf
Status: install ok installed
Architecture: all
Version: 1.5.82
Provides: debconf-2.0
Depends: perl-base

Package: perl-base
Status: install ok installed
Architecture: amd64
Version: 5.36.0-7+deb12u2

Package: libgnutls30
Status: deinstall ok config-files
Architecture: amd64
Version: 3.7.9-2+deb12u7
"""


def test_closure_follows_depends_first_installed_alternative_and_providers() -> None:
    packages = dpkg.parse_status(STATUS)
    assert "libgnutls30" not in packages  # only its configuration files are left
    assert packages["libcurl4"].depends[0] == ("debconf-2.0", "awk")  # Pre-Depends first
    assert packages["libcurl4"].depends[2] == ("libssl3", "libgnutls30")
    assert dpkg.closure(packages, ["curl"]) == [
        "curl",
        "debconf",
        "libc6",
        "libcurl4",
        "libgcc-s1",
        "libssl3",
        "perl-base",
        "zlib1g",
    ]


def test_excluded_packages_and_what_only_they_need_stay_out() -> None:
    packages = dpkg.parse_status(STATUS)
    names = dpkg.closure(packages, ["curl"], excluded=["debconf"])
    assert "debconf" not in names and "perl-base" not in names
    assert "libssl3" in names


def test_an_unknown_root_or_an_unsatisfied_dependency_raises() -> None:
    packages = dpkg.parse_status(STATUS)
    with pytest.raises(KeyError, match="wget"):
        dpkg.closure(packages, ["wget"])
    broken = dpkg.parse_status(STATUS.replace("Depends: libgcc-s1", "Depends: libmissing"))
    with pytest.raises(KeyError, match="libmissing"):
        dpkg.closure(broken, ["curl"])


def test_documentation_is_dropped_but_licences_are_kept() -> None:
    assert not dpkg.kept("/usr/share/man/man1/curl.1.gz")
    assert not dpkg.kept("/usr/share/doc/curl/changelog.Debian.gz")
    assert dpkg.kept("/usr/share/doc/curl/copyright")
    assert dpkg.kept("/usr/bin/curl")


def test_paths_resolve_through_merged_usr_links(tmp_path: Path) -> None:
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "bin").symlink_to("usr/bin")
    (tmp_path / "usr/lib64").mkdir()
    (tmp_path / "lib64").symlink_to("/usr/lib64")
    assert dpkg.resolve_parent(tmp_path, PurePosixPath("bin/sh")) == PurePosixPath("usr/bin/sh")
    assert dpkg.resolve_parent(tmp_path, PurePosixPath("lib64/ld.so")) == PurePosixPath(
        "usr/lib64/ld.so"
    )
    assert dpkg.resolve_parent(tmp_path, PurePosixPath("bin")) == PurePosixPath("bin")


def test_only_the_running_local_clusters_kubeconfig_gets_an_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    checkout = tmp_path / "checkout" / ".cluster"
    checkout.mkdir(parents=True)
    (checkout / "kubeconfig").write_text("apiVersion: v1\n")
    (tmp_path / "cache" / "run").mkdir(parents=True)
    (tmp_path / "cache" / "run" / "owner").write_text(f"{checkout}\n")
    sock_path = tmp_path / "c.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    monkeypatch.setenv("TOOLADAPTER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(containerd, "SOCKET", sock_path)
    try:
        assert containerd.local_cluster(str(checkout / "kubeconfig"))
        other = tmp_path / "kind.kubeconfig"
        other.write_text("apiVersion: v1\n")
        assert not containerd.local_cluster(str(other))
        assert not containerd.local_cluster(None)
        monkeypatch.setattr(containerd, "SOCKET", tmp_path / "absent.sock")
        assert not containerd.local_cluster(str(checkout / "kubeconfig"))
    finally:
        sock.close()


def test_the_operator_images_lock_pins_every_dependency_of_pyproject() -> None:
    # The image installs requirements.lock with --no-deps: a dependency added to
    # pyproject.toml without `python -m image lock --only python` would be absent.
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert python.missing_from_lock(pyproject, python.LOCK.read_text()) == []


def test_a_dependency_missing_from_the_lock_is_named_and_other_platforms_are_not() -> None:
    pyproject = """
[project]
dependencies = [
  "Boto3>=1.36", "uvloop; sys_platform != 'win32'", "pywin32; sys_platform == 'win32'",
]
"""
    assert python.missing_from_lock(pyproject, "boto3==1.44.8 --hash=sha256:00\n") == ["uvloop"]
