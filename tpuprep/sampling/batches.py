"""``ConfigBatches``: seeded, resumable, sharded batches of k sampled configs per graph.

One epoch is a list of items (graph, batch index), planned once for all ranks by ``sampling.plan`` (a
pure function of the seed, the epoch, the graph list, the per-graph quotas and, for a weighted mix of
collections, the weights) and dealt to ranks and DataLoader workers by ``sampling.sharding``: every rank
gets the same number of items (the layout is padded with the epoch's first items, or with ``drop_last``
its last items are dropped), so no rank of a DDP job waits for another; over all ranks and workers every
item of the plan is yielded once, up to that padding or dropping (at most world_size − 1 items). The
rows of an item are drawn by its strategy from a Generator seeded by (seed, epoch, crc32(graph id),
batch index), so they do not depend on who reads the item or when.

The epoch (``set_epoch``) and a resume point (``load_state_dict``) live in a ``SharedProgress`` that
DataLoader workers share with the main process, so persistent workers follow ``set_epoch`` too. A pass
over an epoch begins when ``iter()`` is called. Each DataLoader worker can also save and resume its own
progress (``worker_state`` / ``load_worker_state``: torchdata's ``StatefulDataLoader`` protocol, through
the torch adapter; ``sampling.resume``).
Memory stays bounded whatever the collection size: each batch reads only its k configs
(``Dataset.read_configs``), graph structures (plus runtimes and small graphs' configs) are kept in a
``StructureCache`` of ``cache_bytes`` bytes, one per reader process, and an epoch's plan of at most 2**24
items holds at most 8 bytes per item (``sampling.plan``, "Bounds"; 128 MiB at the bound), decoded a chunk
at a time.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..io.store import Store
from ..shards.reader import ConfigSample, Dataset, GraphRecord
from .cache import StructureCache
from .mixing import select
from .plan import EpochPlan, PlanLayout, check_epoch_items, epoch_plan
from .resume import STATE_VERSION, check_epoch, check_int, parse_state, parse_worker, rank_state
from .sharding import SharedProgress, consumed_items, share_indices, share_length, share_positions
from .strategies import STRATEGIES, sqrt_quotas

__all__ = ["STATE_VERSION", "BatchesAdapter", "ConfigBatch", "ConfigBatches", "batch_arrays", "epoch_plan",
           "item_rng", "share_indices"]

#: share indices decoded at once while iterating (bounded memory whatever the epoch's length)
CHUNK = 4096


@dataclass
class ConfigBatch:
    """One batch: k sampled configs of one graph.

    structure: the graph's ``load_graph(graph_id, configs=False)`` record (read-only, shared through the
    cache: do not modify); sample: its ``ConfigSample`` (fresh, writable arrays; rows (k,) int64, see
    ``Dataset.read_configs``); collection: the graph's collection (in a mix, the one it was drawn for);
    epoch: the epoch it belongs to; position: the number of items of this rank's share of the epoch done
    once this batch is consumed (``state_dict`` resumes after it).
    """

    graph_id: str
    collection: str
    split: str
    structure: GraphRecord
    sample: ConfigSample
    epoch: int
    position: int


def manifest_digest(manifest: dict) -> str:
    """A digest (64 hex digits) of a dataset's manifest as read (``Dataset.manifest``): the same for the
    same build (manifests are deterministic), another for any other build."""
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()


def item_rng(seed: int, epoch: int, graph_id: str, batch: int) -> np.random.Generator:
    """The Generator an item's rows are drawn from (independent of rank, worker and order)."""
    return np.random.default_rng([seed, epoch, zlib.crc32(graph_id.encode()), batch])


