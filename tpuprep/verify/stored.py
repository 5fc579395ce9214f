"""A layout graph's ``configs`` rows read by ``verify`` itself with pyarrow, as stored: the byte planes
of every ``codes`` value turned into int32 codes by plain NumPy, never decoded to layout values.

The rows are found from the configs shards' footers (the ``graph_id`` statistics of each row group,
as docs/spec.md §3 promises them: a layout row group holds one graph), then read in blocks of
consecutive row groups, only the columns the checks compare, every page's CRC-32 verified
(``Dataset.open_shard``). The shard-side checks (``verify.shards``) read the same files' ``graph_id``
and ``config_id`` columns themselves: that every row of a graph is where its footer says and
nowhere else is theirs to find.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import BadShards
from ..shards.parquet import flat, read_row_groups
from ..shards.reader import Dataset, GraphRecord
from .reference import codes_from_planes

COLUMNS = ["config_id", "runtime", "runtime_spread", "group_size", "first_index", "codes"]
"""The layout ``configs`` columns a graph's check reads (``graph_id`` is the shard-side checks')."""

PER_CONFIG = ("runtime", "runtime_spread", "group_size", "first_index")


@dataclass
class StoredBlock:
    """Consecutive configs rows of one graph: ``config_id`` (k,) int64 as stored; ``codes`` (k, 3·nt)
    int32, the stored byte planes joined (column s, block t at 3·s + t); ``columns``: runtime,
    runtime_spread (k,) int64 ns, or None when the block holds a null (test split), group_size,
    first_index (k,) int32."""

    config_id: np.ndarray
    codes: np.ndarray
    columns: dict[str, np.ndarray | None]


class _Footers:
    """Per configs shard of an open ``Dataset``: the open file and, per row group, its graph_id range and
    rows (read from the footer once per process)."""

    def __init__(self, ds: Dataset):
        self._ds = weakref.ref(ds)  # a strong reference would keep the key of _FOOTERS, and its files, alive
        self.files: dict[int, tuple[Path | str, object, list[tuple[str | None, str | None, int]]]] = {}

    def shard(self, i: int):
        if i not in self.files:
            ds = self._ds()
            path = ds.shard_path(i)
            pf = ds.open_shard(path)
            meta = pf.metadata
            col = meta.schema.names.index("graph_id")
            groups = []
            for rg in range(meta.num_row_groups):
                stats = meta.row_group(rg).column(col).statistics
                known = stats is not None and stats.has_min_max
                groups.append((stats.min if known else None, stats.max if known else None,
                               meta.row_group(rg).num_rows))
            self.files[i] = (path, pf, groups)
        return self.files[i]


_FOOTERS: weakref.WeakKeyDictionary[Dataset, _Footers] = weakref.WeakKeyDictionary()


def row_groups(ds: Dataset, g: GraphRecord) -> list[tuple[int, int, int]]:
    """(shard index, row group, rows) of every configs row group of layout graph ``g``, in file order.
    ``BadShards`` when a row group that may hold it has no ``graph_id`` statistics or also holds
    another graph (a layout configs row group holds one graph: docs/spec.md §3)."""
    footers = _FOOTERS.get(ds)
    if footers is None:
        footers = _FOOTERS[ds] = _Footers(ds)
    gid, found = g.graph_id, []
    for i, shard in enumerate(ds.manifest["shards"]):
        if shard["collection"] != g.collection or shard["split"] != g.split or shard["table"] != "layout_configs" \
                or not shard["first_graph"] <= gid <= shard["last_graph"]:
            continue
        path, _, groups = footers.shard(i)
        for rg, (lo, hi, rows) in enumerate(groups):
            if lo is None and rows:
                raise BadShards(f"{path}: row group {rg} has no graph_id statistics")
            if lo is None or not lo <= gid <= hi:
                continue
            if lo != hi:
                raise BadShards(f"{path}: row group {rg} holds graph_id {lo!r}..{hi!r}, where the configs of "
                                f"{gid!r} were expected alone")
            found.append((i, rg, rows))
    return found


def int_values(column: pa.Array | pa.ChunkedArray) -> np.ndarray | None:
    """An integer Arrow column as a NumPy array (None when it holds a null), read from its buffers by
    ``shards.parquet.flat`` (not ``to_numpy``, which imports pandas in every process)."""
    return None if column.null_count else flat(column)


def _int_column(table: pa.Table, name: str) -> np.ndarray | None:
    return int_values(table.column(name))


def _plane_bytes(column: pa.ChunkedArray, rows: int, width: int, where: str) -> np.ndarray:
    """The ``codes`` values of ``rows`` rows, each ``width`` bytes, as (rows, width) uint8; ``BadShards``
    (the words ``codes values of``) for another number of rows or a value of another length."""
    lengths = pc.binary_length(column) if rows else None
    found = pc.min_max(lengths).as_py() if rows else {"min": width, "max": width}
    if len(column) != rows or column.null_count or found["min"] != width or found["max"] != width:
        raise BadShards(f"{where}: codes values of {found['min']}..{found['max']} bytes in {len(column)} rows, "
                        f"expected {rows} rows of {width} bytes")
    parts = []
    for chunk in column.chunks:
        if len(chunk):
            offsets = np.frombuffer(chunk.buffers()[1], np.int32, len(chunk) + 1, chunk.offset * 4)
            parts.append(np.frombuffer(chunk.buffers()[2], np.uint8, int(offsets[-1] - offsets[0]), int(offsets[0])))
    data = parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.empty(0, np.uint8)
    return data.reshape(rows, width)


def stored_blocks(ds: Dataset, g: GraphRecord, nt: int, block_bytes: int) -> Iterator[StoredBlock]:
    """The configs rows of layout graph ``g`` (``nt`` stored columns, 12·nt bytes of codes a row) in
    file order, in blocks of whole row groups holding about ``block_bytes`` of codes each (at least one
    row group). ``BadShards`` naming the shard for rows that cannot be read as stored."""
    groups = row_groups(ds, g)
    width = 12 * nt
    footers = _FOOTERS[ds]
    start = 0
    while start < len(groups):
        i = groups[start][0]
        stop, size = start, 0
        while stop < len(groups) and groups[stop][0] == i and (stop == start or size + groups[stop][2] * width <= block_bytes):
            size += groups[stop][2] * width
            stop += 1
        path, pf, _ = footers.shard(i)
        rgs = [rg for _, rg, _ in groups[start:stop]]
        table = read_row_groups(pf, path, rgs, COLUMNS, use_threads=False)
        where = f"{path}: row groups {rgs[0]}..{rgs[-1]} of {g.graph_id}"
        ids = _int_column(table, "config_id")
        if ids is None:
            raise BadShards(f"{where}: config_id holds nulls")
        planes = _plane_bytes(table.column("codes"), table.num_rows, width, where)
        yield StoredBlock(ids.astype(np.int64), codes_from_planes(planes),
                          {name: _int_column(table, name) for name in PER_CONFIG})
        start = stop
