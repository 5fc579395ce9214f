"""The shard files of an open dataset, through its ``io.store.Store``: one code path for a local folder
and an object store (issue #29). Paths are confined (``Store.confined_file``), shards opened with page
checksums verified and their ids checked against the manifest, footers kept where a read costs a request
(``Store.reads_are_requests``), and byte ranges of a shard read for the direct page reads
(``Store.read_ranges``: ``pread`` locally, one concurrent ranged GET remotely).

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
from ..io.store import FileReplaced, NotConfined, Store
from . import pages, parquet
from .parquet import check_graph_groups, chunk_ranges, open_parquet
from .shard_index import ShardIndex
from .stamp import shard_id


class ShardFiles:
    """Shard paths, opens and byte-range reads of a ``Dataset`` (see the module docstring)."""

    store: Store
    root: Path | str
    manifest: dict
    manifest_path: Path | str

    def shard_path(self, i: int) -> Path | str:
        """The file of ``manifest["shards"][i]``, confined to the dataset folder: a relative POSIX path
        without ``..`` that resolves (symbolic links followed) inside the folder to a regular file;
        remotely the URL of an object (not a prefix) under the dataset's prefix.
        Anything else is ``BadShards`` naming the manifest entry."""
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
            path, size = self.store.confined_file(str(pure))
        except NotConfined as exc:
            raise bad(str(exc)) from None
        self._sizes[str(path)] = size
        self._ids[str(path)] = self.manifest["shards"][i].get("shard_id")  # what open_shard expects
        return path

    def shard_size(self, i: int) -> int:
        """Bytes of the file of ``manifest["shards"][i]`` as stored now (``shard_path`` checks it)."""
        return self._sizes[str(self.shard_path(i))]

    def open_shard(self, path: Path | str) -> pq.ParquetFile:
        """A shard (a path from ``shard_path``) opened for reading with page checksums verified
        (``Store.open_random_access``: remotely footer and row groups are ranged GETs). ``BadShards``
        naming the folder when the shard's id (its footer's ``shard_id``) is not its manifest entry's: the
        folder was rebuilt since ``open_dataset`` (shards written before shard ids have none, their
        entries neither)."""
        try:
            source = self.store.open_random_access(path, self._sizes.get(str(path)))
        except FileNotFoundError:
            raise self._changed(f"{path} no longer exists") from None
        except OSError as exc:
            raise self.store.failure(exc, str(path)) from None
        pf = open_parquet(path, source)
        found, want = shard_id(pf.metadata.metadata), self._ids.get(str(path))
        if found != want:
            raise self._changed(f"{path} is shard {found}, the manifest said {want}")
        return pf

    def _changed(self, detail: str) -> BadShards:
        """The one line of a shard folder rebuilt under this open Dataset."""
        return BadShards(f"{self.root}: the shard folder changed after it was opened ({detail}): open it again")

    def _opened(self, path: Path | str) -> pq.ParquetFile:
        """The shard for one more read: the kept footer where a read is a request (``_parquet``), else the
        file opened again (``open_shard``: what is there now)."""
        return self._parquet(path) if self.store.reads_are_requests else self.open_shard(path)

    def _index(self, collection: str, split: str) -> ShardIndex:
        key = (collection, split)
        if key not in self._indexes:
            shards = [(self.shard_path(i), s["table"]) for i, s in enumerate(self.manifest["shards"])
                      if s["collection"] == collection and s["split"] == split]
            self._indexes[key] = ShardIndex(shards, self._opened)
        return self._indexes[key]

    def _row_group(self, path: Path, rg: int) -> pa.Table:
        key = (path, rg)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        table = parquet.read_row_group(self._opened(path), path, rg)
        self._cache[key] = table
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return table

    def _parquet(self, path: Path | str) -> pq.ParquetFile:
        """An open shard, kept open for later sampled reads (footer parsed once); the identity of the
        file it opened is kept too (``Store.identity``: None remotely or when it changed meanwhile),
        for the direct page reads of ``_fetcher``."""
        if path not in self._files:
            before = self.store.identity(path)
            self._files[path] = self.open_shard(path)
            self._inodes[path] = before if before is not None and self.store.identity(path) == before else None
        return self._files[path]

    def _fetcher(self, path: Path | str) -> Callable[[list[tuple[int, int]]], list[bytes]]:
        """``pages``' fetch of byte ranges of an open shard (``Store.read_ranges``: locally ``pread``s of
        the very file whose footer ``_parquet`` read, remotely one concurrent ranged GET). A file
        replaced since is declined where the reader still holds the old one open (``pages.Unhandled``:
        pyarrow reads the open one), else refused in one line (``BadShards``)."""
        size = self._sizes[str(path)]  # set by shard_path
        footer = self._parquet(path).metadata.serialized_size
        identity = self._inodes.get(path)

        def fetch(ranges: list[tuple[int, int]]) -> list[bytes]:
            try:
                return self.store.read_ranges(path, ranges, size=size, footer_length=footer, identity=identity)
            except FileReplaced as exc:
                if self.store.holds_open_files:
                    raise pages.Unhandled(str(exc)) from None
                raise self._changed(str(exc)) from None
        return fetch

    def _read_sampled(self, path: Path | str, rgs: list[int], graph_id: str, columns: list[str]) -> pa.Table:
        """Row groups ``rgs`` (``columns`` only) of a shard, all of ``graph_id`` (``check_graph_groups``),
        for a sample. Their column chunks come through ``Store.fetched_source`` (remotely all at once,
        concurrently: a sample costs one round trip, not one per row group), then are decoded with
        page checksums verified as always."""
        pf = self._parquet(path)
        check_graph_groups(pf.metadata, path, rgs, graph_id)
        try:
            source = self.store.fetched_source(path, chunk_ranges(pf.metadata, rgs, columns),
                                               self._sizes[str(path)])
        except FileNotFoundError:
            raise self._changed(f"{path} no longer exists") from None
        except OSError as exc:
            raise self.store.failure(exc, str(path)) from None
        part = pf if source is None else pq.ParquetFile(source, metadata=pf.metadata, page_checksum_verification=True)
        return parquet.read_row_groups(part, path, rgs, columns, use_threads=False)
