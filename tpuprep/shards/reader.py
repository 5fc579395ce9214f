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

This module is the facade: ``Dataset`` and ``open_dataset``, with every public name of the reader
importable from here (``GraphRecord``, ``ConfigSample``, ``sample_rows`` …). The work is split by job:
``records`` (what is returned), ``stored_codes`` (a layout graph's codes as stored), ``shard_index``
(where a graph's rows are), ``shard_files`` (the files, through ``io.store.Store``), ``loads``
(whole graphs), ``sampled`` (sampled and block reads), ``scans`` (polars scans, counts).
"""

from __future__ import annotations

from collections import OrderedDict
from functools import cached_property
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..io.storage import resolve
from ..io.store import ShardFile, Store
from ..tpugraphs import graph_fold
from . import arguments, pages
from .derived import safe_normalizer, sample_rows, unique_config_columns
from .layout import MANIFEST
from .loads import GraphLoads
from .manifest import read_manifest
from .records import ConfigSample, GraphRecord
from .sampled import SampledReads
from .scans import Scans
from .shard_files import ShardFiles
from .shard_index import ShardIndex

__all__ = ["ConfigSample", "Dataset", "GraphRecord", "open_dataset", "safe_normalizer", "sample_rows",
           "unique_config_columns"]


class Dataset(GraphLoads, SampledReads, Scans, ShardFiles):
    """A folder of tpuprep shards, described by its ``manifest.json``: a local folder or a prefix in
    object storage (``s3://bucket/shards``; ``store`` is where it lives, ``io.store.Store``).

    ``root`` is the folder (``Path``) locally and the URL (``str``, no credentials) remotely;
    ``storage_options`` are those the store was resolved with (for processes that open it again).

    The methods live in one module per job: ``shard_files`` (paths, opens, byte ranges through the
    store), ``loads`` (``load_graph``, ``graph_row``, ``iter_graphs``), ``sampled`` (``sample_configs``,
    ``read_configs``, ``iter_config_blocks``, ``num_unique_configs``, ``config_runtimes``) and
    ``scans`` (``scan``, ``counts``); this class holds the manifest and what it says."""

    def __init__(self, root: str | Path | Store, cache_row_groups: int = 4, storage_options: dict | None = None):
        self.store: Store = root if isinstance(root, Store) else resolve(root, storage_options, what="shard folder")
        self.storage_options = self.store.storage_options
        self.root: Path | str = self.store.location  # a local folder keeps the name it was given
        self.manifest_path: Path | str = self.store.location_of(MANIFEST)
        self.manifest = read_manifest(self.store)
        self._pins: dict[int, ShardFile] = {}  # manifest shard index -> its file, opened and pinned
        self._named: dict[str, ShardFile] = {}  # shard path (from shard_path) -> its pinned file
        self._ids: dict[str, str | None] = {}  # shard path (from shard_path) -> its manifest entry's shard_id
        self._indexes: dict[tuple[str, str], ShardIndex] = {}
        self._cache: OrderedDict[tuple[Path, int], pa.Table] = OrderedDict()
        self._cache_size = cache_row_groups
        self._files: dict[Path | str, pq.ParquetFile] = {}  # footers read once, through the pinned files
        self._chunks: dict[tuple[Path | str, int], pages.Chunk] = {}  # codes chunks of sampled row groups
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

    def _where(self, graph_id: str) -> tuple[str, str]:
        """(collection, split) of a listed graph (``KeyError`` otherwise)."""
        if arguments.graph_id(graph_id) not in self._graphs:
            raise KeyError(f"no graph {graph_id!r} in {self.root}")
        return self._graphs[graph_id]


def open_dataset(path: str | Path | Store, storage_options: dict | None = None, *,
                 cache_dir: str | Path | None = None, cache_bytes: int | None = None) -> Dataset:
    """Open a shard folder written by ``tpuprep build`` (reads and checks its manifest.json): a local
    folder or a URL (``s3://bucket/shards``, ``gs://…``, any fsspec protocol) read with the same checks,
    or a ``Store`` already resolved (``io.storage.resolve``; its own storage options then apply).

    ``storage_options`` go to the fsspec filesystem of a URL (e.g. ``{"anon": True}`` or
    ``{"endpoint_url": ...}`` for s3fs); without them endpoint and credentials come from the standard
    sources (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, …). Sampled reads of a remote dataset fetch
    the footers once, then only the byte ranges of the row groups they need.

    ``cache_dir`` (a local folder, shared by the processes of this host) and ``cache_bytes`` (at most
    that many bytes in it, least recently used out; None: unbounded) read a URL's shards through a
    local cache: footers and 16 MiB blocks of each object as first read, so later epochs and other
    processes read them from disk; each shard's version is still asked when it is opened, and a
    replaced object is fetched again, never served stale (docs/readers.md, "Shards in object storage").
    A local folder is read in place (the cache is not used).

    Raises ``BadShards`` for a folder that cannot be trusted (no, malformed or foreign manifest, unknown
    format or major schema version, a shard path leaving the folder or prefix), ``FatalError`` for a
    missing bucket or a denied request (one line naming the URL) and ``UsageError`` for an unknown
    scheme or a missing filesystem package (e.g. ``pip install 'tpuprep[s3]'``).
    """
    if cache_dir is not None or cache_bytes is not None:
        path = resolve(path, storage_options, what="shard folder", cache_dir=cache_dir, cache_bytes=cache_bytes)
    return Dataset(path, storage_options=storage_options)
