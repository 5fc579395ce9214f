"""Click commands ``tpuprep train``, ``tpuprep evaluate`` and ``tpuprep predict``.

``train_cmd``, ``evaluate_cmd`` and ``predict_cmd`` are registered on the ``tpuprep`` group at the end.
The dataset reader is imported inside each command body (``tpuprep.open_dataset``), so importing this
module costs nothing and never depends on the reader being importable.

Errors reach the user as ONE line on stderr, ``error: <file or model>: <problem>``, never a traceback:
exit 1 for anything about the content of files (an unreadable, damaged or non-finite model, a model
for a collection the shards lack, non-finite scores, an invalid submission) and exit 2 for a command
line that cannot work whatever the files hold (click's usage errors, e.g. ``predict`` without
``--model``). ``tpuprep/train/README.md`` lists them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from ..errors import FatalError, UsageError
from .common import FiniteFloatRange, LazyChoice, notes
from .group import main
from .outputs import check_output

threads_option = click.option(
    "--threads", default=1, show_default=True, type=click.IntRange(min=0),
    help="BLAS threads (1 is fastest for this small model; 0 = leave BLAS as configured).")
"""The ``--threads`` option of every command that runs the model."""


class Failed(click.ClickException):
    """A refusal shown as one line, ``error: ...``, exit 1 (like the main CLI's fatal errors)."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


class Refused(Failed):
    """A command line that cannot work, shown as one line, ``error: ...``, exit 2 (an output refused by
    ``outputs.check_output``; also when a command is invoked outside the ``tpuprep`` group)."""

    exit_code = 2


def _check_output(path: str | None, option: str, inputs: list[tuple[str, str | None]]) -> None:
    """``outputs.check_output`` as a :class:`Refused` (the shard folder itself is refused by its
    manifest, so ``--shards`` is not passed as an input folder)."""
    try:
        check_output(path, option, inputs)
    except UsageError as e:
        raise Refused(str(e)) from None


@contextmanager
def refusals() -> Iterator[None]:
    """Turn the trainer's refusals (``FatalError`` and ``ValueError`` subclasses) into :class:`Failed`."""
    try:
        yield
    except (FatalError, ValueError) as e:
        raise Failed(str(e)) from None


def _losses() -> tuple[str, ...]:
    """The trainer's loss names (importing the trainer costs Numba: only when they are needed)."""
    from ..train.losses import LOSSES

    return LOSSES


def _pair_weights() -> tuple[str, ...]:
    """The loss's pair-weight names (``train.losses.PAIR_WEIGHTS``; imported only when needed)."""
    from ..train.losses import PAIR_WEIGHTS

    return PAIR_WEIGHTS


def _open(shards: str) -> Any:
    import tpuprep

    opener = getattr(tpuprep, "open_dataset", None)
    if opener is None:
        raise Failed("tpuprep.open_dataset is not available in this installation")
    try:
        return opener(shards)
    except (OSError, ValueError, FatalError) as e:
        raise Failed(f"cannot open shards at {shards}: {e}") from None


def _model_inputs(models: tuple[str, ...]) -> list[tuple[str, str | None]]:
    """The files of the ``--model`` paths (``<M>.npz`` and ``<M>.json``), as inputs for ``check_output``."""
    from ..train.ranker import model_paths

    return [("--model", str(f)) for m in models for f in model_paths(m)]


def _load_models(paths: tuple[str, ...]) -> list[Any]:
    from ..train.ranker import Ranker

    models = []
    for p in paths:
        try:
            models.append(Ranker.load(p))
        except (OSError, ValueError, FatalError) as e:
            raise Failed(f"cannot load model: {e}") from None
    colls = [m.collection for m in models]
    dup = sorted({c for c in colls if colls.count(c) > 1})
    if dup:
        raise Failed(f"more than one model for {', '.join(dup)}: give one per collection")
    return models


@click.command("train")
@click.option("--shards", required=True, type=click.Path(exists=True, file_okay=False),
              help="Shards directory written by `tpuprep build`.")
@click.option("--collection", required=True, help="Collection id, e.g. layout:xla:random or tile:xla.")
@click.option("--out", required=True, type=click.Path(dir_okay=False),
              help="Model path; writes OUT.npz (weights) and OUT.json (config).")
@click.option("--epochs", default=None, type=click.IntRange(min=0),
              help="Passes over the training graphs  [default: 32 for layout, 20 for tile]")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0), help="An integer ≥ 0.")
