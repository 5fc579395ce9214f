"""Where a graph is: ``GraphIndex``, the index part of ``reader.Dataset`` — each listed graph's collection,
split and kind (from the manifest) and, per (collection, split), a ``ShardIndex``: each graph's ``graphs``
row and its configs row groups with their first config ids, found from the shards' footers (``graph_id``
statistics) without decoding a configs column.
"""

from __future__ import annotations

import bisect
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..errors import BadShards
from ..tpugraphs import collection_kind
from . import arguments
from .parquet import check_shard_schema, open_parquet, read_row_group

if TYPE_CHECKING:
    from .shard_files import ShardSet


class ShardIndex:
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



class Place(NamedTuple):
    """Where a listed graph belongs: its collection, split and kind (``"layout"`` or ``"tile"``)."""

    collection: str
    split: str
    kind: str


class GraphIndex:
    """Where every graph of a dataset is (see the module docstring). ``manifest``: the dataset's checked
    manifest; ``files``: its ``ShardSet``, whose footers the per-split indexes are built from."""

    def __init__(self, manifest: dict, files: ShardSet):
        self.manifest, self.files = manifest, files
        self._splits: dict[tuple[str, str], ShardIndex] = {}

    @cached_property
    def places(self) -> dict[str, Place]:
        """{graph id: its ``Place``} of every graph the manifest lists as converted."""
        out = {}
        for i in self.manifest["inputs"]:
            if i["status"] == "ok":
                collection = i["graph_id"].rsplit(":", 1)[0]
                out[i["graph_id"]] = Place(collection, i["path"].split("/")[-2], collection_kind(collection))
        return out

    def place(self, graph_id: str) -> Place:
        """The ``Place`` of a listed graph: ``TypeError`` unless ``graph_id`` is a str, ``KeyError`` for a
        graph the dataset does not list."""
        if arguments.graph_id(graph_id) not in self.places:
            raise KeyError(f"no graph {graph_id!r} in {self.files.root}")
        return self.places[graph_id]

    def graph_ids(self, collection: str | None = None, split: str | None = None) -> list[str]:
        """Sorted ids of the listed graphs of ``collection`` and ``split`` (None: any)."""
        return sorted(g for g, p in self.places.items()
                      if (collection is None or p.collection == collection) and (split is None or p.split == split))

    def of(self, collection: str, split: str) -> ShardIndex:
        """The ``ShardIndex`` of (collection, split), built on first use from its shards' footers, each
        checked afterwards to still be the file opened (the ids read came from it)."""
        key = (collection, split)
        if key not in self._splits:
            shards = [(self.files.path(i), s["table"]) for i, s in enumerate(self.files.entries)
                      if s["collection"] == collection and s["split"] == split]
            index = ShardIndex(shards, self.files.footer)
            for path, _ in shards:
                self.files.confirm(path)
            self._splits[key] = index
        return self._splits[key]

    def plan(self, graph_id: str) -> tuple[list[tuple[Path, int]], np.ndarray]:
        """``ShardIndex.config_plan`` of a listed graph: its configs (shard, row group)s and (g + 1,) int64
        running row counts (a layout graph's first config id of each row group, then c_u)."""
        collection, split, _ = self.place(graph_id)
        return self.of(collection, split).config_plan(graph_id)

    def graph_row(self, graph_id: str) -> tuple[Path, int, int]:
        """(graphs shard, row group, row) of a listed graph's ``graphs`` row; ``BadShards`` when no graphs
        shard of its split holds it."""
        collection, split, _ = self.place(graph_id)
        rows = self.of(collection, split).graph_rows
        if graph_id not in rows:
            raise BadShards(f"{self.files.manifest_path}: graph {graph_id!r} is listed, but no {split} graphs "
                            f"shard of {collection} holds it")
        return rows[graph_id]
