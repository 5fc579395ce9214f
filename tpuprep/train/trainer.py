"""Training loop: per-graph batches of sampled unique configs, pairwise ranking loss, AdamW.

One step = one batch of the sampler ``tpuprep.ConfigBatches`` (strategy "uniform"): one graph and
``batch_configs`` of its unique configs (without replacement; all of them when the graph has fewer),
target = the unique config's minimum runtime (layout) or runtime / normalizer (tile). An epoch visits
every training graph ``batches_per_graph`` times in the sampler's seeded order. The trainer holds the
sampled configs of one step and an LRU of prepared graph structures (``stream.StructureCache``, bounded
in bytes), never a collection's codes; the per-epoch validation streams its configs in blocks.
Everything random comes from seeded streams (the sampler's and NumPy PCG64 ones derived from ``seed``);
same seed and data → same weights.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from ..errors import FatalError
from ._blas import blas_threads
from .losses import LOSSES, pairwise_loss
from .metrics import kendall_tau, slowdown_at_k
from .model import ModelConfig, backward, forward
from .optim import AdamW, lr_at
from .ranker import Ranker, collection_kind
from .stream import StructureCache, sample_target, score_streamed


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
    cache_graphs: int | None = None  # prepared graph structures kept (LRU; None: bounded in bytes only,
    # stream.STRUCTURE_BYTES); configs are never cached, the sampler reads each step's

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


def usable_for_training(structure: Any, kind: str) -> bool:
    """A graph (its structure, ``configs=False``) with targets to rank: runtimes (tile: and
    normalizers) and ≥ 2 unique configs."""
    if structure.config_runtime_original is None or structure.num_unique_configs < 2:
        return False
    return kind == "layout" or structure.config_runtime_normalizers_original is not None


def quick_validation(ranker: Ranker, structures: StructureCache, ids: list[str], max_configs: int,
                     seed: int) -> float:
    """Mean score over ``ids`` on ≤ max_configs sampled unique configs: τ (layout), tile score (tile).
    The configs are streamed in blocks (``stream.score_streamed``)."""
    vals = []
    kind = ranker.config.kind
    for gid in ids:
        structure, pg = structures.get(gid)
        if not usable_for_training(structure, kind):
            continue
        c_u = structure.num_unique_configs
        rng = np.random.Generator(np.random.PCG64([seed, len(vals)]))
        rows = np.arange(c_u)
        if len(rows) > max_configs:
            rows = np.sort(rng.choice(c_u, max_configs, replace=False))
        targets: list[np.ndarray] = []
        scores = score_streamed(ranker, structures.ds, gid, pg, rows,
                                on_block=lambda block, acc=targets: acc.append(sample_target(block, kind)))
        target = np.concatenate(targets)
        if kind == "layout":
            v = kendall_tau(scores, target)
        else:
            v = 2.0 - slowdown_at_k(scores, target, 5)
        if math.isfinite(v):
            vals.append(v)
    return float(np.mean(vals)) if vals else math.nan


def config_batches(ds: Any, collection: str, graph_ids: list[str], cfg: TrainConfig) -> Any:
    """The sampler of a training run: ``tpuprep.ConfigBatches`` over ``graph_ids``, uniform samples of
    ``batch_configs`` unique configs, ``batches_per_graph`` per graph and epoch, seeded by ``seed``.
    Graphs of several splits (``holdout_fold`` pools train and valid) get one sampler per split, their
    batches interleaved in a seeded order (:class:`Interleaved`)."""
    from .. import ConfigBatches

    wanted = set(graph_ids)
    samplers = []
    for split in ds.splits(collection):
        ids = [g for g in ds.graph_ids(collection, split) if g in wanted]
        if ids:
            samplers.append(ConfigBatches(ds, collection, split=split, k=cfg.batch_configs,
                                          strategy="uniform", seed=cfg.seed, graph_ids=ids,
                                          batches_per_graph=cfg.batches_per_graph,
                                          structures=len(ids)))  # bounded by cache_bytes instead
    return samplers[0] if len(samplers) == 1 else Interleaved(samplers, cfg.seed)


class Interleaved:
    """Several samplers as one: ``set_epoch`` goes to each; an epoch yields all their batches, the next
    one drawn from a sampler with probability ∝ its batches left (seeded by seed and epoch)."""

    def __init__(self, samplers: list[Any], seed: int):
        self.samplers, self.seed, self.epoch = samplers, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        for s in self.samplers:
            s.set_epoch(epoch)

    def __len__(self) -> int:
        return sum(len(s) for s in self.samplers)

    def __iter__(self) -> Any:
        rng = np.random.default_rng([self.seed, self.epoch, 2])
        its = [iter(s) for s in self.samplers]
        left = np.array([len(s) for s in self.samplers], np.float64)
        while left.sum() > 0:
            i = int(rng.choice(len(its), p=left / left.sum()))
            left[i] -= 1
            yield next(its[i])


def train(ds: Any, collection: str, config: TrainConfig | None = None,
          out: str | Path | None = None, log: TextIO | None = sys.stderr,
          batches: Callable[[list[str]], Any] | None = None) -> Ranker:
    """Train a model for ``collection`` on ``ds`` (the docs/spec.md §4 reader); save it to ``out`` if given.

    Progress goes to ``log`` (stderr by default; None silences it), one line per epoch. Returns the model.
    batches: ``batches(graph_ids)`` → a sampler with the ``ConfigBatches`` contract (``set_epoch(e)``,
    then iterating yields batches with ``graph_id``, ``structure``, ``sample``); None:
    :func:`config_batches`.
    """
    cfg = config or TrainConfig()
    # overflow in an intermediate (gelu's x³) is harmless; non-finite weights are refused
    with blas_threads(cfg.threads), np.errstate(over="ignore", invalid="ignore"):
        return _train(ds, collection, cfg, out, log, batches)


def _train(ds: Any, collection: str, cfg: TrainConfig, out: str | Path | None,
           log: TextIO | None, batches: Callable[[list[str]], Any] | None) -> Ranker:
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
    structures = StructureCache(ds, ranker, cfg.cache_graphs)
    opt = AdamW(ranker.params, weight_decay=cfg.weight_decay, clip_norm=cfg.clip_norm)
    usable = [gid for gid in train_ids if usable_for_training(ds.load_graph(gid, configs=False), kind)]
    if not usable:
        raise ValueError(f"no training graph of {collection} has ≥ 2 labelled unique configs")
    sampler = (batches or (lambda ids: config_batches(ds, collection, ids, cfg)))(usable)
    total = max(1, cfg.epochs * len(sampler))
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
        sampler.set_epoch(epoch)
        for batch in sampler:
            _, pg = structures.get(batch.graph_id, batch.structure)
            target = sample_target(batch.sample, kind)
            assert target is not None
            configs_seen += len(target)
            scores, fc = forward(ranker.params, pg, ranker.sample_inputs(pg, batch.sample), mcfg)
            loss, dscores = pairwise_loss(scores, target, cfg.loss, cfg.margin)
            grads = backward(ranker.params, pg, fc, dscores, mcfg)  # type: ignore[arg-type]
            spent = None if cfg.time_budget is None else (time.monotonic() - t0) / max(cfg.time_budget, 1e-9)
            opt.step(ranker.params, grads, lr_at(step, total, cfg.lr, progress=spent))
            losses.append(loss)
            step += 1
            if cfg.time_budget is not None and time.monotonic() - t0 > cfg.time_budget:
                stopped = "time_budget"
                break
        entry: dict[str, Any] = {"epoch": epoch, "steps": step, "configs": configs_seen,
                                 "loss": float(np.mean(losses)) if losses else math.nan,
                                 "seconds": round(time.monotonic() - t0, 3)}
        msg = f"epoch {epoch}/{cfg.epochs}  loss {entry['loss']:.4f}  steps {step}"
        if cfg.validate and valid_ids:
            v = quick_validation(ranker, structures, valid_ids, cfg.valid_max_configs, cfg.seed)
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
