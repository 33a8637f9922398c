"""The two image trees, cut from the base root file system (see dpkg.py).

sandbox:  busybox (POSIX sh and the coreutils-like applets shell tools run today, linked
          against glibc so its name lookups work), curl and GNU wget (busybox-static's
          wget crashed on any host name: a static glibc cannot load its resolver), git
          (without perl: see base.SANDBOX_EXCLUDED), the CA bundle; uid 65532,
          /workspace writable.
operator: python3 and the libraries the wheel needs, no shell; the wheel and its pinned
          dependencies are added by python.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path, PurePosixPath

from . import base, dpkg

UID = GID = 65532
USER = "sandbox"


def _write(root: Path, rel: str, text: str, mode: int = 0o644) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def _dir(root: Path, rel: str, mode: int = 0o755, owner: int = 0) -> None:
    path = root / rel
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(mode)
    os.chown(path, owner, owner)


def users(root: Path, user: str, shell: str) -> None:
    _write(
        root,
        "etc/passwd",
        f"root:x:0:0:root:/root:{shell}\n"
        f"{user}:x:{UID}:{GID}:{user}:/home/{user}:{shell}\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    )
    _write(root, "etc/group", f"root:x:0:\n{user}:x:{GID}:\nnogroup:x:65534:\n")
    _dir(root, "home")
    _dir(root, f"home/{user}", 0o755, UID)


def common(
    src: Path, root: Path, roots: tuple[str, ...], excluded: tuple[str, ...] = base.EXCLUDED
) -> None:
    """The package closure of `roots` (less `excluded`), the CA bundle and the file
    system skeleton."""
    installed = dpkg.parse_status((src / "var/lib/dpkg/status").read_text())
    names = dpkg.closure(installed, roots, excluded)
    dpkg.copy_packages(src, root, [installed[n] for n in names])
    # Made by ca-certificates' postinst, so in no file list: the bundle and its hash links.
    shutil.copytree(
        src / "etc/ssl/certs", root / "etc/ssl/certs", symlinks=True, dirs_exist_ok=True
    )
    for rel in ("usr/lib/ssl/certs", "usr/lib/ssl/cert.pem"):
        if not (root / rel).is_symlink():
            dpkg.copy_path(src, root, PurePosixPath(rel))
    _write(root, "etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n")
    _write(root, "etc/os-release", (src / "usr/lib/os-release").read_text())
    for d in ("dev", "proc", "sys", "run", "etc", "root"):
        _dir(root, d, 0o700 if d == "root" else 0o755)
    _dir(root, "tmp", 0o1777)
    _dir(root, "var/tmp", 0o1777)
    # The dynamic loader's cache: faster start-up than searching the default paths.
    subprocess.run(["ldconfig", "-r", str(root)], check=True)
    shutil.rmtree(root / "var/cache/ldconfig", ignore_errors=True)


def sandbox(src: Path, root: Path) -> None:
    common(src, root, base.SANDBOX_ROOTS, base.SANDBOX_EXCLUDED)
    users(root, USER, "/bin/sh")
    _dir(root, "workspace", 0o777, UID)
    # Every busybox applet whose name no package took (curl and wget stay the real ones).
    applets = subprocess.run(
        ["chroot", str(root), "/bin/busybox", "--list-full"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for applet in applets:
        if applet == "linuxrc":  # an init for initramfs, not a command
            continue
        rel = dpkg.resolve_parent(root, PurePosixPath(applet))
        path = root / rel
        if path.exists() or path.is_symlink():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to("/bin/busybox")
    for tool in ("curl", "wget", "sh", "git"):
        if not (root / "usr/bin" / tool).exists():
            raise SystemExit(f"sandbox image: no {tool}")


def operator(src: Path, root: Path) -> None:
    common(src, root, base.OPERATOR_ROOTS)
    users(root, "nonroot", "/usr/sbin/nologin")
    _dir(root, "var/lib/tooladapter", 0o755, UID)
    for shell in ("bin/sh", "bin/bash", "bin/dash", "usr/bin/sh"):
        if (root / shell).exists():
            raise SystemExit(f"operator image: {shell} should not be there")
