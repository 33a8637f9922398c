"""Read a Debian root file system's dpkg database and copy a package closure out of it.

The images are "distroless" in the way Google's distroless images are: mmdebstrap
installs packages into a full Debian root file system (maintainer scripts run there),
and the image gets only the files of the packages it needs, taken from dpkg's file
lists: no package manager, no perl, no debconf. Pure functions over the parsed
database, and one copier.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

#: Paths never copied: documentation, manuals, translations, bug-report scripts.
#: Licence files (`/usr/share/doc/*/copyright`) are kept.
EXCLUDED_PREFIXES = (
    "usr/share/man/",
    "usr/share/info/",
    "usr/share/locale/",
    "usr/share/lintian/",
    "usr/share/bug/",
    "usr/share/bash-completion/",
    "usr/share/doc-base/",
    "usr/share/menu/",
)


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    architecture: str
    #: Alternatives groups: each inner tuple is "a | b | c" (names only).
    depends: tuple[tuple[str, ...], ...]
    provides: tuple[str, ...]


def _names(field: str) -> tuple[tuple[str, ...], ...]:
    """`libc6 (>= 2.34), foo:any | bar` -> (("libc6",), ("foo", "bar"))."""
    groups = []
    for group in field.split(","):
        alts = []
        for alt in group.split("|"):
            name = re.sub(r"\(.*?\)|\[.*?\]|<.*?>", "", alt).strip().split(":")[0]
            if name:
                alts.append(name)
        if alts:
            groups.append(tuple(alts))
    return tuple(groups)


def parse_status(text: str) -> dict[str, Package]:
    """The installed packages of a dpkg `status` file, by name."""
    packages: dict[str, Package] = {}
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") and key:
                fields[key] += " " + line.strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if "Package" not in fields or not fields.get("Status", "").endswith(" installed"):
            continue
        deps = ", ".join(f for f in (fields.get("Pre-Depends"), fields.get("Depends")) if f)
        packages[fields["Package"]] = Package(
            name=fields["Package"],
            version=fields.get("Version", ""),
            architecture=fields.get("Architecture", ""),
            depends=_names(deps),
            provides=tuple(alt for group in _names(fields.get("Provides", "")) for alt in group),
        )
    return packages


def closure(
    packages: Mapping[str, Package], roots: Iterable[str], excluded: Iterable[str] = ()
) -> list[str]:
    """The names of `roots` and everything they depend on, sorted.

    Of alternatives the first installed one is taken (a virtual name resolves to its
    installed provider). `excluded` packages, and what only they pull in, are left out:
    they are what a running program does not need (debconf, perl for maintainer
    scripts). An unknown root or an unsatisfied dependency raises."""
    providers: dict[str, str] = {}
    for pkg in packages.values():
        for virtual in pkg.provides:
            providers.setdefault(virtual, pkg.name)
    skip = set(excluded)
    wanted: set[str] = set()
    todo = list(roots)
    for root in todo:
        if root not in packages:
            raise KeyError(f"package {root} is not installed in the root file system")
    while todo:
        name = todo.pop()
        if name in wanted or name in skip:
            continue
        wanted.add(name)
        for group in packages[name].depends:
            choice = next(
                (
                    alt if alt in packages else providers[alt]
                    for alt in group
                    if alt in packages or alt in providers
                ),
                None,
            )
            if choice is None:
                raise KeyError(f"{name}: no installed package satisfies {' | '.join(group)}")
            todo.append(choice)
    return sorted(wanted)


def package_files(root: Path, package: Package) -> list[str]:
    """The paths dpkg installed for `package` (from `/var/lib/dpkg/info/*.list`)."""
    info = root / "var/lib/dpkg/info"
    for stem in (f"{package.name}:{package.architecture}", package.name):
        listing = info / f"{stem}.list"
        if listing.is_file():
            return [line for line in listing.read_text().splitlines() if line not in ("", "/.")]
    raise FileNotFoundError(f"no file list for {package.name} in {info}")


def kept(path: str) -> bool:
    rel = path.lstrip("/")
    if rel.startswith("usr/share/doc/"):
        return rel.endswith("/copyright")
    return not rel.startswith(EXCLUDED_PREFIXES)


def resolve_parent(root: Path, rel: PurePosixPath) -> PurePosixPath:
    """`rel` with its parent directories' symlinks resolved inside `root` (the leaf
    itself is not followed): `bin/sh` -> `usr/bin/sh` on a merged-/usr system."""
    resolved = PurePosixPath()
    for part in rel.parts[:-1]:
        candidate = resolved / part
        target = root / candidate
        hops = 0
        while target.is_symlink():
            hops += 1
            if hops > 16:
                raise OSError(f"symlink loop at {candidate}")
            link = PurePosixPath(os.readlink(target))
            candidate = link if link.is_absolute() else candidate.parent / link
            candidate = PurePosixPath(os.path.normpath(candidate.as_posix()).lstrip("/"))
            target = root / candidate
        resolved = candidate
    return resolved / rel.name


def copy_path(src_root: Path, dst_root: Path, rel: PurePosixPath) -> None:
    """Copy one path (file, symlink or directory entry, with its mode) and its parent
    directories from `src_root` to the same place under `dst_root`."""
    src = src_root / rel
    dst = dst_root / rel
    for parent in reversed(rel.parents[:-1]):
        d = dst_root / parent
        if not d.exists() and not d.is_symlink():
            s = src_root / parent
            if s.is_symlink():
                d.symlink_to(os.readlink(s))
            else:
                d.mkdir()
                shutil.copystat(s, d)
    if dst.exists() or dst.is_symlink():
        return
    if src.is_symlink():
        dst.symlink_to(os.readlink(src))
    elif src.is_dir():
        dst.mkdir()
        shutil.copystat(src, dst)
    elif src.is_file():
        shutil.copy2(src, dst)


def copy_packages(src_root: Path, dst_root: Path, packages: Iterable[Package]) -> int:
    """Copy the kept files of `packages` (paths as the system resolves them); returns how
    many paths were copied. Merged-/usr top-level links (`bin -> usr/bin`) go first."""
    for top in sorted(os.listdir(src_root)):
        if (src_root / top).is_symlink() and not (dst_root / top).is_symlink():
            (dst_root / top).symlink_to(os.readlink(src_root / top))
    count = 0
    for pkg in packages:
        for path in package_files(src_root, pkg):
            if not kept(path):
                continue
            rel = resolve_parent(src_root, PurePosixPath(path.lstrip("/")))
            if (src_root / rel).exists() or (src_root / rel).is_symlink():
                copy_path(src_root, dst_root, rel)
                count += 1
    return count
