#!/usr/bin/env python3
"""Write a single-layer image as a docker-archive tar (docker save format),
which `ctr -n k8s.io images import` accepts. No registry, no Docker engine.

The output is deterministic (fixed mtimes, sorted entries), so the same input
always gives the same image ID.

  mkimage.py busybox --busybox /bin/busybox --tag localhost/x:dev --out x.tar
  mkimage.py binary  --binary ./pause --tag localhost/pause:dev --out p.tar
"""

import argparse
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile

EPOCH = 0
UID = GID = 65532
USER = "sandbox"


class Layer:
    def __init__(self):
        self.buf = io.BytesIO()
        self.tar = tarfile.open(fileobj=self.buf, mode="w", format=tarfile.PAX_FORMAT)
        self.entries = {}

    def _info(self, name, kind, mode, uid=0, gid=0):
        ti = tarfile.TarInfo(name.lstrip("/"))
        ti.type = kind
        ti.mode = mode
        ti.uid, ti.gid = uid, gid
        ti.uname = ti.gname = ""
        ti.mtime = EPOCH
        return ti

    def dir(self, name, mode=0o755, uid=0, gid=0):
        self.entries[name] = (self._info(name, tarfile.DIRTYPE, mode, uid, gid), None)

    def file(self, name, data, mode=0o644, uid=0, gid=0):
        ti = self._info(name, tarfile.REGTYPE, mode, uid, gid)
        ti.size = len(data)
        self.entries[name] = (ti, data)

    def symlink(self, name, target):
        ti = self._info(name, tarfile.SYMTYPE, 0o777)
        ti.linkname = target
        self.entries[name] = (ti, None)

    def finish(self):
        # Parents first: sorting by path does that.
        for name in sorted(self.entries):
            ti, data = self.entries[name]
            self.tar.addfile(ti, io.BytesIO(data) if data is not None else None)
        self.tar.close()
        return self.buf.getvalue()


def base_dirs(layer):
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
    layer.file(
        "etc/passwd",
        (
            "root:x:0:0:root:/root:/bin/sh\n"
            f"{USER}:x:{UID}:{GID}:{USER}:/home/{USER}:/bin/sh\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
        ).encode(),
    )
    layer.file("etc/group", (f"root:x:0:\n{USER}:x:{GID}:\nnogroup:x:65534:\n").encode())
    layer.file("etc/nsswitch.conf", b"hosts: files dns\n")


def busybox_layer(busybox):
    layer = Layer()
    base_dirs(layer)
    with open(busybox, "rb") as f:
        layer.file("bin/busybox", f.read(), 0o755)
    applets = subprocess.run(
        [busybox, "--list-full"], check=True, capture_output=True, text=True
    ).stdout.split()
    for path in applets:
        if path in ("bin/busybox",) or path.startswith("linuxrc"):
            continue
        layer.symlink(path, "/bin/busybox")
    return layer.finish()


def binary_layer(binary, dest):
    layer = Layer()
    base_dirs(layer)
    with open(binary, "rb") as f:
        layer.file(dest, f.read(), 0o755)
    return layer.finish()


def write_archive(out, tag, layer_tar, config):
    diff_id = "sha256:" + hashlib.sha256(layer_tar).hexdigest()
    config = dict(config)
    config["rootfs"] = {"type": "layers", "diff_ids": [diff_id]}
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_id = hashlib.sha256(config_bytes).hexdigest()
    layer_dir = diff_id.split(":")[1]
    manifest = [
        {"Config": config_id + ".json", "RepoTags": [tag], "Layers": [layer_dir + "/layer.tar"]}
    ]
    tmp = out + ".tmp"
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as t:

        def add(name, data, kind=tarfile.REGTYPE):
            ti = tarfile.TarInfo(name)
            ti.mtime = EPOCH
            ti.type = kind
            if kind == tarfile.DIRTYPE:
                ti.mode = 0o755
                t.addfile(ti)
            else:
                ti.mode = 0o644
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))

        add(config_id + ".json", config_bytes)
        add(layer_dir, None, tarfile.DIRTYPE)
        add(layer_dir + "/layer.tar", layer_tar)
        add("manifest.json", json.dumps(manifest).encode())
        add(
            "repositories",
            json.dumps({tag.rsplit(":", 1)[0]: {tag.rsplit(":", 1)[1]: layer_dir}}).encode(),
        )
    os.replace(tmp, out)
    print("sha256:" + config_id)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=["busybox", "binary"])
    p.add_argument("--tag", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--busybox", default="/bin/busybox")
    p.add_argument("--binary")
    a = p.parse_args()
    env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    if a.kind == "busybox":
        layer = busybox_layer(a.busybox)
        cfg = {
            "Env": [*env, f"HOME=/home/{USER}"],
            "Cmd": ["/bin/sh"],
            "User": f"{UID}:{GID}",
            "WorkingDir": "/workspace",
        }
    else:
        if not a.binary:
            sys.exit("--binary is required")
        layer = binary_layer(a.binary, "pause")
        cfg = {"Env": env, "Entrypoint": ["/pause"], "User": f"{UID}:{GID}", "WorkingDir": "/"}
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": cfg,
        "created": "1970-01-01T00:00:00Z",
        "history": [
            {"created": "1970-01-01T00:00:00Z", "created_by": "hack/cluster/mkimage.py " + a.kind}
        ],
    }
    write_archive(a.out, a.tag, layer, config)


if __name__ == "__main__":
    main()
