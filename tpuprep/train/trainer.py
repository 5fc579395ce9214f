"""Training loop: per-graph batches of sampled unique configs, pairwise ranking loss, AdamW.

One step = one batch of the sampler ``tpuprep.ConfigBatches`` (strategy "uniform"): one graph and
``batch_configs`` of its unique configs (without replacement; all of them when the graph has fewer),
target = the unique config's minimum runtime (layout) or runtime / normalizer (tile). An epoch visits
every training graph ``batches_per_graph`` times in the sampler's seeded order. The trainer holds the
sampled configs of one step and an LRU of prepared graph structures (``stream.StructureCache``, bounded
in bytes), never a collection's codes; the per-epoch validation streams its configs in blocks. With a
time budget every phase — steps, validations, saves — runs against one deadline (``budget.Budget``).
Everything random comes from seeded streams (the sampler's and NumPy PCG64 ones derived from ``seed``);
same seed and data → same weights.
"""

from __future__ import annotations

import math
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from ..errors import FatalError
from ._blas import blas_threads
from .budget import Budget, OutOfTime, startup_seconds
from .losses import LOSSES, PAIR_WEIGHTS, pairwise_loss
from .metrics import kendall_tau, slowdown_at_k
from .model import ModelConfig, backward, check_prior, forward
from .optim import AdamW, lr_at
from .ranker import Ranker, collection_kind
from .stream import StructureCache, sample_target, score_streamed

TRAIN_STRUCTURE_BYTES = 128 * 2 ** 20
"""Bytes of prepared graph structures the trainer keeps (``stream.StructureCache``; an evicted graph is
prepared again from its structure and kept digest in milliseconds)."""
TRAIN_SAMPLER_BYTES = 64 * 2 ** 20
"""Bytes the sampler's LRU may hold (``ConfigBatches(cache_bytes=)``, shared among the samplers of
``holdout_fold``): structures, per-config columns, and the decoded configs of graphs of ≤ 1/8 of it."""
TRAIN_KEEP_BYTES = 128 * 2 ** 20
"""Bytes of chunk activations a training step keeps for its backward pass (``model.forward``;
``backward`` recomputes the other chunks, same gradients)."""


