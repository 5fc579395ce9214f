"""Reading one Parquet shard file safely: opened with every page's CRC-32 checked, row groups read
with one-line errors naming the file and row group, the byte ranges of column chunks (for ranged
remote reads), typed column values as NumPy arrays, and the shard's recorded table and schema.

A remote read that fails for a reason unrelated to the shard's bytes (a denied GET, a lost connection)
is the store's one line (``io.store.request_failure``), never "corrupt".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import BadShards, one_line
from ..io.store import request_failure
from ..kernels.planes import join_columns, join_planes
from .schema import table_schema


def open_parquet(path: Path | str, source=None) -> pq.ParquetFile:
    """A shard opened for reading with every page's CRC-32 checked (``BadShards`` if it is no Parquet).
    ``source``: what to read instead of ``path`` (a remote shard's file object,
    ``ShardFile.source``); ``path`` then only names it, and a denied read is the store's one line."""
    try:
        return pq.ParquetFile(path if source is None else source, page_checksum_verification=True)
    except PermissionError as exc:
        if source is None:
            raise BadShards(f"{path}: not a readable Parquet file: {one_line(exc)}") from None
        raise request_failure(exc, str(path)) from None
    except (OSError, pa.ArrowException) as exc:
        raise BadShards(f"{path}: not a readable Parquet file: {one_line(exc)}") from None


STORE_FAILURES = (PermissionError, ConnectionError, TimeoutError)
"""Errors of a remote read that say nothing about the shard's bytes (a denied GET, a lost connection):
the store's one line (``io.store.request_failure``), never "corrupt". pyarrow re-raises them as they
came from the file object; a local open file does not raise them."""


def read_row_groups(pf: pq.ParquetFile, path: Path, rgs: list[int], columns: list[str] | None = None,
                    use_threads: bool = True) -> pa.Table:
    """Row groups ``rgs`` of an open shard as one table; a failed checksum or bad page → ``BadShards``.
    ``use_threads=False`` for a few small row groups (a thread pool costs more than it saves there)."""
    try:
        return pf.read_row_groups(rgs, columns=columns, use_threads=use_threads)
    except STORE_FAILURES as exc:
        raise request_failure(exc, str(path)) from None
    except (OSError, pa.ArrowException) as exc:
        for rg in rgs:  # name the row group at fault
            read_row_group(pf, path, rg, columns)
        raise BadShards(f"{path}: row groups {rgs[0]}..{rgs[-1]} are corrupt: {one_line(exc)}") from None


def read_row_group(pf: pq.ParquetFile, path: Path, rg: int, columns: list[str] | None = None) -> pa.Table:
    """Row group ``rg`` of an open shard; a failed page checksum or undecodable page → ``BadShards``."""
    try:
        return pf.read_row_group(rg, columns=columns)
    except STORE_FAILURES as exc:
        raise request_failure(exc, str(path)) from None
    except (OSError, pa.ArrowException) as exc:
        raise BadShards(f"{path}: row group {rg} is corrupt: {one_line(exc)}") from None


def chunk_ranges(meta: pq.FileMetaData, rgs: list[int], columns: list[str],
                 gap: int = 8192) -> list[tuple[int, int]]:
    """The byte ranges [start, end) of the column chunks of ``columns`` in row groups ``rgs`` (pages
    and their headers, dictionary page first), sorted, ranges less than ``gap`` bytes apart merged
    (pyarrow's own hole limit for pre-buffered reads)."""
    spans = []
    for rg in rgs:
        group = meta.row_group(rg)
        for c in range(group.num_columns):
            col = group.column(c)
            if col.path_in_schema.split(".")[0] not in columns:
                continue
            start = col.data_page_offset
            if col.has_dictionary_page and col.dictionary_page_offset:
                start = min(start, col.dictionary_page_offset)
            spans.append((start, start + col.total_compressed_size))
    return merge_ranges(spans, gap)


