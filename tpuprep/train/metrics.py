"""Ranking metrics of the TpuGraphs task (TPUGRAPHS.md §8), exact and O(n log n).

* :func:`kendall_tau` — Kendall's τ-b, bit-for-bit the value of ``scipy.stats.kendalltau(x, y)`` (its
  default variant ``"b"``, ties in either input, NaN when an input is constant, has < 2 values or holds
  a NaN). Knight's algorithm: one lexicographic sort, tie counts from runs, discordant pairs counted
  with a Fenwick tree in a Numba kernel (a graph has up to 100,040 configs, so no O(n²) anywhere).
* :func:`ordered_pair_accuracy` — OPA: among pairs whose *true* runtimes differ, the share that the
  prediction orders strictly the same way (true ties are excluded; predicted ties count as wrong,
  as in TpuGraphs, or as half with ``ties="half"``).
* :func:`slowdown_at_k`, :func:`tile_score` — best true runtime among the k predicted-fastest configs
  over the best true runtime of all (≥ 1); the Kaggle tile score is ``2 − slowdown@5`` computed on
  runtime / normalizer (the tile target, TPUGRAPHS §2 and §8).
* :func:`expand_to_original` — predictions over unique configs → every ORIGINAL config index via
  ``config_inverse``, so scores are always taken against the original runtimes (docs/spec.md §2.3).

Predictions follow the convention "higher score = slower config" throughout the trainer; every metric
here takes the prediction as such a score (an ascending sort lists the fastest first).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from ..kernels.jit import kernel

__all__ = [
    "PairCounts",
    "collection_means",
    "expand_to_original",
    "fastest_first",
    "kendall_tau",
    "ordered_pair_accuracy",
    "pair_counts",
    "slowdown_at_k",
    "tile_score",
    "tile_score_of_listed",
]


@kernel
def _count_discordant(ranks: np.ndarray, n_ranks: int) -> int:
    """Strict inversions of ``ranks`` (pairs i < j with ranks[i] > ranks[j]), via a Fenwick tree.

    ``ranks`` (n,) int64 dense ranks in 0..n_ranks−1. Returns an int64 count.
    """
    tree = np.zeros(n_ranks + 1, np.int64)
    dis = 0
    for j in range(ranks.shape[0]):
        r = ranks[j] + 1
        # number of earlier values with rank <= ranks[j]
        le = 0
        i = r
        while i > 0:
            le += tree[i]
            i -= i & (-i)
        dis += j - le
        i = r
        while i <= n_ranks:
            tree[i] += 1
            i += i & (-i)
    return dis


@kernel
def _run_pairs(keys_a: np.ndarray, keys_b: np.ndarray, use_b: bool) -> int:
    """Σ over runs of equal consecutive keys of len·(len−1)/2; with ``use_b`` a run needs both equal."""
    n = keys_a.shape[0]
    total = 0
    run = 1
    for i in range(1, n):
        same = keys_a[i] == keys_a[i - 1]
        if use_b:
            same = same and keys_b[i] == keys_b[i - 1]
        if same:
            run += 1
        else:
            total += run * (run - 1) // 2
            run = 1
    total += run * (run - 1) // 2
    return total


@dataclass(frozen=True)
class PairCounts:
    """Pair statistics of two rankings of n items (Python ints, no overflow).

    tot = n(n−1)/2; xtie / ytie = pairs tied in x / y; ntie = pairs tied in both; dis = discordant
    pairs (strictly ordered both ways, opposite directions). Concordant = tot − xtie − ytie + ntie − dis.
    """

    n: int
    tot: int
    xtie: int
    ytie: int
    ntie: int
    dis: int

    @property
    def con(self) -> int:
        """Concordant pairs (strictly ordered in both, same direction)."""
        return self.tot - self.xtie - self.ytie + self.ntie - self.dis


def _as_1d(a: np.ndarray | Iterable[float], name: str) -> np.ndarray:
    arr = np.asarray(a)
    if arr.ndim != 1:
        arr = arr.ravel()
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be a numeric array, got dtype {arr.dtype}")
    if arr.dtype.kind == "b":
        arr = arr.astype(np.int64)
    return arr


def _has_nan(a: np.ndarray) -> bool:
    return a.dtype.kind == "f" and bool(np.isnan(a).any())


def pair_counts(x: np.ndarray, y: np.ndarray) -> PairCounts:
    """Tie and discordance counts of (x, y) in O(n log n); x, y are (n,) numeric arrays without NaN."""
    x = _as_1d(x, "x")
    y = _as_1d(y, "y")
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same length, got {x.shape[0]} and {y.shape[0]}")
    n = int(x.shape[0])
    tot = n * (n - 1) // 2
    if n < 2:
        return PairCounts(n, tot, 0, 0, 0, 0)
    # y → dense ranks (equal values share a rank; −0.0 == 0.0 as in scipy)
    y_sorted_idx = np.argsort(y, kind="stable")
    ys = y[y_sorted_idx]
    new = np.empty(n, np.bool_)
    new[0] = True
    np.not_equal(ys[1:], ys[:-1], out=new[1:])
    y_rank = np.empty(n, np.int64)
    y_rank[y_sorted_idx] = np.cumsum(new) - 1
    n_ranks = int(y_rank.max()) + 1 if n else 0
    ytie = int(_run_pairs(ys, ys, False))
    # sort by (x, y-rank): ties in x are then never counted as inversions
    order = np.lexsort((y_rank, x))
    xs = x[order]
    yr = np.ascontiguousarray(y_rank[order])
    xtie = int(_run_pairs(xs, xs, False))
    ntie = int(_run_pairs(xs, yr, True))
    dis = int(_count_discordant(yr, n_ranks))
    return PairCounts(n, tot, xtie, ytie, ntie, dis)


def kendall_tau(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's τ-b of (x, y), equal to ``scipy.stats.kendalltau(x, y).statistic``.

    x, y: (n,) numeric arrays (any int/float dtype; int64 runtimes are compared exactly).
    Returns NaN when n < 2, when either input is constant, or when either holds a NaN.
    """
    x = _as_1d(x, "x")
    y = _as_1d(y, "y")
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same length, got {x.shape[0]} and {y.shape[0]}")
    if x.size == 0 or _has_nan(x) or _has_nan(y):
        return math.nan
    pc = pair_counts(x, y)
    if pc.xtie == pc.tot or pc.ytie == pc.tot:
        return math.nan
    con_minus_dis = pc.tot - pc.xtie - pc.ytie + pc.ntie - 2 * pc.dis
    tau = con_minus_dis / np.sqrt(pc.tot - pc.xtie) / np.sqrt(pc.tot - pc.ytie)
    return float(min(1.0, max(-1.0, tau)))


