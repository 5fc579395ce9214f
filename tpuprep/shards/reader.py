"""Reading shards: ``open_dataset(path)`` → ``Dataset``, ``Dataset.load_graph(id)`` → ``GraphRecord``,
``Dataset.sample_configs(id, k)`` → ``ConfigSample``.

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

This module is the facade: ``Dataset`` holds the manifest and hands every other public method, in a line
or two, to one of its parts (``docs/architecture.md``, "Reading shards"): ``files`` (``ShardSet``,
``shard_files``: the files), ``index`` (``GraphIndex``, ``shard_index``: where a graph is), ``graphs``
(``GraphLoader``, ``loads``: whole graphs) and ``configs`` (``ConfigReader``, ``sampled``: configs by row,
with the one ``DerivedCache``); ``scans`` holds ``scan`` and ``counts``. Every public name of the reader
is importable from here (``GraphRecord``, ``ConfigSample``, ``sample_rows`` …).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow.parquet as pq

from ..io.storage import resolve
from ..io.store import Store
from ..tpugraphs import graph_fold
from . import arguments, scans
from .derived import safe_normalizer, sample_rows, unique_config_columns
from .layout import MANIFEST
from .loads import GraphLoader
from .manifest import read_manifest
from .records import ConfigSample, GraphRecord
from .sampled import ConfigReader
from .shard_files import ShardSet
from .shard_index import GraphIndex

if TYPE_CHECKING:
    import polars as pl

__all__ = ["ConfigSample", "Dataset", "GraphRecord", "open_dataset", "safe_normalizer", "sample_rows",
           "unique_config_columns"]


class Dataset:
    """A folder of tpuprep shards, described by its ``manifest.json``: a local folder or a prefix in
    object storage (``s3://bucket/shards``; ``store`` is where it lives, ``io.store.Store``).

    ``root`` is the folder (``Path``) locally and the URL (``str``, no credentials) remotely;
    ``storage_options`` are those the store was resolved with (for processes that open it again).
    ``files``, ``index``, ``graphs`` and ``configs`` are the parts the methods are handed to (the module
    docstring); they are the reader's own workings, not part of its stable API."""

    def __init__(self, root: str | Path | Store, cache_row_groups: int = 4, storage_options: dict | None = None):
        self.store: Store = root if isinstance(root, Store) else resolve(root, storage_options, what="shard folder")
        self.storage_options = self.store.storage_options
        self.root: Path | str = self.store.location  # a local folder keeps the name it was given
        self.manifest_path: Path | str = self.store.location_of(MANIFEST)
        self.manifest = read_manifest(self.store)
        self.files = ShardSet(self.store, self.manifest["shards"], self.manifest_path)
        self.index = GraphIndex(self.manifest, self.files)
        self.graphs = GraphLoader(self.files, self.index, cache_row_groups)
        self.configs = ConfigReader(self.files, self.index, self.graphs)

    def __repr__(self) -> str:
        return f"Dataset({str(self.root)!r}, collections={self.collections})"

    # -- what the manifest says -------------------------------------------------------------------
    @property
    def collections(self) -> list[str]:
        return list(self.manifest["collections"])

    def splits(self, collection: str) -> list[str]:
        return list(self.manifest["collections"][arguments.name("collection", collection)]["splits"])

    def graph_ids(self, collection: str | None = None, split: str | None = None) -> list[str]:
        """Graph ids (sorted) of a collection and/or split."""
        collection, split = arguments.name("collection", collection, True), arguments.name("split", split, True)
        return self.index.graph_ids(collection, split)

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

    # -- whole graphs: graphs (loads.py) ----------------------------------------------------------
    def load_graph(self, graph_id: str, configs: bool = True) -> GraphRecord:
        """Load one graph and all its unique configs (``KeyError`` for an unknown id, ``BadShards`` when
        the shards do not hold it as the manifest says). ``configs=False``: the structure only (graphs
        row; no configs shard is opened), every per-unique-config array None.

        Memory: the graphs row's arrays (node_feat n'·140·4 bytes, …), 28 bytes per unique config for the
        per-config columns and, for a layout graph, its codes as stored (compressed: 0.1–0.7 bytes per
        config per configurable node on the ``full`` profile; ``GraphRecord``). ``config_codes`` is built
        on first use (12 bytes per config per configurable node); ``node_config_feat(rows)`` decodes
        only the row groups of ``rows``."""
        return self.graphs.load(graph_id, configs)

    def graph_row(self, graph_id: str) -> dict:
        """The scalar columns of a graph's ``graphs`` row (``num_edges``, ``fold``, ``source_sha256``
        ...) as Python values: what the shards say about the graph besides its arrays."""
        return self.graphs.row(graph_id)

    def iter_graphs(self, collection: str | None = None, split: str | None = None) -> Iterator[GraphRecord]:
        """Yield GraphRecords in graph-id order (shard order, so row groups are read once)."""
        for gid in self.graph_ids(collection, split):
            yield self.load_graph(gid)

    # -- configs by row: configs (sampled.py) -----------------------------------------------------
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
        return self.configs.sample(graph_id, k, seed)

    def read_configs(self, graph_id: str, rows: np.ndarray | list[int], columns: object = None) -> ConfigSample:
        """The unique configs ``rows`` ((k,) ints in 0..c_u-1, any order; a row may repeat) of a graph,
        decoded, in the order given: a ``ConfigSample`` whose ``rows`` is ``rows`` as int64. Reads what
        ``sample_configs`` reads for the same rows (layout: the ``config_id`` and ``codes`` chunks of
        their ≤ 64-config row groups; the small per-config fields come from the graph's structure,
        derived once and kept). ``IndexError`` for a row out of range, ``KeyError`` for an unknown
        graph, ``TypeError`` / ``ValueError`` naming ``rows`` when they are not integers.

        ``columns`` is deprecated and ignored (a ``DeprecationWarning``): it took the caller's
        ``unique_config_columns``, which the dataset now derives and keeps itself. A value that is not
        such columns is still refused (``TypeError`` / ``ValueError`` naming ``columns``)."""
        if columns is not None:
            self.configs.deprecated_columns(graph_id, columns)
        return self.configs.read(graph_id, rows)

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
        return self.configs.blocks(graph_id, rows_per_block, rows)

    def num_unique_configs(self, graph_id: str) -> int:
        """c_u, the graph's number of unique configs (layout: from the configs shards' footers, nothing
        decoded; tile: its graphs row)."""
        return self.configs.count(graph_id)

    def config_runtimes(self, graph_id: str) -> np.ndarray | None:
        """(c_u,) int64 runtimes in ns of every unique config of a graph (row r is config_id r, the
        ``load_graph`` numbering; a fresh array), None on the test split: what sampling strategies
        need, no codes read. Layout: derived from the graph's structure (each duplicate group's smallest
        runtime, the stored column by the dedup rule) and kept with its other derived columns, no
        configs row group read; tile: the ``runtime`` column of its configs rows."""
        return self.configs.runtimes(graph_id)

    # -- tables: scans.py -------------------------------------------------------------------------
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
        return scans.scan(self.files, self.manifest, table, collection, split, storage_options)

    def counts(self, collection: str) -> dict[str, dict[str, int]]:
        """Per split of ``collection``, its counts recounted from the shards themselves (not taken from
        the manifest), under the manifest's ``COUNT_FIELDS`` keys: ``graphs``, ``configs``,
        ``unique_configs``, ``nodes_before``/``nodes_after``, ``edges_before``/``edges_after``,
        ``bytes_in`` (npz bytes), ``anomalies``, ``dimensions_undecided`` (sums of the ``graphs`` rows'
        scalars, int; the last one only when the shards have it, schema >= 3.3) and ``bytes_out`` (the
        bytes of the split's shard files as opened). Only those int columns of the ``graphs`` shards are
        read, through the opened files (``scans.counts``), never the features."""
        return scans.counts(self.files, self.manifest, collection)

    # -- shard files: files (shard_files.py) -------------------------------------------------------
    def shard_path(self, i: int) -> Path | str:
        """The file of ``manifest["shards"][i]``, confined to the dataset folder: a relative POSIX path
        without ``..`` that resolves (symbolic links followed) inside the folder to a regular file;
        remotely the URL of an object (not a prefix) under the dataset's prefix. Opened (pinned) on
        the first call. Anything else is ``BadShards`` naming the manifest entry."""
        return self.files.path(i)

    def open_shard(self, path: Path | str) -> pq.ParquetFile:
        """A shard (a path from ``shard_path``) opened for reading with page checksums verified, from
        its pinned file (remotely footer and row groups are ranged GETs). ``BadShards`` naming the folder
        when the shard's id (its footer's ``shard_id``) is not its manifest entry's: the folder was
        rebuilt since ``open_dataset`` (shards written before shard ids have none, their entries
        neither), or the file changed since it was opened."""
        return self.files.open(path)


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
