"""The Debian root file system both images are cut from, built once per pinned input.

mmdebstrap (`--variant=essential`, root mode, no Docker) installs the pinned packages of
`packages.lock` from the pinned suite into a directory; maintainer scripts run there
(ca-certificates makes its bundle). The result is cached under
`~/.cache/tooladapter/images/base-<key>/`, keyed by the lock, the suite and this file, so
only the first build downloads anything.

snapshot.debian.org is not reachable from our machines, so the pin is the suite plus every
package version in the lock. When a point release or a security update replaces a pinned
version on the mirror, the build fails and says so: `python -m image lock` re-resolves the
lock (commit the result).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from . import dpkg

HERE = Path(__file__).resolve().parent
LOCK = HERE / "packages.lock"
MIRROR = "http://deb.debian.org/debian"
SECURITY = "http://deb.debian.org/debian-security"
SUITE = "bookworm"
#: The suite's three archives: the release, its updates and its security fixes.
SOURCES = (
    f"deb {MIRROR} {SUITE} main",
    f"deb {MIRROR} {SUITE}-updates main",
    f"deb {SECURITY} {SUITE}-security main",
)

#: What each image is cut from (package closures, see `dpkg.closure`).
SANDBOX_ROOTS = ("busybox", "curl", "wget", "ca-certificates", "git")
OPERATOR_ROOTS = ("python3-minimal", "libpython3.11-stdlib", "libstdc++6", "ca-certificates")
#: Needed to install packages, never to run them: maintainer-script interpreters, the
#: package manager, debconf, the openssl command line (ca-certificates' postinst), time
#: zone data (the operator works in UTC).
EXCLUDED = ("debconf", "perl-base", "dpkg", "openssl", "tzdata", "base-files", "readline-common")
#: Left out of the sandbox besides: git's perl (and liberror-perl, which only perl uses),
#: about 30 MB for the few git commands still written in perl (send-email, svn, cvs,
#: archimport); git itself, its builtins (clone, diff, status, log, commit, apply...)
#: and its https transport are C. git-man: manual pages, never copied anyway.
SANDBOX_EXCLUDED = (*EXCLUDED, "perl", "liberror-perl", "git-man")

#: Bump when the way the base is built changes.
BASE_REV = "1"


@dataclass(frozen=True)
class Pin:
    name: str
    version: str

    def __str__(self) -> str:
        return f"{self.name}={self.version}"


def read_lock(path: Path = LOCK) -> list[Pin]:
    pins = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("=")
            pins.append(Pin(name, version))
    return pins


def base_key(lock_text: str) -> str:
    h = hashlib.sha256()
    for part in (BASE_REV, SUITE, *SOURCES, lock_text, (HERE / "base.py").read_text()):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


def mmdebstrap(target: Path, includes: list[str]) -> None:
    """A Debian root file system at `target` (which must not exist)."""
    if not shutil.which("mmdebstrap"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "mmdebstrap"], check=True)
    subprocess.run(
        [
            "mmdebstrap",
            "--quiet",
            "--mode=root",
            "--variant=essential",
            "--include=" + ",".join(includes),
            # Documentation never reaches an image; licences do (see dpkg.kept).
            "--dpkgopt=path-exclude=/usr/share/man/*",
            "--dpkgopt=path-exclude=/usr/share/locale/*",
            "--dpkgopt=path-exclude=/usr/share/info/*",
            SUITE,
            str(target),
            *SOURCES,
        ],
        check=True,
    )


def build_base(cache: Path) -> Path:
    """The cached base root file system of the current lock (built when missing)."""
    lock_text = LOCK.read_text()
    root = cache / f"base-{base_key(lock_text)}" / "rootfs"
    if root.is_dir():
        return root
    tmp = root.with_name("rootfs.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    pins = read_lock()
    try:
        mmdebstrap(tmp, [str(p) for p in pins])
    except subprocess.CalledProcessError as e:
        raise SystemExit(
            f"mmdebstrap failed ({e}); if a pinned version is no longer on {MIRROR}, "
            "refresh the pins: PYTHONPATH=hack python3 -m image lock"
        ) from e
    installed = dpkg.parse_status((tmp / "var/lib/dpkg/status").read_text())
    wrong = [
        f"{p} (got {installed[p.name].version if p.name in installed else 'none'})"
        for p in pins
        if p.name not in installed or installed[p.name].version != p.version
    ]
    if wrong:
        raise SystemExit("pinned packages not installed as pinned: " + ", ".join(wrong))
    tmp.rename(root)
    return root


def write_lock(cache: Path) -> list[Pin]:
    """Resolve the current versions of both images' closures and write `packages.lock`."""
    tmp = cache / "lock-rootfs.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    try:
        mmdebstrap(tmp, sorted({*SANDBOX_ROOTS, *OPERATOR_ROOTS}))
        installed = dpkg.parse_status((tmp / "var/lib/dpkg/status").read_text())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    names = {
        *dpkg.closure(installed, SANDBOX_ROOTS, SANDBOX_EXCLUDED),
        *dpkg.closure(installed, OPERATOR_ROOTS, EXCLUDED),
    }
    pins = [Pin(n, installed[n].version) for n in sorted(names)]
    LOCK.write_text(
        f"# Debian {SUITE} packages of the images (every file they ship comes from these).\n"
        "# Generated by `PYTHONPATH=hack python3 -m image lock`; do not edit by hand.\n"
        + "".join(f"{p}\n" for p in pins)
    )
    return pins
