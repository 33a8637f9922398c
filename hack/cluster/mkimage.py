#!/usr/bin/env python3
"""Write a single-layer image as an OCI image archive (an OCI image layout in a tar),
which `ctr -n k8s.io images import`, `docker load` (25+) and `skopeo copy oci-archive:`
accept. No registry, no Docker engine.

The output is deterministic: layer entries sorted by path, every mtime fixed
(`EPOCH`), numeric owners only, no extended attributes, hard links kept as links; the
config's dates are fixed too. So the same input always gives the same digests.

  mkimage.py rootfs  --dir ROOTFS --tag localhost/x:dev --out x.tar \\
                     [--user 65532:65532] [--entrypoint JSON] [--cmd JSON] [--env K=V]...
  mkimage.py binary  --binary ./pause --tag localhost/pause:dev --out p.tar

Prints the manifest digest (what `ctr images ls` shows as DIGEST).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import stat
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

EPOCH = 0
CREATED = "1970-01-01T00:00:00Z"
UID = GID = 65532
USER = "sandbox"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"


class _HashingWriter(io.RawIOBase):
    """A write-only file that hashes and counts what passes through it."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.size

    def write(self, b: Any) -> int:
        data = bytes(b)
        self.sha.update(data)
        self.size += len(data)
        self.out.write(data)
        return len(data)


def _info(name: str, kind: bytes, mode: int, uid: int = 0, gid: int = 0) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name.strip("/"))
    ti.type = kind
    ti.mode = mode
    ti.uid, ti.gid = uid, gid
    ti.uname = ti.gname = ""
    ti.mtime = EPOCH
    return ti


@dataclass
class Layer:
    """A layer built from explicit entries (small images: busybox, pause)."""

    entries: dict[str, tuple[tarfile.TarInfo, bytes | None]] = field(default_factory=dict)

    def dir(self, name: str, mode: int = 0o755, uid: int = 0, gid: int = 0) -> None:
        self.entries[name] = (_info(name, tarfile.DIRTYPE, mode, uid, gid), None)

    def file(self, name: str, data: bytes, mode: int = 0o644, uid: int = 0, gid: int = 0) -> None:
        ti = _info(name, tarfile.REGTYPE, mode, uid, gid)
        ti.size = len(data)
        self.entries[name] = (ti, data)

    def symlink(self, name: str, target: str) -> None:
        ti = _info(name, tarfile.SYMTYPE, 0o777)
        ti.linkname = target
        self.entries[name] = (ti, None)

    def finish(self) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            # Parents first: sorting by path does that.
            for name in sorted(self.entries):
                ti, data = self.entries[name]
                tar.addfile(ti, io.BytesIO(data) if data is not None else None)
        return buf.getvalue()


def walk_sorted(root: Path) -> Iterator[Path]:
    """Every path under `root` (not `root` itself), parents before children, in a fixed
    order that does not depend on the file system's directory order."""
    for name in sorted(os.listdir(root)):
        path = root / name
        yield path
        if path.is_dir() and not path.is_symlink():
            yield from walk_sorted(path)


def write_rootfs_layer(root: Path, out: IO[bytes]) -> None:
    """A root file system directory as one deterministic layer tar.

    Owners and modes come from the directory (the builder sets them); mtimes are fixed;
    extended attributes (file capabilities too) are dropped; device nodes, sockets and
    fifos are skipped (the runtime makes /dev)."""
    seen: dict[tuple[int, int], str] = {}
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in walk_sorted(root):
            name = path.relative_to(root).as_posix()
            st = path.lstat()
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISDIR(st.st_mode):
                tar.addfile(_info(name, tarfile.DIRTYPE, mode, st.st_uid, st.st_gid))
            elif stat.S_ISLNK(st.st_mode):
                ti = _info(name, tarfile.SYMTYPE, 0o777, st.st_uid, st.st_gid)
                ti.linkname = os.readlink(path)
                tar.addfile(ti)
            elif stat.S_ISREG(st.st_mode):
                key = (st.st_dev, st.st_ino)
                if st.st_nlink > 1 and key in seen:
                    ti = _info(name, tarfile.LNKTYPE, mode, st.st_uid, st.st_gid)
                    ti.linkname = seen[key]
                    tar.addfile(ti)
                    continue
                seen[key] = name
                ti = _info(name, tarfile.REGTYPE, mode, st.st_uid, st.st_gid)
                ti.size = st.st_size
                with path.open("rb") as f:
                    tar.addfile(ti, f)


def _canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def image_config(cfg: dict[str, Any], history: str) -> dict[str, Any]:
    """The image configuration of a one-layer amd64 image (`rootfs` is added when the
    layer is written)."""
    return {
        "architecture": "amd64",
        "os": "linux",
        "config": cfg,
        "created": CREATED,
        "history": [{"created": CREATED, "created_by": history}],
    }


