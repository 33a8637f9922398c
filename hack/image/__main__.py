"""`make image`: the operator and sandbox images without a Docker engine.

  PYTHONPATH=hack python3 -m image [sandbox] [operator] [--tag dev] [--load auto|yes|no]
  PYTHONPATH=hack python3 -m image lock [--only debian|python]   # re-resolve the pins

Prints one archive path per image. Each archive is cached under
`~/.cache/tooladapter/images/`, keyed by every input (pinned packages, the builder's
code, the operator's sources, the tag), so a warm build only checks the cache and
containerd. `--load auto` imports into the local cluster only when KUBECONFIG is its
kubeconfig (see containerd.py).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import importlib.util
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from . import base, containerd, python, stage

HERE = Path(__file__).resolve().parent
MKIMAGE = HERE.parent / "cluster" / "mkimage.py"
REPOSITORIES = {
    "sandbox": "localhost/tooladapter-sandbox",
    "operator": "localhost/tooladapter-operator",
}
UID = 65532


def _mkimage() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mkimage", MKIMAGE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["mkimage"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def log(msg: str) -> None:
    print(f"[image {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def builder_digest() -> str:
    h = hashlib.sha256()
    for path in sorted([*HERE.glob("*.py"), MKIMAGE]):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def image_config(name: str) -> dict[str, object]:
    if name == "sandbox":
        return {
            "Env": [base_env(), "HOME=/home/sandbox"],
            "Cmd": ["/bin/sh"],
            "User": f"{UID}:{UID}",
            "WorkingDir": "/workspace",
        }
    return {
        "Env": [
            base_env(),
            "PYTHONUNBUFFERED=1",
            "PYTHONDONTWRITEBYTECODE=1",
            "HOME=/home/nonroot",
        ],
        "Entrypoint": ["/usr/bin/python3", "-m", "tooladapter"],
        "Cmd": ["run"],
        "User": f"{UID}:{UID}",
        "WorkingDir": "/home/nonroot",
    }


def base_env() -> str:
    return "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def build(name: str, tag: str, cache: Path) -> tuple[Path, str]:
    """The archive of image `name` (built unless cached) and its manifest digest."""
    ref = f"{REPOSITORIES[name]}:{tag}"
    h = hashlib.sha256()
    for part in (ref, base.base_key(base.LOCK.read_text()), builder_digest()):
        h.update(part.encode() + b"\0")
    if name == "operator":
        h.update(python.source_digest().encode())
    archive = cache / f"{name}-{tag}-{h.hexdigest()[:16]}.tar"
    digest_file = archive.with_suffix(".digest")
    if archive.is_file() and digest_file.is_file():
        log(f"{ref}: cached {archive}")
        return archive, digest_file.read_text().strip()
    src = base.build_base(cache)
    tree = cache / f"{archive.stem}.rootfs.tmp"
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    try:
        log(f"{ref}: staging the root file system")
        stagers: dict[str, Callable[[Path, Path], None]] = {
            "sandbox": stage.sandbox,
            "operator": stage.operator,
        }
        stagers[name](src, tree)
        if name == "operator":
            log(f"{ref}: installing the wheel and its pinned dependencies")
            python.install(tree)
        log(f"{ref}: packing {archive.name}")
        mk = _mkimage()
        digest: str = mk.write_archive(
            archive,
            ref,
            lambda f: mk.write_rootfs_layer(tree, f),
            mk.image_config(image_config(name), f"hack/image {name}"),
        )
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    digest_file.write_text(digest + "\n")
    # Older builds of the same image and tag are never used again.
    for stale in cache.glob(f"{name}-{tag}-*"):
        if stale.is_file() and stale not in (archive, digest_file):
            stale.unlink()
    return archive, digest


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m image", description=__doc__.split("\n\n")[0])
    p.add_argument("images", nargs="*", metavar="sandbox|operator|lock")
    p.add_argument("--tag", default=os.environ.get("IMAGE_TAG", "dev"))
    p.add_argument("--load", choices=["auto", "yes", "no"], default="auto")
    p.add_argument("--only", choices=["debian", "python"], help="lock: re-resolve one lock")
    a = p.parse_args()
    unknown = set(a.images) - {*REPOSITORIES, "lock"}
    if unknown:
        p.error(f"unknown image(s): {', '.join(sorted(unknown))}")
    cache = containerd.cache_root() / "images"
    cache.mkdir(parents=True, exist_ok=True)
    if "lock" in a.images:
        if a.only != "python":
            log(f"pinned {len(base.write_lock(cache))} Debian packages in {base.LOCK}")
        if a.only != "debian":
            log(f"pinned {python.write_lock()} Python packages in {python.LOCK}")
        return
    names = a.images or list(REPOSITORIES)
    # Standard output carries only the archives' paths (images.sh reads them): whatever
    # the tools print (apt-get installing mmdebstrap on a new machine, pip) goes to stderr.
    paths = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    load = a.load == "yes" or (
        a.load == "auto" and containerd.local_cluster(os.environ.get("KUBECONFIG"))
    )
    # One build at a time per machine: `make image` and a cluster-up may overlap.
    lock = (cache / ".lock").open("w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    for name in names:
        started = time.monotonic()
        archive, digest = build(name, a.tag, cache)
        ref = f"{REPOSITORIES[name]}:{a.tag}"
        log(
            f"{ref}: {digest}, {archive.stat().st_size / 2**20:.1f} MiB, "
            f"{time.monotonic() - started:.1f}s"
        )
        if load:
            imported = containerd.load(archive, ref, digest)
            log(f"{ref}: {'imported into' if imported else 'already in'} the local containerd")
        print(archive, file=paths, flush=True)
    if a.load == "auto" and not load:
        log("not the local cluster (KUBECONFIG): archives written, nothing imported")


if __name__ == "__main__":
    main()
