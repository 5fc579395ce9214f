"""Writing Parquet/zstd shards: one part per graph from the workers, then a deterministic merge.

A build has two phases. Each task converts one layout file or a batch of tile files and writes the
graphs' ``graphs`` rows and ``configs`` rows as *part* files (Arrow IPC, ``<dst>/.tpuprep/parts/...``). Then, per (collection, split), the parts are merged in
graph-id order into the final shards ``<dst>/<collection path>/{graphs,configs}/<split>-0000i-of-0000N``.
Because every part depends only on its input file and the options, and the merge only on the sorted
parts, the shards are byte-identical whatever the number of workers or the order they finished in.

Row groups: layout configs are cut at graph boundaries (and at ``row_group_bytes`` inside a large
graph); tile configs and tile graph rows are batched, since tile graphs are tiny.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from .convert import ConvertedGraph
from .faults import checkpoint
from .schema import SCHEMA_VERSION, table_schema

TILE_GRAPHS_ROW_GROUP_BYTES = 8 << 20
TILE_CONFIGS_ROW_GROUP_ROWS = 1 << 20


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
    }
    arrays = {
        "node_index": g.node_index, "node_feat": g.node_feat, "node_opcode": g.node_opcode,
        "edge_index": g.edge_index, "config_inverse": g.config_inverse,
        "config_runtime_original": g.runtime_original,
    }
    if kind == "layout":
        scalars["num_config_nodes"] = len(g.node_config_ids)
        arrays |= {"node_config_ids": g.node_config_ids, "node_splits": g.node_splits}
    else:
        arrays["config_runtime_normalizers_original"] = g.normalizer_original
    columns = []
    for field in schema:
        if field.name in scalars:
            columns.append(pa.array([scalars[field.name]], type=field.type))
        else:
            columns.append(_one_row_list(arrays[field.name], field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def config_table(g: ConvertedGraph) -> pa.Table:
    """The ``configs`` table of a converted graph: one row per unique config, in config_id order."""
    kind = g.inp.kind
    schema = table_schema(f"{kind}_configs").arrow
    u = g.num_unique_configs
    columns = {
        "graph_id": repeated_string(g.inp.graph_id, u),
        "config_id": pa.array(np.arange(u, dtype=np.int32)),
        "runtime": pa.nulls(u, pa.int64()) if g.runtime is None else pa.array(g.runtime, pa.int64()),
        "group_size": pa.array(g.group_size, pa.int32()),
        "first_index": pa.array(g.first_index, pa.int32()),
    }
    if kind == "layout":
        columns["codes"] = fixed_width_binary(g.codes.reshape(u, -1))
    else:
        columns["normalizer"] = pa.nulls(u, pa.int64()) if g.normalizer is None else pa.array(g.normalizer, pa.int64())
        columns["config_feat"] = pa.FixedSizeListArray.from_arrays(
            pa.array(np.ascontiguousarray(g.config_feat).reshape(-1), pa.float32()), 24)
    return pa.Table.from_arrays([_chunked(columns[f.name]) for f in schema], schema=schema)


def _chunked(array: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray:
    return array if isinstance(array, pa.ChunkedArray) else pa.chunked_array([array])


# --------------------------------------------------------------------------- files


def _writer(path: Path, table: str, compression_level: int) -> pq.ParquetWriter:
    ts = table_schema(table)
    return pq.ParquetWriter(
        path, ts.arrow, compression="zstd", compression_level=compression_level,
        write_page_index=True, store_schema=True, **ts.parquet_options(),
    )


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


PART_OPTIONS = ipc.IpcWriteOptions(compression="lz4")


@dataclass
class PartFiles:
    """The two part files of a batch of graphs of one (collection, split), in graph-id order.

    Arrow IPC files (LZ4), cheap to write and read back; paths are relative to the staging folder.
    ``graphs`` holds one record batch per graph; ``configs`` one or more record batches per graph,
    each at most one row group of the final shard.
    """

    graphs: str
    configs: str
    graph_ids: list[str]
    graphs_bytes: int
    configs_bytes: int


def rows_per_group(table: pa.Table, budget_bytes: int) -> int:
    """Rows per row group so that one group stays under ``budget_bytes`` uncompressed."""
    if table.num_rows == 0:
        return 1
    per_row = max(1, table.nbytes // table.num_rows)
    return max(1, budget_bytes // per_row)


def _write_ipc(path: Path, schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp(path)
    size = 0
    with ipc.new_file(tmp, schema, options=PART_OPTIONS) as w:
        for batch in batches:
            w.write_batch(batch)
            size += batch.nbytes
    os.replace(tmp, path)
    return size


def write_parts(graphs: Sequence[ConvertedGraph], staging: Path, name: str, row_group_bytes: int) -> PartFiles:
    """Write the part files of a batch of converted graphs (same kind, collection and split)."""
    kind = graphs[0].inp.kind
    folder = "parts/" + graphs[0].inp.relpath.rsplit("/", 1)[0]

    def graph_batches() -> Iterator[pa.RecordBatch]:
        for g in graphs:
            yield from graph_table(g).to_batches()

    def config_batches() -> Iterator[pa.RecordBatch]:
        for g in graphs:
            t = config_table(g)
            step = rows_per_group(t, row_group_bytes)
            for start in range(0, max(t.num_rows, 1), step):
                yield from t.slice(start, step).combine_chunks().to_batches()

    rel_g, rel_c = f"{folder}/{name}.graphs.arrow", f"{folder}/{name}.configs.arrow"
    configs_bytes = _write_ipc(staging / rel_c, table_schema(f"{kind}_configs").arrow, config_batches())
    graphs_bytes = _write_ipc(staging / rel_g, table_schema(f"{kind}_graphs").arrow, graph_batches())
    return PartFiles(rel_g, rel_c, [g.inp.graph_id for g in graphs], graphs_bytes, configs_bytes)


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


def _part_batches(staging: Path, rel: str) -> Iterator[pa.Table]:
    with ipc.open_file(staging / rel) as reader:
        for i in range(reader.num_record_batches):
            yield pa.Table.from_batches([reader.get_batch(i)])


def merge_parts(
    kind: str,
    collection: str,
    split: str,
    parts: Sequence[PartFiles],
    staging: Path,
    dst: Path,
    *,
    shard_bytes: int,
    row_group_bytes: int,
    compression_level: int,
) -> list[ShardInfo]:
    """Merge the parts of one (collection, split), given in graph-id order, into shards."""
    coll_dir = dst.joinpath(*collection.split(":"))
    infos: list[ShardInfo] = []
    for table_kind in ("graphs", "configs"):
        table = f"{kind}_{table_kind}"
        sizes = [getattr(p, f"{table_kind}_bytes") for p in parts]
        plan = plan_shards(sizes, shard_bytes)
        out_dir = coll_dir / table_kind
        out_dir.mkdir(parents=True, exist_ok=True)
        for i, members in enumerate(plan):
            name = f"{split}-{i:05d}-of-{len(plan):05d}.parquet"
            path = out_dir / name
            tmp = _tmp(path)
            rows = 0
            chosen = [parts[j] for j in members]
            with _writer(tmp, table, compression_level) as w:
                pieces = (t for p in chosen for t in _part_batches(staging, getattr(p, table_kind)))
                if kind == "tile":
                    limit = (TILE_GRAPHS_ROW_GROUP_BYTES if table_kind == "graphs" else row_group_bytes)
                    max_rows = 1 << 30 if table_kind == "graphs" else TILE_CONFIGS_ROW_GROUP_ROWS
                    pieces = _batched(pieces, max_rows, limit)
                for t in pieces:
                    w.write_table(t, row_group_size=max(t.num_rows, 1))
                    rows += t.num_rows
            os.replace(tmp, path)
            checkpoint("shard")
            meta = pq.ParquetFile(path).metadata
            infos.append(ShardInfo(
                path=path.relative_to(dst).as_posix(), table=table, collection=collection, split=split,
                rows=rows, row_groups=meta.num_row_groups, bytes=path.stat().st_size,
                sha256=sha256_of(path), first_graph=chosen[0].graph_ids[0], last_graph=chosen[-1].graph_ids[-1],
            ))
    return infos


def shard_record(info: ShardInfo) -> dict:
    return asdict(info)


__all__ = [
    "SCHEMA_VERSION", "PartFiles", "ShardInfo", "config_table", "graph_table", "list_column",
    "merge_parts", "plan_shards", "repeated_string", "shard_record", "write_parts",
]