class ConfigBatches:
    """Batches of ``k`` sampled unique configs per graph of one collection, or of a weighted mix of
    collections, and one split (module docstring).

    ``collection``: a collection name, or a mapping {collection: weight} of collections of one kind
    (``sampling.mixing``; per epoch each collection's share of the batches follows the weights within
    ±1 batch, up- or down-sampling its graphs: ``sampling.plan``); ``strategy``: "uniform", "stratified"
    or "pairs" (``sampling.strategies``; only "uniform" on the test split, which has no runtimes);
    ``batches_per_graph``: an int ≥ 1, or "sqrt" for ``sqrt_quotas`` (∝ √ of each graph's unique
    configs, per collection); an epoch holds at most 2**24 batches; ``graph_ids``: a subset of the
    collections' split (default: all of it, sorted); ``drop_last``: rank shares of equal length by
    dropping the epoch's last items instead of padding with its first ones; ``cache_bytes``: how many
    bytes of arrays the structures cache of each reader process holds (the most recent entry is always
    kept), and ``structures``: at most that many graphs too (default: no count limit). A tile graph's
    entry holds all of its configs, read once and sliced per batch, and so does a layout graph's whose
    decoded configs take at most ``cache_bytes / 8``; larger graphs are read per batch, only the row
    groups holding its k rows. Iterating yields ``ConfigBatch``es of one epoch (``set_epoch``) of this
    rank's share. ``collection`` reads the one collection's name (None for a mix), ``collections`` and
    ``weights`` the collections (sorted) and their weights."""

    def __init__(self, ds: Dataset, collection: str | Mapping[str, float], split: str = "train", k: int = 64,
                 strategy: str = "uniform", seed: int = 0, rank: int = 0, world_size: int = 1,
                 graph_ids: Sequence[str] | None = None, batches_per_graph: int | str = 1,
                 structures: int | None = None, cache_bytes: int = 256 << 20, drop_last: bool = False):
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
        if structures is not None and (isinstance(structures, bool) or not isinstance(structures, int)
                                       or structures < 1):
            raise ValueError(f"structures must be an int ≥ 1 or None, got {structures!r}")
        if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int) or cache_bytes < 0:
            raise ValueError(f"cache_bytes must be an int ≥ 0, got {cache_bytes!r}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last must be True or False, got {drop_last!r}")
        selection = select(ds, collection, split, graph_ids)
        if batches_per_graph != "sqrt":
            check_epoch_items(batches_per_graph * len(selection.graph_ids))
        self.selection = selection
        self.graph_ids = selection.graph_ids
        self.collections, self.weights = selection.names, selection.weights
        self.collection = None if selection.mixed else selection.names[0]
        self._ds, self.split, self.k = ds, split, k
        self._manifest_digest: str | None = None  # of the manifest ds opened: ``_opened_digest``
        self._fingerprint: str | None = None  # ``fingerprint``: settings fixed from here on
        self.strategy, self.seed, self.rank, self.world_size = strategy, int(seed), rank, world_size
        self.batches_per_graph, self.structures = batches_per_graph, structures
        self.cache_bytes, self.drop_last = cache_bytes, drop_last
        self.worker, self.num_workers = 0, 1
        self._opened_in: int | None = os.getpid()  # a forked child opens the dataset again (``_own_dataset``)
        self._quotas: np.ndarray | None = None
        self._layout: PlanLayout | None = None
        self._progress = SharedProgress()
        self._reset_local()

    def _reset_local(self) -> None:
        """What only this process knows: its cache, the pass it began — (epoch, base, start): the layout
        and the share index it started at —, its position (share index after the last batch it yielded),
        the share index it reads next, and a worker state it loaded and has not begun yet."""
        self.cache = StructureCache(self.cache_bytes, self.structures)
        self._pass: tuple[int, int, int] | None = None
        self._position = 0
        self._next = 0
        self._local: tuple[int, int, int, int] | None = None  # (epoch, base, start, next)

    def __repr__(self) -> str:
        what = repr(self.collection) if self.collection is not None else \
            "{" + ", ".join(f"{n!r}: {w}" for n, w in zip(self.collections, self.weights, strict=True)) + "}"
        return (f"ConfigBatches({what}, split={self.split!r}, k={self.k}, "
                f"strategy={self.strategy!r}, seed={self.seed}, rank={self.rank}, world_size={self.world_size}, "
                f"epoch={self.epoch}, graphs={len(self.graph_ids)})")

    # -- the plan -------------------------------------------------------------------------------
    def quotas(self) -> np.ndarray:
        """(G,) int64 batches per graph of ``graph_ids`` in every round (``sampling.plan``; the epoch of
        one collection is one round)."""
        if self._quotas is None:
            if self.batches_per_graph == "sqrt":
                counts = np.array([self.ds.num_unique_configs(g) for g in self.graph_ids], np.int64)
                ends = np.cumsum(self.selection.counts)
                self._quotas = np.concatenate([sqrt_quotas(part) for part in np.split(counts, ends[:-1])])
            else:
                self._quotas = np.full(len(self.graph_ids), self.batches_per_graph, np.int64)
        return self._quotas

    def layout(self) -> PlanLayout:
        """The ``PlanLayout`` the epochs are planned from (quotas, collections, shares)."""
        if self._layout is None:
            quotas = self.quotas()
            check_epoch_items(int(quotas.sum()))
            self._layout = PlanLayout.mix(self.collections, self.weights, self.selection.counts, quotas)
        return self._layout

    def plan(self, epoch: int | None = None) -> np.ndarray:
        """(N, 2) int64 (graph index, batch index) items of an epoch (default: the current), all ranks.
        For inspection: iterating decodes the plan a chunk at a time instead."""
        plan = EpochPlan(self.layout(), self.seed, self.epoch if epoch is None else check_epoch(epoch))
        return plan.items(np.arange(len(plan)))

    @property
    def epoch(self) -> int:
        """The epoch the next iteration yields (shared with DataLoader workers)."""
        return self._progress.epoch

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch the next iteration yields (an int in 0..2**63-1), in this process and in
        DataLoader workers holding a copy of this object (persistent ones too). A resume point
        (``load_state_dict``) is kept when ``epoch`` is the resumed epoch, dropped otherwise."""
        self._progress.set_epoch(check_epoch(epoch))

    def set_worker(self, worker: int, num_workers: int) -> None:
        """Read only worker ``worker``'s part of this rank's share (a DataLoader worker of
        ``num_workers``; the torch adapter calls this)."""
        if not (num_workers >= 1 and 0 <= worker < num_workers):
            raise ValueError(f"worker must be in 0..num_workers-1, got {worker} of {num_workers}")
        self.worker, self.num_workers = worker, num_workers

    def __len__(self) -> int:
        """Batches this rank (and worker) yields in a whole epoch: the same on every rank."""
        length = share_length(len(self.layout()), self.world_size, self.drop_last)
        return len(range(self.worker, length, self.num_workers))

    # -- reading --------------------------------------------------------------------------------
    @property
    def ds(self) -> Dataset:
        """The dataset read from: the one given, or in another process (a DataLoader worker) the same
        folder opened again there, checked to be the build the given one opened (``_own_dataset``)."""
        self._own_dataset()
        return self._ds

    def _own_dataset(self) -> None:
        """In a process other than the one that opened the dataset — forked after it was opened, or
        started by spawn/forkserver (``__setstate__``) — open it again, on first use: pyarrow's open
        files and their read caches must not be shared with the parent (reads can hang), nor an object
        store's client (fsspec's are not fork-safe), so the store is made again as a spawned worker gets
        it (pickled: the same location, options and bucket cache). Its manifest must be the one the
        given dataset opened (``manifest_digest``): a folder rebuilt in between is ``BadShards``, "the
        shard folder changed after it was opened", in the worker's first read, never the new build's
        rows beside the old build's plan and inherited cache (whose arrays, the same build's, stay
        valid). The shards themselves are checked as every ``Dataset`` checks them (their ids)."""
        if self._opened_in == os.getpid():
            return
        store = self._ds if isinstance(self._ds, Store) else pickle.loads(pickle.dumps(self._ds.store))
        ds = Dataset(store)
        expected = self._opened_digest()
        if expected is not None and manifest_digest(ds.manifest) != expected:
            raise ds.files.changed(f"{ds.manifest_path} is not the manifest it was opened with")
        self._ds, self._opened_in = ds, os.getpid()

    def _opened_digest(self) -> str | None:
        """The digest of the manifest the given dataset opened, which a DataLoader worker, opening the
        folder again, must find there: computed on first need (pickling for a spawned worker, or in a
        forked one from the inherited dataset), never when no worker reads. None for a view of a dataset
        (such as train/holdout.py's), only read in the process that made it."""
        if self._manifest_digest is None and isinstance(self._ds, Dataset):
            self._manifest_digest = manifest_digest(self._ds.manifest)
        return self._manifest_digest

    def __iter__(self) -> Iterator[ConfigBatch]:
        """Begin a pass now (the epoch and resume point are read here, not at the first batch) and
        return its batches."""
        self._own_dataset()
        if self._local is not None:  # a worker state loaded in this process
            epoch, base, start, first = self._local
            self._local = None
            self._progress.record_pass(self.worker, epoch, base)
        else:
            epoch, base, start = self._progress.begin(self.worker, self.num_workers)
            first = start + self.worker
        self._pass, self._position, self._next = (epoch, base, start), start, first
        return self._read(epoch, base, first)

    def _read(self, epoch: int, base: int, first: int) -> Iterator[ConfigBatch]:
        """The batches of this reader's share indices first, first + n, … of the pass."""
        plan = EpochPlan(self.layout(), self.seed, epoch)
        length = share_length(len(plan), self.world_size, self.drop_last, base)
        step = self.num_workers
        for lo in range(first, length, CHUNK * step):
            j = np.arange(lo, min(lo + CHUNK * step, length), step, dtype=np.int64)
            items = plan.items(share_positions(j, len(plan), self.rank, self.world_size, base))
            for (g, b), share in zip(items.tolist(), j.tolist(), strict=True):
                batch = self.batch(self.graph_ids[g], b, epoch)
                batch.position = share + 1
                self._position, self._next = share + 1, share + step
                yield batch

    def warm_up(self) -> None:
        """Read the first item of this rank's share of the current epoch now, in this process: the
        reading kernels (numba, ~2 s per process) and that graph's cache entry are loaded, and DataLoader
        workers started by fork afterwards inherit them instead of each paying for them again."""
        plan = EpochPlan(self.layout(), self.seed, self.epoch)
        if share_length(len(plan), self.world_size, self.drop_last):
            g, b = plan.items(share_positions(np.zeros(1, np.int64), len(plan), self.rank, self.world_size))[0]
            self.batch(self.graph_ids[int(g)], int(b))

    def batch(self, graph_id: str, b: int, epoch: int | None = None) -> ConfigBatch:
        """Item (graph_id, b) of an epoch (default: the current), read now (``position`` 0)."""
        epoch = self.epoch if epoch is None else epoch
        self._own_dataset()
        needs_runtimes, choose = STRATEGIES[self.strategy]
        cached = self.cache.get(self.ds, graph_id, needs_runtimes)
        rows = choose(cached.runtimes if needs_runtimes else cached.count, self.k,
                      item_rng(self.seed, epoch, graph_id, b))
        sample = cached.configs.take(rows) if cached.configs is not None else self.ds.read_configs(graph_id, rows)
        return ConfigBatch(graph_id, cached.structure.collection, self.split, cached.structure, sample, epoch, 0)

    def __getstate__(self) -> dict[str, Any]:
        """Picklable (DataLoader workers started by spawn/forkserver): the dataset travels as its store
        (``io.store.Store``: its folder or URL, its ``storage_options`` — so a worker opens it again with
        the same credentials; they are never shown by ``repr`` or ``state_dict`` — and a bucket cache's
        ``cache_dir``); the cache starts empty; the epoch and resume point stay shared with this object
        when a worker is being started (``SharedProgress``)."""
        self._opened_digest()
        state = dict(vars(self))
        state["_ds"] = self.ds.store
        for local in ("cache", "_pass", "_position", "_next", "_local", "_opened_in"):
            del state[local]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """The dataset is opened again at its first use (``_own_dataset``), so that a folder changed
        meanwhile is an error of that read (which a DataLoader hands to the main process as it is),
        not of unpickling (a worker that dies at start)."""
        vars(self).update(state)  # _ds: the store until then
        self._opened_in = None
        self._reset_local()

    # -- resuming -------------------------------------------------------------------------------
    def fingerprint(self) -> str:
        """A short hash of every setting the stream depends on except seed, epoch, rank and world size
        (graph list, collections and weights, split, k, strategy, quotas rule, drop_last)."""
        if self._fingerprint is None:  # asked after every batch (StatefulDataLoader): hashed once
            settings = [self.selection.setting(), self.split, self.k, self.strategy, self.batches_per_graph,
                        self.drop_last, self.graph_ids]
            self._fingerprint = hashlib.sha256(json.dumps(settings).encode()).hexdigest()[:16]
        return self._fingerprint

    def state_dict(self, position: int | None = None) -> dict[str, Any]:
        """{"version", "epoch", "base", "position", "world_size", "rank", "seed", "fingerprint"}
        (JSON-able): resuming from it yields this rank's share of the epoch from share index
        ``position`` on. ``position`` defaults to after the last batch this object yielded; give
        ``batch.position`` of the last batch consumed when DataLoader workers read the batches (without
        it, a state after their reading is refused: it would repeat what they yielded)."""
        epoch, base = self.epoch, 0
        pending = self._progress.pending()
        pass_epoch, pass_base, passes = self._progress.last_pass()
        if position is None:
            if pending is not None:
                epoch, base, position = pending
            elif self._pass is not None and self._pass[0] == epoch:
                base, position = self._pass[1], self._position
            elif passes and pass_epoch == epoch:
                raise ValueError("DataLoader workers read this epoch's batches: give state_dict(position) "
                                 "with batch['position'] of the last batch consumed")
            else:
                position = 0
        else:
            position = check_int(position, "position")
            if pending is not None:
                base = pending[1]
            elif passes and pass_epoch == epoch:
                base = pass_base
        length = share_length(len(self.layout()), self.world_size, self.drop_last, base)
        if position > length:
            raise ValueError(f"position {position} is past the end of this rank's share ({length} batches)")
        return rank_state(epoch, base, position, self.world_size, self.rank, self.seed, self.fingerprint())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume where ``state`` (``state_dict``) left off: the next iteration (of this process, or of
        each DataLoader worker) yields the rest of its epoch. The ranks of a job move in lockstep (each
        yields the same number of batches per epoch), so a state of any rank resumes every rank: with
        the same world size, each rank resumes its own share at the state's position; with another
        world size, the items not yet consumed by the old world are dealt again to the new one (padded
        or dropped to equal shares). ``ValueError`` when it was made with other settings or seed, or is
        a DataLoader worker's state (``load_worker_state``)."""
        epoch, base, position, world = parse_state(state, self.fingerprint(), self.seed, len(self.layout()),
                                                   self.drop_last)
        if "worker" in state:
            raise ValueError(f"this is the state of DataLoader worker {state['worker']} of "
                             f"{state.get('num_workers')} (torchdata's StatefulDataLoader saves one per worker): "
                             "load it with StatefulDataLoader.load_state_dict")
        if world != self.world_size:  # deal what the old world had not consumed to this one
            base, position = consumed_items(len(self.layout()), world, base, position), 0
        self._progress.resume(epoch, base, position)
        self._pass, self._position = None, position

    def worker_state(self) -> dict[str, Any]:
        """This reader's own resume point (``sampling.resume``: the rank state of its pass plus "worker",
        "num_workers" and "next"), after the last batch it yielded; before its pass begins, the point
        the pass will start at. What torchdata's ``StatefulDataLoader`` saves for each DataLoader worker
        (the torch adapter calls it in the worker)."""
        if self._local is not None:
            epoch, base, start, nxt = self._local
        elif self._pass is not None:
            (epoch, base, start), nxt = self._pass, self._next
        else:
            epoch, base, start = self._progress.pending() or (self.epoch, 0, 0)
            nxt = start + self.worker
        state = rank_state(epoch, base, start, self.world_size, self.rank, self.seed, self.fingerprint())
        return {**state, "worker": self.worker, "num_workers": self.num_workers, "next": int(nxt)}

    def load_worker_state(self, state: dict[str, Any]) -> None:
        """Make this reader's next pass resume ``state``: a worker state of the same worker of as many
        workers in the same world size (it continues that worker's batches), or a rank state (every
        worker resumes it, in any world size, as ``load_state_dict`` does). The point is this process's
        own: other readers and the shared progress are not touched; the next ``iter()`` takes it."""
        epoch, base, position, world = parse_state(state, self.fingerprint(), self.seed, len(self.layout()),
                                                   self.drop_last)
        if "worker" in state:
            length = share_length(len(self.layout()), world, self.drop_last, base)
            nxt = parse_worker(state, self.worker, self.num_workers, self.world_size, position, world, length)
        else:
            if world != self.world_size:
                base, position = consumed_items(len(self.layout()), world, base, position), 0
            nxt = position + self.worker
        self._local = (epoch, base, position, nxt)


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
    """A batch as a flat dict of NumPy arrays plus ``graph_id`` and ``collection`` (str), ``epoch`` and
    ``position`` (int): what the torch and JAX adapters convert. Keys: node_feat (n, 140) float32, node_opcode (n,)
    uint8, edge_index (m, 2) int32, rows (k,) int64, group_size (k,) int32, and per kind: layout
    node_config_ids (nc,) int32, node_config_feat (k, nc, 18) int8; tile config_feat (k, 24) float32.
    With runtimes (not test): config_runtime (k,) int64 ns (tile also config_runtime_normalizers
    (k,) int64 ns). Structure arrays are the LRU's read-only arrays, not copies."""
    s, c = batch.structure, batch.sample
    out: dict[str, Any] = {"graph_id": batch.graph_id, "collection": batch.collection, "epoch": batch.epoch,
                           "position": batch.position,
                           "node_feat": s.node_feat, "node_opcode": s.node_opcode,
                           "edge_index": s.edge_index, "rows": c.rows, "group_size": c.group_size}
    optional = {"node_config_ids": s.node_config_ids, "node_config_feat": c.node_config_feat,
                "config_feat": c.config_feat, "config_runtime": c.config_runtime,
                "config_runtime_normalizers": c.config_runtime_normalizers}
    out.update({key: value for key, value in optional.items() if value is not None})
    return out
