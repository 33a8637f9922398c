"""Artifacts as files on a local (or mounted) file system: as durable as that volume."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tooladapter.artifacts.protocol import (
    CorruptArtifact,
    Space,
    content_ref,
    index_key,
    index_prefix,
    relative_key,
    verified,
)

#: Threads that fsync a batch's files at once (`put_all`): concurrent fsyncs of one file
#: system share a journal commit, so a batch costs about one fsync, not one per file.
_FSYNC = ThreadPoolExecutor(max_workers=8, thread_name_prefix="tooladapter-fsync")


def _temp(folder: Path, data: bytes) -> str:
    """A hidden temporary file in `folder` holding `data`, not yet fsynced: the caller
    syncs it, then renames or links it into place (and removes it when that fails)."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalArtifactStore:
    """Files under `root/[results/]sha256/<2 hex>/<64 hex>`, written atomically (rename)
    and fsynced; named index entries under `root/index/...`, created by a hard link that
    fails when the name exists, so two writers never overwrite one another."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __str__(self) -> str:
        return f"file:{self.root}"

    def path_of(self, ref: str, space: Space = Space.RECEIPTS) -> Path:
        return self.root / relative_key(ref, space)

    def put(self, data: bytes, space: Space = Space.RECEIPTS) -> str:
        ref = content_ref(data)
        self._store([(data, self.path_of(ref, space))])
        return ref

    def get(self, ref: str, space: Space = Space.RECEIPTS) -> bytes:
        path = self.path_of(ref, space)
        try:
            return verified(ref, path.read_bytes())
        except FileNotFoundError:
            raise KeyError(ref) from None

    def put_key(self, key: str, data: bytes) -> None:
        if not self._store((), [(key, data)]):
            raise CorruptArtifact(
                f"{self.root / index_key(key)} already holds other bytes (never overwritten)"
            )

    def put_all(self, datas: Sequence[bytes], keys: Sequence[tuple[str, bytes]] = ()) -> int:
        """`put` of every `datas`, then `put_key` of each of `keys` in order, stopping at the
        first key that holds other bytes: how many keys were stored. Every file is written,
        then all are fsynced at once, before any name appears: a receipt and its chain link
        (or a batch of them) cost one round of fsyncs, and a name never outlives its bytes."""
        return self._store([(data, self.path_of(content_ref(data))) for data in datas], keys)

    def _store(
        self, contents: Sequence[tuple[bytes, Path]], keys: Sequence[tuple[str, bytes]] = ()
    ) -> int:
        """`contents` (bytes at the path of their hash: renamed into place, idempotent), then
        `keys` (linked, write-once) in order up to the first that holds other bytes: how many
        keys were stored. Every file fsynced before any name appears."""
        temps: list[str] = []
        try:
            moves: list[tuple[str, Path]] = []
            for data, path in contents:
                if path.exists():
                    # Its name is its hash: another size is damage, which a write-once
                    # store never repairs by overwriting.
                    if path.stat().st_size != len(data):
                        raise CorruptArtifact(
                            f"{path} holds {path.stat().st_size} bytes, not {len(data)}"
                        )
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                temps.append(_temp(path.parent, data))
                moves.append((temps[-1], path))
            links: list[tuple[str | None, Path, bytes]] = []
            for key, data in keys:
                path = self.root / index_key(key)
                if path.exists():
                    links.append((None, path, data))
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                linked = _temp(path.parent, data)
                temps.append(linked)
                links.append((linked, path, data))
            # All but the last on the fsync threads, the last here: a lone receipt and its
            # link wake one thread, not two.
            syncing = [_FSYNC.submit(_fsync_path, tmp) for tmp in temps[:-1]]
            if temps:
                _fsync_path(temps[-1])
            for future in syncing:
                future.result()
            for tmp, path in moves:
                os.replace(tmp, path)
            for stored, (source, path, data) in enumerate(links):
                try:
                    if source is None:
                        raise FileExistsError(path)
                    # link(2), unlike rename(2), refuses an existing name: write-once.
                    os.link(source, path)
                except FileExistsError:
                    if path.read_bytes() != data:
                        return stored
            return len(links)
        finally:
            for tmp in temps:
                Path(tmp).unlink(missing_ok=True)

    def get_key(self, key: str) -> bytes:
        try:
            return (self.root / index_key(key)).read_bytes()
        except FileNotFoundError:
            raise KeyError(key) from None

    def list(self, prefix: str) -> list[str]:
        folder = self.root / index_prefix(prefix)
        if not folder.is_dir():
            return []
        return sorted(
            path.relative_to(self.root).as_posix()
            for path in folder.rglob("*")
            if path.is_file() and not path.name.startswith(".")
        )