def merge_ranges(ranges: list[tuple[int, int]], gap: int) -> list[tuple[int, int]]:
    """Byte ranges [start, end) sorted, with those at most ``gap`` bytes apart joined (one read each)."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1] + gap:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


_FLOATS = {"halffloat": "float16", "float": "float32", "double": "float64"}
"""Arrow's names of its floating-point types → NumPy's."""


def flat(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """All leaf values of a (possibly nested, possibly chunked) list array as one NumPy array."""
    if isinstance(array, pa.ChunkedArray):
        if array.num_chunks == 0:  # no chunk at all: an empty array of its type
            return flat(array.combine_chunks())
        chunks = [flat(c) for c in array.chunks]
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
    while pa.types.is_list(array.type) or pa.types.is_fixed_size_list(array.type):
        array = array.flatten()
    if array.null_count == 0 and (pa.types.is_integer(array.type) or pa.types.is_floating(array.type)):
        # the values buffer as it is (zero-copy): pyarrow's to_numpy imports pandas on its first call,
        # ≈ 0.37 s in every process that reads a shard (each DataLoader or verify worker)
        dtype = np.dtype(_FLOATS.get(str(array.type), str(array.type)))  # int8 … uint64 spell alike
        return np.frombuffer(array.buffers()[1], dtype, len(array), array.offset * dtype.itemsize)
    return array.to_numpy(zero_copy_only=array.null_count == 0 and not pa.types.is_boolean(array.type))


def rows_of(table: pa.Table, name: str, value: str) -> pa.Table:
    """The rows of ``table`` whose string column ``name`` equals ``value``. Rows of one graph are one
    run in a sorted shard: they are found from the column's offsets and bytes and sliced (zero-copy);
    anything else goes through ``pyarrow.compute`` (which, like every Python → Arrow conversion,
    imports pandas on its first call: ≈ 0.37 s in each reading process)."""
    want = value.encode()
    hits = []
    base = 0
    for chunk in table.column(name).chunks:
        if len(chunk) and not chunk.null_count and pa.types.is_string(chunk.type):
            _, offsets_buf, data_buf = chunk.buffers()
            offsets = np.frombuffer(offsets_buf, np.int32, len(chunk) + 1, chunk.offset * 4)
            data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
            rows = np.flatnonzero(np.diff(offsets) == len(want))  # values of the right length
            if len(want) and len(rows):
                at = offsets[rows][:, None] + np.arange(len(want))
                rows = rows[(data[at] == np.frombuffer(want, np.uint8)).all(axis=1)]
            hits.append(rows + base)
        elif len(chunk):
            return table.filter(pc.equal(table.column(name), value))
        base += len(chunk)
    rows = np.concatenate(hits) if hits else np.zeros(0, np.int64)
    if len(rows) and rows[-1] - rows[0] + 1 != len(rows):  # not one run: let pyarrow filter
        return table.filter(pc.equal(table.column(name), value))
    return table.slice(int(rows[0]) if len(rows) else 0, len(rows))


def binary_bytes(column: pa.ChunkedArray) -> np.ndarray:
    """The values of a binary column, concatenated: (total bytes,) uint8 (zero-copy for a single chunk)."""
    parts = []
    for chunk in column.chunks:
        if len(chunk) == 0:
            continue
        offsets = np.frombuffer(chunk.buffers()[1], np.int32, len(chunk) + 1, chunk.offset * 4)
        data = chunk.buffers()[2]
        parts.append(np.frombuffer(data, np.uint8, int(offsets[-1] - offsets[0]), int(offsets[0])))
    return parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.empty(0, np.uint8)


def codes_rows(column: pa.ChunkedArray, k: int, columns: np.ndarray | None = None,
               nt: int | None = None) -> np.ndarray:
    """The layout ``codes`` of k configs (each nt·12 bytes, byte planes: ``kernels.planes``) → their
    stored codes (k, nt, 3) int32, or with ``columns`` (m,) int only those columns' codes (k, m, 3) int32,
    gathered while joined (``config_node_tie``: every node's codes). ``ValueError`` unless the values are
    k rows of one width in whole columns (``nt`` columns, if given); ``IndexError`` when a column is out
    of range."""
    lengths = pc.min_max(pc.binary_length(column)).as_py() if k else {"min": 0, "max": 0}
    want = "whole 12-byte columns" if nt is None else f"{12 * nt} bytes"
    if len(column) != k or lengths["min"] != lengths["max"] or lengths["min"] % 12 or \
            (nt is not None and lengths["min"] != 12 * nt):
        raise ValueError(f"codes values of {lengths['min']}..{lengths['max']} bytes in {len(column)} rows, "
                         f"expected {k} rows of {want}")
    data = binary_bytes(column).reshape(k, lengths["min"])
    return join_planes(data).reshape(k, -1, 3) if columns is None else join_columns(data, columns)


def shard_table(pf: pq.ParquetFile) -> str:
    """The ``table`` recorded in a shard's key-value metadata (``layout_graphs`` ...)."""
    meta = pf.schema_arrow.metadata or {}
    return meta.get(b"table", b"").decode(errors="replace")


def shard_version(pf: pq.ParquetFile) -> tuple[int, int]:
    """(major, minor) of the ``schema_version`` in a shard's key-value metadata ((0, 0) when absent or
    not MAJOR.MINOR)."""
    text = (pf.schema_arrow.metadata or {}).get(b"schema_version", b"").decode(errors="replace")
    major, _, minor = text.partition(".")
    return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else (0, 0)


def check_shard_schema(pf: pq.ParquetFile, path: Path, table: str) -> None:
    """``BadShards`` unless the shard holds ``table`` with every column of its schema file, of the
    same type and nullability (a newer minor version may add columns; a column whose schema entry says
    ``since`` a version newer than the shard's may be absent)."""
    if shard_table(pf) != table:
        raise BadShards(f"{path}: holds table {shard_table(pf)!r}, the manifest says {table!r}")
    have = pf.schema_arrow
    schema = table_schema(table)
    version = shard_version(pf)
    for want in schema.arrow:
        i = have.get_field_index(want.name)
        if i < 0 and schema.since(want.name) > version:
            continue
        if i < 0 or have.field(i).type != want.type or have.field(i).nullable != want.nullable:
            found = f"{have.field(i).type}{'' if have.field(i).nullable else ' not null'}" if i >= 0 else "missing"
            raise BadShards(f"{path}: column {want.name} is {found}, the {table} schema says {want.type}"
                            f"{'' if want.nullable else ' not null'}")


def check_graph_groups(meta: pq.FileMetaData, path: Path | str, rgs: list[int], graph_id: str) -> None:
    """``BadShards`` unless the ``graph_id`` statistics of every layout configs row group ``rgs`` of the
    shard ``meta`` describes say it holds ``graph_id`` alone: what a read of them returns is that graph's
    rows, checked on the footer of the file actually read (no column decoded)."""
    col = meta.schema.names.index("graph_id")
    for rg in rgs:
        stats = meta.row_group(rg).column(col).statistics
        if stats is None or not stats.has_min_max or stats.min != graph_id or stats.max != graph_id:
            held = "no graph_id statistics" if stats is None or not stats.has_min_max else \
                f"graph_id {stats.min!r}" + ("" if stats.min == stats.max else f"..{stats.max!r}")
            raise BadShards(f"{path}: row group {rg} holds {held}, where the configs of {graph_id!r} were "
                            "expected")
