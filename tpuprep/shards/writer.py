"""Writing Parquet/zstd shards: one part per graph from the workers, then a deterministic merge.

A build has two phases. Each task converts one layout file or a batch of tile files and writes, under
``<dst>/.tpuprep/parts/...``, the batch's ``configs`` rows as a finished Parquet shard and its
``graphs`` rows as a small Arrow IPC part. Then, per (collection, split), the parts are merged in
graph-id order into the final shards ``<dst>/<collection path>/{graphs,configs}/<split>-0000i-of-0000N``.
Because every part depends only on its input file and the options, and the merge only on the sorted
parts, the shards are byte-identical whatever the number of workers or the order they finished in.

Row groups: layout configs are cut at graph boundaries and every ``layout_rows_per_group(nt)`` configs
inside a graph (≈ 32 KiB of stored codes, at least 64 configs; fewer if ``row_group_bytes`` demands it), so that a reader can fetch a few sampled
configs by decompressing only the small row groups that hold them (``Dataset.sample_configs``); tile
configs and tile graph rows are batched, since tile graphs are tiny.
"""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from ..convert import ConvertedGraph
from ..faults import checkpoint
from ..io.files import sha256_file
from ..io.store import Store
from .layout import part_relpaths, shard_relpath
from .schema import SCHEMA_VERSION, table_schema
from .stamp import merged_id, shard_id, with_shard_id

TILE_GRAPHS_ROW_GROUP_BYTES = 8 << 20
TILE_CONFIGS_ROW_GROUP_ROWS = 1 << 20
LAYOUT_CONFIGS_ROW_GROUP_ROWS = 64
"""Fewest layout configs per row group (a graph's last group may hold fewer)."""
LAYOUT_CONFIGS_ROW_GROUP_CODE_BYTES = 32 << 10
"""Stored codes per layout row group (uncompressed): the unit of random access. A row group holds
max(``LAYOUT_CONFIGS_ROW_GROUP_ROWS``, this // (12 · nt)) configs, so a sampled config costs the
decompression of ≈ 32 KiB of codes whatever the graph (see benchmarks/RESULTS.md for the measurements:
smaller groups read faster but cost bytes, most on graphs with few stored columns)."""
LAYOUT_WRITE_SLICE_BYTES = 8 << 20
"""Stored codes per ``write_table`` call of a layout graph (whole row groups): the writer's working set."""
NOISY_SPREAD = 0.01
"""A duplicate group is *noisy* when its largest runtime exceeds its smallest by more than this share."""


# --------------------------------------------------------------------------- Arrow arrays


def _offsets(lengths: np.ndarray) -> pa.Array:
    out = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=out[1:])
    return pa.array(out)


def list_column(values: np.ndarray, lengths: Sequence[int], dtype: pa.DataType) -> pa.Array:
    """A list<...> array over flat ``values``: row i holds the next ``lengths[i]`` items.

    ``dtype`` is the list type; values (N, w) fill a list<fixed_size_list<T, w>>.
    """
    item = dtype.value_type
    flat = np.ascontiguousarray(values).reshape(-1)
    if pa.types.is_fixed_size_list(item):
        inner = pa.FixedSizeListArray.from_arrays(pa.array(flat, type=item.value_type), item.list_size)
    else:
        inner = pa.array(flat, type=item)
    return pa.ListArray.from_arrays(_offsets(np.asarray(lengths, np.int64)), inner, type=dtype)


def repeated_string(value: str, count: int) -> pa.Array:
    """A string array of ``count`` copies of ``value``, built from buffers (no per-row Python work)."""
    data = value.encode()
    offsets = (np.arange(count + 1, dtype=np.int32) * len(data)).astype(np.int32)
    return pa.StringArray.from_buffers(count, pa.py_buffer(offsets), pa.py_buffer(data * count))


