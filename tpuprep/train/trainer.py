"""Training loop: per-graph batches of sampled unique configs, pairwise ranking loss, AdamW.

One step = one graph and ``batch_configs`` of its unique configs (without replacement; all of them when
the graph has fewer), target = the unique config's minimum runtime (layout) or runtime / normalizer
(tile). An epoch visits every training graph ``batches_per_graph`` times in a seeded random order.
Everything random comes from NumPy PCG64 streams derived from ``seed``; same seed and data → same weights.
"""

from __future__ import annotations

import math
import sys
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from ..errors import FatalError
from ._blas import blas_threads
from .features import PreparedGraph
from .losses import LOSSES, pairwise_loss
from .metrics import kendall_tau, slowdown_at_k
from .model import ModelConfig, backward, forward
from .optim import AdamW, lr_at
from .ranker import Ranker, collection_kind


class TrainingDiverged(FatalError, ValueError):
    """The weights became non-finite; nothing is saved (a saved model would be refused at load)."""


def check_finite_weights(ranker: Ranker, epoch: int, lr: float) -> None:
    """:class:`TrainingDiverged` naming the first parameter with a NaN or inf."""
    for name, arr in ranker.params.items():
        if not np.isfinite(arr).all():
            raise TrainingDiverged(f"training of {ranker.collection} diverged in epoch {epoch}: "
                                   f"weights {name!r} hold NaN or inf; nothing saved (try a lower "
                                   f"--lr than {lr:g})")


@dataclass
class TrainConfig:
    """Hyper-parameters of :func:`train` (all are stored in the model's JSON)."""

    epochs: int = 20
    seed: int = 0
    batch_configs: int = 64
    lr: float = 2e-3
    hidden: int = 64
    head_hidden: int = 64
    layers: int = 2
    derived: bool = True  # layout: hand-made layout features + violation ratio in the model
    loss: str = "hinge"
    margin: float = 1.0
    weight_decay: float = 1e-5
    clip_norm: float = 1.0
    batches_per_graph: int = 1
    time_budget: float | None = None  # seconds; stops after the step that crosses it, and the LR
    # schedule follows whichever of steps and time runs out first (warm-up and decay fit the budget)
    holdout_fold: int | None = None  # train on train+valid graphs of the other folds, validate on it
    validate: bool = True
    valid_max_configs: int = 2000  # unique configs sampled per graph for the per-epoch check
    dtype: str = "float32"
    threads: int | None = 1  # BLAS threads while training (_blas.py); None leaves BLAS alone
    cache_graphs: int | None = None  # graphs kept decoded in memory (None = all)

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {self.loss!r}")
        if self.batch_configs < 2:
            raise ValueError("batch_configs must be ≥ 2 (the loss compares pairs)")
        if self.epochs < 0 or self.batches_per_graph < 1:
            raise ValueError("epochs must be ≥ 0 and batches_per_graph ≥ 1")


def split_graph_ids(ds: Any, collection: str, holdout_fold: int | None) -> tuple[list[str], list[str]]:
    """(train ids, validation ids): the official splits, or K-fold over train+valid via ``ds.fold``."""
    train = list(ds.graph_ids(collection, split="train"))
    valid = list(ds.graph_ids(collection, split="valid"))
    if holdout_fold is None:
        return train, valid
    pool = train + valid
    return ([g for g in pool if ds.fold(g) != holdout_fold],
            [g for g in pool if ds.fold(g) == holdout_fold])


def unique_target(record: Any, kind: str) -> np.ndarray | None:
    """Training target of every unique config: (c_u,) int64 ns (layout) or float64 ratio (tile)."""
    if record.config_runtime is None:
        return None
    if kind == "layout":
        return np.asarray(record.config_runtime, np.int64)
    if record.config_runtime_normalizers is None:
        return None
    return (np.asarray(record.config_runtime, np.float64)
            / np.asarray(record.config_runtime_normalizers, np.float64))


class GraphCache:
    """Loaded records and their prepared inputs, kept in memory across epochs (LRU when bounded).

    max_items: how many graphs to keep (None = all). Bound it when the decoded training set does not
    fit in memory; evicted graphs are simply loaded again from the shards when next needed.
    """

    def __init__(self, ds: Any, ranker: Ranker, max_items: int | None = None):
        self.ds = ds
        self.ranker = ranker
        self.max_items = max_items
        self._items: OrderedDict[str, tuple[Any, PreparedGraph, np.ndarray | None]] = OrderedDict()

    def get(self, graph_id: str) -> tuple[Any, PreparedGraph, np.ndarray | None]:
        """(record, prepared graph, unique target) of ``graph_id``."""
        item = self._items.get(graph_id)
        if item is None:
            rec = self.ds.load_graph(graph_id)
            item = (rec, self.ranker.prepare(rec), unique_target(rec, self.ranker.config.kind))
            self._items[graph_id] = item
            if self.max_items is not None:
                while len(self._items) > max(1, self.max_items):
                    self._items.popitem(last=False)
        else:
            self._items.move_to_end(graph_id)
        return item