def ordered_pair_accuracy(pred: np.ndarray, truth: np.ndarray, ties: str = "strict") -> float:
    """Ordered-pair accuracy of scores ``pred`` against ``truth`` (both (n,), higher = slower).

    Counts the pairs with truth_i ≠ truth_j (true ties excluded) that ``pred`` orders the same way.
    A predicted tie on such a pair counts 0 with ``ties="strict"`` (TpuGraphs' definition) or ½ with
    ``ties="half"``. NaN when no pair has distinct true values. With no ties anywhere OPA = (τ + 1) / 2.
    """
    if ties not in ("strict", "half"):
        raise ValueError("ties must be 'strict' or 'half'")
    pc = pair_counts(pred, truth)
    true_pairs = pc.tot - pc.ytie
    if true_pairs == 0:
        return math.nan
    good = float(pc.con)
    if ties == "half":
        good += 0.5 * (pc.xtie - pc.ntie)
    return good / true_pairs


def fastest_first(pred: np.ndarray) -> np.ndarray:
    """Indices of ``pred`` (n,) ascending (predicted fastest first); ties keep index order. (n,) int64."""
    return np.argsort(np.asarray(pred), kind="stable").astype(np.int64, copy=False)


def slowdown_at_k(pred: np.ndarray, truth: np.ndarray, k: int) -> float:
    """min(truth over the k predicted-fastest) / min(truth over all), ≥ 1 (1 = the best was found).

    pred: (n,) scores, higher = slower; truth: (n,) true runtimes (or runtime / normalizer), > 0.
    k is capped at n; ties in ``pred`` go to the lower index (as in the submission writer).
    """
    truth = np.asarray(truth, dtype=np.float64)
    if truth.size == 0:
        return math.nan
    k = max(1, min(int(k), truth.size))
    listed = fastest_first(pred)[:k]
    return float(truth[listed].min() / truth.min())


def tile_score_of_listed(listed: np.ndarray, target: np.ndarray) -> float:
    """Kaggle tile score of a listed set of original indices: 2 − min(target[listed]) / min(target).

    listed: (≤5,) int original config indices; target: (c,) runtime / normalizer of every original config.
    """
    target = np.asarray(target, dtype=np.float64)
    listed = np.asarray(listed, dtype=np.int64)
    if target.size == 0 or listed.size == 0:
        return math.nan
    return float(2.0 - target[listed].min() / target.min())


def tile_score(pred: np.ndarray, runtime: np.ndarray, normalizer: np.ndarray, k: int = 5) -> float:
    """Tile score of one graph: 2 − slowdown@k on runtime / normalizer (pred, runtime, normalizer: (c,))."""
    target = np.asarray(runtime, dtype=np.float64) / np.asarray(normalizer, dtype=np.float64)
    return 2.0 - slowdown_at_k(pred, target, k)


def expand_to_original(pred_unique: np.ndarray, config_inverse: np.ndarray) -> np.ndarray:
    """Scores of unique configs (c_u,) → scores of every original config (c,) via ``config_inverse``."""
    inv = np.asarray(config_inverse)
    pred_unique = np.asarray(pred_unique)
    if inv.size and (inv.min() < 0 or inv.max() >= pred_unique.shape[0]):
        raise ValueError("config_inverse refers to a unique config that has no prediction")
    return pred_unique[inv]


def collection_means(
    rows: Iterable[Mapping[str, object]], keys: Iterable[str], by: str = "collection"
) -> dict[str, dict[str, float]]:
    """Mean of each metric in ``keys`` per value of ``rows[by]``, ignoring NaN and missing values.

    Returns {collection: {key: mean, "graphs": count}}, collections sorted; a key with no finite value
    gives NaN. The per-graph rows become one polars frame, aggregated by one ``group_by``.
    """
    import polars as pl

    keys, rows = list(keys), list(rows)
    frame = pl.DataFrame(
        {by: [str(r[by]) for r in rows],
         **{k: [None if r.get(k) is None else float(r[k]) for r in rows] for k in keys}},  # type: ignore[arg-type]
        schema={by: pl.String, **dict.fromkeys(keys, pl.Float64)})
    finite = [pl.when(pl.col(k).is_finite()).then(pl.col(k)).mean().alias(k) for k in keys]
    table = frame.group_by(by).agg(pl.len().alias("graphs"), *finite).sort(by)
    return {row[by]: {**{k: math.nan if row[k] is None else float(row[k]) for k in keys},
                      "graphs": float(row["graphs"])}
            for row in table.iter_rows(named=True)}
