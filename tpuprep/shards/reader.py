"""Reading shards: ``open_dataset(path)`` → ``Dataset``, ``Dataset.load_graph(id)`` → ``GraphRecord``.

Only pyarrow is used. A graph's configs are found through the Parquet row-group statistics on
``graph_id``, so loading one layout graph decompresses only that graph's row groups. Arrays come back
as NumPy views of the Arrow buffers where Arrow allows it (no per-element Python work), and every array
of a ``GraphRecord`` is read-only (``flags.writeable`` is False), whether it is such a view or a copy
Arrow had to make: ``g.node_feat.copy()`` is the writable copy to modify in place.

A shard folder is not trusted blindly (``BadShards``, one line naming the file and what is wrong):
the manifest is checked on open (``manifest.check_manifest``: format, major schema version, options,
graph ids, every entry's shape); every file it names must stay inside the folder (relative, no ``..``,
no symbolic link leading out) and be a regular file; every Parquet page's CRC-32 is verified as it is
read; and a graph's rows must be where the manifest says, in the numbers its ``graphs`` row says.
"""

from __future__ import annotations

import bisect
import errno
import os
import re
import stat
import struct
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import BadShards, one_line
from ..io.storage import Store, resolve, scheme_of, storage_error
from ..kernels.base7 import decode_base7
from ..kernels.planes import join_planes
from ..tpugraphs import ConfigCounts, collection_kind, graph_fold
from . import arguments, pages
from .derived import expand_tied, safe_normalizer, sample_rows, unique_config_columns
from .layout import MANIFEST
from .manifest import COUNT_FIELDS, read_manifest
from .parquet import (
    check_graph_groups,
    check_shard_schema,
    chunk_ranges,
    codes_rows,
    flat,
    open_parquet,
    read_row_group,
    read_row_groups,
)
from .schema import table_name
from .stamp import shard_id

if TYPE_CHECKING:
    import polars as pl


def _taken(table: pa.Table, taken: pa.Table, name: str) -> np.ndarray | None:
    """Column ``name`` of the rows ``taken`` from ``table`` as a fresh NumPy array, None when the column
    holds nulls in ``table`` (the test split's runtimes: decided on every row read, even for k = 0)."""
    return None if table.column(name).null_count else flat(taken.column(name)).copy()


def _sample_fields(graph_id: str, rows: np.ndarray, table: pa.Table, taken: pa.Table) -> dict:
    """The ConfigSample fields common to layout and tile, from the rows ``taken`` out of ``table``."""
    return {"graph_id": graph_id, "rows": rows, "config_runtime": _taken(table, taken, "runtime"),
            "config_runtime_spread": _taken(table, taken, "runtime_spread"),
            "group_size": flat(taken.column("group_size")).copy(),
            "first_index": flat(taken.column("first_index")).copy()}


def _flat_or_none(column: pa.ChunkedArray) -> np.ndarray | None:
    """A flat int64/... column as NumPy, None when it holds nulls (the test split's runtimes)."""
    return None if column.null_count else flat(column)


def _list_cell(table: pa.Table, column: str, row: int, width: int | None = None) -> np.ndarray | None:
    col = table.column(column)
    cell = col.slice(row, 1)
    if cell.null_count:
        return None
    values = flat(cell.combine_chunks() if cell.num_chunks != 1 else cell.chunk(0))
    return values.reshape(-1, width) if width else values


