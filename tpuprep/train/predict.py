"""Kaggle submission (TPUGRAPHS §8): ``ID,TopConfigs`` with ORIGINAL config indices, fastest first.

* layout: a full permutation of 0..c−1 — original configs ordered by the score of their unique config
  (``config_inverse``), duplicates next to each other, ties by original index;
* tile: the top 5 (fewer when c < 5). The five slots go to five *different* configurations when the
  graph has them (each unique config is listed once, by its ``first_index``), because listing
  duplicates of one config cannot lower min(runtime of the listed); then further original indices
  fill up to 5.

Refusals (:class:`SubmissionError`, one line, exit 1 from the CLI): a model whose collection the
dataset lacks or whose collection has no graph in the split, two models for one collection, and a
model that gives non-finite scores (:class:`~.ranker.BadScores`).

Checking (:func:`validate_submission`): against a dataset, the CSV must hold exactly one row per graph
of the split in EVERY collection of the dataset (not only those the models cover); without a dataset
(a standalone CSV) only the Kaggle test set's shape can be checked: the 5 collections with 894 rows
(:data:`KAGGLE_TEST_ROWS`), layout rows a permutation of 0..len−1, tile rows 1..5 distinct indices.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import FatalError
from ..io.files import atomic_open
from ._blas import blas_threads
from .metrics import expand_to_original, fastest_first
from .ranker import Ranker
from .stream import prepare_streamed, score_streamed

HEADER = ("ID", "TopConfigs")
TILE_TOP = 5
KAGGLE_TEST_ROWS = {"layout:nlp:default": 17, "layout:nlp:random": 17, "layout:xla:default": 8,
                    "layout:xla:random": 8, "tile:xla": 844}
"""Test graphs per collection of the full TpuGraphs dataset: the 894 rows Kaggle expects."""


class SubmissionError(FatalError, ValueError):
    """A submission cannot be written as asked (one line: which model / collection and why)."""


def collection_of(graph_id: str) -> str | None:
    """The collection id of a graph id (``layout:<src>:<search>:<stem>``, ``tile:xla:<stem>``)."""
    parts = graph_id.split(":")
    n = {"layout": 3, "tile": 2}.get(parts[0])
    if n is None or len(parts) <= n:
        return None
    return ":".join(parts[:n])


def layout_order(pred_unique: np.ndarray, config_inverse: np.ndarray) -> np.ndarray:
    """Every original index (c,) int64, predicted fastest first (ties by original index)."""
    return fastest_first(expand_to_original(pred_unique, config_inverse))


def tile_top_configs(pred_unique: np.ndarray, config_inverse: np.ndarray, first_index: np.ndarray,
                     k: int = TILE_TOP) -> np.ndarray:
    """Up to k distinct original indices (int64), predicted fastest first, one per unique config first."""
    inv = np.asarray(config_inverse, np.int64)
    c = len(inv)
    k = min(k, c)
    best_unique = fastest_first(pred_unique)[:k]
    listed = [int(i) for i in np.asarray(first_index, np.int64)[best_unique]]
    if len(listed) < k:
        chosen = set(listed)
        for i in layout_order(pred_unique, inv):
            if int(i) not in chosen:
                listed.append(int(i))
                chosen.add(int(i))
                if len(listed) == k:
                    break
    return np.asarray(listed, np.int64)


def top_configs(ranker: Ranker, record: Any, pred_unique: np.ndarray | None = None) -> np.ndarray:
    """The TopConfigs of one graph for ``ranker``'s collection kind (original indices, int64)."""
    pred = ranker.predict_unique(record) if pred_unique is None else pred_unique
    ranker.check_finite(pred, record.graph_id)
    if ranker.config.kind == "layout":
        return layout_order(pred, record.config_inverse)
    return tile_top_configs(pred, record.config_inverse, record.first_index)