@click.option("--batch-configs", default=64, show_default=True, type=click.IntRange(min=2),
              help="Unique configs sampled per graph and step (TGraph: 64–128).")
@click.option("--lr", default=4e-3, show_default=True, type=FiniteFloatRange(min=0, min_open=True))
@click.option("--hidden", default=64, show_default=True, type=click.IntRange(min=1))
@click.option("--layers", default=2, show_default=True, type=click.IntRange(min=1),
              help="Message-passing steps.")
@click.option("--derived/--no-derived", default=True, show_default=True,
              help="Layout: add hand-made layout features and the violation ratio to the model.")
@click.option("--prior", default=1000.0, show_default=True, type=FiniteFloatRange(min=0),
              help="Layout (with --derived): scale of the prior term, the share of the conv/dot work "
                   "whose output left its modal layout, through one learned weight; 0: no prior term. "
                   "See tpuprep/train/README.md.")
@click.option("--loss", default="hinge", show_default=True, type=LazyChoice(_losses))
@click.option("--pair-weight", default="floor", show_default=True, type=LazyChoice(_pair_weights),
              help="hinge/ranknet pair weights: floor = min(1, |log r_i - log r_j| / 3e-3) (pairs "
                   "closer than the measurement noise count little), logdiff = |log r_i - log r_j|.")
@click.option("--batches-per-graph", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--time-budget", default=None, type=FiniteFloatRange(min=0),
              help="Seconds the whole run may take, validation and saving included (the model is "
                   "saved within S x 1.1; start-up before training, i.e. imports and opening the "
                   "shards, is reported, not counted). See tpuprep/train/README.md.")
@click.option("--holdout-fold", default=None, type=click.IntRange(min=0),
              help="Train on train+valid graphs outside this fold (ds.fold) and validate on it.")
@click.option("--validate/--no-validate", default=True, show_default=True,
              help="Report a quick validation score (see --valid-every).")
@click.option("--valid-every", default=10, show_default=True, type=click.IntRange(min=1),
              help="Validate after the first epoch, every N-th and the last one.")
@click.option("--cache-graphs", default=None, type=click.IntRange(min=1),
              help="Keep at most N prepared graph structures in memory (default: as many as "
                   "fit in 128 MB; configs are never kept, each step reads its sample).")
@threads_option
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
def train_cmd(shards: str, collection: str, out: str, epochs: int | None, seed: int, batch_configs: int,
              lr: float, hidden: int, layers: int, derived: bool, prior: float, loss: str, pair_weight: str,
              batches_per_graph: int,
              time_budget: float | None, holdout_fold: int | None, validate: bool, valid_every: int,
              cache_graphs: int | None, threads: int, quiet: bool) -> None:
    """Train a torch-free ranking model for one collection."""
    from ..train.ranker import model_paths
    from ..train.trainer import TrainConfig, train

    for written in (out, *model_paths(out)):
        _check_output(written, "--out", [])
    ds = _open(shards)
    cfg = TrainConfig(epochs=epochs, seed=seed, batch_configs=batch_configs, lr=lr, hidden=hidden,
                      head_hidden=hidden, layers=layers, derived=derived, prior=prior, loss=loss,
                      pair_weight=pair_weight,
                      batches_per_graph=batches_per_graph,
                      time_budget=time_budget, holdout_fold=holdout_fold, validate=validate,
                      valid_every=valid_every, threads=threads or None, cache_graphs=cache_graphs)
    with refusals(), notes(quiet):
        train(ds, collection, cfg, out=out, log=None if quiet else sys.stderr)


@click.command("evaluate")
@click.option("--shards", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--model", "models", required=True, multiple=True,
              help="Model path (OUT of `tpuprep train`); repeat for several collections.")
@click.option("--split", default="valid", show_default=True, help="A split with runtimes.")
@click.option("--truth", default=None, type=click.Path(exists=True, file_okay=False),
              help="Synthetic truth directory (<synth_root>/truth): adds the oracle tau.")
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Write per_graph.csv, summary.json/.txt and PNG plots here.")
@click.option("--baseline/--no-baseline", default=True, show_default=True,
              help="Also score the training-free violation-ratio heuristic (layout).")
@click.option("--max-graphs", default=None, type=click.IntRange(min=1),
              help="Evaluate only the first N graphs of each collection.")
