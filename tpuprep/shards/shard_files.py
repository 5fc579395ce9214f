"""``ShardSet``: the shard files of one open dataset, through its ``io.store.Store`` — one code path for a
local folder and an object store (issue #29), and the only part of the reader that touches a file.

Each shard is opened once (``Store.open_shard_file``: its path confined to the folder, the file or object
pinned), its footer read once and kept, its id checked against the manifest; every read of it afterwards
— pyarrow's row groups, the direct page reads (``read_ranges``) — is checked to come from that very file
or object (``ShardFile.verify``): a shard replaced, rewritten in place or shortened under an open dataset
is one line, "the shard folder changed after it was opened", never another file's bytes (issue #36 items
1–2). What it keeps per opened shard (the pinned file, its footer, the descriptions of the ``codes``
chunks of the row groups sampled) is bounded by the shards' footers.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import BadShards
from ..io.store import FileReplaced, NotConfined, ShardFile, Store
from . import pages, parquet
from .parquet import check_graph_groups, chunk_ranges, open_parquet
from .stamp import shard_id


class ShardSet:
    """The shard files of a dataset (see the module docstring).

    ``store``: where the dataset lives; ``entries``: the manifest's ``shards`` list; ``manifest_path`` and
    ``root`` name the manifest and the folder in errors. A shard is named by ``path(i)`` (its manifest
    entry i) and every other method takes that path."""

    def __init__(self, store: Store, entries: list[dict], manifest_path: Path | str):
        self.store, self.entries, self.manifest_path = store, entries, manifest_path
        self.root: Path | str = store.location
        self._pinned: dict[int, ShardFile] = {}  # manifest entry -> its file, opened and pinned
        self._named: dict[str, ShardFile] = {}  # str(path) -> its pinned file
        self._ids: dict[str, str | None] = {}  # str(path) -> its manifest entry's shard_id
        self._footers: dict[str, pq.ParquetFile] = {}  # str(path) -> the shard opened once, footer parsed
        self._chunks: dict[tuple[str, int], pages.Chunk] = {}  # (str(path), row group) -> its codes chunk

    @property
    def opened(self) -> int:
        """How many shard files this dataset has opened (each once, pinned to the version it saw)."""
        return len(self._pinned)

    # -- naming and opening ---------------------------------------------------------------------
    def path(self, i: int) -> Path | str:
        """The file of ``entries[i]``, confined to the dataset folder (``Dataset.shard_path``), pinned on
        the first call; ``BadShards`` naming the manifest entry otherwise."""
        return self._pin(i).name

    def size(self, i: int) -> int:
        """Bytes of the file of ``entries[i]`` as it was opened."""
        return self._pin(i).size

    def _pin(self, i: int) -> ShardFile:
        if i in self._pinned:
            return self._pinned[i]
        rel = self.entries[i]["path"]

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
        self._pinned[i] = self._named[str(pinned.name)] = pinned
        self._ids[str(pinned.name)] = self.entries[i].get("shard_id")  # what open() expects
        return pinned

    def open(self, path: Path | str) -> pq.ParquetFile:
        """A shard (a path from ``path(i)``) opened anew from its pinned file, page checksums verified
        (``Dataset.open_shard``). ``BadShards`` naming the folder when its footer's ``shard_id`` is not
        its manifest entry's, or the file changed since it was opened."""
        pinned = self._named[str(path)]
        pf = self._checked(pinned, lambda: open_parquet(path, pinned.source()))
        found, want = shard_id(pf.metadata.metadata), self._ids.get(str(path))
        if found != want:
            raise self.changed(f"{path} is shard {found}, the manifest said {want}")
        return pf

    def footer(self, path: Path | str) -> pq.ParquetFile:
        """The shard opened once and kept (``open``): its footer is parsed once for every later read."""
        key = str(path)
        if key not in self._footers:
            self._footers[key] = self.open(path)
        return self._footers[key]

    # -- checked reads --------------------------------------------------------------------------
    def changed(self, detail: str) -> BadShards:
        """The one line of a shard folder changed under this open dataset."""
        return BadShards(f"{self.root}: the shard folder changed after it was opened ({detail}): open it again")

    def confirm(self, path: Path | str) -> None:
        """``BadShards`` (``changed``) unless the shard is still the file that was opened."""
        self._checked(self._named[str(path)], lambda: None)

    def _checked(self, pinned: ShardFile, read: Callable):
        """``read()`` (through ``pinned``'s sources), then ``pinned.verify()``: ``FileReplaced`` from either
        is the folder-changed line, and so is any failure of ``read`` (a page that does not decode, say)
        when the file changed meanwhile: a changed file is never called corrupt."""
        try:
            out = read()
        except FileReplaced as exc:
            raise self.changed(str(exc)) from None
        except Exception:
            self._checked(pinned, lambda: None)
            raise
        try:
            pinned.verify()
        except FileReplaced as exc:
            raise self.changed(str(exc)) from None
        return out

    def read(self, path: Path | str, rgs: list[int], columns: list[str] | None = None,
             use_threads: bool = True) -> pa.Table:
        """Row groups ``rgs`` (``columns`` only; None: all) of a shard as one table, through its kept
        footer, checked to come from the file opened."""
        pf = self.footer(path)
        return self._checked(self._named[str(path)],
                             lambda: parquet.read_row_groups(pf, path, rgs, columns, use_threads=use_threads))

    def read_group(self, path: Path | str, rg: int, columns: list[str] | None = None) -> pa.Table:
        """Row group ``rg`` of a shard, as ``read`` reads several."""
        pf = self.footer(path)
        return self._checked(self._named[str(path)], lambda: parquet.read_row_group(pf, path, rg, columns))

    def read_sampled(self, path: Path | str, rgs: list[int], graph_id: str, columns: list[str]) -> pa.Table:
        """Row groups ``rgs`` (``columns`` only) of a shard, all of ``graph_id`` (``check_graph_groups``),
        for a sample. Their column chunks come through ``ShardFile.prefetched`` (remotely all at once,
        concurrently: a sample costs one round trip, not one per row group), then are decoded with
        page checksums verified as always."""
        pf = self.footer(path)
        check_graph_groups(pf.metadata, path, rgs, graph_id)
        pinned = self._named[str(path)]

        def read() -> pa.Table:
            source = pinned.prefetched(chunk_ranges(pf.metadata, rgs, columns))
            part = pf if source is None else pq.ParquetFile(source, metadata=pf.metadata,
                                                            page_checksum_verification=True)
            return parquet.read_row_groups(part, path, rgs, columns, use_threads=False)
        return self._checked(pinned, read)

    def fetcher(self, path: Path | str) -> Callable[[list[tuple[int, int]]], list[bytes]]:
        """``pages``' fetch of byte ranges of a shard (``ShardFile.read_ranges``: locally ``pread``s of
        the very file whose footer was read, remotely one concurrent ranged GET of that version). A file
        changed since it was opened is refused in one line (``changed``)."""
        self.footer(path)  # the footer first: the shard's id checked
        pinned = self._named[str(path)]

        def fetch(ranges: list[tuple[int, int]]) -> list[bytes]:
            try:
                return pinned.read_ranges(ranges)
            except FileReplaced as exc:
                raise self.changed(str(exc)) from None
        return fetch

    def codes_chunks(self, path: Path | str, rgs: list[int], graph_id: str) -> list[pages.Chunk]:
        """The ``codes`` chunks of row groups ``rgs`` of a shard (``pages.chunk_info``, read from its footer
        once and kept), which must hold ``graph_id`` alone (else ``BadShards``, as ``check_graph_groups``);
        ``pages.Unhandled`` for a chunk the direct page reader does not decode."""
        out = []
        for rg in rgs:
            key = (str(path), rg)
            chunk = self._chunks.get(key)
            if chunk is None:
                chunk = self._chunks[key] = pages.chunk_info(self.footer(path).metadata, rg)
            if chunk.graph_ids != (graph_id, graph_id):
                check_graph_groups(self.footer(path).metadata, path, [rg], graph_id)  # raises
            out.append(chunk)
        return out
