"""Kaggle submission (TPUGRAPHS §8): ``ID,TopConfigs`` with ORIGINAL config indices, fastest first.

* layout: a full permutation of 0..c−1 — original configs ordered by the score of their unique config
  (``config_inverse``), duplicates next to each other, ties by original index;
* tile: the top 5 (fewer when c < 5). The five slots go to five *different* configurations when the
  graph has them (each unique config is listed once, by its ``first_index``), because listing
  duplicates of one config cannot lower min(runtime of the listed); then further original indices
  fill up to 5.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ._blas import blas_threads
from .metrics import expand_to_original, fastest_first
from .ranker import Ranker

HEADER = ("ID", "TopConfigs")
TILE_TOP = 5


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
    if ranker.config.kind == "layout":
        return layout_order(pred, record.config_inverse)
    return tile_top_configs(pred, record.config_inverse, record.first_index)


def submission_rows(ds: Any, rankers: Iterable[Ranker], split: str = "test") -> Iterator[tuple[str, str]]:
    """(ID, TopConfigs) for every graph of every model's collection in ``split``."""
    seen: set[str] = set()
    for ranker in rankers:
        if ranker.collection in seen:
            raise ValueError(f"two models for collection {ranker.collection}")
        seen.add(ranker.collection)
        for gid in ds.graph_ids(ranker.collection, split=split):
            record = ds.load_graph(gid)
            yield gid, ";".join(map(str, top_configs(ranker, record).tolist()))


def write_submission(ds: Any, rankers: Iterable[Ranker], out: str | os.PathLike[str],
                     split: str = "test", threads: int | None = 1) -> int:
    """Write the submission CSV to ``out`` (atomically); returns the number of rows.

    threads: BLAS threads while scoring (see _blas.py; None leaves BLAS alone).
    """
    with blas_threads(threads):
        return _write_submission(ds, rankers, Path(out), split)


def _write_submission(ds: Any, rankers: Iterable[Ranker], out: Path, split: str) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    n = 0
    with tmp.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(HEADER)
        for row in submission_rows(ds, rankers, split):
            w.writerow(row)
            n += 1
    os.replace(tmp, out)
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


def validate_submission(path: str | os.PathLike[str], ds: Any, split: str = "test",
                        collections: Iterable[str] | None = None) -> list[str]:
    """Problems with a submission against the dataset (empty list = valid).

    Checks the header, unique IDs, that every graph of the given collections (default: all collections
    in the file) is present, layout rows are full permutations of 0..c−1 over ORIGINAL indices, tile rows
    hold 1..5 distinct indices in 0..c−1 (exactly min(5, c)).
    """
    try:
        sub = read_submission(path)
    except ValueError as e:
        return [str(e)]
    problems: list[str] = []
    colls = list(collections) if collections is not None else sorted(
        {c for c in ds.collections if any(gid.startswith(c + ":") for gid in sub)})
    expected = {gid: c for c in colls for gid in ds.graph_ids(c, split=split)}
    for gid in sorted(set(expected) - set(sub)):
        problems.append(f"missing row for {gid}")
    for gid in sorted(set(sub) - set(expected)):
        problems.append(f"unexpected ID {gid}")
    for gid, top in sub.items():
        if gid not in expected:
            continue
        c = len(ds.load_graph(gid).config_inverse)
        arr = np.asarray(top, np.int64)
        if expected[gid].startswith("layout"):
            if len(arr) != c or not np.array_equal(np.sort(arr), np.arange(c)):
                problems.append(f"{gid}: not a permutation of 0..{c - 1}")
        else:
            if len(arr) != min(TILE_TOP, c) or len(set(arr.tolist())) != len(arr) \
                    or (len(arr) and (arr.min() < 0 or arr.max() >= c)):
                problems.append(f"{gid}: expected {min(TILE_TOP, c)} distinct indices in 0..{c - 1}")
    return problems