@click.option("--max-configs", default=None, type=click.IntRange(min=2),
              help="Layout: score a seeded sample of N unique configs (and their duplicates) per graph.")
@threads_option
@click.option("-q", "--quiet", is_flag=True, help="No per-graph progress on stderr.")
def evaluate_cmd(shards: str, models: tuple[str, ...], split: str, truth: str | None,
                 out_dir: str | None, baseline: bool, max_graphs: int | None,
                 max_configs: int | None, threads: int, quiet: bool) -> None:
    """Score models per graph and per collection (Kendall tau, OPA, slowdown, tile score)."""
    from ..train.evaluate import evaluate, format_table, write_outputs

    _check_output(out_dir, "--out", [("--truth", truth), *_model_inputs(models)])
    ds = _open(shards)
    rankers = _load_models(models)
    with refusals(), notes(quiet):
        result = evaluate(ds, rankers, split=split, truth=truth, baseline=baseline,
                          max_graphs=max_graphs, log=None if quiet else sys.stderr,
                          threads=threads or None, max_configs=max_configs)
    click.echo(format_table(result.summary))
    if out_dir is not None:
        for p in write_outputs(result, out_dir, log=sys.stderr):  # no matplotlib: one line, no plots
            click.echo(f"wrote {p}", err=True)


@click.command("predict")
@click.option("--shards", default=None, type=click.Path(exists=True, file_okay=False),
              help="Shards directory (required unless --check-only checks a standalone CSV).")
@click.option("--split", default="test", show_default=True)
@click.option("--out", required=True, type=click.Path(dir_okay=False),
              help="Submission CSV path (with --check-only: the CSV to check).")
@click.option("--model", "models", multiple=True,
              help="Model path; one per collection, repeat the option.")
@click.option("--check/--no-check", default=False, show_default=True,
              help="Re-read the CSV and validate it: one row per SPLIT graph of every collection "
                   "of the shards.")
@click.option("--kaggle", is_flag=True,
              help="Also require the Kaggle test set: 5 collections, 894 rows (implies --check).")
@click.option("--check-only", is_flag=True,
              help="Do not predict: validate the existing --out CSV (against --shards if given, "
                   "else against the Kaggle test set's shape).")
@threads_option
def predict_cmd(shards: str | None, split: str, out: str, models: tuple[str, ...], check: bool,
                kaggle: bool, check_only: bool, threads: int) -> None:
    """Write a Kaggle submission CSV (ID,TopConfigs) over ORIGINAL config indices."""
    from ..train.predict import write_submission

    if check_only and models:
        raise click.UsageError("--check-only checks an existing CSV; it takes no --model")
    if not check_only and (not models or shards is None):
        raise click.UsageError("predicting needs --shards and at least one --model "
                               "(or --check-only to check an existing CSV)")
    if not check_only:
        _check_output(out, "--out", _model_inputs(models))
    ds = _open(shards) if shards is not None else None
    if not check_only:
        rankers = _load_models(models)
        with refusals(), notes():
            n = write_submission(ds, rankers, out, split=split, threads=threads or None)
        click.echo(f"wrote {n} rows to {out}", err=True)
    if check or kaggle or check_only:
        _check(out, ds, split, kaggle)


def _check(out: str, ds: Any, split: str, kaggle: bool) -> None:
    """Validate ``out`` (see predict.validate_submission); one line on failure, exit 1."""
    from ..train.predict import (
        KAGGLE_TEST_ROWS,
        kaggle_problems,
        read_submission,
        validate_submission,
    )

    problems = validate_submission(out, ds, split, kaggle=kaggle)
    if problems:
        more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
        raise Failed(f"{out} is not a valid submission: {'; '.join(problems[:3])}{more}")
    if ds is None:
        click.echo(f"{out} has the shape of the Kaggle test set "
                   f"({sum(KAGGLE_TEST_ROWS.values())} rows)", err=True)
        return
    click.echo(f"submission is valid: one row per {split} graph of {', '.join(ds.collections)}",
               err=True)
    if split == "test" and not kaggle and kaggle_problems(read_submission(out)):
        click.echo(f"note: these shards are not the full TpuGraphs test set; Kaggle expects "
                   f"{sum(KAGGLE_TEST_ROWS.values())} rows over 5 collections (--kaggle checks that)",
                   err=True)


main.add_command(train_cmd, "train")
main.add_command(evaluate_cmd, "evaluate")
main.add_command(predict_cmd, "predict")
