"""``ConfigBatches``: seeded, resumable, sharded batches of k sampled configs per graph.

One epoch is a list of items (graph, batch index), planned once for all ranks by ``epoch_plan`` (a pure
function of the seed, the epoch, the graph list and the per-graph quotas). Rank r of w and worker i of n
take the items of the plan at positions p with p ≡ r (mod w) (the rank's share, in plan order) and, of
the share, those at share index j ≥ start with (j − start) ≡ i (mod n): over all ranks and workers every
item is yielded exactly once. The rows of an item are drawn by its strategy from a Generator seeded by
(seed, epoch, crc32(graph id), batch index), so they do not depend on who reads the item or when.

Memory stays bounded whatever the collection size: each batch reads only its k configs
(``Dataset.read_configs``), and graph structures (plus runtimes, for the runtime-aware strategies) are
kept in an LRU of ``structures`` graphs.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ..shards.reader import ConfigSample, Dataset, GraphRecord, unique_config_columns
from .strategies import STRATEGIES, sqrt_quotas

STATE_VERSION = 1


@dataclass
class ConfigBatch:
    """One batch: k sampled configs of one graph.

    structure: the graph's ``load_graph(graph_id, configs=False)`` record (read-only, shared through the
    LRU: do not modify); sample: its ``ConfigSample`` (fresh, writable arrays; rows (k,) int64, see
    ``Dataset.read_configs``); epoch: the epoch it belongs to; position: the number of items of this
    rank's share of the epoch done once this batch is consumed (``state_dict`` resumes after it).
    """

    graph_id: str
    collection: str
    split: str
    structure: GraphRecord
    sample: ConfigSample
    epoch: int
    position: int


@dataclass
class _Cached:
    """One LRU entry: a graph's structure, its derived per-config columns (layout, else None), its
    (c_u,) int64 runtimes (None on test, or for tile when the strategy needs none), c_u, and for tile
    every config of the graph (a tile graph's configs share row groups with other graphs: reading the
    graph's rows once and slicing them is ~3.5× cheaper per batch than filtering a row group again)."""

    structure: GraphRecord
    columns: dict[str, np.ndarray | None] | None
    runtimes: np.ndarray | None
    count: int
    configs: ConfigSample | None = None  # all of the graph's configs, read once (tile; small layout graphs)

    @cached_property
    def nbytes(self) -> int:
        """Bytes of the NumPy arrays this entry holds (structure, columns, runtimes, configs)."""
        parts = [*vars(self.structure).values(), *(self.columns or {}).values(), self.runtimes,
                 *(vars(self.configs).values() if self.configs is not None else ())]
        return sum(a.nbytes for a in parts if isinstance(a, np.ndarray))


def epoch_plan(num_graphs: int, quotas: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """(N,) items of one epoch as an (N, 2) int64 array of (graph index, batch index), N = Σ quotas:
    every (g, b) with b < quotas[g], in the order of ``default_rng([seed, epoch]).permutation``."""
    quotas = np.asarray(quotas, np.int64)
    if len(quotas) != num_graphs:
        raise ValueError(f"{len(quotas)} quotas for {num_graphs} graphs")
    graph = np.repeat(np.arange(num_graphs, dtype=np.int64), quotas)
    first = np.repeat(np.cumsum(quotas) - quotas, quotas)
    items = np.stack([graph, np.arange(len(graph), dtype=np.int64) - first], axis=1)
    return items[np.random.default_rng([seed, epoch]).permutation(len(items))]


def share_indices(num_items: int, rank: int, world_size: int, worker: int = 0, num_workers: int = 1,
                  start: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(plan positions, share indices), each (n,) int64, that rank ``rank`` / worker ``worker`` reads of
    an epoch of ``num_items`` items when its rank's share resumes at share index ``start``."""
    share = np.arange(rank, num_items, world_size, dtype=np.int64)
    j = np.arange(start, len(share), dtype=np.int64)
    j = j[(j - start) % num_workers == worker]
    return share[j], j


def item_rng(seed: int, epoch: int, graph_id: str, batch: int) -> np.random.Generator:
    """The Generator an item's rows are drawn from (independent of rank, worker and order)."""
    return np.random.default_rng([seed, epoch, zlib.crc32(graph_id.encode()), batch])


class ConfigBatches:
    """Batches of ``k`` sampled unique configs per graph of one collection and split (module docstring).

    ``strategy``: "uniform", "stratified" or "pairs" (``sampling.strategies``; only "uniform" on the
    test split, which has no runtimes); ``batches_per_graph``: an int ≥ 1, or "sqrt" for
    ``sqrt_quotas`` (∝ √ of each graph's unique configs); ``graph_ids``: a subset of the collection's
    split (default: all of it, sorted); ``structures``: how many graph structures the LRU keeps, and
    ``cache_bytes``: how many bytes of arrays they may hold together (the most recent entry is always
    kept). A tile graph's entry holds all of its configs, read once and sliced per batch, and so does a
    layout graph's whose decoded configs take at most ``cache_bytes / 8``; larger graphs are read per
    batch, only the row groups holding its k rows.
    Iterating yields ``ConfigBatch``es of one epoch (``set_epoch``) of this rank's share."""

    def __init__(self, ds: Dataset, collection: str, split: str = "train", k: int = 64,
                 strategy: str = "uniform", seed: int = 0, rank: int = 0, world_size: int = 1,
                 graph_ids: Sequence[str] | None = None, batches_per_graph: int | str = 1,
                 structures: int = 32, cache_bytes: int = 256 << 20):
        if collection not in ds.collections:
            raise KeyError(f"no collection {collection!r} in {ds.root} (it has {', '.join(ds.collections)})")
        if split not in ds.splits(collection):
            raise KeyError(f"{collection} has no {split!r} split in {ds.root}")
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}")
        if STRATEGIES[strategy][0] and split == "test":
            raise ValueError(f"strategy {strategy!r} needs runtimes; the test split has none (use 'uniform')")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be an int ≥ 1, got {k!r}")
        if not (isinstance(world_size, int) and world_size >= 1 and isinstance(rank, int)
                and 0 <= rank < world_size):
            raise ValueError(f"rank must be in 0..world_size-1 and world_size ≥ 1, got {rank} of {world_size}")
        if batches_per_graph != "sqrt" and (isinstance(batches_per_graph, bool)
                                            or not isinstance(batches_per_graph, int) or batches_per_graph < 1):
            raise ValueError(f"batches_per_graph must be an int ≥ 1 or 'sqrt', got {batches_per_graph!r}")
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise ValueError(f"seed must be an int ≥ 0, got {seed!r}")
        if not isinstance(structures, int) or structures < 1:
            raise ValueError(f"structures must be an int ≥ 1, got {structures!r}")
        if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int) or cache_bytes < 0:
            raise ValueError(f"cache_bytes must be an int ≥ 0, got {cache_bytes!r}")
        listed = ds.graph_ids(collection, split)
        self.graph_ids = list(listed if graph_ids is None else graph_ids)
        foreign = sorted(set(self.graph_ids) - set(listed))
        if foreign:
            raise KeyError(f"graph {foreign[0]!r} is not in {collection} {split} of {ds.root}")
        if len(set(self.graph_ids)) != len(self.graph_ids):
            raise ValueError("graph_ids lists a graph twice")
        self.ds, self.collection, self.split, self.k = ds, collection, split, k
        self.strategy, self.seed, self.rank, self.world_size = strategy, int(seed), rank, world_size
        self.batches_per_graph, self.structures = batches_per_graph, structures
        self.cache_bytes = cache_bytes
        self.worker, self.num_workers = 0, 1
        self.epoch, self._start, self._position = 0, 0, 0
        self._quotas: np.ndarray | None = None
        self._cache: OrderedDict[str, _Cached] = OrderedDict()
        self._cached_bytes = 0

    # -- the plan -------------------------------------------------------------------------------
    def quotas(self) -> np.ndarray:
        """(G,) int64 batches per graph of ``graph_ids`` in every epoch."""
        if self._quotas is None:
            if self.batches_per_graph == "sqrt":
                counts = np.array([self.ds.num_unique_configs(g) for g in self.graph_ids], np.int64)
                self._quotas = sqrt_quotas(counts)
            else:
                self._quotas = np.full(len(self.graph_ids), self.batches_per_graph, np.int64)
        return self._quotas

    def plan(self, epoch: int | None = None) -> np.ndarray:
        """(N, 2) int64 (graph index, batch index) items of an epoch (default: the current), all ranks."""
        return epoch_plan(len(self.graph_ids), self.quotas(), self.seed,
                          self.epoch if epoch is None else epoch)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch the next iteration yields. A resume point (``load_state_dict``) is kept when
        ``epoch`` is the resumed epoch, dropped otherwise."""
        if isinstance(epoch, bool) or not isinstance(epoch, int | np.integer) or epoch < 0:
            raise ValueError(f"epoch must be an int ≥ 0, got {epoch!r}")
        epoch = int(epoch)
        if epoch != self.epoch:
            self._start = 0
        self.epoch = epoch

    def set_worker(self, worker: int, num_workers: int) -> None:
        """Read only worker ``worker``'s part of this rank's share (a DataLoader worker of
        ``num_workers``; the torch adapter calls this)."""
        if not (num_workers >= 1 and 0 <= worker < num_workers):
            raise ValueError(f"worker must be in 0..num_workers-1, got {worker} of {num_workers}")
        self.worker, self.num_workers = worker, num_workers

    def _mine(self, start: int) -> tuple[np.ndarray, np.ndarray]:
        plan = self.plan()
        where, j = share_indices(len(plan), self.rank, self.world_size, self.worker, self.num_workers,
                                 start)
        return plan[where], j

    def __len__(self) -> int:
        """Batches this rank (and worker) yields in a whole epoch."""
        return len(share_indices(int(self.quotas().sum()), self.rank, self.world_size, self.worker,
                                 self.num_workers)[0])

    # -- reading --------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[ConfigBatch]:
        start, self._start = self._start, 0
        items, shares = self._mine(start)
        self._position = start
        for (g, b), j in zip(items.tolist(), shares.tolist(), strict=True):
            batch = self.batch(self.graph_ids[g], b)
            batch.position = j + 1
            self._position = j + 1
            yield batch

    def batch(self, graph_id: str, b: int, epoch: int | None = None) -> ConfigBatch:
        """Item (graph_id, b) of an epoch (default: the current), read now (``position`` 0)."""
        epoch = self.epoch if epoch is None else epoch
        cached = self._structure(graph_id)
        needs_runtimes, choose = STRATEGIES[self.strategy]
        rows = choose(cached.runtimes if needs_runtimes else cached.count, self.k,
                      item_rng(self.seed, epoch, graph_id, b))
        sample = (cached.configs.take(rows) if cached.configs is not None
                  else self.ds.read_configs(graph_id, rows, cached.columns))
        return ConfigBatch(graph_id, self.collection, self.split, cached.structure, sample, epoch, 0)

    def _structure(self, graph_id: str) -> _Cached:
        """What a graph's batches need, through the LRU of ``structures`` entries."""
        if graph_id in self._cache:
            self._cache.move_to_end(graph_id)
            return self._cache[graph_id]
        structure = self.ds.load_graph(graph_id, configs=False)
        if structure.kind == "layout":  # small per-config columns from the structure: samples read codes only
            columns = unique_config_columns(structure)
            runtimes = columns["runtime"]
            decoded = structure.num_unique_configs * len(structure.node_config_ids) * 18  # int8 bytes
            # a small graph (≤ 1/8 of the cache) is decoded once and sliced per batch: its 64 rows would
            # touch most of its row groups anyway; a large one is read per batch, 64 configs at a time
            configs = (self.ds.read_configs(graph_id, np.arange(structure.num_unique_configs), columns)
                       if decoded <= self.cache_bytes // 8 else None)
        else:
            columns = None
            configs = self.ds.read_configs(graph_id, np.arange(structure.num_unique_configs))
            runtimes = configs.config_runtime if STRATEGIES[self.strategy][0] else None
            if runtimes is not None:
                runtimes = runtimes.copy()
                runtimes.flags.writeable = False
        entry = _Cached(structure, columns, runtimes, structure.num_unique_configs, configs)
        self._cache[graph_id] = entry
        self._cached_bytes += entry.nbytes
        while len(self._cache) > 1 and (len(self._cache) > self.structures
                                        or self._cached_bytes > self.cache_bytes):
            self._cached_bytes -= self._cache.popitem(last=False)[1].nbytes
        return entry

    def __getstate__(self) -> dict[str, Any]:
        """Picklable (DataLoader workers started by spawn/forkserver): the dataset travels as its folder
        and is opened again; the LRU starts empty."""
        state = dict(vars(self))
        state["ds"], state["_cache"], state["_cached_bytes"] = str(self.ds.root), OrderedDict(), 0
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self.ds = Dataset(state["ds"])

    # -- resuming -------------------------------------------------------------------------------
    def fingerprint(self) -> str:
        """A short hash of every setting the stream depends on except seed and epoch (graph list,
        collection, split, k, strategy, quotas rule, rank, world size)."""
        settings = [self.collection, self.split, self.k, self.strategy, self.batches_per_graph,
                    self.rank, self.world_size, self.graph_ids]
        return hashlib.sha256(json.dumps(settings).encode()).hexdigest()[:16]

    def state_dict(self, position: int | None = None) -> dict[str, Any]:
        """{"version", "epoch", "position", "seed", "fingerprint"} (JSON-able): resuming from it yields
        this rank's share of the epoch from share index ``position`` on (default: after the last batch
        this object yielded; give ``batch.position`` of the last batch consumed when batches were read
        by several workers)."""
        return {"version": STATE_VERSION, "epoch": self.epoch,
                "position": int(self._position if position is None else position),
                "seed": self.seed, "fingerprint": self.fingerprint()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume where ``state`` (``state_dict``) left off: the next iteration yields the rest of its
        epoch. ``ValueError`` when it was made with other settings or another seed."""
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ValueError(f"not a ConfigBatches state (version {STATE_VERSION}): {state!r:.80}")
        if state.get("fingerprint") != self.fingerprint() or state.get("seed") != self.seed:
            raise ValueError("this state was made by a ConfigBatches with other settings or seed "
                             f"(fingerprint {state.get('fingerprint')}, seed {state.get('seed')}; this one "
                             f"{self.fingerprint()}, seed {self.seed})")
        epoch, position = state.get("epoch"), state.get("position")
        if not (isinstance(epoch, int) and epoch >= 0 and isinstance(position, int) and position >= 0):
            raise ValueError(f"bad epoch or position in the state: {epoch!r}, {position!r}")
        self.epoch, self._start, self._position = epoch, position, position


class BatchesAdapter:
    """What the torch and JAX adapters share: a ``ConfigBatches`` (``self.batches``) whose length, epoch
    and resume state they pass through."""

    batches: ConfigBatches

    def __len__(self) -> int:
        """Batches of this rank per epoch (all DataLoader workers together)."""
        return len(self.batches)

    def set_epoch(self, epoch: int) -> None:
        self.batches.set_epoch(epoch)

    def state_dict(self, position: int | None = None) -> dict[str, Any]:
        """``ConfigBatches.state_dict``: JSON-able; ``position`` = the last consumed batch's
        ``batch["position"]`` (needed with DataLoader workers, whose progress this process cannot see)."""
        return self.batches.state_dict(position)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batches.load_state_dict(state)


def batch_arrays(batch: ConfigBatch) -> dict[str, Any]:
    """A batch as a flat dict of NumPy arrays plus ``graph_id`` (str), ``epoch`` and ``position``
    (int): what the torch and JAX adapters convert. Keys: node_feat (n, 140) float32, node_opcode (n,)
    uint8, edge_index (m, 2) int32, rows (k,) int64, group_size (k,) int32, and per kind: layout
    node_config_ids (nc,) int32, node_config_feat (k, nc, 18) int8; tile config_feat (k, 24) float32.
    With runtimes (not test): config_runtime (k,) int64 ns (tile also config_runtime_normalizers
    (k,) int64 ns). Structure arrays are the LRU's read-only arrays, not copies."""
    s, c = batch.structure, batch.sample
    out: dict[str, Any] = {"graph_id": batch.graph_id, "epoch": batch.epoch, "position": batch.position,
                           "node_feat": s.node_feat, "node_opcode": s.node_opcode,
                           "edge_index": s.edge_index, "rows": c.rows, "group_size": c.group_size}
    optional = {"node_config_ids": s.node_config_ids, "node_config_feat": c.node_config_feat,
                "config_feat": c.config_feat, "config_runtime": c.config_runtime,
                "config_runtime_normalizers": c.config_runtime_normalizers}
    out.update({key: value for key, value in optional.items() if value is not None})
    return out
