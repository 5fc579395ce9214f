"""The epoch plan of ``ConfigBatches``: which (graph, batch index) items an epoch holds and in which
order — a pure function of the seed, the epoch, the graphs, their quotas and, for a mix of collections,
the collections' weights (issue #38 item 2). Nothing here reads data.

**Rounds.** The graphs are listed collection by collection (collections sorted by name); collection c
owns graphs ``bounds[c]`` … ``bounds[c + 1]`` − 1, and graph g has ``quotas[g]`` batches per round. A
*round* of collection c is its R_c = Σ quotas items (g, b), b < quotas[g], in graph order.

**Epoch length and shares.** An epoch has N = Σ_c R_c items, whatever the weights (one round of every
collection: the same number of batches as the collections have together), of which collection c
supplies n_c = ``apportion(N, weights)[c]`` items: the largest-remainder rounding of N · w_c / Σ w, so
|n_c − N · w_c / Σ w| < 1 and Σ n_c = N. One collection: n_c = R_c = N.

**Draws.** Collection c's n_c items are ⌊n_c / R_c⌋ whole rounds (up-sampling: a collection that runs out
of graphs is drawn again), then m = n_c mod R_c items of one more round chosen uniformly without
replacement by ``default_rng([seed, epoch, crc32(name)]).permutation(R_c)[:m]`` (down-sampling when
n_c < R_c). Round r's item (g, b) is drawn as batch index b + r · quotas[g]: an up-sampled graph draws
fresh rows in every round (rows are seeded by the batch index). The N draws, numbered collection by
collection, round by round, are put in the order of ``default_rng([seed, epoch]).permutation(N)``. For one
collection this is ``items[default_rng([seed, epoch]).permutation(N)]``, the plan of every earlier version.

**Bounds.** N ≤ ``MAX_EPOCH_ITEMS`` (2**24): an epoch plan holds its order, one int32 permutation of N,
and the partial rounds' picks, Σ_c m_c ≤ N int32 (m_c < R_c, m_c ≤ n_c; each drawn from an int32
permutation of R_c that is freed once its m_c picks are copied out, and as Σ R_c = N the picks and the
permutation being drawn never exceed N items together): at most 8 bytes per item, 128 MiB at the bound
(measured: 192 MiB when the picks were views of whole int64 permutations), plus 8 bytes per graph (the
quotas' running sum), per reading process and pass. Items are decoded a chunk at a time, never all at
once. A larger epoch is refused in one line (more epochs with ``set_epoch`` give the same batches per
graph).
Epochs are 0 … ``MAX_EPOCH`` (the int64 range the shared progress holds).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

#: the most items one epoch may hold (its order is an int32 permutation of N: 4 bytes per item)
MAX_EPOCH_ITEMS = 1 << 24
#: the largest epoch number (the shared progress holds int64)
MAX_EPOCH = (1 << 63) - 1


def apportion(total: int, weights: Sequence[float]) -> np.ndarray:
    """(C,) int64 shares of ``total`` items ∝ ``weights`` (each > 0): ⌊total · w_c / Σ w⌋, plus one for
    the collections with the largest remainders (ties: the lower index first), computed exactly in
    rationals, so |share_c − total · w_c / Σ w| < 1 and the shares sum to ``total``."""
    exact = [Fraction(w) for w in weights]
    whole = sum(exact)
    quotas = [total * w / whole for w in exact]
    shares = [int(q) for q in quotas]  # floor: q ≥ 0
    order = sorted(range(len(quotas)), key=lambda c: (-(quotas[c] - shares[c]), c))
    for c in order[:total - sum(shares)]:
        shares[c] += 1
    return np.array(shares, np.int64)


@dataclass(frozen=True)
class PlanLayout:
    """What an epoch plan is drawn from (module docstring): ``quotas`` (G,) int64 batches per graph and
    round, ``bounds`` (C + 1,) int64 graph offsets of the collections, ``draws`` (C,) int64 items each
    collection supplies per epoch (n_c), ``keys`` (C,) the crc32 of each collection's name (the seed of
    its partial round)."""

    quotas: np.ndarray
    bounds: np.ndarray
    draws: np.ndarray
    keys: tuple[int, ...]

    @classmethod
    def single(cls, quotas: np.ndarray) -> PlanLayout:
        """One collection: every item of one round, once."""
        quotas = np.asarray(quotas, np.int64)
        return cls(quotas, np.array([0, len(quotas)], np.int64), np.array([quotas.sum()], np.int64), (0,))

    @classmethod
    def mix(cls, names: Sequence[str], weights: Sequence[float], graphs: Sequence[int],
            quotas: np.ndarray) -> PlanLayout:
        """Collections ``names`` (sorted) with ``weights``, holding ``graphs[c]`` graphs each (listed in
        that order in ``quotas``). ``ValueError`` when a collection with a weight has no item to draw."""
        quotas = np.asarray(quotas, np.int64)
        bounds = np.concatenate([[0], np.cumsum(np.asarray(graphs, np.int64))])
        rounds = np.array([quotas[bounds[c]:bounds[c + 1]].sum() for c in range(len(names))], np.int64)
        if len(names) == 1:
            return cls.single(quotas)
        empty = [name for name, r in zip(names, rounds.tolist(), strict=True) if r == 0]
        if empty:
            raise ValueError(f"collection {empty[0]} has no batch to draw (its graphs have no configs)")
        draws = apportion(int(rounds.sum()), weights)
        return cls(quotas, bounds, draws, tuple(zlib.crc32(n.encode()) for n in names))

    @property
    def rounds(self) -> np.ndarray:
        """(C,) int64 items per round of each collection (R_c)."""
        ends = np.cumsum(self.quotas)
        starts = np.concatenate([[0], ends])
        return starts[self.bounds[1:]] - starts[self.bounds[:-1]]

    def __len__(self) -> int:
        """N: the items of one epoch."""
        return int(self.draws.sum())


def check_epoch_items(total: int) -> None:
    """``ValueError`` when an epoch of ``total`` items is over ``MAX_EPOCH_ITEMS``."""
    if total > MAX_EPOCH_ITEMS:
        raise ValueError(f"an epoch of {total:,} batches is more than {MAX_EPOCH_ITEMS:,} (2**24): give fewer "
                         "batches_per_graph and run more epochs (set_epoch draws new batches each epoch)")


class EpochPlan:
    """One epoch's plan (module docstring): ``len(plan)`` items, ``plan.items(positions)`` the (n, 2)
    int64 (graph, batch index) items at plan positions ``positions``. Holds the epoch's order, (N,)
    int32, and the partial rounds' picks, (m_c,) int32 per collection (copies: never a view keeping a
    whole permutation of R_c alive), ≤ N together (module docstring, "Bounds")."""

    def __init__(self, layout: PlanLayout, seed: int, epoch: int):
        self.layout = layout
        total = len(layout)
        check_epoch_items(total)
        self.order = np.arange(total, dtype=np.int32)
        np.random.default_rng([seed, epoch]).shuffle(self.order)  # = permutation(total), in 4 bytes per item
        rounds = layout.rounds
        self._rounds = rounds
        self._whole = np.where(rounds > 0, layout.draws // np.maximum(rounds, 1), 0)
        self._draw_starts = np.concatenate([[0], np.cumsum(layout.draws)])
        self._round_starts = np.concatenate([[0], np.cumsum(rounds)])
        self._ends = np.cumsum(layout.quotas)
        self._picks = [_partial_round(seed, epoch, key, r, d - w * r)
                       for key, r, d, w in zip(layout.keys, rounds.tolist(), layout.draws.tolist(),
                                               self._whole.tolist(), strict=True)]

    def __len__(self) -> int:
        return len(self.order)

    def items(self, positions: np.ndarray) -> np.ndarray:
        """(n, 2) int64 (graph index, batch index) of the items at plan positions ``positions`` (n,)."""
        draw = self.order[np.asarray(positions, np.int64)].astype(np.int64)
        c = np.searchsorted(self._draw_starts, draw, side="right") - 1
        k = draw - self._draw_starts[c]
        rounds = self._rounds[c]
        r = k // np.maximum(rounds, 1)
        i = k - r * rounds
        partial = r >= self._whole[c]
        for col in np.unique(c[partial]).tolist():
            sel = partial & (c == col)
            i[sel] = self._picks[col][k[sel] - self._whole[col] * self._rounds[col]]
        item = self._round_starts[c] + i  # the item's number in the concatenated rounds of all collections
        graph = np.searchsorted(self._ends, item, side="right")
        quotas = self.layout.quotas[graph]
        batch = item - (self._ends[graph] - quotas) + r * quotas
        return np.stack([graph, batch], axis=1)


def _partial_round(seed: int, epoch: int, key: int, items: int, m: int) -> np.ndarray:
    """(m,) int32: ``default_rng([seed, epoch, key]).permutation(items)[:m]``, drawn in 4 bytes per item
    (a shuffle of an int32 range draws what ``permutation`` draws) and copied out of it."""
    if not m:
        return np.zeros(0, np.int32)
    perm = np.arange(items, dtype=np.int32)
    np.random.default_rng([seed, epoch, key]).shuffle(perm)
    return perm[:m].copy()


def epoch_plan(num_graphs: int, quotas: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """(N, 2) int64 (graph index, batch index) items of one epoch of one collection, N = Σ quotas: every
    (g, b) with b < quotas[g], in the order of ``default_rng([seed, epoch]).permutation(N)``."""
    quotas = np.asarray(quotas, np.int64)
    if len(quotas) != num_graphs:
        raise ValueError(f"{len(quotas)} quotas for {num_graphs} graphs")
    plan = EpochPlan(PlanLayout.single(quotas), seed, epoch)
    return plan.items(np.arange(len(plan)))