def write_archive(
    out: str | Path,
    tag: str,
    layer: bytes | Callable[[IO[bytes]], None],
    config: dict[str, Any],
) -> str:
    """Write the OCI archive of one layer and the image configuration `config` (see
    `image_config`); returns the manifest digest. `layer` is the layer tar, or a function
    that writes it to a file: a root file system's layer goes through a temporary file,
    it may be large."""
    out = Path(out)
    write_layer = layer if callable(layer) else (lambda f: f.write(layer))
    with tempfile.TemporaryFile(dir=out.parent) as layer_file:
        hashing = _HashingWriter(layer_file)
        write_layer(hashing)
        layer_digest, layer_size = "sha256:" + hashing.sha.hexdigest(), hashing.size
        rootfs = {"type": "layers", "diff_ids": [layer_digest]}
        config_bytes = _canonical_json({**config, "rootfs": rootfs})
        config_digest = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
        manifest = _canonical_json(
            {
                "schemaVersion": 2,
                "mediaType": MEDIA_MANIFEST,
                "config": {
                    "mediaType": MEDIA_CONFIG,
                    "digest": config_digest,
                    "size": len(config_bytes),
                },
                "layers": [{"mediaType": MEDIA_LAYER, "digest": layer_digest, "size": layer_size}],
            }
        )
        manifest_digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
        index = _canonical_json(
            {
                "schemaVersion": 2,
                "mediaType": MEDIA_INDEX,
                "manifests": [
                    {
                        "mediaType": MEDIA_MANIFEST,
                        "digest": manifest_digest,
                        "size": len(manifest),
                        # containerd (ctr import, docker load) reads the full name; OCI
                        # tools (skopeo, podman) read the reference.
                        "annotations": {
                            "io.containerd.image.name": tag,
                            "org.opencontainers.image.ref.name": tag.rsplit(":", 1)[1],
                        },
                    }
                ],
            }
        )
        tmp = out.with_name(out.name + ".tmp")
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as t:

            def add(
                name: str, data: bytes | None = None, src: IO[bytes] | None = None, size: int = 0
            ) -> None:
                if data is None and src is None:
                    t.addfile(_info(name, tarfile.DIRTYPE, 0o755))
                    return
                ti = _info(name, tarfile.REGTYPE, 0o644)
                ti.size = len(data) if data is not None else size
                t.addfile(ti, io.BytesIO(data) if data is not None else src)

            add("blobs")
            add("blobs/sha256")
            blobs = sorted(
                [(config_digest, config_bytes), (manifest_digest, manifest), (layer_digest, None)]
            )
            for digest, data in blobs:
                name = "blobs/sha256/" + digest.split(":", 1)[1]
                if data is None:
                    layer_file.seek(0)
                    add(name, src=layer_file, size=layer_size)
                else:
                    add(name, data)
            add("index.json", index)
            add("oci-layout", _canonical_json({"imageLayoutVersion": "1.0.0"}))
        os.replace(tmp, out)
    return manifest_digest


def base_dirs(layer: Layer) -> None:
    for d in (
        "bin",
        "sbin",
        "usr",
        "usr/bin",
        "usr/sbin",
        "etc",
        "dev",
        "proc",
        "sys",
        "var",
        "run",
    ):
        layer.dir(d)
    layer.dir("tmp", 0o1777)
    layer.dir("var/tmp", 0o1777)
    layer.dir("home")
    layer.dir("home/" + USER, 0o755, UID, GID)
    layer.dir("workspace", 0o777, UID, GID)
    layer.file("etc/passwd", passwd().encode())
    layer.file("etc/group", group().encode())
    layer.file("etc/nsswitch.conf", b"hosts: files dns\n")


def passwd(shell: str = "/bin/sh") -> str:
    return (
        f"root:x:0:0:root:/root:{shell}\n"
        f"{USER}:x:{UID}:{GID}:{USER}:/home/{USER}:{shell}\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )


def group() -> str:
    return f"root:x:0:\n{USER}:x:{GID}:\nnogroup:x:65534:\n"


def binary_layer(binary: str, dest: str) -> bytes:
    layer = Layer()
    base_dirs(layer)
    with open(binary, "rb") as f:
        layer.file(dest, f.read(), 0o755)
    return layer.finish()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kind", choices=["rootfs", "binary"])
    p.add_argument("--tag", required=True)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--dir", type=Path, help="rootfs: the root file system directory")
    p.add_argument("--user", default=f"{UID}:{GID}")
    p.add_argument("--entrypoint", type=json.loads, help="rootfs: a JSON list")
    p.add_argument("--cmd", type=json.loads, help="rootfs: a JSON list")
    p.add_argument("--env", action="append", default=[], help="rootfs: K=V (repeatable)")
    p.add_argument("--workdir", default="/")
    p.add_argument("--binary")
    a = p.parse_args()
    cfg: dict[str, Any]
    if a.kind == "rootfs":
        if not a.dir or not a.dir.is_dir():
            sys.exit("--dir must be a directory")
        root: Path = a.dir

        def layer(f: IO[bytes]) -> None:
            write_rootfs_layer(root, f)

        cfg = {"Env": [PATH_ENV, *a.env], "User": a.user, "WorkingDir": a.workdir}
        if a.entrypoint:
            cfg["Entrypoint"] = a.entrypoint
        if a.cmd:
            cfg["Cmd"] = a.cmd
    else:
        if not a.binary:
            sys.exit("--binary is required")
        layer: bytes | Callable[[IO[bytes]], None] = binary_layer(a.binary, "pause")
        cfg = {
            "Env": [PATH_ENV],
            "Entrypoint": ["/pause"],
            "User": f"{UID}:{GID}",
            "WorkingDir": "/",
        }
    digest = write_archive(
        a.out, a.tag, layer, image_config(cfg, "hack/cluster/mkimage.py " + a.kind)
    )
    print(digest)


if __name__ == "__main__":
    main()
