"""The operator's Python part: this repository's wheel plus its pinned dependencies.

`requirements.lock` pins every dependency of `pyproject.toml` to one version and the
sha256 of the one wheel pip picks for CPython 3.11 on manylinux x86-64 (Debian bookworm's
python3 and glibc 2.36); pip installs them with `--require-hashes`, binary wheels only,
into `/usr/local/lib/python3.11/dist-packages`, which Debian's python3 searches. Bytecode
is compiled inside the image by its own python3 with unchecked hashes: deterministic
(no timestamps) and no compile at start-up in a read-only container.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
LOCK = HERE / "requirements.lock"
SITE = "usr/local/lib/python3.11/dist-packages"
#: The interpreter the wheels must fit: Debian bookworm's python3 on x86-64.
TARGET = (
    "--only-binary=:all:",
    "--implementation=cp",
    "--python-version=3.11",
    "--abi=cp311",
    # glibc 2.36 runs every manylinux wheel up to 2_36; pip 23 does not infer the
    # older tags from the newest one, so all are listed.
    *(f"--platform=manylinux_2_{minor}_x86_64" for minor in range(36, 4, -1)),
    "--platform=manylinux2014_x86_64",
    "--platform=manylinux2010_x86_64",
    "--platform=manylinux1_x86_64",
)
#: What the wheel is built from (and what the operator image's cache key covers).
SOURCES = ("pyproject.toml", "README.md", "operator/tooladapter")


def source_files() -> list[Path]:
    files: list[Path] = []
    for rel in SOURCES:
        path = REPO / rel
        if path.is_file():
            files.append(path)
            continue
        files.extend(
            p
            for p in sorted(path.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
        )
    return files


def source_digest() -> str:
    h = hashlib.sha256()
    for path in source_files():
        h.update(path.relative_to(REPO).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    h.update(LOCK.read_bytes())
    return h.hexdigest()


#: The interpreter the markers of `pyproject.toml`'s dependencies are evaluated for.
MARKER_ENV = {"python_version": "3.11", "sys_platform": "linux", "platform_system": "Linux"}


def missing_from_lock(pyproject: str, lock: str) -> list[str]:
    """The dependencies of `pyproject` (for the image's interpreter) that `lock` does
    not pin: the image installs the lock with --no-deps, so each would be absent."""
    # pip's own copy of packaging: the builder needs pip anyway, and nothing else.
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name

    pinned = {
        canonicalize_name(line.split("==", 1)[0])
        for line in lock.splitlines()
        if "==" in line and not line.lstrip().startswith("#")
    }
    wanted = []
    for text in tomllib.loads(pyproject)["project"]["dependencies"]:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate(MARKER_ENV):
            wanted.append(req.name)
    return [name for name in wanted if canonicalize_name(name) not in pinned]


def _pip(*args: str) -> None:
    if importlib.util.find_spec("pip") is None:
        raise SystemExit(f"{sys.executable} has no pip: run `make venv` (or install python3-pip)")
    subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args],
        check=True,
    )


def build_wheel(out: Path) -> Path:
    """The repository's wheel, built from a clean copy of its sources (no build/ or
    egg-info left in the work tree)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        for path in source_files():
            dst = src / path.relative_to(REPO)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dst)
        _pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(src))
    wheels = sorted(out.glob("tooladapter-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"expected one tooladapter wheel in {out}, found {wheels}")
    return wheels[0]


def install(root: Path) -> None:
    """The pinned dependencies and the wheel into the image tree, compiled."""
    missing = missing_from_lock((REPO / "pyproject.toml").read_text(), LOCK.read_text())
    if missing:
        raise SystemExit(
            f"{LOCK.name} does not pin {', '.join(missing)} (pyproject.toml needs them): "
            "PYTHONPATH=hack python3 -m image lock --only python"
        )
    site = root / SITE
    site.mkdir(parents=True, exist_ok=True)
    common = (
        "install",
        "--quiet",
        "--root-user-action=ignore",
        "--no-compile",
        "--no-deps",
        "--target",
        str(site),
    )
    # Console scripts (`bin/`) carry the host's interpreter in their shebang: dropped.
    _pip(*common, *TARGET, "--require-hashes", "-r", str(LOCK))
    shutil.rmtree(site / "bin", ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        wheel = build_wheel(Path(tmp))
        _pip(*common, *TARGET, str(wheel))
    shutil.rmtree(site / "bin", ignore_errors=True)
    # The temporary path the wheel came from.
    for direct_url in site.glob("*.dist-info/direct_url.json"):
        direct_url.unlink()
    for record in site.glob("*.dist-info/RECORD"):
        # RECORD lists direct_url.json and the scripts; the files it names may go.
        record.write_text(
            "".join(
                line + "\n"
                for line in record.read_text().splitlines()
                if not line.startswith(("../", "bin/")) and "direct_url.json" not in line
            )
        )
    # The image's own interpreter imports the operator: a dependency missing from the
    # lock fails the build, not the first start.
    subprocess.run(
        ["chroot", str(root), "/usr/bin/python3", "-c", "import tooladapter.main"],
        check=True,
    )
    subprocess.run(
        [
            "chroot",
            str(root),
            "/usr/bin/python3",
            "-m",
            "compileall",
            "-q",
            "--invalidation-mode",
            "unchecked-hash",
            "/usr/lib/python3.11",
            "/" + SITE,
        ],
        check=True,
    )


def write_lock() -> int:
    """Resolve `pyproject.toml`'s dependencies for the image's interpreter and write
    `requirements.lock` (name==version --hash); returns how many were pinned."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        _pip(
            "install",
            "--quiet",
            "--dry-run",
            "--ignore-installed",
            "--target",
            str(Path(tmp) / "t"),
            *TARGET,
            "--report",
            str(report),
            *deps,
        )
        installs = json.loads(report.read_text())["install"]
    lines = []
    for item in sorted(installs, key=lambda i: i["metadata"]["name"].lower()):
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        digest = item["download_info"]["archive_info"]["hashes"]["sha256"]
        lines.append(f"{name}=={version} --hash=sha256:{digest}\n")
    LOCK.write_text(
        "# The operator image's Python dependencies: one wheel each for CPython 3.11,\n"
        "# manylinux x86-64. Generated by `PYTHONPATH=hack python3 -m image lock`.\n"
        + "".join(lines)
    )
    return len(lines)