def fixed_width_binary(rows: np.ndarray, max_chunk_bytes: int = 1 << 30) -> pa.ChunkedArray:
    """A binary column whose value i is the little-endian bytes of ``rows[i]`` (rows: (k, w) array).

    Built from buffers without per-row Python work, in chunks of ≤ ``max_chunk_bytes`` so that int32
    offsets never overflow.
    """
    rows = np.ascontiguousarray(rows, dtype=rows.dtype.newbyteorder("<"))
    k = rows.shape[0]
    width = rows.shape[1] * rows.dtype.itemsize if rows.ndim == 2 else 0
    step = max(1, max_chunk_bytes // max(width, 1))
    chunks = []
    for start in range(0, k, step):
        part = rows[start : start + step]
        offsets = np.arange(len(part) + 1, dtype=np.int32) * np.int32(width)
        chunks.append(pa.Array.from_buffers(pa.binary(), len(part),
                                            [None, pa.py_buffer(offsets), pa.py_buffer(part)]))
    return pa.chunked_array(chunks, type=pa.binary())


def _one_row_list(values: np.ndarray | None, dtype: pa.DataType) -> pa.Array:
    if values is None:
        return pa.nulls(1, type=dtype)
    values = np.asarray(values)
    return list_column(values, [values.shape[0]], dtype)


def group_runtime_spread(g: ConvertedGraph) -> tuple[np.ndarray, np.ndarray] | None:
    """(min, max) (c_u,) int64 of the original runtimes of each unique config's duplicate group, in
    ns; None on the test split (no runtimes)."""
    if g.config_runtime_original is None:
        return None
    u = g.num_unique_configs
    runtime = np.asarray(g.config_runtime_original, np.int64)
    lo = np.full(u, np.iinfo(np.int64).max, np.int64)
    hi = np.full(u, np.iinfo(np.int64).min, np.int64)
    np.minimum.at(lo, g.config_inverse, runtime)
    np.maximum.at(hi, g.config_inverse, runtime)
    return lo, hi


def quality_counts(g: ConvertedGraph) -> tuple[int, int | None]:
    """(duplicate groups, noisy duplicate groups) of a graph: groups of ≥ 2 original configs, and those
    among them whose largest runtime exceeds the smallest by more than ``NOISY_SPREAD`` (None on test)."""
    duplicates = int(np.count_nonzero(np.asarray(g.group_size) > 1))
    spread = group_runtime_spread(g)
    if spread is None:
        return duplicates, None
    lo, hi = spread
    noisy = (np.asarray(g.group_size) > 1) & (hi.astype(np.float64) > lo * (1.0 + NOISY_SPREAD))
    return duplicates, int(np.count_nonzero(noisy))


def graph_table(g: ConvertedGraph) -> pa.Table:
    """The one-row ``graphs`` table of a converted graph (layout or tile schema)."""
    kind = g.inp.kind
    schema = table_schema(f"{kind}_graphs").arrow
    inp = g.inp
    scalars = {
        "graph_id": inp.graph_id, "collection": inp.collection, "split": inp.split,
        "source_file": inp.relpath, "source_sha256": g.sha256, "source_bytes": inp.size,
        "fold": g.fold, "num_nodes_original": g.num_nodes_original,
        "num_edges_original": g.num_edges_original, "num_nodes": len(g.node_index),
        "num_edges": len(g.edge_index), "num_configs": g.num_configs,
        "num_unique_configs": g.num_unique_configs, "num_repad_anomalies": g.num_repad_anomalies,
        "dimensions_undecided": g.dimensions_undecided,
    }
    scalars["num_duplicate_groups"], scalars["num_noisy_groups"] = quality_counts(g)
    arrays = {
        "node_index": g.node_index, "node_feat": g.node_feat, "node_opcode": g.node_opcode,
        "edge_index": g.edge_index, "config_inverse": g.config_inverse,
        "config_runtime_original": g.config_runtime_original,
    }
    if kind == "layout":
        tie = g.config_columns.tie
        scalars["num_config_nodes"] = len(g.node_config_ids)
        scalars["num_config_columns"] = g.config_columns.num_columns
        arrays |= {"node_config_ids": g.node_config_ids, "node_splits": g.node_splits, "config_node_tie": tie}
    else:
        arrays["config_runtime_normalizers_original"] = g.config_runtime_normalizers_original
    columns = []
    for field in schema:
        if field.name in scalars:
            columns.append(pa.array([scalars[field.name]], type=field.type))
        else:
            columns.append(_one_row_list(arrays[field.name], field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def config_table(g: ConvertedGraph, start: int = 0, stop: int | None = None,
                 spread: tuple[np.ndarray, np.ndarray] | None = None) -> pa.Table:
    """The ``configs`` table of a converted graph's unique configs start..stop−1 (default: all), one row
    per config in config_id order; a layout row's codes hold the graph's stored tie columns only.
    ``spread``: the graph's ``group_runtime_spread`` if already computed."""
    kind = g.inp.kind
    schema = table_schema(f"{kind}_configs").arrow
    stop = g.num_unique_configs if stop is None else min(stop, g.num_unique_configs)
    u = max(0, stop - start)
    part = slice(start, stop)
    columns = {
        "graph_id": repeated_string(g.inp.graph_id, u),
        "config_id": pa.array(np.arange(start, stop, dtype=np.int32)),
        "runtime": pa.nulls(u, pa.int64()) if g.config_runtime is None else pa.array(g.config_runtime[part], pa.int64()),
        "group_size": pa.array(g.group_size[part], pa.int32()),
        "first_index": pa.array(g.first_index[part], pa.int32()),
    }
    spread = group_runtime_spread(g) if spread is None else spread
    columns["runtime_spread"] = (pa.nulls(u, pa.int64()) if spread is None
                                 else pa.array(spread[1][part] - spread[0][part], pa.int64()))
    if kind == "layout":
        columns["codes"] = fixed_width_binary(g.config_columns.stored_planes(start, stop))
    else:
        normalizers = g.config_runtime_normalizers
        columns["normalizer"] = (pa.nulls(u, pa.int64()) if normalizers is None
                                 else pa.array(normalizers[part], pa.int64()))
        columns["config_feat"] = pa.FixedSizeListArray.from_arrays(
            pa.array(np.ascontiguousarray(g.config_feat[part]).reshape(-1), pa.float32()), 24)
    return pa.Table.from_arrays([_chunked(columns[f.name]) for f in schema], schema=schema)


def _chunked(array: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray:
    return array if isinstance(array, pa.ChunkedArray) else pa.chunked_array([array])


# --------------------------------------------------------------------------- files


def parquet_options(table: str, compression_level: int) -> dict:
    """The ``pyarrow.parquet`` writer options of a shard of ``table``: page index, stored Arrow schema,
    and a CRC-32 checksum in every page header, which the reader verifies (a flipped byte fails loudly
    instead of decoding to wrong values), plus the table's per-column encodings, statistics and
    compression (zstd at ``compression_level`` unless the schema stores a column uncompressed)."""
    return {"write_page_index": True, "write_page_checksum": True, "store_schema": True,
            **table_schema(table).parquet_options(compression_level)}


def _writer(path: Path, table: str, compression_level: int, shard_id: str | None = None) -> pq.ParquetWriter:
    """A Parquet writer for one shard of ``table`` (``parquet_options``), the shard id in its metadata."""
    schema = with_shard_id(table_schema(table).arrow, shard_id)
    return pq.ParquetWriter(path, schema, **parquet_options(table, compression_level))


PART_OPTIONS = ipc.IpcWriteOptions(compression="lz4")


@dataclass
class PartFiles:
    """What one task wrote for a batch of graphs of one (collection, split), in graph-id order.

    ``graphs``: an Arrow IPC file (LZ4) with one record batch per graph row, merged into ``graphs``
    shards later (they are small). ``configs``: already a final ``configs`` shard (Parquet/zstd, row
    groups cut at graph boundaries), which the merge only links into place under its
    ``<split>-i-of-N`` name; its sha256, rows and row groups are computed here, in the worker, and
    ``configs_id`` is the shard id in its footer (``stamp.part_id``; None if written without one).
    Paths are relative to the staging folder.
    """

    graphs: str
    configs: str
    graph_ids: list[str]
    graphs_bytes: int
    configs_rows: int
    configs_row_groups: int
    configs_file_bytes: int
    configs_sha256: str
    configs_id: str | None = None


def layout_rows_per_group(num_columns: int) -> int:
    """Configs per row group of a layout graph with ``num_columns`` stored codes columns (nt)."""
    return max(LAYOUT_CONFIGS_ROW_GROUP_ROWS, LAYOUT_CONFIGS_ROW_GROUP_CODE_BYTES // max(1, 12 * num_columns))


def rows_per_group(table: pa.Table, budget_bytes: int) -> int:
    """Rows per row group so that one group stays under ``budget_bytes`` uncompressed."""
    if table.num_rows == 0:
        return 1
    per_row = max(1, table.nbytes // table.num_rows)
    return max(1, budget_bytes // per_row)


def _write_ipc(path: Path, schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> int:
    size = 0
    with ipc.new_file(path, schema, options=PART_OPTIONS) as w:
        for batch in batches:
            w.write_batch(batch)
            size += batch.nbytes
    return size


def _write_layout_configs(w: pq.ParquetWriter, g: ConvertedGraph, row_group_bytes: int) -> None:
    """Write a layout graph's configs in slices of whole row groups (≈ ``LAYOUT_WRITE_SLICE_BYTES`` of
    codes each), so the stored codes are never copied whole; the row groups are those of one
    ``write_table`` of the whole table."""
    u = g.num_unique_configs
    spread = group_runtime_spread(g)
    probe = config_table(g, 0, min(u, LAYOUT_CONFIGS_ROW_GROUP_ROWS), spread)
    rows = min(layout_rows_per_group(g.config_columns.num_columns), rows_per_group(probe, row_group_bytes))
    step = rows * max(1, LAYOUT_WRITE_SLICE_BYTES // max(1, rows * 12 * g.config_columns.num_columns))
    if u == 0:
        w.write_table(probe, row_group_size=rows)
    for start in range(0, u, step):
        w.write_table(config_table(g, start, start + step, spread), row_group_size=rows)


def _write_configs_shard(path: Path, graphs: Sequence[ConvertedGraph], row_group_bytes: int,
                         compression_level: int, part_id: str | None = None) -> None:
    kind = graphs[0].inp.kind
    with _writer(path, f"{kind}_configs", compression_level, part_id) as w:
        if kind == "layout":  # row groups never span two graphs
            for g in graphs:
                _write_layout_configs(w, g, row_group_bytes)
        else:  # tile configs are tiny: the whole batch in as few row groups as the budget allows
            t = pa.concat_tables([config_table(g) for g in graphs])
            w.write_table(t, row_group_size=min(TILE_CONFIGS_ROW_GROUP_ROWS, rows_per_group(t, row_group_bytes)))


def write_parts(graphs: Sequence[ConvertedGraph], staging: Store, name: str, row_group_bytes: int,
                compression_level: int, *, part_id: str | None = None) -> PartFiles:
    """Write the part files of a batch of converted graphs (same kind, collection and split) under
    ``staging``, the configs part first; each appears whole (``Store.writing``). ``part_id``
    (``stamp.part_id``) goes into the configs part's footer as its shard id."""
    kind = graphs[0].inp.kind
    rel_g, rel_c = part_relpaths(graphs[0].inp.relpath, name)
    with staging.writing(rel_c) as path:
        _write_configs_shard(path, graphs, row_group_bytes, compression_level, part_id)
        meta = pq.ParquetFile(path).metadata
        size, sha256 = path.stat().st_size, sha256_file(path)
    with staging.writing(rel_g) as path:
        batches = (b for g in graphs for b in graph_table(g).to_batches())
        graphs_bytes = _write_ipc(path, table_schema(f"{kind}_graphs").arrow, batches)
    return PartFiles(rel_g, rel_c, [g.inp.graph_id for g in graphs], graphs_bytes, meta.num_rows,
                     meta.num_row_groups, size, sha256, shard_id(meta.metadata))


@dataclass
class ShardInfo:
    """One written shard, as listed in the manifest."""

    path: str
    table: str
    collection: str
    split: str
    rows: int
    row_groups: int
    bytes: int
    sha256: str
    first_graph: str
    last_graph: str
    shard_id: str | None = None  # in the shard's footer too (shards.stamp); None: written without one


def plan_shards(sizes: Sequence[int], shard_bytes: int) -> list[range]:
    """Cut a sequence of part sizes (bytes, uncompressed) into consecutive shards of ≤ shard_bytes
    (a part larger than that gets a shard of its own)."""
    shards: list[range] = []
    start, total = 0, 0
    for i, size in enumerate(sizes):
        if i > start and total + size > shard_bytes:
            shards.append(range(start, i))
            start, total = i, 0
        total += size
    if len(sizes):
        shards.append(range(start, len(sizes)))
    return shards


def _batched(tables: Iterator[pa.Table], max_rows: int, max_bytes: int) -> Iterator[pa.Table]:
    batch: list[pa.Table] = []
    rows = size = 0
    for t in tables:
        if batch and (rows + t.num_rows > max_rows or size + t.nbytes > max_bytes):
            yield pa.concat_tables(batch)
            batch, rows, size = [], 0, 0
        batch.append(t)
        rows += t.num_rows
        size += t.nbytes
    if batch:
        yield pa.concat_tables(batch)


def _part_batches(path: Path) -> Iterator[pa.Table]:
    with ipc.open_file(path) as reader:
        for i in range(reader.num_record_batches):
            yield pa.Table.from_batches([reader.get_batch(i)])


def _configs_shards(kind: str, collection: str, split: str, parts: Sequence[PartFiles]) -> list[ShardInfo]:
    """The ``configs`` shards of one (collection, split): part i becomes shard i of N as it is (no
    re-encoding), so its sha256, rows and row groups are those the worker computed."""
    return [ShardInfo(path=shard_relpath(collection, "configs", split, i, len(parts)), table=f"{kind}_configs",
                      collection=collection, split=split, rows=p.configs_rows, row_groups=p.configs_row_groups,
                      bytes=p.configs_file_bytes, sha256=p.configs_sha256, first_graph=p.graph_ids[0],
                      last_graph=p.graph_ids[-1], shard_id=p.configs_id)
            for i, p in enumerate(parts)]


def _write_graphs_shard(path: Path, kind: str, chosen: Sequence[PartFiles], graph_parts: Sequence[Path],
                        compression_level: int) -> int:
    """Write one ``graphs`` shard at ``path`` from the graph parts ``chosen`` (their IPC files at the
    local ``graph_parts``); returns its rows. One row group per layout graph, ≤ 8 MB row groups for
    tile. Its shard id is ``merged_id`` of the parts' ids."""
    rows = 0
    sid = merged_id([p.configs_id for p in chosen])
    with _writer(path, f"{kind}_graphs", compression_level, sid) as w:
        pieces = (t for part in graph_parts for t in _part_batches(part))
        if kind == "tile":
            pieces = _batched(pieces, 1 << 30, TILE_GRAPHS_ROW_GROUP_BYTES)
        for t in pieces:
            w.write_table(t, row_group_size=max(t.num_rows, 1))
            rows += t.num_rows
    return rows


def _graphs_info(path: Path, rel: str, kind: str, collection: str, split: str, chosen: Sequence[PartFiles],
                 rows: int) -> ShardInfo:
    meta = pq.ParquetFile(path).metadata
    return ShardInfo(path=rel, table=f"{kind}_graphs", collection=collection, split=split, rows=rows,
                     row_groups=meta.num_row_groups, bytes=path.stat().st_size, sha256=sha256_file(path),
                     first_graph=chosen[0].graph_ids[0], last_graph=chosen[-1].graph_ids[-1],
                     shard_id=shard_id(meta.metadata))


def merge_parts(
    kind: str,
    collection: str,
    split: str,
    parts: Sequence[PartFiles],
    staging: Store,
    dst: Store,
    *,
    shard_bytes: int,
    compression_level: int,
) -> list[ShardInfo]:
    """Place the shards of one (collection, split) from its parts, given in graph-id order.

    ``configs``: each part's configs file becomes shard i of N as it is (``Store.copy``: a hard link
    locally, a server-side copy in an object store; no re-encoding, its shard id is in its footer
    already). ``graphs``: the rows of consecutive parts are written into shards of ≤ ``shard_bytes``
    (uncompressed), one row group per layout graph and ≤ 8 MB row groups for tile, each with the
    ``merged_id`` of its parts' ids (``shards.stamp``); on an object store the graph parts are fetched
    to a local temporary folder, merged there and the shard uploaded (``Store.reading``/``writing``).
    """
    infos = _configs_shards(kind, collection, split, parts)
    for p, info in zip(parts, infos, strict=True):
        dst.copy(posixpath.relpath(staging.path(p.configs), dst.root), info.path)
        checkpoint("shard")
    plan = plan_shards([p.graphs_bytes for p in parts], shard_bytes)
    for i, members in enumerate(plan):
        rel = shard_relpath(collection, "graphs", split, i, len(plan))
        chosen = [parts[j] for j in members]
        with contextlib.ExitStack() as stack:
            graph_parts = [stack.enter_context(staging.reading(p.graphs)) for p in chosen]
            with dst.writing(rel) as path:
                rows = _write_graphs_shard(path, kind, chosen, graph_parts, compression_level)
                infos.append(_graphs_info(path, rel, kind, collection, split, chosen, rows))
        checkpoint("shard")
    return infos


def shard_record(info: ShardInfo) -> dict:
    return asdict(info)


__all__ = [
    "LAYOUT_CONFIGS_ROW_GROUP_CODE_BYTES", "LAYOUT_CONFIGS_ROW_GROUP_ROWS", "NOISY_SPREAD", "SCHEMA_VERSION", "PartFiles", "ShardInfo", "config_table", "graph_table", "layout_rows_per_group", "list_column",
    "merge_parts", "plan_shards", "quality_counts", "repeated_string", "shard_record", "write_parts",
]
