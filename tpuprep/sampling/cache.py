"""The structures cache of ``ConfigBatches``: what a graph's batches need besides their k configs (its
structure, c_u, its runtimes when the strategy draws by them and, for small graphs, all of its configs),
read through the reader's public API and kept in an LRU bounded in bytes. The per-config columns a
sample of a layout graph needs are not kept here: the dataset derives and keeps them itself
(``shards.derived.DerivedCache``), so ``read_configs(graph_id, rows)`` is all a batch calls.

Each reader process (the main process, or each DataLoader worker) holds its own cache; in a persistent
worker it lives across epochs, so from the second epoch on the batches of cached graphs cost no read.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..shards.reader import ConfigSample, Dataset, GraphRecord

#: bytes of one decoded layout config per configurable node (node_config_feat is (k, nc, 18) int8)
LAYOUT_CONFIG_BYTES = 18


@dataclass
class CachedGraph:
    """One entry: a graph's structure, its (c_u,) int64 runtimes (read-only; None on test, or when the
    strategy needs none), c_u, and every config of the graph when it is small (a tile graph; a layout
    graph whose decoded configs take at most ``cache_bytes / 8``): reading the graph's rows once and
    slicing them is cheaper per batch than filtering row groups again (a tile graph's configs share row
    groups with other graphs)."""

    structure: GraphRecord
    runtimes: np.ndarray | None
    count: int
    configs: ConfigSample | None = None

    @cached_property
    def nbytes(self) -> int:
        """Bytes of the NumPy arrays this entry holds (structure, runtimes, configs)."""
        parts = [*vars(self.structure).values(), self.runtimes,
                 *(vars(self.configs).values() if self.configs is not None else ())]
        return sum(a.nbytes for a in parts if isinstance(a, np.ndarray))


class StructureCache:
    """An LRU of ``CachedGraph`` entries holding at most ``max_bytes`` bytes of arrays together (and, if
    ``max_entries`` is not None, at most that many entries); the most recent entry is always kept."""

    def __init__(self, max_bytes: int, max_entries: int | None = None):
        self.max_bytes, self.max_entries = max_bytes, max_entries
        self.entries: OrderedDict[str, CachedGraph] = OrderedDict()
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, ds: Dataset, graph_id: str, needs_runtimes: bool) -> CachedGraph:
        """The entry of ``graph_id``, read from ``ds`` on a miss (``needs_runtimes``: keep tile runtimes)."""
        if graph_id in self.entries:
            self.entries.move_to_end(graph_id)
            return self.entries[graph_id]
        entry = self.read(ds, graph_id, needs_runtimes)
        self.entries[graph_id] = entry
        self.nbytes += entry.nbytes
        while len(self.entries) > 1 and (self.nbytes > self.max_bytes or (
                self.max_entries is not None and len(self.entries) > self.max_entries)):
            self.nbytes -= self.entries.popitem(last=False)[1].nbytes
        return entry

    def read(self, ds: Dataset, graph_id: str, needs_runtimes: bool) -> CachedGraph:
        """A graph's entry, read now (never the configs' of a large layout graph)."""
        structure = ds.load_graph(graph_id, configs=False)
        count = structure.num_unique_configs
        configs = None
        if structure.kind != "layout":  # a tile graph's configs share row groups with others: read once
            configs = ds.read_configs(graph_id, np.arange(count))
        elif count * len(structure.node_config_ids) * LAYOUT_CONFIG_BYTES <= self.max_bytes // 8:
            # a small graph (≤ 1/8 of the cache) is decoded once and sliced per batch: its 64 rows would
            # touch most of its row groups anyway; a large one is read per batch, 64 configs at a time
            configs = ds.read_configs(graph_id, np.arange(count))
        runtimes = None
        if needs_runtimes:
            runtimes = ds.config_runtimes(graph_id) if configs is None else configs.config_runtime
            if runtimes is not None:
                runtimes = runtimes.copy()
                runtimes.flags.writeable = False
        return CachedGraph(structure, runtimes, count, configs)