DEFAULT_EPOCHS = {"layout": 32, "tile": 20}
"""Epochs of a run that does not say (``TrainConfig.epochs`` None, ``tpuprep train`` without ``--epochs``).
Layout: 32 (20 before issue #30 item 4: the models were still learning). With validation every 10th epoch
instead of every epoch, 32 epochs cost ≤ 1.5 × the former default's CPU time on every ``small`` seed
measured (40 cost 1.67 × on seed 0 xla:default, whose validations are cheap and steps dear). Tile: 20
(its score is at 0.98–0.99 of the noise-free top 5 already; more of its many cheap steps would cost
time for nothing)."""


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

    epochs: int | None = None  # None: DEFAULT_EPOCHS of the collection's kind
    seed: int = 0
    batch_configs: int = 64
    lr: float = 4e-3
    hidden: int = 64
    head_hidden: int = 64
    layers: int = 2
    derived: bool = True  # layout: hand-made layout features + violation ratio in the model
    prior: float = 1000.0  # layout with derived: the compute-share prior term's scale (model.py; 0: none)
    loss: str = "hinge"
    margin: float = 1.0
    pair_weight: str = "floor"  # losses.PAIR_WEIGHTS: pairs closer than ~the noise count little
    weight_decay: float = 1e-5
    clip_norm: float = 1.0
    batches_per_graph: int = 1
    time_budget: float | None = None  # seconds for the whole run, validation and saving included
    # (``budget.py``: ends within budget × 1.1); the LR schedule follows whichever of steps and time
    # runs out first (warm-up and decay fit the budget)
    holdout_fold: int | None = None  # train on train+valid graphs of the other folds, validate on it
    validate: bool = True
    valid_every: int = 10  # validate after the first, every N-th and the last epoch
    valid_max_configs: int = 2000  # unique configs sampled per graph for the per-epoch check
    dtype: str = "float32"
    threads: int | None = 1  # BLAS threads while training (_blas.py); None leaves BLAS alone
    cache_graphs: int | None = None  # prepared graph structures kept (LRU; None: bounded in bytes only,
    # stream.STRUCTURE_BYTES); configs are never cached, the sampler reads each step's

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {self.loss!r}")
        if self.pair_weight not in PAIR_WEIGHTS:
            raise ValueError(f"pair_weight must be one of {PAIR_WEIGHTS}, got {self.pair_weight!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise ValueError(f"seed must be an integer ≥ 0, got {self.seed!r}")
        if self.batch_configs < 2:
            raise ValueError("batch_configs must be ≥ 2 (the loss compares pairs)")
        if (self.epochs is not None and self.epochs < 0) or self.batches_per_graph < 1 or self.valid_every < 1:
            raise ValueError("epochs must be ≥ 0, batches_per_graph and valid_every ≥ 1")
        check_prior(self.prior)  # before any data is read, as ModelConfig will


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


def validation_rows(graph_id: str, num_unique: int, max_configs: int, seed: int) -> np.ndarray:
    """The unique-config rows a validation scores of ``graph_id``: all of them, or a sorted sample of
    ``max_configs`` (int64) seeded by ``seed`` and a digest of the graph id (CRC-32) — so a graph gets
    the same rows whichever graphs were scored before it, and every validation of a run the same."""
    if num_unique <= max_configs:
        return np.arange(num_unique)
    rng = np.random.Generator(np.random.PCG64([seed, zlib.crc32(graph_id.encode())]))
    return np.sort(rng.choice(num_unique, max_configs, replace=False))


def quick_validation(ranker: Ranker, structures: StructureCache, ids: list[str], max_configs: int,
                     seed: int) -> float:
    """Mean score over ``ids`` on ≤ max_configs sampled unique configs: τ (layout), tile score (tile).
    The configs are streamed in blocks (``stream.score_streamed``)."""
    return validate_within(ranker, structures, ids, max_configs, seed).score


@dataclass
class Validation:
    """A validation's mean score, the graphs it scored of those it had (``scored < total`` when it
    reached its cut-off) and whether it scored them all."""

    score: float
    scored: int
    total: int

    @property
    def complete(self) -> bool:
        return self.scored == self.total


def validate_within(ranker: Ranker, structures: StructureCache, ids: list[str], max_configs: int,
                    seed: int, budget: Budget | None = None, cutoff: float = math.inf) -> Validation:
    """:func:`quick_validation` against a ``budget``'s clock: before each graph and each streamed block,
    its expected scoring time must fit before ``cutoff``, else the validation stops there and the mean
    is over the graphs scored so far. Expected: the graph's last time (shared out over its blocks), else
    the slowest validation rate seen per config × configurable node, else — the run's first validation
    graph — the rate of its blocks scored so far (its first block starts unchecked). Graphs are scored in the
    order of ``ids``; the same rows are drawn each time (:func:`validation_rows`: seeded by ``seed`` and the graph id)."""
    vals = []
    kind = ranker.config.kind
    scored = unusable = 0
    clock = budget.clock if budget is not None else time.monotonic

    def fits(seconds: float) -> None:
        if budget is not None and clock() + seconds > cutoff:
            raise OutOfTime

    try:
        for gid in ids:
            t = clock()
            structure, pg = structures.get(gid)
            if not usable_for_training(structure, kind):
                unusable += 1
                continue
            c_u = structure.num_unique_configs
            per_config = max(1, len(pg.config_pos))  # scoring units (config × configurable node)
            rows = validation_rows(gid, c_u, max_configs, seed)
            units = per_config * len(rows)
            known = None if budget is None else budget.graph_estimate(gid, units)
            fits(known or 0.0)  # a graph of unknown cost starts; its blocks are checked as they come
            targets: list[np.ndarray] = []
            done = [0]  # units of the blocks scored so far

            def on_block(block: Any, acc: list[np.ndarray] = targets, start: float = t,
                         known: float | None = known, n: int = len(rows), unit: int = per_config,
                         done: list[int] = done) -> None:
                here = len(block.rows) * unit
                if known is not None:  # this graph's last time, shared out over its blocks
                    fits(known * len(block.rows) / n)
                elif budget is not None:  # at the rate seen so far (validations, else this graph)
                    rate = budget.score_unit_s or ((clock() - start) / done[0] if done[0] else 0.0)
                    fits(rate * here)
                done[0] += here
                acc.append(sample_target(block, kind))

            scores = score_streamed(ranker, structures.ds, gid, pg, rows, on_block=on_block)
            if budget is not None:
                budget.learn_scoring(gid, clock() - t, units)
            target = np.concatenate(targets)
            v = kendall_tau(scores, target) if kind == "layout" else 2.0 - slowdown_at_k(scores, target, 5)
            scored += 1
            if math.isfinite(v):
                vals.append(v)
    except OutOfTime:
        pass  # the graphs left count as not scored
    return Validation(float(np.mean(vals)) if vals else math.nan, scored, len(ids) - unusable)


def config_batches(ds: Any, collection: str, graph_ids: list[str], cfg: TrainConfig) -> Any:
    """The sampler of a training run: ``tpuprep.ConfigBatches`` over ``graph_ids``, uniform samples of
    ``batch_configs`` unique configs, ``batches_per_graph`` per graph and epoch, seeded by ``seed``,
    their LRUs holding ``TRAIN_SAMPLER_BYTES`` together. Graphs of several splits (``holdout_fold``
    pools train and valid) get one sampler per split, their batches interleaved in a seeded order
    (:class:`Interleaved`)."""
    from .. import ConfigBatches

    wanted = set(graph_ids)
    parts = [(split, ids) for split in ds.splits(collection)
             if (ids := [g for g in ds.graph_ids(collection, split) if g in wanted])]
    samplers = [ConfigBatches(ds, collection, split=split, k=cfg.batch_configs, strategy="uniform",
                              seed=cfg.seed, graph_ids=ids, batches_per_graph=cfg.batches_per_graph,
                              structures=len(ids),  # bounded by cache_bytes instead
                              cache_bytes=TRAIN_SAMPLER_BYTES // len(parts))
                for split, ids in parts]
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
          batches: Callable[[list[str]], Any] | None = None,
          clock: Callable[[], float] | None = None) -> Ranker:
    """Train a model for ``collection`` on ``ds`` (the docs/spec.md §4 reader); save it to ``out`` if given.

    Progress goes to ``log`` (stderr by default; None silences it), one line per epoch. Returns the model.
    batches: ``batches(graph_ids)`` → a sampler with the ``ConfigBatches`` contract (``set_epoch(e)``,
    then iterating yields batches with ``graph_id``, ``structure``, ``sample``); None:
    :func:`config_batches`. clock: seconds (default ``time.monotonic``) that ``time_budget`` is kept
    against, from the moment of this call to the saved model (``budget.py``).
    """
    cfg = config or TrainConfig()
    budget = Budget(cfg.time_budget, clock or time.monotonic)
    # overflow in an intermediate (gelu's x³) is harmless; non-finite weights are refused
    with blas_threads(cfg.threads), np.errstate(over="ignore", invalid="ignore"):
        return _train(ds, collection, cfg, out, log, batches, budget)


def _train(ds: Any, collection: str, cfg: TrainConfig, out: str | Path | None,
           log: TextIO | None, batches: Callable[[list[str]], Any] | None, budget: Budget) -> Ranker:
    startup = startup_seconds()
    kind = collection_kind(collection)
    if cfg.epochs is None:
        cfg = replace(cfg, epochs=DEFAULT_EPOCHS[kind])
    assert cfg.epochs is not None
    if collection not in ds.collections:
        raise ValueError(f"collection {collection!r} not in the dataset (has {ds.collections})")
    train_ids, valid_ids = split_graph_ids(ds, collection, cfg.holdout_fold)
    if not train_ids:
        raise ValueError(f"no training graphs for {collection}")
    mcfg = ModelConfig(kind=kind, hidden=cfg.hidden, head_hidden=cfg.head_hidden, layers=cfg.layers,
                       dtype=cfg.dtype, derived=cfg.derived and kind == "layout", prior=cfg.prior)
    hyper = asdict(cfg)
    hyper.update(n_train_graphs=len(train_ids), n_valid_graphs=len(valid_ids))
    ranker = Ranker.create(collection, ds.stats(collection), mcfg, cfg.seed, hyper)
    structures = StructureCache(ds, ranker, cfg.cache_graphs, TRAIN_STRUCTURE_BYTES)
    opt = AdamW(ranker.params, weight_decay=cfg.weight_decay, clip_norm=cfg.clip_norm)
    usable = [gid for gid in train_ids if usable_for_training(ds.load_graph(gid, configs=False), kind)]
    if not usable:
        raise ValueError(f"no training graph of {collection} has ≥ 2 labelled unique configs")
    if cfg.validate:
        valid_ids = [g for g in valid_ids if usable_for_training(ds.load_graph(g, configs=False), kind)]
    validate = bool(cfg.validate and valid_ids)  # no usable valid graph: no empty validations, no reserve
    sampler = (batches or (lambda ids: config_batches(ds, collection, ids, cfg)))(usable)
    total = max(1, cfg.epochs * len(sampler))
    step = configs_seen = 0
    stopped = ""
    name = "valid_tau" if kind == "layout" else "valid_tile_score"
    validated_at = -1  # the step count at the last validation

    def say(msg: str) -> None:
        if log is not None:
            print(msg, file=log, flush=True)

    def save() -> None:
        if out is not None:
            t = budget.clock()
            ranker.save(out)
            budget.save_s = max(budget.save_s, budget.clock() - t)

    def validation(final: bool) -> dict[str, Any]:
        t = budget.clock()
        v = validate_within(ranker, structures, valid_ids, cfg.valid_max_configs, cfg.seed, budget,
                            budget.cutoff(final))
        took = budget.clock() - t
        if v.complete:
            budget.valid_s = took
        res: dict[str, Any] = {name: v.score, "valid_seconds": round(took, 3)}
        if not v.complete:
            res["valid_graphs"] = f"{v.scored}/{v.total}"
        return res

    say(f"train {collection}: {len(usable)} graphs, {len(valid_ids) if validate else 0} for validation, "
        f"{cfg.epochs} epochs, batch {cfg.batch_configs}, loss {cfg.loss}"
        + ("" if startup is None else f"; start-up {startup:.1f}s (before train: imports, opening the "
           "shards)" + (", not in the time budget" if budget.limited else "")))
    for epoch in range(1, cfg.epochs + 1):
        losses = []
        sampler.set_epoch(epoch)
        last = budget.clock()
        for batch in sampler:
            if step and not budget.room_for_step(validate):
                stopped = "time_budget"
                break
            _, pg = structures.get(batch.graph_id, batch.structure)
            target = sample_target(batch.sample, kind)
            assert target is not None
            configs_seen += len(target)
            scores, fc = forward(ranker.params, pg, ranker.sample_inputs(pg, batch.sample), mcfg,
                                 keep_bytes=TRAIN_KEEP_BYTES)
            loss, dscores = pairwise_loss(scores, target, cfg.loss, cfg.margin, cfg.pair_weight)
            grads = backward(ranker.params, pg, fc, dscores, mcfg)  # type: ignore[arg-type]
            del fc
            opt.step(ranker.params, grads, lr_at(step, total, cfg.lr, progress=budget.progress(validate)))
            losses.append(loss)
            step += 1
            now = budget.clock()
            budget.learn_step(now - last)
            last = now
        else:
            if budget.limited and epoch < cfg.epochs and not budget.room_for_step(validate):
                stopped = "time_budget"  # no step would fit after this epoch: its validation is final
        if stopped and not losses and ranker.history:  # the budget ended before this epoch's first step
            ranker.history[-1]["stopped"] = stopped
            say(f"stopped: {stopped} (no step fits before the final validation and save; the last "
                "validation scored the final weights)")
            break
        entry: dict[str, Any] = {"epoch": epoch, "steps": step, "configs": configs_seen,
                                 "loss": float(np.mean(losses)) if losses else math.nan}
        final = bool(stopped) or epoch == cfg.epochs
        # the first epoch is validated too: a time budget learns from it what the final validation costs
        due = final or epoch == 1 or epoch % cfg.valid_every == 0
        if validate and validated_at < step and due:
            if not final and budget.limited and budget.valid_s is None:
                # the first validation's cost is unknown: it may use what is left; once timed, training
                # goes on if a step and another validation still fit, else this one was the final one
                entry.update(validation(True))
                if not budget.room_for_step(True):
                    stopped = "time_budget"
            else:
                # a per-epoch validation that would eat the final one's reserve makes this the last epoch
                if not final and budget.left() - budget.valid_estimate() < budget.step_s + budget.reserve(True):
                    stopped, final = "time_budget", True
                entry.update(validation(final))
            validated_at = step
        entry["seconds"] = round(budget.elapsed(), 3)
        msg = f"epoch {epoch}/{cfg.epochs}  loss {entry['loss']:.4f}  steps {step}"
        if name in entry:
            msg += f"  {name} {entry[name]:.4f}"
            if "valid_graphs" in entry:
                msg += f" (on {entry['valid_graphs']} graphs: time budget)"
        msg += f"  {entry['seconds']:.1f}s"
        if stopped:
            entry["stopped"] = stopped
            msg += f"  (stopped: {stopped})"
        ranker.history.append(entry)
        say(msg)
        check_finite_weights(ranker, epoch, cfg.lr)
        if stopped or epoch == cfg.epochs:
            break
        save()  # a checkpoint per epoch (timed: the reserve keeps room for the last save)
    if ranker.history:
        ranker.history[-1]["startup_seconds"] = None if startup is None else round(startup, 3)
    if out is not None:
        npz, js = ranker.save(out)
        say(f"saved {npz} and {js}  ({budget.elapsed():.1f}s"
            + (f" of a {budget.seconds:g}s budget)" if budget.limited else ")"))
    return ranker