@dataclass
class GraphRecord(ConfigCounts):
    """One graph as stored (docs/spec.md §4). Shapes: n' kept nodes, m' kept edges, nc configurable nodes,
    c original configs, c_u unique configs. Runtimes in ns.

    node_feat (n', 140) float32; node_opcode (n',) uint8; edge_index (m', 2) int32;
    node_index (n',) int32; node_config_ids (nc,) int32 and node_splits (s,) int32 (layout, else None);
    config_runtime (c_u,) int64 (None on test); group_size, first_index (c_u,) int32;
    config_inverse (c,) int32; config_runtime_original (c,) int64 (None on test);
    config_codes (c_u, nc, 3) int32 (layout, else None); config_feat (c_u, 24) float32,
    config_runtime_normalizers (c_u,) int64 and config_runtime_normalizers_original (c,) int64
    (tile, normalizers None on test); config_runtime_spread (c_u,) int64, the largest minus the
    smallest original runtime of each duplicate group, ns (0 for a group of one; layout: the largest is
    config_runtime + config_runtime_spread; None on test); config_node_tie (nc,) int32 (layout): the stored codes column
    of each configurable node (tied nodes, equal in every config, share one).

    ``load_graph(graph_id, configs=False)`` leaves every per-unique-config array (config_runtime,
    group_size, first_index, config_codes, config_feat, config_runtime_normalizers, config_runtime_spread)
    None: the structure only, read without opening a configs shard.

    Every array is read-only (``flags.writeable`` False): most are zero-copy views of the Arrow
    buffers the shard was decoded into, and the rest are frozen too so that all fields behave alike.
    Take a writable copy with ``.copy()`` (e.g. ``x = g.node_feat.copy(); x[:, :134] -= mean``).
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
    group_size: np.ndarray | None
    first_index: np.ndarray | None
    config_inverse: np.ndarray
    config_runtime_original: np.ndarray | None
    node_config_ids: np.ndarray | None = None
    node_splits: np.ndarray | None = None
    config_codes: np.ndarray | None = None
    config_feat: np.ndarray | None = None
    config_runtime_normalizers: np.ndarray | None = None
    config_runtime_normalizers_original: np.ndarray | None = None
    config_runtime_spread: np.ndarray | None = None
    config_node_tie: np.ndarray | None = None

    @property
    def kind(self) -> str:
        return collection_kind(self.collection)

    def node_config_feat(self, rows: np.ndarray | list[int] | None = None) -> np.ndarray:
        """Decoded layouts (k, nc, 18) int8 of unique configs ``rows`` in the order given (all if None)."""
        if self.config_codes is None and self.config_feat is None:
            raise ValueError(f"{self.graph_id} was loaded with configs=False: use sample_configs or "
                             "load_graph(graph_id) for its configs")
        if self.config_codes is None:
            raise ValueError(f"{self.graph_id} is a tile graph: it has config_feat, not node_config_feat")
        codes = self.config_codes if rows is None else self.config_codes[np.asarray(rows, dtype=np.int64)]
        return decode_base7(codes)


def _read_only(record: GraphRecord) -> GraphRecord:
    """Make every array field of ``record`` read-only (in place; views of Arrow buffers already are)."""
    for value in vars(record).values():
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
    return record


@dataclass
class ConfigSample:
    """k sampled unique configs of one graph (``Dataset.sample_configs``). Every array is a fresh,
    writable NumPy array owned by the sample.

    rows (k,) int64: unique-config rows, the numbering of ``load_graph`` (``config_id``), distinct, in
    the order drawn; config_runtime (k,) int64 ns (None on test); config_runtime_spread (k,) int64 ns, the
    largest minus the smallest runtime of each row's duplicate group (None on test); group_size, first_index (k,) int32;
    node_config_feat (k, nc, 18) int8 (layout, else None); config_feat (k, 24) float32 and
    config_runtime_normalizers (k,) int64 (tile, else None; normalizers None on test).
    """

    graph_id: str
    rows: np.ndarray
    config_runtime: np.ndarray | None
    config_runtime_spread: np.ndarray | None
    group_size: np.ndarray
    first_index: np.ndarray
    node_config_feat: np.ndarray | None = None
    config_feat: np.ndarray | None = None
    config_runtime_normalizers: np.ndarray | None = None

    def take(self, positions: np.ndarray) -> ConfigSample:
        """The entries at ``positions`` ((k,) ints into this sample's arrays) as a new sample of fresh
        arrays; for a sample of all of a graph's rows in order (``read_configs(g, arange(c_u))``)
        positions are rows, so ``full.take(rows)`` equals ``read_configs(g, rows)``."""
        positions = np.asarray(positions, np.int64)
        picked = {f.name: None if getattr(self, f.name) is None else getattr(self, f.name)[positions]
                  for f in fields(self) if f.name != "graph_id"}
        return ConfigSample(graph_id=self.graph_id, **picked)


class _RowOutOfRange(Exception):
    """A row ``read_configs`` was asked for is not one of the graph's unique configs."""


def _nbytes(columns: dict[str, np.ndarray | None]) -> int:
    return sum(a.nbytes for a in columns.values() if a is not None)


DERIVED_BYTES = 64 << 20
"""Most bytes of derived per-unique-config columns a Dataset keeps for ``sample_configs`` (24 bytes per
unique config: 2.4 MB for a graph of 100,000)."""
_SAMPLE_COLUMNS = {"layout": ["config_id", "runtime", "runtime_spread", "group_size", "first_index", "codes"],
                   "tile": ["graph_id", "config_id", "runtime", "runtime_spread", "group_size",
                            "first_index", "normalizer", "config_feat"]}


class _ShardIndex:
    """Where each graph of one (collection, split) lives: graphs row and configs row groups.

    ``shards``: (path, table) of the collection's and split's shards, paths already confined to the
    dataset folder; ``opener(path)`` opens one (``Dataset.open_shard``)."""

    def __init__(self, shards: list[tuple[Path, str]], opener=open_parquet):
        self.graph_rows: dict[str, tuple[Path, int, int]] = {}
        # (min id, max id, shard, row group, rows) of every configs row group
        self.config_groups: list[tuple[str, str, Path, int, int]] = []
        for path, table in shards:
            pf = opener(path)
            check_shard_schema(pf, path, table)
            if table.endswith("_graphs"):
                for rg in range(pf.metadata.num_row_groups):
                    ids = read_row_group(pf, path, rg, ["graph_id"]).column(0).to_pylist()
                    for i, gid in enumerate(ids):
                        if gid in self.graph_rows:
                            raise BadShards(f"{path}: a second graphs row of {gid!r} (row group {rg})")
                        self.graph_rows[gid] = (path, rg, i)
                continue
            meta = pf.metadata
            col = meta.schema.names.index("graph_id")
            for rg in range(meta.num_row_groups):
                stats = meta.row_group(rg).column(col).statistics
                if meta.row_group(rg).num_rows:
                    if stats is None or not stats.has_min_max:
                        raise BadShards(f"{path}: row group {rg} has no graph_id statistics")
                    self.config_groups.append((stats.min, stats.max, path, rg, meta.row_group(rg).num_rows))
        self.config_groups.sort()
        self._mins = [g[0] for g in self.config_groups]
        self._plans: dict[str, tuple[list[tuple[Path, int]], np.ndarray]] = {}  # config_plan's answers

    def config_row_groups(self, graph_id: str) -> list[tuple[Path, int]]:
        """(shard, row group) of every row group whose graph_id range covers ``graph_id``, sorted."""
        return self.config_plan(graph_id)[0]

    def config_plan(self, graph_id: str) -> tuple[list[tuple[Path, int]], np.ndarray]:
        """``config_row_groups`` and (g + 1,) int64 running row counts over them: for a layout graph
        (whose row groups hold only it, config_id 0..c_u−1 in order) the first config_id of each row
        group, then c_u. Found once per graph from the footers (a bisect over the sorted index); the
        same objects on every call (do not modify them)."""
        if graph_id not in self._plans:
            lo = bisect.bisect_left(self._mins, graph_id)
            hi = bisect.bisect_right(self._mins, graph_id)
            found = self.config_groups[lo:hi]  # those starting at graph_id
            for i in range(lo - 1, -1, -1):  # and those starting before it that reach it (tile groups)
                if self.config_groups[i][1] < graph_id:
                    break
                found.append(self.config_groups[i])
            found.sort(key=lambda g: (g[2], g[3]))  # by (path, row group); a layout graph's already are
            starts = np.zeros(len(found) + 1, np.int64)
            np.cumsum([g[4] for g in found], out=starts[1:])
            self._plans[graph_id] = ([(g[2], g[3]) for g in found], starts)
        return self._plans[graph_id]


class Dataset:
    """A folder of tpuprep shards, described by its ``manifest.json``: a local folder or a prefix in
    object storage (``s3://bucket/shards``; ``store`` is where it lives, ``io.storage.Store``).

    ``root`` is the folder (``Path``) locally and the URL (``str``, no credentials) remotely;
    ``storage_options`` are those the store was resolved with (for processes that open it again)."""

    def __init__(self, root: str | Path, cache_row_groups: int = 4, storage_options: dict | None = None):
        self.store: Store = resolve(root, storage_options, what="shard folder")
        self.storage_options = storage_options
        if self.store.is_local:  # a local folder keeps the name it was given (file:// → its path)
            self.root: Path | str = Path(root) if scheme_of(root) is None else Path(self.store.root)
        else:
            self.root = self.store.url()
        self.manifest_path: Path | str = self.root / MANIFEST if self.store.is_local \
            else self.store.url(MANIFEST)
        self.manifest = read_manifest(self.root if self.store.is_local else self.store)
        self._real_root = Path(self.root).resolve() if self.store.is_local else None
        self._sizes: dict[str, int] = {}
        self._ids: dict[str, str | None] = {}  # shard path (from shard_path) -> its manifest entry's shard_id
        self._indexes: dict[tuple[str, str], _ShardIndex] = {}
        self._cache: OrderedDict[tuple[Path, int], pa.Table] = OrderedDict()
        self._cache_size = cache_row_groups
        self._files: dict[Path, pq.ParquetFile] = {}
        self._inodes: dict[Path, tuple[int, int, int, int]] = {}  # identity of the files _files opened
        self._chunks: dict[tuple[Path, int], pages.Chunk] = {}  # codes chunks of sampled row groups
        self._ties: dict[str, np.ndarray] = {}
        self._derived: OrderedDict[str, dict[str, np.ndarray | None]] = OrderedDict()
        self._derived_bytes = 0

    def __repr__(self) -> str:
        return f"Dataset({str(self.root)!r}, collections={self.collections})"

    @property
    def collections(self) -> list[str]:
        return list(self.manifest["collections"])

    def splits(self, collection: str) -> list[str]:
        return list(self.manifest["collections"][arguments.name("collection", collection)]["splits"])

    @cached_property
    def _graphs(self) -> dict[str, tuple[str, str]]:
        return {i["graph_id"]: (i["graph_id"].rsplit(":", 1)[0], i["path"].split("/")[-2])
                for i in self.manifest["inputs"] if i["status"] == "ok"}

    def graph_ids(self, collection: str | None = None, split: str | None = None) -> list[str]:
        """Graph ids (sorted) of a collection and/or split."""
        collection, split = arguments.name("collection", collection, True), arguments.name("split", split, True)
        return sorted(g for g, (c, s) in self._graphs.items()
                      if (collection is None or c == collection) and (split is None or s == split))

    def stats(self, collection: str) -> dict[str, np.ndarray]:
        """Train-split statistics of node_feat[:, :134] (``KeyError`` without train graphs):

        ``node_feat_mean`` / ``node_feat_std`` (134,) float64 as recorded in the manifest (population
        std; 0 for a column constant over the train split), ``node_feat_std_safe`` (134,) float64 (the
        std with 0 → 1, :func:`safe_normalizer`: safe to divide by), ``constant_columns`` (k,) int64
        (the columns whose std was replaced) and ``count`` (int: the train nodes they were taken over).
        """
        s = self.manifest["collections"][collection].get("node_feat_stats")
        if not s:
            raise KeyError(f"{collection} has no train graphs, hence no feature statistics")
        mean, std = np.asarray(s["mean"], np.float64), np.asarray(s["std"], np.float64)
        safe = safe_normalizer(mean, std)[1]
        return {"node_feat_mean": mean, "node_feat_std": std, "node_feat_std_safe": safe,
                "constant_columns": np.flatnonzero(safe != std), "count": s["count"]}

    def normalizer(self, collection: str) -> tuple[np.ndarray, np.ndarray]:
        """(mean, std_safe), each (134,) float64: ``(g.node_feat[:, :134] - mean) / std_safe`` is the
        collection's train standardisation with constant columns centred, never divided by zero."""
        s = self.stats(collection)
        return safe_normalizer(s["node_feat_mean"], s["node_feat_std"])

    def fold(self, graph_id: str) -> int:
        """The graph's grouped K-fold id (K = the build's --folds)."""
        return graph_fold(arguments.graph_id(graph_id), self.manifest["options"]["folds"])

    def shard_path(self, i: int) -> Path | str:
        """The file of ``manifest["shards"][i]``, confined to the dataset folder: a relative POSIX path
        without ``..`` that resolves (symbolic links followed) inside the folder to a regular file;
        remotely the URL of an object (not a prefix) under the dataset's prefix.
        Anything else is ``BadShards`` naming the manifest entry."""
        rel = self.manifest["shards"][i]["path"]
        path = self._shard_path(i, rel)
        self._ids[str(path)] = self.manifest["shards"][i].get("shard_id")  # what open_shard expects
        return path

    def _shard_path(self, i: int, rel: str) -> Path | str:
        def bad(problem: str) -> BadShards:
            return BadShards(f"{self.manifest_path}: shards[{i}].path {rel!r}: {problem}")

        pure = PurePosixPath(rel) if isinstance(rel, str) else None
        if pure is None or not rel or "\\" in rel or "\0" in rel:
            raise bad("is not a relative POSIX path")
        if pure.is_absolute() or re.match(r"[A-Za-z]:", rel):
            raise bad("is an absolute path; shard paths are relative to the manifest's folder")
        if ".." in pure.parts:
            raise bad("contains '..'; shard paths must stay inside the shard folder")
        if not self.store.is_local:
            return self._remote_shard(str(pure), bad)
        try:
            real = (self._real_root / pure).resolve(strict=True)
        except FileNotFoundError:
            raise bad("the file does not exist") from None
        except (OSError, RuntimeError) as exc:
            raise bad(f"cannot be resolved: {one_line(exc)}") from None
        if not real.is_relative_to(self._real_root):
            raise bad(f"leads outside the shard folder (to {real}) through a symbolic link")
        if not stat.S_ISREG(os.lstat(real).st_mode):
            raise bad("is not a regular file")
        return real

    def _remote_shard(self, rel: str, bad) -> str:
        """The URL of the remote shard ``rel`` (a checked relative path): an object, not a prefix;
        its size is kept for ``open_shard``. A denied request is the store's one-line error."""
        url = self.store.url(rel)
        try:
            info = self.store.fs.info(self.store.path(rel))
        except FileNotFoundError:
            raise bad("the file does not exist") from None
        except OSError as exc:
            raise storage_error(exc, url, self.store) from None
        if info.get("type") != "file":
            raise bad("is not a file")
        self._sizes[url] = int(info["size"])
        return url

    def shard_size(self, i: int) -> int:
        """Bytes of the file of ``manifest["shards"][i]`` as stored now (``shard_path`` checks it)."""
        path = self.shard_path(i)
        return os.stat(path).st_size if self.store.is_local else self._sizes[str(path)]

    def open_shard(self, path: Path | str) -> pq.ParquetFile:
        """A shard (a path from ``shard_path``) opened for reading with page checksums verified;
        remotely through ``Store.open_ranged``: footer and row groups are ranged GETs. ``BadShards``
        naming the folder when the shard's id (its footer's ``shard_id``) is not its manifest entry's: the
        folder was rebuilt since ``open_dataset`` (shards written before shard ids have none, their
        entries neither)."""
        if self.store.is_local:
            if not os.path.exists(path):
                raise self._changed(f"{path} no longer exists")
            pf = open_parquet(path)
        else:
            try:
                source = self.store.open_ranged(str(path), self._sizes.get(str(path)))
            except FileNotFoundError:
                raise self._changed(f"{path} no longer exists") from None
            except OSError as exc:
                raise storage_error(exc, str(path), self.store) from None
            pf = open_parquet(path, source)
        found, want = shard_id(pf.metadata.metadata), self._ids.get(str(path))
        if found != want:
            raise self._changed(f"{path} is shard {found}, the manifest said {want}")
        return pf

    def _changed(self, detail: str) -> BadShards:
        """The one line of a shard folder rebuilt under this open Dataset."""
        return BadShards(f"{self.root}: the shard folder changed after it was opened ({detail}): open it again")

    def _index(self, collection: str, split: str) -> _ShardIndex:
        key = (collection, split)
        if key not in self._indexes:
            shards = [(self.shard_path(i), s["table"]) for i, s in enumerate(self.manifest["shards"])
                      if s["collection"] == collection and s["split"] == split]
            self._indexes[key] = _ShardIndex(shards, self.open_shard if self.store.is_local else self._parquet)
        return self._indexes[key]

    def _row_group(self, path: Path, rg: int) -> pa.Table:
        key = (path, rg)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        pf = self.open_shard(path) if self.store.is_local else self._parquet(path)  # remote: footer once
        table = read_row_group(pf, path, rg)
        self._cache[key] = table
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return table

    def _graph_row_group(self, graph_id: str) -> tuple[_ShardIndex, Path, pa.Table, int]:
        """(index of its collection and split, graphs shard, row group table, row) of a listed graph."""
        if arguments.graph_id(graph_id) not in self._graphs:
            raise KeyError(f"no graph {graph_id!r} in {self.root}")
        collection, split = self._graphs[graph_id]
        index = self._index(collection, split)
        if graph_id not in index.graph_rows:
            raise BadShards(f"{self.manifest_path}: graph {graph_id!r} is listed, but no {split} graphs "
                            f"shard of {collection} holds it")
        path, rg, row = index.graph_rows[graph_id]
        table = self._row_group(path, rg)
        found = table.column("graph_id")[row].as_py() if row < table.num_rows else None
        if found != graph_id:
            raise BadShards(f"{path}: row {row} of row group {rg} holds graph {found!r}, not {graph_id!r}: "
                            f"the shard changed under the open dataset {self.root}?")
        return index, path, table, row

    def load_graph(self, graph_id: str, configs: bool = True) -> GraphRecord:
        """Load one graph and all its unique configs (``KeyError`` for an unknown id, ``BadShards`` when
        the shards do not hold it as the manifest says). ``configs=False``: the structure only (graphs
        row; no configs shard is opened), every per-unique-config array None."""
        configs = arguments.flag("configs", configs)
        index, path, g, row = self._graph_row_group(graph_id)
        collection, split = self._graphs[graph_id]
        if not configs:
            try:
                record = self._record(graph_id, collection, split, g, row, None)
                if record.config_node_tie is not None:
                    self._ties[graph_id] = record.config_node_tie
                return record
            except (KeyError, ValueError, TypeError, IndexError, pa.ArrowException) as exc:
                if isinstance(exc, BadShards):
                    raise
                raise BadShards(f"{path}: graph {graph_id!r} cannot be read back: {one_line(exc)}") from None
        groups = index.config_row_groups(graph_id)
        try:
            pieces = []
            if collection_kind(collection) == "layout":  # the graph's own (small) row groups, one read per shard
                for cpath in dict.fromkeys(p for p, _ in groups):
                    rgs = [rg for p, rg in groups if p == cpath]
                    check_graph_groups(self._parquet(cpath).metadata, cpath, rgs, graph_id)
                    pieces.append(read_row_groups(self._parquet(cpath), cpath, rgs))
            for cpath, crg in groups if collection_kind(collection) == "tile" else ():
                t = self._row_group(cpath, crg)
                pieces.append(t.filter(pc.equal(t.column("graph_id"), graph_id)))
            return self._record(graph_id, collection, split, g, row, pieces)
        except (KeyError, ValueError, TypeError, IndexError, pa.ArrowException) as exc:
            if isinstance(exc, BadShards):
                raise
            where = ", ".join(sorted({str(path), *(str(p) for p, _ in groups)}))
            raise BadShards(f"{where}: graph {graph_id!r} cannot be read back: {one_line(exc)}") from None

    def _record(self, graph_id: str, collection: str, split: str, g: pa.Table, row: int,
                pieces: list[pa.Table] | None) -> GraphRecord:
        """Assemble a GraphRecord from the graph's row (``g``, row ``row``) and its configs rows
        (``pieces``; None: the structure only)."""
        kind = collection_kind(collection)
        scalar = {name: g.column(name)[row].as_py()
                  for name in ("fold", "source_file", "num_config_nodes", "num_config_columns",
                               "num_unique_configs")
                  if name in g.column_names}
        if pieces is None:
            return self._structure(graph_id, collection, split, g, row, scalar)
        rows = sum(p.num_rows for p in pieces)
        if rows != scalar["num_unique_configs"]:
            raise ValueError(f"{rows} configs rows, its graphs row says num_unique_configs "
                             f"{scalar['num_unique_configs']}")
        configs = pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]
        record = self._structure(graph_id, collection, split, g, row, scalar)
        record.config_runtime = _flat_or_none(configs.column("runtime"))
        record.config_runtime_spread = _flat_or_none(configs.column("runtime_spread"))
        record.group_size = flat(configs.column("group_size"))
        record.first_index = flat(configs.column("first_index"))
        if kind == "layout":
            record.config_codes = codes_rows(configs.column("codes"), rows, record.config_node_tie,
                                             scalar["num_config_columns"])  # expanded while joined
        else:
            record.config_feat = flat(configs.column("config_feat")).reshape(-1, 24)
            record.config_runtime_normalizers = (None if configs.column("normalizer").null_count
                                                 else flat(configs.column("normalizer")))
        return _read_only(record)

    @staticmethod
    def _structure(graph_id: str, collection: str, split: str, g: pa.Table, row: int,
                   scalar: dict) -> GraphRecord:
        """A GraphRecord of the graphs row alone (every per-unique-config array None)."""
        record = GraphRecord(
            graph_id=graph_id, collection=collection, split=split, fold=scalar["fold"],
            source_file=scalar["source_file"],
            node_feat=_list_cell(g, "node_feat", row, 140),
            node_opcode=_list_cell(g, "node_opcode", row),
            edge_index=_list_cell(g, "edge_index", row, 2),
            node_index=_list_cell(g, "node_index", row),
            config_inverse=_list_cell(g, "config_inverse", row),
            config_runtime_original=_list_cell(g, "config_runtime_original", row),
            config_runtime=None, group_size=None, first_index=None,
        )
        if collection_kind(collection) == "layout":
            record.node_config_ids = _list_cell(g, "node_config_ids", row)
            record.node_splits = _list_cell(g, "node_splits", row)
            record.config_node_tie = _list_cell(g, "config_node_tie", row)
            tie = record.config_node_tie
            if len(tie) != scalar["num_config_nodes"]:
                raise ValueError(f"config_node_tie has {len(tie)} entries, "
                                 f"num_config_nodes is {scalar['num_config_nodes']}")
            if scalar["num_config_columns"] != (int(tie.max()) + 1 if len(tie) else 0):
                raise ValueError(f"num_config_columns is {scalar['num_config_columns']}, config_node_tie names "
                                 f"{int(tie.max()) + 1 if len(tie) else 0} columns")
        else:
            record.config_runtime_normalizers_original = _list_cell(g, "config_runtime_normalizers_original", row)
        return _read_only(record)

    def _parquet(self, path: Path) -> pq.ParquetFile:
        """An open shard, kept open for later sampled reads (footer parsed once); locally the identity
        of the file it opened is kept too, for the direct page reads of ``_fetcher``."""
        if path not in self._files:
            before = pages.identity(path) if self.store.is_local else None
            self._files[path] = self.open_shard(path)
            if before is not None and pages.identity(path) == before:
                self._inodes[path] = before
        return self._files[path]

    def sample_configs(self, graph_id: str, k: int, seed: int = 0) -> ConfigSample:
        """``min(k, c_u)`` distinct unique configs of a graph drawn by ``sample_rows(c_u, k, seed)``
        (``numpy.random.default_rng(seed).choice(c_u, k', replace=False)``), decoded: ``read_configs``
        of those rows.

        Layout: only the row groups (≤ 64 configs each) holding the drawn rows are read, and of them
        only ``config_id`` and ``codes``: the graph's structure is read once, for its tie array and the
        per-config columns derived from it (``unique_config_columns``: group sizes, first indices,
        runtimes, spreads; kept for up to ``DERIVED_BYTES`` of graphs). Tile: the graph's configs
        rows (small). Rows follow ``load_graph``'s numbering, so ``sample.node_config_feat[i] ==
        load_graph(graph_id).node_config_feat([sample.rows[i]])[0]``. ``TypeError`` / ``ValueError``
        naming the argument unless ``k`` and ``seed`` are integers ≥ 0 (``shards.arguments``).
        """
        self._where(graph_id)
        k, seed = arguments.count("k", k), arguments.seed(seed)
        return self._configs(graph_id, lambda count: sample_rows(count, k, seed), derive=True)

    def read_configs(self, graph_id: str, rows: np.ndarray | list[int],
                     columns: dict[str, np.ndarray | None] | None = None) -> ConfigSample:
        """The unique configs ``rows`` ((k,) ints in 0..c_u-1, any order; a row may repeat) of a graph,
        decoded, in the order given: a ``ConfigSample`` whose ``rows`` is ``rows`` as int64. Reads what
        ``sample_configs`` reads for the same rows (layout: only their ≤ 64-config row groups).
        ``columns`` (layout): the graph's ``unique_config_columns(structure)``, kept by the caller; then
        only ``config_id`` and ``codes`` are read and the small per-config fields are taken from it
        (what ``ConfigBatches`` and ``sample_configs`` do: ~3× fewer column chunks to read per
        sample). Without it every stored column of those row groups is read (what ``verify`` checks).
        ``IndexError`` for a row out of range, ``KeyError`` for an unknown graph, ``TypeError`` /
        ``ValueError`` naming ``rows`` or ``columns`` when they are not integers / that graph's columns."""
        if collection_kind(self._where(graph_id)[0]) == "layout":
            columns = arguments.config_columns(columns, self.num_unique_configs(graph_id))
        wanted = arguments.rows(rows)

        def check(count: int) -> np.ndarray:
            if wanted.size and (wanted.min() < 0 or wanted.max() >= count):
                bad = int(wanted[(wanted < 0) | (wanted >= count)][0])
                raise _RowOutOfRange(f"row {bad} of {graph_id!r}: it has {count} unique configs")
            return wanted

        try:
            return self._configs(graph_id, check, columns)
        except _RowOutOfRange as exc:
            raise IndexError(str(exc)) from None

    def num_unique_configs(self, graph_id: str) -> int:
        """c_u, the graph's number of unique configs (layout: from the configs shards' footers, nothing
        decoded; tile: its graphs row)."""
        collection, split = self._where(graph_id)
        if collection_kind(collection) == "tile":
            return int(self.graph_row(graph_id)["num_unique_configs"])
        return int(self._index(collection, split).config_plan(graph_id)[1][-1])

    def config_runtimes(self, graph_id: str) -> np.ndarray | None:
        """(c_u,) int64 runtimes in ns of every unique config of a graph (row r is config_id r, the
        ``load_graph`` numbering), None on the test split: only the ``config_id`` and ``runtime``
        columns of the graph's configs row groups are read (what sampling strategies need)."""
        collection, split = self._where(graph_id)
        groups = self._index(collection, split).config_row_groups(graph_id)
        try:
            pieces = []
            for path in dict.fromkeys(p for p, _ in groups):
                rgs = [rg for p, rg in groups if p == path]
                if collection_kind(collection) == "layout":
                    check_graph_groups(self._parquet(path).metadata, path, rgs, graph_id)
                t = read_row_groups(self._parquet(path), path, rgs, ["graph_id", "config_id", "runtime"],
                                    use_threads=False)
                if collection_kind(collection) == "tile":
                    t = t.filter(pc.equal(t.column("graph_id"), graph_id))
                pieces.append(t)
            table = pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]
            ids = flat(table.column("config_id"))
            if not np.array_equal(ids, np.arange(len(ids))):
                raise BadShards(f"{groups[0][0]}: configs rows of {graph_id!r} are not config_id "
                                f"0..{len(ids) - 1}")
            runtimes = _flat_or_none(table.column("runtime"))
            return None if runtimes is None else runtimes.astype(np.int64, copy=True)
        except (KeyError, ValueError, TypeError, IndexError, pa.ArrowException) as exc:
            if isinstance(exc, BadShards):
                raise
            where = ", ".join(sorted({str(p) for p, _ in groups}))
            raise BadShards(f"{where}: runtimes of {graph_id!r} cannot be read: {one_line(exc)}") from None

    def _where(self, graph_id: str) -> tuple[str, str]:
        """(collection, split) of a listed graph (``KeyError`` otherwise)."""
        if arguments.graph_id(graph_id) not in self._graphs:
            raise KeyError(f"no graph {graph_id!r} in {self.root}")
        return self._graphs[graph_id]

    def _configs(self, graph_id: str, choose: Callable[[int], np.ndarray],
                 columns: dict[str, np.ndarray | None] | None = None, derive: bool = False) -> ConfigSample:
        """The configs ``choose(c_u)`` ((k,) int64 rows) of a graph, decoded (``sample_configs``,
        ``read_configs``). ``derive``: a layout graph's per-config columns come from
        ``_derived_columns`` when ``columns`` is None (else they are read from the shards)."""
        collection, split = self._where(graph_id)
        groups, starts = self._index(collection, split).config_plan(graph_id)
        kind = collection_kind(collection)
        try:
            if kind == "layout":
                if columns is None and derive:
                    columns = self._derived_columns(graph_id)
                elif graph_id not in self._ties:
                    self._ties[graph_id] = self.load_graph(graph_id, configs=False).config_node_tie
                rows = choose(int(starts[-1]))
                return self._sample_layout(graph_id, groups, starts, rows, self._ties[graph_id], columns)
            return self._sample_tile(graph_id, groups, choose)
        except (KeyError, ValueError, TypeError, IndexError, pa.ArrowException) as exc:
            if isinstance(exc, BadShards):
                raise
            where = ", ".join(sorted({str(p) for p, _ in groups}))
            raise BadShards(f"{where}: configs of {graph_id!r} cannot be sampled: {one_line(exc)}") from None

    def _derived_columns(self, graph_id: str) -> dict[str, np.ndarray | None]:
        """A layout graph's ``unique_config_columns``, derived once from its structure (which also gives
        its tie array) and kept in an LRU of at most ``DERIVED_BYTES``, so a sample reads only the
        ``config_id`` and ``codes`` column chunks of its row groups (3× fewer than all six)."""
        if graph_id in self._derived:
            self._derived.move_to_end(graph_id)
            return self._derived[graph_id]
        structure = self.load_graph(graph_id, configs=False)
        self._ties[graph_id] = structure.config_node_tie
        columns = unique_config_columns(structure)
        self._derived[graph_id] = columns
        self._derived_bytes += _nbytes(columns)
        while len(self._derived) > 1 and self._derived_bytes > DERIVED_BYTES:
            self._derived_bytes -= _nbytes(self._derived.popitem(last=False)[1])
        return columns

    def _sample_layout(self, graph_id: str, groups: list[tuple[Path, int]], starts: np.ndarray,
                       rows: np.ndarray, tie: np.ndarray,
                       columns: dict[str, np.ndarray | None] | None = None) -> ConfigSample:
        """The configs ``rows`` of a layout graph whose row groups are ``groups`` with first config_ids
        ``starts`` (``_ShardIndex.config_plan``): only the row groups holding a row are read."""
        nt = int(tie.max()) + 1 if len(tie) else 0
        direct = None if columns is None or not len(rows) else pages.sample_codes(
            groups, starts, rows, 12 * nt, lambda path, rgs: self._chunks_of(path, rgs, graph_id), self._fetcher)
        if direct is not None:  # the codes pages read directly (pages.py); else pyarrow reads the row groups
            stored, table, taken = join_planes(direct).reshape(len(rows), nt, 3), None, None
        else:
            stored, table, taken = self._sampled_table(graph_id, groups, starts, rows, nt, columns is not None)
        if columns is not None:
            fields = {"graph_id": graph_id, "rows": rows, "group_size": columns["group_size"][rows],
                      "first_index": columns["first_index"][rows]}
            for name, key in (("config_runtime", "runtime"), ("config_runtime_spread", "runtime_spread")):
                fields[name] = None if columns[key] is None else columns[key][rows]
        else:
            fields = _sample_fields(graph_id, rows, table, taken)
        return ConfigSample(
            **fields,
            # decode the stored columns, then spread them over the tied nodes (nt ≤ nc: less to decode)
            node_config_feat=expand_tied(decode_base7(stored), tie) if len(rows) else
            np.zeros((0, len(tie), 18), np.int8),
        )

    def _sampled_table(self, graph_id: str, groups: list[tuple[Path, int]], starts: np.ndarray, rows: np.ndarray,
                       nt: int, derived: bool) -> tuple[np.ndarray, pa.Table, pa.Table]:
        """(stored codes (k, nt, 3) int32, the row groups read, the rows taken) of ``rows`` read with
        pyarrow: ``config_id`` and ``codes`` (``derived``) or every column."""
        sizes = np.diff(starts)
        where = np.searchsorted(starts, rows, side="right") - 1
        needed = np.unique(where) if len(rows) else np.zeros(1, np.int64)  # k = 0: one group, no rows
        pieces, offsets = [], {}
        for path in dict.fromkeys(groups[i][0] for i in needed):
            mine = [int(i) for i in needed if groups[i][0] == path]
            t = self._read_sampled(path, [groups[i][1] for i in mine], graph_id,
                                   ["config_id", "codes"] if derived else _SAMPLE_COLUMNS["layout"])
            base = sum(p.num_rows for p in pieces)
            at = base
            for i in mine:
                offsets[i] = at
                at += int(sizes[i])
            pieces.append(t)
        table = pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]
        pos = np.array([offsets[int(w)] for w in where], np.int64) + rows - starts[where]
        ids = flat(table.column("config_id"))[pos]
        if not np.array_equal(ids, rows):
            bad = int(np.flatnonzero(ids != rows)[0])
            raise BadShards(f"{groups[int(where[bad])][0]}: row group {groups[int(where[bad])][1]} holds "
                            f"config_id {int(ids[bad])} where config {int(rows[bad])} of {graph_id!r} belongs")
        taken = table.take(pa.array(pos))
        stored = codes_rows(taken.column("codes"), len(rows), nt=nt) if len(rows) else np.zeros((0, 0, 3), np.int32)
        return stored, table, taken

    def _chunks_of(self, path: Path | str, rgs: list[int], graph_id: str) -> list[pages.Chunk]:
        """The ``codes`` chunks of row groups ``rgs`` of an open shard (``pages.chunk_info``, read from its
        footer once), which must hold ``graph_id`` alone (else ``BadShards``, as ``check_graph_groups``)."""
        out = []
        for rg in rgs:
            chunk = self._chunks.get((path, rg))
            if chunk is None:
                chunk = self._chunks[(path, rg)] = pages.chunk_info(self._parquet(path).metadata, rg)
            if chunk.graph_ids != (graph_id, graph_id):
                check_graph_groups(self._parquet(path).metadata, path, [rg], graph_id)  # raises
            out.append(chunk)
        return out

    def _fetcher(self, path: Path | str) -> Callable | None:
        """``pages``' fetch of byte ranges of an open shard: locally ``pread``s of the very file whose
        footer ``_parquet`` read (None when it was replaced since: pyarrow then reads the open one);
        remotely one concurrent ``Store.cat_ranges``, failures as the store's one line."""
        if self.store.is_local:
            known = self._inodes.get(path)
            return None if known is None else pages.file_fetch(path, known)
        size = self._sizes[str(path)]  # set by shard_path
        # the object's last 8 bytes (footer length, PAR1) come in the same round trip: an object replaced
        # since its footer was read (another size or footer) is refused, never read with that footer
        tail = struct.pack("<I", self._parquet(path).metadata.serialized_size) + b"PAR1"

        def fetch_remote(ranges: list[tuple[int, int]]) -> list[bytes]:
            try:
                *blocks, last = self.store.cat_ranges(str(path), [*ranges, (size - 8, size)])
            except FileNotFoundError:
                raise self._changed(f"{path} no longer exists") from None
            except OSError as exc:  # ranges of the footer read at open, past the object's end now
                if exc.errno == errno.EINVAL and "range" in str(exc).lower():
                    raise self._changed(f"{path} is shorter than the object whose footer was read") from None
                raise storage_error(exc, str(path), self.store) from None
            except Exception as exc:  # botocore's NoCredentialsError ...: the store's one line
                raise storage_error(exc, str(path), self.store) from None
            if last != tail:
                raise self._changed(f"{path} is no longer the object whose footer was read")
            return blocks
        return fetch_remote

    def _read_sampled(self, path: Path | str, rgs: list[int], graph_id: str, columns: list[str]) -> pa.Table:
        """Row groups ``rgs`` (``columns`` only) of a shard, all of ``graph_id`` (``check_graph_groups``),
        for a sample. Remotely their column chunks are fetched first, all at once and concurrently
        (``Store.open_prefetched``), then decoded with page checksums verified as always: a sample costs
        one round trip, not one per row group."""
        pf = self._parquet(path)
        check_graph_groups(pf.metadata, path, rgs, graph_id)
        if self.store.is_local:
            return read_row_groups(pf, path, rgs, columns, use_threads=False)
        url = str(path)
        try:
            source = self.store.open_prefetched(url, chunk_ranges(pf.metadata, rgs, columns),
                                                self._sizes[url])  # set by shard_path
        except FileNotFoundError:
            raise self._changed(f"{url} no longer exists") from None
        except OSError as exc:
            raise storage_error(exc, url, self.store) from None
        part = pq.ParquetFile(source, metadata=pf.metadata, page_checksum_verification=True)
        return read_row_groups(part, path, rgs, columns, use_threads=False)

    def _sample_tile(self, graph_id: str, groups: list[tuple[Path, int]],
                     choose: Callable[[int], np.ndarray]) -> ConfigSample:
        pieces = []
        for path, rg in groups:
            t = read_row_group(self._parquet(path), path, rg, _SAMPLE_COLUMNS["tile"])
            pieces.append(t.filter(pc.equal(t.column("graph_id"), graph_id)))
        table = pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]
        ids = flat(table.column("config_id"))
        if not np.array_equal(ids, np.arange(len(ids))):
            raise BadShards(f"{groups[0][0]}: configs rows of {graph_id!r} are not config_id 0..{len(ids) - 1}")
        rows = choose(len(ids))
        taken = table.take(pa.array(rows, pa.int64()))
        return ConfigSample(
            **_sample_fields(graph_id, rows, table, taken),
            config_feat=flat(taken.column("config_feat")).reshape(-1, 24).copy(),
            config_runtime_normalizers=_taken(table, taken, "normalizer"),
        )

    def graph_row(self, graph_id: str) -> dict:
        """The scalar columns of a graph's ``graphs`` row (``num_edges``, ``fold``, ``source_sha256``
        ...) as Python values: what the shards say about the graph besides its arrays."""
        _, _, g, row = self._graph_row_group(graph_id)
        return {f.name: g.column(f.name)[row].as_py() for f in g.schema
                if not (pa.types.is_list(f.type) or pa.types.is_fixed_size_list(f.type))}

    def scan(self, table: str, collection: str, split: str | None = None,
             storage_options: dict | None = None) -> pl.LazyFrame:
        """A lazy polars frame over the ``table`` shards (``"graphs"``: one row per graph, ``"configs"``:
        one row per unique config) of ``collection``, one split or all, plus a ``split`` column.

        Nothing is read until ``.collect()``: polars pushes filters down to the Parquet row groups
        (their ``graph_id`` statistics skip other graphs) and reads only the columns a query uses.
        Columns are those of ``docs/schema.md`` (runtimes int64 ns; ``codes`` binary). Each shard is
        confined to the folder and its schema checked as in ``load_graph``; page checksums are not
        verified by polars (``load_graph`` and ``tpuprep verify`` do). ``ValueError`` for another
        ``table``, ``KeyError`` for an unknown collection or split.

        Remote datasets: polars reads the shard URLs with its own object-store client, not the
        dataset's fsspec filesystem. It takes endpoint and credentials from the standard environment
        variables (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, …) or from ``storage_options`` given
        here in *polars'* spelling (``{"aws_endpoint_url": ..., "aws_region": ...}``, see
        ``polars.scan_parquet``); the fsspec ``storage_options`` of ``open_dataset`` are not
        translated. Locally ``storage_options`` is ignored."""
        import polars as pl

        if table not in ("graphs", "configs"):
            raise ValueError(f"table must be 'graphs' or 'configs', not {table!r}")
        if collection not in self.manifest["collections"]:
            raise KeyError(f"no collection {collection!r} in {self.root} (it has {', '.join(self.collections)})")
        splits = self.splits(collection)
        if split is not None and split not in splits:
            raise KeyError(f"{collection} has no {split!r} split in {self.root} (it has {', '.join(splits)})")
        name = table_name(collection_kind(collection), table)
        frames = []
        for s in splits if split is None else [split]:
            paths = [self.shard_path(i) for i, e in enumerate(self.manifest["shards"])
                     if e["collection"] == collection and e["split"] == s and e["table"] == name]
            for path in paths:
                check_shard_schema(self.open_shard(path), path, name)
            if paths:
                options = {} if self.store.is_local or storage_options is None else \
                    {"storage_options": storage_options}
                frames.append(pl.scan_parquet([str(p) for p in paths], **options).with_columns(split=pl.lit(s)))
        if not frames:
            raise BadShards(f"{self.manifest_path}: lists no {table} shards of {collection}")
        return pl.concat(frames) if len(frames) > 1 else frames[0]

    def counts(self, collection: str) -> dict[str, dict[str, int]]:
        """Per split of ``collection``, its counts recounted from the shards themselves (not taken from
        the manifest), under the manifest's ``COUNT_FIELDS`` keys: ``graphs``, ``configs``,
        ``unique_configs``, ``nodes_before``/``nodes_after``, ``edges_before``/``edges_after``,
        ``bytes_in`` (npz bytes), ``anomalies`` (sums of the ``graphs`` rows' scalars, int) and
        ``bytes_out`` (the bytes of the split's shard files on disk). One ``scan`` aggregated per split:
        polars reads only those eight int columns of the ``graphs`` shards, never the features."""
        import polars as pl

        sums = {"configs": "num_configs", "unique_configs": "num_unique_configs",
                "nodes_before": "num_nodes_original", "nodes_after": "num_nodes",
                "edges_before": "num_edges_original", "edges_after": "num_edges",
                "bytes_in": "source_bytes", "anomalies": "num_repad_anomalies"}
        frame = (self.scan("graphs", collection)
                 .group_by("split")
                 .agg(pl.len().alias("graphs"), *(pl.col(c).cast(pl.Int64).sum().alias(k) for k, c in sums.items()))
                 .collect())
        rows = {r["split"]: r for r in frame.iter_rows(named=True)}
        out: dict[str, dict[str, int]] = {}
        for split in self.splits(collection):
            row = rows.get(split, {"graphs": 0} | dict.fromkeys(sums, 0))
            on_disk = sum(self.shard_size(i) for i, e in enumerate(self.manifest["shards"])
                          if e["collection"] == collection and e["split"] == split)
            out[split] = {k: on_disk if k == "bytes_out" else int(row[k]) for k in COUNT_FIELDS}
        return out

    def iter_graphs(self, collection: str | None = None, split: str | None = None):
        """Yield GraphRecords in graph-id order (shard order, so row groups are read once)."""
        for gid in self.graph_ids(collection, split):
            yield self.load_graph(gid)

    def iter_config_blocks(self, graph_id: str, rows_per_block: int = 4096,
                           rows: np.ndarray | list[int] | None = None) -> Iterator[ConfigSample]:
        """The unique configs of a graph as a stream of :class:`ConfigSample` blocks of at most
        ``rows_per_block`` configs each, so a caller can go through every config of a big graph holding
        one block's codes at a time (the trainer's evaluation and prediction do).

        rows: unique-config rows to visit, in the order given (``None``: all, 0..c_u−1 in order); the
        blocks cut them into consecutive pieces, each decoded like :meth:`sample_configs` (only the row
        groups holding its rows are read, and a layout block stops before those would hold more than
        ``rows_per_block`` configs, so sparse rows come in smaller blocks). ``block.rows`` tells which
        configs a block holds.
        ``KeyError`` for an unknown graph, ``ValueError`` for rows_per_block < 1 or rows outside the
        graph, ``BadShards`` as in :meth:`sample_configs`.
        """
        self._where(graph_id)
        rows_per_block = arguments.count("rows_per_block", rows_per_block, 1)
        c_u = self.num_unique_configs(graph_id)
        want = np.arange(c_u, dtype=np.int64) if rows is None else arguments.rows(rows)
        if len(want) and (want.min() < 0 or want.max() >= c_u):
            raise ValueError(f"rows of {graph_id!r} must lie in 0..{c_u - 1}")
        for piece in self._config_blocks(graph_id, want, rows_per_block):
            yield self.read_configs(graph_id, piece)

    def _config_blocks(self, graph_id: str, want: np.ndarray, rows_per_block: int) -> Iterator[np.ndarray]:
        """``want`` cut into consecutive pieces of ≤ rows_per_block rows; layout pieces also stop before
        the row groups they read would hold more than rows_per_block configs (sparse rows, e.g. a
        sample spread over a big graph, would otherwise decompress the whole graph at once)."""
        collection, split = self._graphs[graph_id]
        if collection_kind(collection) != "layout":
            for start in range(0, len(want), rows_per_block):
                yield want[start:start + rows_per_block]
            return
        starts = self._index(collection, split).config_plan(graph_id)[1]
        where = np.searchsorted(starts, want, side="right") - 1
        sizes = np.diff(starts)
        first, read, groups = 0, 0, set()
        for i, g in enumerate(where.tolist()):
            new = g not in groups
            if i > first and (i - first == rows_per_block or (new and read + sizes[g] > rows_per_block)):
                yield want[first:i]
                first, read, groups = i, 0, set()
                new = True
            if new:
                groups.add(g)
                read += int(sizes[g])
        if first < len(want):
            yield want[first:]


def open_dataset(path: str | Path, storage_options: dict | None = None) -> Dataset:
    """Open a shard folder written by ``tpuprep build`` (reads and checks its manifest.json): a local
    folder or a URL (``s3://bucket/shards``, ``gs://…``, any fsspec protocol) read with the same checks.

    ``storage_options`` go to the fsspec filesystem of a URL (e.g. ``{"anon": True}`` or
    ``{"endpoint_url": ...}`` for s3fs); without them endpoint and credentials come from the standard
    sources (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, …). Sampled reads of a remote dataset fetch
    the footers once, then only the byte ranges of the row groups they need.

    Raises ``BadShards`` for a folder that cannot be trusted (no, malformed or foreign manifest, unknown
    format or major schema version, a shard path leaving the folder or prefix), ``FatalError`` for a
    missing bucket or a denied request (one line naming the URL) and ``UsageError`` for an unknown
    scheme or a missing filesystem package (e.g. ``pip install 'tpuprep[s3]'``).
    """
    return Dataset(path, storage_options=storage_options)