def submission_rows(ds: Any, rankers: Iterable[Ranker], split: str = "test") -> Iterator[tuple[str, str]]:
    """(ID, TopConfigs) for every graph of every model's collection in ``split``.

    Raises :class:`SubmissionError` before any row when a model's collection is not in ``ds`` or has
    no graph in ``split`` (the submission would silently lack it), or two models share a collection.
    """
    rankers = list(rankers)
    check_models_fit(ds, rankers, split)
    for ranker in rankers:
        for gid in ds.graph_ids(ranker.collection, split=split):
            yield gid, ";".join(map(str, streamed_top_configs(ranker, ds, gid).tolist()))


def streamed_top_configs(ranker: Ranker, ds: Any, graph_id: str) -> np.ndarray:
    """:func:`top_configs` of a graph of ``ds``, holding one block of its configs at a time
    (``stream.score_streamed``) instead of the whole graph; the same indices."""
    structure, pg = prepare_streamed(ranker, ds, graph_id)
    firsts: list[np.ndarray] = []
    pred = score_streamed(ranker, ds, graph_id, pg, on_block=lambda block: firsts.append(block.first_index))
    ranker.check_finite(pred, graph_id)
    if ranker.config.kind == "layout":
        return layout_order(pred, structure.config_inverse)
    return tile_top_configs(pred, structure.config_inverse, np.concatenate(firsts))


def check_models_fit(ds: Any, rankers: Iterable[Ranker], split: str) -> None:
    """:class:`SubmissionError` unless every model's collection has graphs of ``split`` in ``ds``, once."""
    seen: set[str] = set()
    for ranker in rankers:
        name = ranker.source or ranker.collection
        if ranker.collection in seen:
            raise SubmissionError(f"two models for collection {ranker.collection}: give one per collection")
        seen.add(ranker.collection)
        if ranker.collection not in ds.collections:
            raise SubmissionError(f"model {name} is for {ranker.collection}, which the dataset does "
                                  f"not hold (it has {', '.join(ds.collections) or 'no collections'})")
        if not ds.graph_ids(ranker.collection, split=split):
            raise SubmissionError(f"model {name} is for {ranker.collection}, which has no {split} "
                                  "graphs in the dataset")


def write_submission(ds: Any, rankers: Iterable[Ranker], out: str | os.PathLike[str],
                     split: str = "test", threads: int | None = 1) -> int:
    """Write the submission CSV to ``out`` (atomically); returns the number of rows.

    threads: BLAS threads while scoring (see _blas.py; None leaves BLAS alone).
    """
    # overflow in an intermediate (gelu's x³) is harmless; non-finite results are refused
    with blas_threads(threads), np.errstate(over="ignore", invalid="ignore"):
        return _write_submission(ds, rankers, Path(out), split)


