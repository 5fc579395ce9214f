"""Reading shards: ``open_dataset(path)`` → ``Dataset``, ``Dataset.load_graph(id)`` → ``GraphRecord``.

Only pyarrow is used. A graph's configs are found through the Parquet row-group statistics on
``graph_id``, so loading one layout graph decompresses only that graph's row groups. Arrays come back
as NumPy views of the Arrow buffers where Arrow allows it (no per-element Python work).
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..kernels.base7 import decode_base7
from ..tpugraphs import collection_kind, graph_fold
from .layout import MANIFEST
from .manifest import read_manifest


def _flat(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """All leaf values of a (possibly nested, possibly chunked) list array as one NumPy array."""
    if isinstance(array, pa.ChunkedArray):
        chunks = [_flat(c) for c in array.chunks]
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
    while pa.types.is_list(array.type) or pa.types.is_fixed_size_list(array.type):
        array = array.flatten()
    return array.to_numpy(zero_copy_only=array.null_count == 0 and not pa.types.is_boolean(array.type))


def binary_rows(column: pa.ChunkedArray, dtype: str = "<i4") -> np.ndarray:
    """The values of a binary column of equal-width rows, concatenated as one flat NumPy array
    (zero-copy for a single chunk)."""
    parts = []
    for chunk in column.chunks:
        if len(chunk) == 0:
            continue
        offsets = np.frombuffer(chunk.buffers()[1], np.int32, len(chunk) + 1, chunk.offset * 4)
        data = chunk.buffers()[2]
        parts.append(np.frombuffer(data, np.uint8, int(offsets[-1] - offsets[0]), int(offsets[0])))
    raw = parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.empty(0, np.uint8)
    return raw.view(np.dtype(dtype)).astype(np.dtype(dtype).newbyteorder("="), copy=False)


def _list_cell(table: pa.Table, column: str, row: int, width: int | None = None) -> np.ndarray | None:
    col = table.column(column)
    cell = col.slice(row, 1)
    if cell.null_count:
        return None
    values = _flat(cell.combine_chunks() if cell.num_chunks != 1 else cell.chunk(0))
    return values.reshape(-1, width) if width else values


@dataclass
class GraphRecord:
    """One graph as stored (SPEC §4). Shapes: n' kept nodes, m' kept edges, nc configurable nodes,
    c original configs, c_u unique configs. Runtimes in ns.

    node_feat (n', 140) float32; node_opcode (n',) uint8; edge_index (m', 2) int32;
    node_index (n',) int32; node_config_ids (nc,) int32 and node_splits (s,) int32 (layout, else None);
    config_runtime (c_u,) int64 (None on test); group_size, first_index (c_u,) int32;
    config_inverse (c,) int32; config_runtime_original (c,) int64 (None on test);
    config_codes (c_u, nc, 3) int32 (layout, else None); config_feat (c_u, 24) float32,
    config_runtime_normalizers (c_u,) int64 and config_runtime_normalizers_original (c,) int64
    (tile, normalizers None on test).
    """

    graph_id: str
    collection: str
    split: str
    fold: int
    source_file: str
    node_feat: np.ndarray
    node_opcode: np.ndarray
    edge_index: np.ndarray
    node_index: np.ndarray
    config_runtime: np.ndarray | None
    group_size: np.ndarray
    first_index: np.ndarray
    config_inverse: np.ndarray
    config_runtime_original: np.ndarray | None
    node_config_ids: np.ndarray | None = None
    node_splits: np.ndarray | None = None
    config_codes: np.ndarray | None = None
    config_feat: np.ndarray | None = None
    config_runtime_normalizers: np.ndarray | None = None
    config_runtime_normalizers_original: np.ndarray | None = None

    @property
    def kind(self) -> str:
        return collection_kind(self.collection)

    @property
    def num_configs(self) -> int:
        return int(self.config_inverse.shape[0])

    @property
    def num_unique_configs(self) -> int:
        return int(self.group_size.shape[0])

    def node_config_feat(self, rows: np.ndarray | list[int] | None = None) -> np.ndarray:
        """Decoded layouts (k, nc, 18) int8 of unique configs ``rows`` in the order given (all if None)."""
        if self.config_codes is None:
            raise ValueError(f"{self.graph_id} is a tile graph: it has config_feat, not node_config_feat")
        codes = self.config_codes if rows is None else self.config_codes[np.asarray(rows, dtype=np.int64)]
        return decode_base7(codes)


class _ShardIndex:
    """Where each graph of one (collection, split) lives: graphs row and configs row groups."""

    def __init__(self, root: Path, graph_shards: list[str], config_shards: list[str]):
        self.root = root
        self.graph_rows: dict[str, tuple[str, int, int]] = {}
        for rel in graph_shards:
            pf = pq.ParquetFile(root / rel)
            for rg in range(pf.metadata.num_row_groups):
                ids = pf.read_row_group(rg, columns=["graph_id"]).column(0).to_pylist()
                for i, gid in enumerate(ids):
                    self.graph_rows[gid] = (rel, rg, i)
        self.config_groups: list[tuple[str, str, str, int]] = []  # (min id, max id, shard, row group)
        for rel in config_shards:
            meta = pq.ParquetFile(root / rel).metadata
            col = meta.schema.names.index("graph_id")
            for rg in range(meta.num_row_groups):
                stats = meta.row_group(rg).column(col).statistics
                if meta.row_group(rg).num_rows:
                    self.config_groups.append((stats.min, stats.max, rel, rg))
        self.config_groups.sort()
        self._mins = [g[0] for g in self.config_groups]

    def config_row_groups(self, graph_id: str) -> list[tuple[str, int]]:
        """Row groups whose graph_id range covers ``graph_id`` (sorted, so a bisect finds them)."""
        hi = bisect.bisect_right(self._mins, graph_id)
        out = []
        for i in range(hi - 1, -1, -1):
            _lo_id, hi_id, rel, rg = self.config_groups[i]
            if hi_id < graph_id:
                break
            out.append((rel, rg))
        return sorted(out, key=lambda x: (x[0], x[1]))


class Dataset:
    """A folder of tpuprep shards, described by its ``manifest.json``."""

    def __init__(self, root: str | Path, cache_row_groups: int = 4):
        self.root = Path(root)
        if not (self.root / MANIFEST).is_file():
            raise FileNotFoundError(f"{self.root} has no manifest.json: not a finished tpuprep build "
                                    "(an interrupted build is finished with tpuprep build --resume)")
        self.manifest = read_manifest(self.root)
        self._indexes: dict[tuple[str, str], _ShardIndex] = {}
        self._cache: OrderedDict[tuple[str, int], pa.Table] = OrderedDict()
        self._cache_size = cache_row_groups

    def __repr__(self) -> str:
        return f"Dataset({str(self.root)!r}, collections={self.collections})"

    @property
    def collections(self) -> list[str]:
        return list(self.manifest["collections"])

    def splits(self, collection: str) -> list[str]:
        return list(self.manifest["collections"][collection]["splits"])

    @cached_property
    def _graphs(self) -> dict[str, tuple[str, str]]:
        return {i["graph_id"]: (i["graph_id"].rsplit(":", 1)[0], i["path"].split("/")[-2])
                for i in self.manifest["inputs"] if i["status"] == "ok"}

    def graph_ids(self, collection: str | None = None, split: str | None = None) -> list[str]:
        """Graph ids (sorted) of a collection and/or split."""
        return sorted(g for g, (c, s) in self._graphs.items()
                      if (collection is None or c == collection) and (split is None or s == split))

    def stats(self, collection: str) -> dict[str, np.ndarray]:
        """Train-split statistics of node_feat[:, :134]: node_feat_mean / node_feat_std (134,) float64."""
        s = self.manifest["collections"][collection].get("node_feat_stats")
        if not s:
            raise KeyError(f"{collection} has no train graphs, hence no feature statistics")
        return {"node_feat_mean": np.asarray(s["mean"]), "node_feat_std": np.asarray(s["std"]),
                "count": s["count"]}

    def fold(self, graph_id: str) -> int:
        """The graph's grouped K-fold id (K = the build's --folds)."""
        return graph_fold(graph_id, self.manifest["options"]["folds"])

    def _index(self, collection: str, split: str) -> _ShardIndex:
        key = (collection, split)
        if key not in self._indexes:
            shards = [s for s in self.manifest["shards"] if s["collection"] == collection and s["split"] == split]
            self._indexes[key] = _ShardIndex(
                self.root, [s["path"] for s in shards if s["table"].endswith("_graphs")],
                [s["path"] for s in shards if s["table"].endswith("_configs")])
        return self._indexes[key]

    def _row_group(self, rel: str, rg: int) -> pa.Table:
        key = (rel, rg)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        table = pq.ParquetFile(self.root / rel).read_row_group(rg)
        self._cache[key] = table
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return table

    def load_graph(self, graph_id: str) -> GraphRecord:
        """Load one graph and all its unique configs."""
        if graph_id not in self._graphs:
            raise KeyError(f"no graph {graph_id!r} in {self.root}")
        collection, split = self._graphs[graph_id]
        index = self._index(collection, split)
        rel, rg, row = index.graph_rows[graph_id]
        g = self._row_group(rel, rg)
        kind = collection_kind(collection)
        pieces = []
        for crel, crg in index.config_row_groups(graph_id):
            t = self._row_group(crel, crg)
            if kind == "tile":
                t = t.filter(pc.equal(t.column("graph_id"), graph_id))
            pieces.append(t)
        configs = pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]
        scalar = {name: g.column(name)[row].as_py() for name in ("fold", "source_file", "num_config_nodes")
                  if name in g.column_names}
        record = GraphRecord(
            graph_id=graph_id, collection=collection, split=split, fold=scalar["fold"],
            source_file=scalar["source_file"],
            node_feat=_list_cell(g, "node_feat", row, 140),
            node_opcode=_list_cell(g, "node_opcode", row),
            edge_index=_list_cell(g, "edge_index", row, 2),
            node_index=_list_cell(g, "node_index", row),
            config_inverse=_list_cell(g, "config_inverse", row),
            config_runtime_original=_list_cell(g, "config_runtime_original", row),
            config_runtime=None if configs.column("runtime").null_count else _flat(configs.column("runtime")),
            group_size=_flat(configs.column("group_size")),
            first_index=_flat(configs.column("first_index")),
        )
        if kind == "layout":
            nc = scalar["num_config_nodes"]
            record.node_config_ids = _list_cell(g, "node_config_ids", row)
            record.node_splits = _list_cell(g, "node_splits", row)
            record.config_codes = binary_rows(configs.column("codes")).reshape(-1, nc, 3)
        else:
            record.config_feat = _flat(configs.column("config_feat")).reshape(-1, 24)
            record.config_runtime_normalizers = (None if configs.column("normalizer").null_count
                                                 else _flat(configs.column("normalizer")))
            record.config_runtime_normalizers_original = _list_cell(g, "config_runtime_normalizers_original", row)
        return record

    def iter_graphs(self, collection: str | None = None, split: str | None = None):
        """Yield GraphRecords in graph-id order (shard order, so row groups are read once)."""
        for gid in self.graph_ids(collection, split):
            yield self.load_graph(gid)


def open_dataset(path: str | Path) -> Dataset:
    """Open a shard folder written by ``tpuprep build`` (reads its manifest.json)."""
    return Dataset(path)
