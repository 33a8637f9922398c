#!/usr/bin/env python3
"""Pack one static add-on binary (CoreDNS, local-path-provisioner) as a
single-layer image archive for `ctr images import`: the binary at /NAME as the
entrypoint, run as uid 65532, nothing else but mkimage.py's base directories.

Reuses mkimage.py's layer and archive writers (deterministic output), so this
file only states what differs from the pause image.

  image.py --binary PATH --tag localhost/tooladapter-coredns:KEY --out coredns.tar
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# mkimage.py is a sibling script, not a package.
import mkimage


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--tag", required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    name = os.path.basename(a.binary)
    uid = f"{mkimage.UID}:{mkimage.GID}"
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Entrypoint": ["/" + name],
            "User": uid,
            "WorkingDir": "/",
        },
        "created": "1970-01-01T00:00:00Z",
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "addons/image.py " + name}],
    }
    mkimage.write_archive(a.out, a.tag, mkimage.binary_layer(a.binary, name), config)


if __name__ == "__main__":
    main()