def _write_submission(ds: Any, rankers: Iterable[Ranker], out: Path, split: str) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    # atomically: a refused or interrupted submission leaves nothing behind
    with atomic_open(out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(HEADER)
        for row in submission_rows(ds, rankers, split):
            w.writerow(row)
            n += 1
    return n


def read_submission(path: str | os.PathLike[str]) -> dict[str, list[int]]:
    """Parse a submission CSV into {ID: [indices]}; raises ValueError on a bad header or duplicate ID."""
    out: dict[str, list[int]] = {}
    with Path(path).open(newline="") as f:
        r = csv.reader(f)
        header = next(r, None)
        if header is None or tuple(header) != HEADER:
            raise ValueError(f"bad header {header!r}, expected {','.join(HEADER)}")
        for line_no, row in enumerate(r, start=2):
            if len(row) != 2:
                raise ValueError(f"line {line_no}: expected 2 fields, got {len(row)}")
            gid, top = row
            if gid in out:
                raise ValueError(f"line {line_no}: duplicate ID {gid}")
            out[gid] = [int(t) for t in top.split(";")] if top else []
    return out


def validate_submission(path: str | os.PathLike[str], ds: Any = None, split: str = "test",
                        collections: Iterable[str] | None = None, kaggle: bool = False) -> list[str]:
    """Problems with a submission (empty list = valid); each problem is one line.

    With a dataset ``ds``: the CSV must hold exactly one row per graph of ``split`` in every collection
    of ``ds`` (or of ``collections`` when given, for a deliberately partial check); layout rows are full
    permutations of 0..c−1 over ORIGINAL indices, tile rows hold min(5, c) distinct indices in 0..c−1.
    Without a dataset, or with ``kaggle``: the Kaggle test set's shape (:func:`kaggle_problems`).
    """
    try:
        sub = read_submission(path)
    except (OSError, ValueError) as e:
        return [f"{path}: {e}"]
    problems = kaggle_problems(sub) if ds is None or kaggle else []
    if ds is None:
        return problems
    colls = list(collections) if collections is not None else list(ds.collections)
    expected = {gid: c for c in colls for gid in ds.graph_ids(c, split=split)}
    missing: dict[str, list[str]] = {}
    for gid in sorted(set(expected) - set(sub)):
        missing.setdefault(expected[gid], []).append(gid)
    totals = {c: sum(1 for v in expected.values() if v == c) for c in missing}
    absent = [c for c, gids in missing.items() if len(gids) == totals[c]]
    if absent:
        problems.append(f"no rows for {len(absent)} collection(s) of the dataset: "
                        + ", ".join(f"{c} ({totals[c]} {split} graphs)" for c in absent))
    for c, gids in missing.items():
        if c not in absent:
            problems.append(f"missing rows for {len(gids)} of the {totals[c]} {split} graphs of {c} "
                            f"(first: {gids[0]})")
    unexpected = sorted(set(sub) - set(expected))
    if unexpected:
        problems.append(f"{len(unexpected)} IDs that are not {split} graphs of "
                        f"{', '.join(colls) or 'the dataset'} (first: {unexpected[0]})")
    for gid, top in sub.items():
        if gid not in expected:
            continue
        c = len(ds.load_graph(gid, configs=False).config_inverse)
        arr = np.asarray(top, np.int64)
        if expected[gid].startswith("layout"):
            if len(arr) != c or not np.array_equal(np.sort(arr), np.arange(c)):
                problems.append(f"{gid}: not a permutation of 0..{c - 1}")
        else:
            if len(arr) != min(TILE_TOP, c) or len(set(arr.tolist())) != len(arr) \
                    or (len(arr) and (arr.min() < 0 or arr.max() >= c)):
                problems.append(f"{gid}: expected {min(TILE_TOP, c)} distinct indices in 0..{c - 1}")
    return problems


def kaggle_problems(sub: dict[str, list[int]]) -> list[str]:
    """What keeps ``sub`` ({ID: indices}) from having the Kaggle test set's shape: the 5 collections
    with :data:`KAGGLE_TEST_ROWS` rows (894), layout rows a permutation of 0..len−1, tile rows 1..5
    distinct non-negative indices. (Without the data, the configs per graph cannot be checked.)"""
    problems = []
    counts: dict[str, int] = {}
    foreign = []
    for gid, top in sub.items():
        coll = collection_of(gid)
        if coll not in KAGGLE_TEST_ROWS:
            foreign.append(gid)
            continue
        counts[coll] = counts.get(coll, 0) + 1
        arr = np.asarray(top, np.int64)
        if coll.startswith("layout"):
            if not len(arr) or not np.array_equal(np.sort(arr), np.arange(len(arr))):
                problems.append(f"{gid}: not a permutation of 0..{len(arr) - 1}")
        elif not 1 <= len(arr) <= TILE_TOP or len(set(arr.tolist())) != len(arr) or arr.min() < 0:
            problems.append(f"{gid}: expected 1..{TILE_TOP} distinct non-negative indices")
    if foreign:
        problems.append(f"{len(foreign)} IDs of no TpuGraphs collection (first: {foreign[0]})")
    for coll, want in KAGGLE_TEST_ROWS.items():
        if counts.get(coll, 0) != want:
            problems.append(f"{coll}: {counts.get(coll, 0)} rows, the Kaggle test set has {want}")
    total = sum(KAGGLE_TEST_ROWS.values())
    if len(sub) != total:
        problems.append(f"{len(sub)} rows, the Kaggle test set has {total}")
    return problems
