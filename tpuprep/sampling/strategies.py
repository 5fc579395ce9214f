"""Which unique configs a batch takes: pure NumPy functions of (runtimes or a count, k, a Generator).

Every strategy returns (min(k, c_u),) int64 distinct unique-config rows (the ``load_graph`` numbering), a
deterministic function of its arguments and the Generator's state. Runtimes are (c_u,) int64 ns.

- ``uniform``: k rows uniformly without replacement (needs only c_u: works on the test split).
- ``stratified``: a quarter from the fastest tenth of the configs, a quarter from the slowest tenth,
  the rest uniform among those left (every config can be drawn; the extremes are over-represented).
- ``pairs``: k // 2 pairs of configs adjacent in runtime order (rows[2i], rows[2i + 1] are a pair,
  the faster first), then one uniform row when k is odd.
- ``sqrt_quotas``: batches per graph ∝ √(c_u) (the 5th-place Kaggle team's sampling).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

#: fraction of a graph's configs (by runtime) that ``stratified`` counts as its fastest / slowest
EXTREME_FRACTION = 0.1


def uniform(num_unique: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """(min(k, num_unique),) int64 distinct rows drawn uniformly, in the order drawn."""
    _check_k(k)
    return rng.choice(num_unique, min(k, num_unique), replace=False).astype(np.int64)


def stratified(runtimes: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """(min(k, c_u),) int64 distinct rows: k // 4 drawn from the fastest ``EXTREME_FRACTION`` of the
    configs (at least k // 4 configs), k // 4 from the slowest (at least k // 4, never overlapping the
    fastest), the rest uniform among the rows not yet taken. Order: best part, worst part, rest."""
    _check_k(k)
    c = len(runtimes)
    k = min(k, c)
    order = np.argsort(np.asarray(runtimes), kind="stable")  # fastest first
    quarter = k // 4
    pool = min(max(quarter, int(np.ceil(c * EXTREME_FRACTION))), c // 2)
    best = rng.choice(order[:pool], quarter, replace=False)
    worst = rng.choice(order[c - pool:], quarter, replace=False)
    left = np.setdiff1d(np.arange(c), np.concatenate([best, worst]), assume_unique=True)
    rest = rng.choice(left, k - 2 * quarter, replace=False)
    return np.concatenate([best, worst, rest]).astype(np.int64)


def pairs(runtimes: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """(min(k, c_u),) int64 distinct rows: k // 2 pairs of configs next to each other in runtime order
    (rows[2i] the faster, rows[2i + 1] the next slower; the sorted order is cut into disjoint
    neighbours at a random offset 0 or 1), then uniform rows among the rest to reach min(k, c_u)."""
    _check_k(k)
    c = len(runtimes)
    k = min(k, c)
    order = np.argsort(np.asarray(runtimes), kind="stable")
    offset = int(rng.integers(2)) if c > 2 else 0
    available = (c - offset) // 2
    starts = offset + 2 * rng.choice(available, min(k // 2, available), replace=False)
    paired = np.stack([order[starts], order[starts + 1]], axis=1).reshape(-1)
    left = np.setdiff1d(np.arange(c), paired, assume_unique=True)
    rest = rng.choice(left, k - len(paired), replace=False)
    return np.concatenate([paired, rest]).astype(np.int64)


#: strategy name → (needs runtimes, function)
STRATEGIES: dict[str, tuple[bool, Callable[..., np.ndarray]]] = {
    "uniform": (False, uniform), "stratified": (True, stratified), "pairs": (True, pairs)}


def sqrt_quotas(num_unique: np.ndarray) -> np.ndarray:
    """(G,) int64 batches per graph ∝ √(c_u), scaled so that the epoch holds about G batches (as many
    as one batch per graph): max(1, round(G · √c_g / Σ √c)); 0 for a graph without configs."""
    counts = np.asarray(num_unique, np.float64)
    roots = np.sqrt(counts)
    total = roots.sum()
    if total == 0:
        return np.zeros(len(counts), np.int64)
    quotas = np.maximum(1, np.rint(len(counts) * roots / total)).astype(np.int64)
    quotas[counts == 0] = 0
    return quotas


def _check_k(k: int) -> None:
    if k < 0:
        raise ValueError(f"k must be ≥ 0, got {k}")
