"""Where each graph of one (collection, split) lives: its ``graphs`` row and its configs row groups,
found from the shards' footers (``graph_id`` statistics) without decoding a configs column."""

from __future__ import annotations

import bisect
from pathlib import Path

import numpy as np

from ..errors import BadShards
from .parquet import check_shard_schema, open_parquet, read_row_group


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

