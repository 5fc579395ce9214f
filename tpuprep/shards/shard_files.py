"""The shard files of an open dataset, through its ``io.store.Store``: one code path for a local folder
and an object store (issue #29). Each shard is opened once (``Store.open_shard_file``: its path confined
to the folder, the file or object pinned), its footer read once and kept, its ids checked against the
manifest; every read of it afterwards — pyarrow's row groups, the direct page reads (``read_ranges``) —
is checked to come from that very file or object (``ShardFile.verify``): a shard replaced, rewritten
in place or shortened under an open dataset is one line, "the shard folder changed after it was
opened", never another file's bytes (issue #36 items 1–2).

``ShardFiles`` is a part of ``reader.Dataset`` (a mixin): it uses the dataset's ``store``, ``root``,
``manifest``, ``manifest_path`` and the caches ``Dataset.__init__`` sets up.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import BadShards
from ..io.store import FileReplaced, NotConfined, ShardFile, Store
from . import parquet
from .parquet import check_graph_groups, chunk_ranges, open_parquet
from .shard_index import ShardIndex
from .stamp import shard_id


class ShardFiles:
    """Shard paths, opens and checked reads of a ``Dataset`` (see the module docstring)."""

    store: Store
    root: Path | str
    manifest: dict
    manifest_path: Path | str

    def shard_path(self, i: int) -> Path | str:
        """The file of ``manifest["shards"][i]``, confined to the dataset folder: a relative POSIX path
        without ``..`` that resolves (symbolic links followed) inside the folder to a regular file;
        remotely the URL of an object (not a prefix) under the dataset's prefix. Opened (pinned) on
        the first call. Anything else is ``BadShards`` naming the manifest entry."""
        return self._shard(i).name

    def shard_size(self, i: int) -> int:
        """Bytes of the file of ``manifest["shards"][i]`` as it was opened."""
        return self._shard(i).size

    def _shard(self, i: int) -> ShardFile:
        """The pinned file of ``manifest["shards"][i]`` (``shard_path``)."""
        if i in self._pins:
            return self._pins[i]
        rel = self.manifest["shards"][i]["path"]

        def bad(problem: str) -> BadShards:
            return BadShards(f"{self.manifest_path}: shards[{i}].path {rel!r}: {problem}")

        pure = PurePosixPath(rel) if isinstance(rel, str) else None
        if pure is None or not rel or "\\" in rel or "\0" in rel:
            raise bad("is not a relative POSIX path")
        if pure.is_absolute() or re.match(r"[A-Za-z]:", rel):
            raise bad("is an absolute path; shard paths are relative to the manifest's folder")
        if ".." in pure.parts:
            raise bad("contains '..'; shard paths must stay inside the shard folder")
        try:
            pinned = self.store.open_shard_file(str(pure))
        except NotConfined as exc:
            raise bad(str(exc)) from None
        self._pins[i] = self._named[str(pinned.name)] = pinned
        self._ids[str(pinned.name)] = self.manifest["shards"][i].get("shard_id")  # what open_shard expects
        return pinned

    def open_shard(self, path: Path | str) -> pq.ParquetFile:
        """A shard (a path from ``shard_path``) opened for reading with page checksums verified, from
        its pinned file (remotely footer and row groups are ranged GETs). ``BadShards`` naming the folder
        when the shard's id (its footer's ``shard_id``) is not its manifest entry's: the folder was
        rebuilt since ``open_dataset`` (shards written before shard ids have none, their entries
        neither), or the file changed since it was opened."""
        pinned = self._named[str(path)]
        pf = self._checked(pinned, lambda: open_parquet(path, pinned.source()))
        found, want = shard_id(pf.metadata.metadata), self._ids.get(str(path))
        if found != want:
            raise self._changed(f"{path} is shard {found}, the manifest said {want}")
        return pf

    def _changed(self, detail: str) -> BadShards:
        """The one line of a shard folder changed under this open Dataset."""
        return BadShards(f"{self.root}: the shard folder changed after it was opened ({detail}): open it again")

    def _checked(self, pinned: ShardFile, read: Callable):
        """``read()`` (through ``pinned``'s sources), then ``pinned.verify()``: ``FileReplaced`` from either
        is the folder-changed line, and so is any failure of ``read`` (a page that does not decode, say)
        when the file changed meanwhile: a changed file is never called corrupt."""
        try:
            out = read()
        except FileReplaced as exc:
            raise self._changed(str(exc)) from None
        except Exception:
            self._checked(pinned, lambda: None)
            raise
        try:
            pinned.verify()
        except FileReplaced as exc:
            raise self._changed(str(exc)) from None
        return out

    def _index(self, collection: str, split: str) -> ShardIndex:
        key = (collection, split)
        if key not in self._indexes:
            shards = [(self.shard_path(i), s["table"]) for i, s in enumerate(self.manifest["shards"])
                      if s["collection"] == collection and s["split"] == split]
            index = ShardIndex(shards, self._parquet)
            for path, _ in shards:  # the graph ids read while indexing came from the opened files
                self._checked(self._named[str(path)], lambda: None)
            self._indexes[key] = index
        return self._indexes[key]

    def _row_group(self, path: Path, rg: int) -> pa.Table:
        key = (path, rg)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        table = self._read_one(path, rg)
        self._cache[key] = table
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return table

    def _read(self, path: Path | str, rgs: list[int], columns: list[str] | None = None,
              use_threads: bool = True) -> pa.Table:
        """Row groups ``rgs`` (``columns`` only) of a shard through its kept footer, as one table, checked
        to come from the file opened (``_checked``)."""
        pf = self._parquet(path)
        return self._checked(self._named[str(path)],
                             lambda: parquet.read_row_groups(pf, path, rgs, columns, use_threads=use_threads))

    def _read_one(self, path: Path | str, rg: int, columns: list[str] | None = None) -> pa.Table:
        """Row group ``rg`` of a shard, as ``_read`` reads several."""
        pf = self._parquet(path)
        return self._checked(self._named[str(path)], lambda: parquet.read_row_group(pf, path, rg, columns))

    def _parquet(self, path: Path | str) -> pq.ParquetFile:
        """An open shard, kept for later reads (footer parsed once)."""
        if path not in self._files:
            self._files[path] = self.open_shard(path)
        return self._files[path]

    def _fetcher(self, path: Path | str) -> Callable[[list[tuple[int, int]]], list[bytes]]:
        """``pages``' fetch of byte ranges of an open shard (``ShardFile.read_ranges``: locally ``pread``s
        of the very file whose footer ``_parquet`` read, remotely one concurrent ranged GET of that
        version). A file changed since it was opened is refused in one line (``BadShards``)."""
        self._parquet(path)  # the footer first: the shard's id checked
        pinned = self._named[str(path)]

        def fetch(ranges: list[tuple[int, int]]) -> list[bytes]:
            try:
                return pinned.read_ranges(ranges)
            except FileReplaced as exc:
                raise self._changed(str(exc)) from None
        return fetch

    def _read_sampled(self, path: Path | str, rgs: list[int], graph_id: str, columns: list[str]) -> pa.Table:
        """Row groups ``rgs`` (``columns`` only) of a shard, all of ``graph_id`` (``check_graph_groups``),
        for a sample. Their column chunks come through ``ShardFile.prefetched`` (remotely all at once,
        concurrently: a sample costs one round trip, not one per row group), then are decoded with
        page checksums verified as always."""
        pf = self._parquet(path)
        check_graph_groups(pf.metadata, path, rgs, graph_id)
        pinned = self._named[str(path)]

        def read() -> pa.Table:
            source = pinned.prefetched(chunk_ranges(pf.metadata, rgs, columns))
            part = pf if source is None else pq.ParquetFile(source, metadata=pf.metadata,
                                                            page_checksum_verification=True)
            return parquet.read_row_groups(part, path, rgs, columns, use_threads=False)
        return self._checked(pinned, read)
