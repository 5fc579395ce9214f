"""Hold out configurations instead of graphs: train on part of each graph's unique configs, score the rest.

With one or a few graphs (a real file at hand, a new program), a graph-level split leaves nothing to
validate on. ``ConfigHoldout`` wraps a dataset and splits every labelled graph of a collection's train
split by its **unique** configs: a seeded ``fraction`` of them (and all their original duplicates) form
a graph of split ``"valid"``, the others a graph of split ``"train"``. Duplicates never straddle the two
sides, so no held-out configuration was seen in training. Node features, edges and feature statistics
are the original graph's; only the config arrays are restricted and renumbered.

The views are ordinary ``GraphRecord`` objects, so ``train`` and ``evaluate`` run on them unchanged.
Their graph ids are ``<graph id>@train`` and ``<graph id>@holdout`` (synthetic truth files are keyed by
the real graph id, so ``--truth`` does not apply to them).
"""

from __future__ import annotations

import dataclasses
import zlib
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import ConfigSample, GraphRecord, sample_rows

TRAIN_SUFFIX, HOLDOUT_SUFFIX = "@train", "@holdout"
ORIGINALS_KEPT = 8
"""Views whose kept original indices (8 bytes per original config) :class:`ConfigHoldout` keeps."""


def restrict_configs(record: GraphRecord, unique_rows: np.ndarray, graph_id: str, split: str) -> GraphRecord:
    """The graph with only the unique configs ``unique_rows`` (sorted, int64) and their duplicates.

    Original configs keep their relative order and are renumbered 0..c'−1; ``config_inverse`` points at
    the kept unique configs renumbered 0..k−1 in the order of ``unique_rows``; ``first_index`` follows.
    """
    rows = np.asarray(unique_rows, np.int64)
    inverse = np.asarray(record.config_inverse, np.int64)
    position = np.full(record.num_unique_configs, -1, np.int64)
    position[rows] = np.arange(len(rows))
    originals = np.flatnonzero(position[inverse] >= 0)  # ascending original indices that stay

    def unique(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else np.ascontiguousarray(a[rows])

    def original(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else np.ascontiguousarray(a[originals])

    return dataclasses.replace(
        record, graph_id=graph_id, split=split,
        config_runtime=unique(record.config_runtime),
        group_size=unique(record.group_size),
        first_index=None if record.first_index is None else
        np.searchsorted(originals, record.first_index[rows]).astype(np.int32),
        config_inverse=position[inverse[originals]].astype(np.int32),
        config_runtime_original=original(record.config_runtime_original),
        config_codes=unique(record.config_codes),
        config_feat=unique(record.config_feat),
        config_runtime_normalizers=unique(record.config_runtime_normalizers),
        config_runtime_normalizers_original=original(record.config_runtime_normalizers_original),
    )


def holdout_rows(graph_id: str, num_unique: int, fraction: float, seed: int) -> np.ndarray:
    """Sorted unique-config rows held out of ``graph_id``: round(fraction · c_u), at least 1 and at
    most c_u − 2 (so both sides can still be ranked); seeded by ``seed`` and the graph id."""
    k = min(max(round(fraction * num_unique), 1), num_unique - 2)
    rng = np.random.Generator(np.random.PCG64([seed, zlib.crc32(graph_id.encode())]))
    return np.sort(rng.choice(num_unique, k, replace=False))


class ConfigHoldout:
    """A view of ``ds`` (a ``tpuprep.open_dataset`` reader; graph sizes come from its manifest, so no graph is
    read until it is used) with the interface ``train``/``evaluate`` use, that splits each train graph of
    ``collection`` into a ``@train`` graph (split ``"train"``) and a ``@holdout`` graph (split
    ``"valid"``) by unique configs. Graphs with fewer than 4 unique configs are left out.
    """

    def __init__(self, ds: Any, collection: str, fraction: float = 0.2, seed: int = 0):
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"fraction must lie strictly between 0 and 1, got {fraction}")
        self.ds, self.collection, self.fraction, self.seed = ds, collection, fraction, seed
        self._views: dict[str, tuple[str, str, np.ndarray]] = {}  # view id -> (graph id, split, rows)
        self._originals_lru: OrderedDict[str, np.ndarray] = OrderedDict()
        unique = {i["graph_id"]: i["counts"]["unique_configs"] for i in ds.manifest["inputs"]
                  if i["status"] == "ok"}
        for gid in ds.graph_ids(collection, split="train"):  # train graphs always carry runtimes
            c_u = unique[gid]
            if c_u < 4:
                continue
            held = holdout_rows(gid, c_u, fraction, seed)
            kept = np.setdiff1d(np.arange(c_u), held)
            self._views[gid + TRAIN_SUFFIX] = (gid, "train", kept)
            self._views[gid + HOLDOUT_SUFFIX] = (gid, "valid", held)
        if not self._views:
            raise ValueError(f"{collection} has no labelled train graph with ≥ 4 unique configs")

    @property
    def collections(self) -> list[str]:
        return [self.collection]

    def graph_ids(self, collection: str | None = None, split: str | None = None) -> list[str]:
        if collection not in (None, self.collection):
            return []
        return [v for v, (_, s, _) in self._views.items() if split is None or s == split]

    def load_graph(self, graph_id: str, configs: bool = True) -> GraphRecord:
        gid, split, rows = self._views[graph_id]
        return restrict_configs(self.ds.load_graph(gid, configs=configs), rows, graph_id, split)

    def iter_config_blocks(self, graph_id: str, rows_per_block: int = 4096,
                           rows: np.ndarray | None = None) -> Iterator[ConfigSample]:
        """``Dataset.iter_config_blocks`` of a view: its unique configs ``rows`` (view numbering, all
        if None) in blocks, with ``rows`` and ``first_index`` renumbered as in :func:`restrict_configs`."""
        gid, kept = self._views[graph_id][0], self._views[graph_id][2]
        for block in self.ds.iter_config_blocks(gid, rows_per_block, kept[self._rows(graph_id, rows)]):
            yield self._renumbered(graph_id, block)

    def read_configs(self, graph_id: str, rows: np.ndarray, columns: Any = None) -> ConfigSample:
        """``Dataset.read_configs`` of a view (``columns`` is not needed: the shards give them)."""
        gid, kept = self._views[graph_id][0], self._views[graph_id][2]
        return self._renumbered(graph_id, self.ds.read_configs(gid, kept[self._rows(graph_id, rows)]))

    def sample_configs(self, graph_id: str, k: int, seed: int = 0) -> ConfigSample:
        """``Dataset.sample_configs`` of a view (rows drawn by ``sample_rows`` over its unique configs)."""
        return self.read_configs(graph_id, sample_rows(self.num_unique_configs(graph_id), k, seed))

    def num_unique_configs(self, graph_id: str) -> int:
        return len(self._views[graph_id][2])

    def config_runtimes(self, graph_id: str) -> np.ndarray | None:
        gid, _, kept = self._views[graph_id]
        runtimes = self.ds.config_runtimes(gid)
        return None if runtimes is None else runtimes[kept]

    @property
    def root(self) -> Any:
        return self.ds.root

    def splits(self, collection: str) -> list[str]:
        return ["train", "valid"] if collection == self.collection else []

    def _rows(self, graph_id: str, rows: np.ndarray | None) -> np.ndarray:
        """View rows (all if None) checked against the view's unique configs."""
        n = self.num_unique_configs(graph_id)
        want = np.arange(n) if rows is None else np.asarray(rows, np.int64)
        if len(want) and (want.min() < 0 or want.max() >= n):
            raise IndexError(f"rows of {graph_id!r} must lie in 0..{n - 1}")
        return want

    def _originals(self, graph_id: str) -> np.ndarray:
        """Ascending original indices of the underlying graph that a view keeps, (c',) int64; the last
        ``ORIGINALS_KEPT`` views' are kept (each block and batch of a view needs them: reading the
        graph's structure again for every block, as before, cost a whole-graph read per batch)."""
        got = self._originals_lru.get(graph_id)
        if got is None:
            gid, _, kept = self._views[graph_id]
            inverse = np.asarray(self.ds.load_graph(gid, configs=False).config_inverse, np.int64)
            got = self._originals_lru[graph_id] = np.flatnonzero(np.isin(inverse, kept))
            while len(self._originals_lru) > ORIGINALS_KEPT:
                self._originals_lru.popitem(last=False)
        self._originals_lru.move_to_end(graph_id)
        return got

    def _renumbered(self, graph_id: str, block: ConfigSample) -> ConfigSample:
        """A block of the underlying graph in the view's numbering (rows, first_index)."""
        kept = self._views[graph_id][2]
        originals = self._originals(graph_id)  # ascending original indices that stay
        return dataclasses.replace(
            block, graph_id=graph_id, rows=np.searchsorted(kept, block.rows).astype(np.int64),
            first_index=np.searchsorted(originals, block.first_index).astype(np.int32))

    def stats(self, collection: str) -> dict[str, np.ndarray]:
        return self.ds.stats(collection)

    def fold(self, graph_id: str) -> int:
        return self.ds.fold(self._views[graph_id][0])