def quick_validation(ranker: Ranker, cache: GraphCache, ids: list[str], max_configs: int,
                     seed: int) -> float:
    """Mean score over ``ids`` on ≤ max_configs sampled unique configs: τ (layout), tile score (tile)."""
    vals = []
    for gid in ids:
        rec, pg, target = cache.get(gid)
        if target is None or len(target) < 2:
            continue
        rng = np.random.Generator(np.random.PCG64([seed, len(vals)]))
        rows = np.arange(len(target))
        if len(rows) > max_configs:
            rows = np.sort(rng.choice(len(target), max_configs, replace=False))
        st = ranker.static(pg)
        scores = np.concatenate([
            forward(ranker.params, pg, ranker.batch_inputs(rec, pg, rows[i:i + 1024]), ranker.config, st,
                    keep=False)[0] for i in range(0, len(rows), 1024)])
        if ranker.config.kind == "layout":
            v = kendall_tau(scores, target[rows])
        else:
            v = 2.0 - slowdown_at_k(scores, target[rows], 5)
        if math.isfinite(v):
            vals.append(v)
    return float(np.mean(vals)) if vals else math.nan


def train(ds: Any, collection: str, config: TrainConfig | None = None,
          out: str | Path | None = None, log: TextIO | None = sys.stderr) -> Ranker:
    """Train a model for ``collection`` on ``ds`` (the SPEC §4 reader); save it to ``out`` if given.

    Progress goes to ``log`` (stderr by default; None silences it), one line per epoch. Returns the model.
    """
    cfg = config or TrainConfig()
    # overflow in an intermediate (gelu's x³) is harmless; non-finite weights are refused
    with blas_threads(cfg.threads), np.errstate(over="ignore", invalid="ignore"):
        return _train(ds, collection, cfg, out, log)


def _train(ds: Any, collection: str, cfg: TrainConfig, out: str | Path | None,
           log: TextIO | None) -> Ranker:
    kind = collection_kind(collection)
    if collection not in ds.collections:
        raise ValueError(f"collection {collection!r} not in the dataset (has {ds.collections})")
    train_ids, valid_ids = split_graph_ids(ds, collection, cfg.holdout_fold)
    if not train_ids:
        raise ValueError(f"no training graphs for {collection}")
    mcfg = ModelConfig(kind=kind, hidden=cfg.hidden, head_hidden=cfg.head_hidden, layers=cfg.layers,
                       dtype=cfg.dtype, derived=cfg.derived and kind == "layout")
    hyper = asdict(cfg)
    hyper.update(n_train_graphs=len(train_ids), n_valid_graphs=len(valid_ids))
    ranker = Ranker.create(collection, ds.stats(collection), mcfg, cfg.seed, hyper)
    cache = GraphCache(ds, ranker, cfg.cache_graphs)
    opt = AdamW(ranker.params, weight_decay=cfg.weight_decay, clip_norm=cfg.clip_norm)
    rng = np.random.Generator(np.random.PCG64([cfg.seed, 1]))
    usable = []
    for gid in train_ids:
        _, _, target = cache.get(gid)
        if target is not None and len(target) >= 2:
            usable.append(gid)
    if not usable:
        raise ValueError(f"no training graph of {collection} has ≥ 2 labelled unique configs")
    total = max(1, cfg.epochs * len(usable) * cfg.batches_per_graph)
    step = configs_seen = 0
    t0 = time.monotonic()
    stopped = ""

    def say(msg: str) -> None:
        if log is not None:
            print(msg, file=log, flush=True)

    say(f"train {collection}: {len(usable)} graphs, {len(valid_ids)} for validation, "
        f"{cfg.epochs} epochs, batch {cfg.batch_configs}, loss {cfg.loss}")
    for epoch in range(1, cfg.epochs + 1):
        losses = []
        for gid in (usable[i] for i in rng.permutation(len(usable))):
            rec, pg, target = cache.get(gid)
            assert target is not None
            for _ in range(cfg.batches_per_graph):
                k = min(cfg.batch_configs, len(target))
                configs_seen += k
                rows = np.sort(rng.choice(len(target), k, replace=False))
                scores, fc = forward(ranker.params, pg, ranker.batch_inputs(rec, pg, rows), mcfg)
                loss, dscores = pairwise_loss(scores, target[rows], cfg.loss, cfg.margin)
                grads = backward(ranker.params, pg, fc, dscores, mcfg)  # type: ignore[arg-type]
                spent = None if cfg.time_budget is None else (time.monotonic() - t0) / max(cfg.time_budget, 1e-9)
                opt.step(ranker.params, grads, lr_at(step, total, cfg.lr, progress=spent))
                losses.append(loss)
                step += 1
                if cfg.time_budget is not None and time.monotonic() - t0 > cfg.time_budget:
                    stopped = "time_budget"
                    break
            if stopped:
                break
        entry: dict[str, Any] = {"epoch": epoch, "steps": step, "configs": configs_seen,
                                 "loss": float(np.mean(losses)) if losses else math.nan,
                                 "seconds": round(time.monotonic() - t0, 3)}
        msg = f"epoch {epoch}/{cfg.epochs}  loss {entry['loss']:.4f}  steps {step}"
        if cfg.validate and valid_ids:
            v = quick_validation(ranker, cache, valid_ids, cfg.valid_max_configs, cfg.seed)
            name = "valid_tau" if kind == "layout" else "valid_tile_score"
            entry[name] = v
            msg += f"  {name} {v:.4f}"
        msg += f"  {entry['seconds']:.1f}s"
        if stopped:
            entry["stopped"] = stopped
            msg += f"  (stopped: {stopped})"
        ranker.history.append(entry)
        say(msg)
        check_finite_weights(ranker, epoch, cfg.lr)
        if out is not None:
            ranker.save(out)
        if stopped:
            break
    if out is not None:
        npz, js = ranker.save(out)
        say(f"saved {npz} and {js}")
    return ranker
