"""An in-memory stand-in for ``tpuprep.open_dataset`` (docs/spec.md §4) for the trainer's tests.

The fake follows the reader interface exactly: graph ids ``<collection>:<stem>``, deduplicated unique
configs (first-occurrence order, minimum runtime per group — tile: smallest runtime / normalizer),
``config_inverse`` back to every original config, base-7 ``config_codes`` and ``node_config_feat(rows)``
decoding them, ``None`` runtimes on test. Runtimes are learnable functions of the layout (or tile sizes):

* layout: each configurable node pays ``w_j`` when the minor-most dim of its output layout is not the
  node's largest output dim (the "violation" of seeds/002 §5.2), and ``0.5 w_j`` when its operand layout's
  minor-most dim differs from its output's; ``w_j`` grows with the node's tensor size.
* tile: cost grows with |log2(output tile product) − log2(ideal)|, ideal read from the node shapes;
  runtime = normalizer × ratio so runtime alone ranks differently from runtime / normalizer.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tpuprep.shards.reader import ConfigSample, sample_rows

LAYOUT, TILE = "layout:xla:random", "tile:xla"
"""The collections the trainer's tests use."""


def dataset_fixture(**sizes):
    """A module-scoped pytest fixture ``ds``: ``make_fake_dataset(**sizes)``, made once per test module
    (``ds = dataset_fixture(seed=7, n_train=2, ...)`` at module level)."""
    import pytest

    @pytest.fixture(scope="module")
    def ds():
        return make_fake_dataset(**sizes)

    return ds


def untrained_ranker(ds, collection: str, seed: int = 0, hidden: int = 8):
    """A ``Ranker`` of ``collection`` made from ``ds``'s train statistics and never trained (one layer of
    ``hidden`` units): what refusals, file formats and index mappings are tested with."""
    from tpuprep.tpugraphs import collection_kind
    from tpuprep.train import Ranker
    from tpuprep.train.model import ModelConfig

    kind = collection_kind(collection)
    return Ranker.create(collection, ds.stats(collection), ModelConfig(kind, hidden, hidden, 1), seed)

POW7 = 7 ** np.arange(6, dtype=np.int64)


def encode(values: np.ndarray) -> np.ndarray:
    """(..., 18) ints in −1..5 → (..., 3) int32 base-7 codes (digit = value + 1, first slot least significant)."""
    v = np.asarray(values, np.int64) + 1
    v = v.reshape(*v.shape[:-1], 3, 6)
    return (v * POW7).sum(axis=-1).astype(np.int32)


def decode(codes: np.ndarray) -> np.ndarray:
    """(..., 3) codes → (..., 18) int8 values in −1..5."""
    c = np.asarray(codes, np.int64)[..., None]
    digits = (c // POW7) % 7
    return (digits - 1).astype(np.int8).reshape(*codes.shape[:-1], 18)


@dataclass
class FakeGraph:
    """A GraphRecord with the attributes of docs/spec.md §4."""

    graph_id: str
    collection: str
    split: str
    node_feat: np.ndarray
    node_opcode: np.ndarray
    edge_index: np.ndarray
    node_index: np.ndarray
    node_config_ids: np.ndarray | None
    node_splits: np.ndarray | None
    config_runtime: np.ndarray | None
    group_size: np.ndarray
    first_index: np.ndarray
    config_inverse: np.ndarray
    config_runtime_original: np.ndarray | None
    config_codes: np.ndarray | None = None
    config_feat: np.ndarray | None = None
    config_runtime_normalizers: np.ndarray | None = None
    config_runtime_normalizers_original: np.ndarray | None = None
    truth: np.ndarray | None = field(default=None, repr=False)  # noise-free runtime of original configs

    @property
    def kind(self) -> str:
        return self.collection.split(":", 1)[0]

    @property
    def num_unique_configs(self) -> int:
        if self.group_size is None:  # a structure (configs=False)
            return int(self.config_inverse.max()) + 1 if len(self.config_inverse) else 0
        return len(self.group_size)

    def node_config_feat(self, rows: np.ndarray | None = None) -> np.ndarray:
        """Decoded layout values (k, nc, 18) int8 for the given unique-config rows (all if None)."""
        if self.config_codes is None:
            raise ValueError("tile graphs have no node_config_feat")
        codes = self.config_codes if rows is None else self.config_codes[np.asarray(rows)]
        return decode(codes)


class FakeDataset:
    """The reader API over a list of FakeGraph."""

    def __init__(self, graphs: list[FakeGraph], n_folds: int = 5):
        self._graphs = {g.graph_id: g for g in graphs}
        self.n_folds = n_folds
        self.collections = sorted({g.collection for g in graphs})

    def graph_ids(self, collection: str, split: str = "train") -> list[str]:
        return [g.graph_id for g in self._graphs.values() if g.collection == collection and g.split == split]

    def load_graph(self, graph_id: str, configs: bool = True) -> FakeGraph:
        g = self._graphs[graph_id]
        if configs:
            return g
        return dataclasses.replace(g, config_runtime=None, group_size=None, first_index=None,
                                   config_codes=None, config_feat=None, config_runtime_normalizers=None)

    def iter_config_blocks(self, graph_id: str, rows_per_block: int = 4096,
                           rows: np.ndarray | None = None) -> Iterator[ConfigSample]:
        """``Dataset.iter_config_blocks``: the unique configs ``rows`` (all if None) in blocks."""
        g = self._graphs[graph_id]
        want = np.arange(g.num_unique_configs) if rows is None else np.asarray(rows, np.int64)
        for start in range(0, len(want), rows_per_block):
            yield self._sample(g, want[start:start + rows_per_block])

    def sample_configs(self, graph_id: str, k: int, seed: int = 0) -> ConfigSample:
        """``Dataset.sample_configs``: k distinct unique configs drawn by ``sample_rows``."""
        g = self._graphs[graph_id]
        return self._sample(g, sample_rows(g.num_unique_configs, k, seed))

    # what tpuprep.ConfigBatches uses besides the above
    root = "<fake dataset>"

    def splits(self, collection: str) -> list[str]:
        return sorted({g.split for g in self._graphs.values() if g.collection == collection})

    def read_configs(self, graph_id: str, rows: np.ndarray, columns: dict | None = None) -> ConfigSample:
        return self._sample(self._graphs[graph_id], np.asarray(rows, np.int64))

    def num_unique_configs(self, graph_id: str) -> int:
        return self._graphs[graph_id].num_unique_configs

    def config_runtimes(self, graph_id: str) -> np.ndarray | None:
        rt = self._graphs[graph_id].config_runtime
        return None if rt is None else np.array(rt, np.int64)

    @staticmethod
    def _sample(g: FakeGraph, r: np.ndarray) -> ConfigSample:
        def take(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else np.array(a[r])

        return ConfigSample(
            g.graph_id, r, take(g.config_runtime), None, take(g.group_size), take(g.first_index),
            node_config_feat=None if g.config_codes is None else decode(g.config_codes[r]),
            config_feat=take(g.config_feat), config_runtime_normalizers=take(g.config_runtime_normalizers))

    def stats(self, collection: str) -> dict[str, np.ndarray]:
        feats = [g.node_feat[:, :134].astype(np.float64) for g in self._graphs.values()
                 if g.collection == collection and g.split == "train"]
        allf = np.concatenate(feats)
        return {"node_feat_mean": allf.mean(axis=0), "node_feat_std": allf.std(axis=0)}

    def fold(self, graph_id: str) -> int:
        return zlib.crc32(graph_id.encode()) % self.n_folds

    def write_truth(self, root: Path) -> None:
        """Write the synthetic generator's truth side files under ``root`` (= <synth_root>/truth)."""
        for g in self._graphs.values():
            if g.truth is None:
                continue
            stem = g.graph_id[len(g.collection) + 1:]
            p = Path(root, *g.collection.split(":"), g.split, f"{stem}.npy")
            p.parent.mkdir(parents=True, exist_ok=True)
            np.save(p, g.truth.astype(np.float64))


def _dedup_first(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unique rows of ``keys`` (c, k) in first-occurrence order: (first_index (c_u,), inverse (c,))."""
    _, first, inv = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return first[order].astype(np.int32), rank[inv.reshape(-1)].astype(np.int32)


def _node_feat(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """node_feat (n, 140) float32 with shapes and −1-padded layouts; returns it and each node's rank."""
    nf = np.zeros((n, 140), np.float32)
    nf[:, 13] = 1.0  # f32
    ranks = rng.integers(2, 5, n)
    for i in range(n):
        r = ranks[i]
        dims = 2 ** rng.integers(0, 10, r)
        nf[i, 21:21 + r] = dims
        nf[i, 27] = dims.sum()
        nf[i, 28] = dims.prod()
        nf[i, 134:140] = -1
        nf[i, 134:134 + r] = rng.permutation(r)
    nf[:, 31:37] = -1
    nf[:, 95:99] = -1
    nf[:, 101:105] = -1
    nf[:, 0] = rng.random(n) < 0.1
    nf[:, 37:45] = rng.integers(0, 4, (n, 8))
    return nf, ranks


def _edges(rng: np.random.Generator, n: int) -> np.ndarray:
    rows = []
    for u in range(1, n):
        for v in rng.choice(u, size=min(u, int(rng.integers(1, 3))), replace=False):
            rows.append((u, int(v)))
    return np.array(rows, np.int32).reshape(-1, 2)


def _perm_block(rng: np.random.Generator, r: int, p_default: float) -> np.ndarray:
    out = -np.ones(6, np.int64)
    if rng.random() >= p_default:
        out[:r] = rng.permutation(r)
    return out


def make_layout_graph(rng: np.random.Generator, collection: str, stem: str, split: str,
                      n_nodes: int = 40, n_cfg: int = 6, n_unique: int = 120, dup_rate: float = 0.3,
                      noise: float = 2e-4) -> FakeGraph:
    """One layout graph; runtimes depend on the configurable nodes' layouts (see module docstring)."""
    nf, ranks = _node_feat(rng, n_nodes)
    opcode = rng.choice(np.array([2, 11, 13, 24, 27, 41, 45, 59, 63, 70, 98], np.uint8), n_nodes)
    cfg_ids = np.sort(rng.choice(n_nodes, n_cfg, replace=False)).astype(np.int32)
    opcode[cfg_ids] = rng.choice(np.array([26, 34, 75], np.uint8), n_cfg)
    edges = _edges(rng, n_nodes)
    # distinct configs, then duplicates
    uniq = []
    seen = set()
    while len(uniq) < n_unique:
        rows = []
        for j in cfg_ids:
            r = int(ranks[j])
            o = _perm_block(rng, r, 0.2)
            i = _perm_block(rng, r, 0.2)
            k = _perm_block(rng, r, 0.5) if opcode[j] == 26 else -np.ones(6, np.int64)
            rows.append(np.concatenate([o, i, k]))
        vals = np.stack(rows)
        key = vals.tobytes()
        if key not in seen:
            seen.add(key)
            uniq.append(vals)
    uniq_vals = np.stack(uniq)  # (n_unique, nc, 18)
    n_dup = round(n_unique * dup_rate)
    pick = np.concatenate([np.arange(n_unique), rng.integers(0, n_unique, n_dup)])
    pick = rng.permutation(pick)
    vals = uniq_vals[pick]  # (c, nc, 18) original configs
    # noise-free runtime
    dims = nf[cfg_ids, 21:27].astype(np.float64)
    largest = dims.argmax(axis=1)
    weight = np.log2(np.maximum(nf[cfg_ids, 28].astype(np.float64), 2.0)) / 10.0
    default_minor = nf[cfg_ids, 134].astype(np.int64)
    out_minor = np.where(vals[:, :, 0] >= 0, vals[:, :, 0], default_minor[None])
    in_minor = np.where(vals[:, :, 6] >= 0, vals[:, :, 6], default_minor[None])
    pen = (out_minor != largest[None]) * 1.0 + 0.5 * (in_minor != out_minor)
    truth = 1e6 * (1.0 + (pen * weight[None]).sum(axis=1))
    runtime = np.round(truth * (1.0 + noise * rng.standard_normal(truth.shape))).astype(np.int64)
    codes_all = encode(vals)
    first, inv = _dedup_first(codes_all.reshape(len(vals), -1))
    c_u = len(first)
    group_min = np.full(c_u, np.iinfo(np.int64).max)
    np.minimum.at(group_min, inv, runtime)
    test = split == "test"
    return FakeGraph(
        graph_id=f"{collection}:{stem}", collection=collection, split=split,
        node_feat=nf, node_opcode=opcode, edge_index=edges,
        node_index=np.arange(n_nodes, dtype=np.int32), node_config_ids=cfg_ids,
        node_splits=np.array([0, n_nodes], np.int32),
        config_runtime=None if test else group_min,
        group_size=np.bincount(inv, minlength=c_u).astype(np.int32), first_index=first,
        config_inverse=inv, config_runtime_original=None if test else runtime,
        config_codes=codes_all[first], truth=truth,
    )


def make_tile_graph(rng: np.random.Generator, stem: str, split: str, n_nodes: int = 8,
                    n_configs: int = 40) -> FakeGraph:
    """One tile graph; runtime / normalizer depends on the output tile sizes (see module docstring)."""
    nf, _ = _node_feat(rng, n_nodes)
    opcode = rng.choice(np.array([2, 26, 34, 41, 59, 63, 70], np.uint8), n_nodes)
    edges = _edges(rng, n_nodes)
    ideal = float(np.log2(nf[:, 28].astype(np.float64).max() + 1.0)) / 2.0
    cf = np.zeros((n_configs, 24), np.float32)
    for i in range(n_configs):
        k = 2 ** rng.integers(0, 5, 2)
        o = 2 ** rng.integers(0, 6, 3)
        cf[i, 0:2] = k
        cf[i, 6], cf[i, 7] = k.sum(), k.prod()
        cf[i, 8:11] = o
        cf[i, 14], cf[i, 15] = o.sum(), o.prod()
    cf[rng.integers(0, n_configs, n_configs // 5)] = cf[0]  # some duplicates
    ratio = 1.0 + np.abs(np.log2(cf[:, 15].astype(np.float64)) - ideal) / 4.0 \
        + 0.05 * np.log2(cf[:, 7].astype(np.float64) + 1.0)
    norm = np.round(5e4 * (1.0 + 0.3 * rng.random(n_configs))).astype(np.int64)
    runtime = np.round(norm * ratio).astype(np.int64)
    first, inv = _dedup_first(cf)
    c_u = len(first)
    best = np.zeros(c_u, np.int64)
    for u in range(c_u):  # smallest runtime / normalizer in each group (first on ties)
        members = np.flatnonzero(inv == u)
        best[u] = members[np.argmin(runtime[members] / norm[members])]
    test = split == "test"
    return FakeGraph(
        graph_id=f"tile:xla:{stem}", collection="tile:xla", split=split,
        node_feat=nf, node_opcode=opcode, edge_index=edges,
        node_index=np.arange(n_nodes, dtype=np.int32), node_config_ids=None, node_splits=None,
        config_runtime=None if test else runtime[best],
        group_size=np.bincount(inv, minlength=c_u).astype(np.int32), first_index=first,
        config_inverse=inv, config_runtime_original=None if test else runtime,
        config_feat=cf[first], config_runtime_normalizers=None if test else norm[best],
        config_runtime_normalizers_original=None if test else norm,
        truth=runtime.astype(np.float64) / norm if not test else None,
    )


def make_fake_dataset(seed: int = 0, n_train: int = 8, n_valid: int = 3, n_test: int = 2,
                      tile: bool = True, n_unique: int = 120, n_nodes: int = 40) -> FakeDataset:
    """A small two-collection dataset: ``layout:xla:random`` (+ ``tile:xla`` when ``tile``)."""
    rng = np.random.default_rng(seed)
    graphs: list[FakeGraph] = []
    coll = "layout:xla:random"
    for split, count in (("train", n_train), ("valid", n_valid), ("test", n_test)):
        for i in range(count):
            graphs.append(make_layout_graph(
                rng, coll, f"{split}_prog_{i}", split, n_nodes=n_nodes + int(rng.integers(0, 20)),
                n_cfg=int(rng.integers(3, 8)), n_unique=n_unique))
    if tile:
        for split, count in (("train", 3 * n_train), ("valid", n_valid), ("test", n_test)):
            for i in range(count):
                graphs.append(make_tile_graph(rng, f"fusion.{i}_{split}", split,
                                              n_configs=int(rng.integers(3, 50))))
    return FakeDataset(graphs)


def record_from_npz(path: Path, collection: str, split: str) -> FakeGraph:
    """A GraphRecord built from a raw TpuGraphs .npz (no pruning or re-padding; exact dedup)."""
    with np.load(path, allow_pickle=False) as z:
        d = {k: z[k] for k in z.files}
    stem = Path(path).stem.split(".pad-1")[0]
    common = dict(graph_id=f"{collection}:{stem}", collection=collection, split=split,
                  node_feat=d["node_feat"].astype(np.float32), node_opcode=d["node_opcode"],
                  edge_index=d["edge_index"].astype(np.int32),
                  node_index=np.arange(len(d["node_feat"]), dtype=np.int32))
    runtime = d["config_runtime"].astype(np.int64)
    if collection.startswith("layout"):
        codes_all = encode(d["node_config_feat"].astype(np.int64))
        first, inv = _dedup_first(codes_all.reshape(len(runtime), -1))
        group_min = np.full(len(first), np.iinfo(np.int64).max)
        np.minimum.at(group_min, inv, runtime)
        return FakeGraph(**common, node_config_ids=d["node_config_ids"].astype(np.int32),
                         node_splits=d["node_splits"].reshape(-1).astype(np.int32),
                         config_runtime=group_min,
                         group_size=np.bincount(inv).astype(np.int32), first_index=first,
                         config_inverse=inv, config_runtime_original=runtime,
                         config_codes=codes_all[first])
    cf = d["config_feat"]
    norm = d["config_runtime_normalizers"].astype(np.int64)
    first, inv = _dedup_first(cf)
    best = np.array([np.flatnonzero(inv == u)[np.argmin(runtime[inv == u] / norm[inv == u])]
                     for u in range(len(first))], np.int64)
    return FakeGraph(**common, node_config_ids=None, node_splits=None, config_runtime=runtime[best],
                     group_size=np.bincount(inv).astype(np.int32), first_index=first,
                     config_inverse=inv, config_runtime_original=runtime, config_feat=cf[first],
                     config_runtime_normalizers=norm[best], config_runtime_normalizers_original=norm)


class LocalBatches:
    """Tests only: a minimal stand-in for ``tpuprep.ConfigBatches`` (strategy "uniform") built on
    ``ds.sample_configs``, so the trainer's loop can be tested against the sampler contract: per epoch
    every graph ``batches_per_graph`` times in a seeded order, each batch ``k`` sampled unique configs."""

    def __init__(self, ds, graph_ids: list[str], k: int, seed: int = 0, batches_per_graph: int = 1):
        self.ds, self.graph_ids, self.k, self.seed = ds, list(graph_ids), k, seed
        self.batches_per_graph = batches_per_graph
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.graph_ids) * self.batches_per_graph

    def __iter__(self):
        from types import SimpleNamespace

        rng = np.random.default_rng([self.seed, self.epoch])
        for i in rng.permutation(len(self.graph_ids)):
            gid = self.graph_ids[int(i)]
            structure = self.ds.load_graph(gid, configs=False)
            for _ in range(self.batches_per_graph):
                sample = self.ds.sample_configs(gid, self.k, seed=int(rng.integers(2 ** 31)))
                yield SimpleNamespace(graph_id=gid, collection=structure.collection, split=structure.split,
                                      structure=structure, sample=sample)


def local_batches(ds, cfg):
    """``train(..., batches=local_batches(ds, cfg))``: the trainer's sampler factory for LocalBatches."""
    return lambda ids: LocalBatches(ds, ids, cfg.batch_configs, cfg.seed, cfg.batches_per_graph)
