"""Layout configurations: tie groups, option tables and the runtime model of one program
(``plan_layout`` -> ``LayoutPlan``), and the config rows of one file, drawn per collection with
the file's duplicate share (``draw_choices``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .constants import RESHAPE, UNSET
from .graph import ConfigurableNode, SynthGraph
from .profiles import NONMODAL_P_RANDOM, NONMODAL_ROWS_DEFAULT
from .seeding import loguniform


@dataclass
class LayoutPlan:
    """How the configs of one layout program are drawn and timed (shared by default and random).

    node_config_ids (nc,) int64. group_of (nc,) int64: tie group of every configurable node (members
    of a group carry identical vectors in every row). table (nc, K, 18) float32: option vectors of
    every node (option k of its group; padded with option 0 up to K). n_out, n_opnd (G,) int64: output
    and operand option counts of each group (option k = o · n_opnd + i); major (G,) bool: conv/dot
    groups whose output layout moves the runtime. jump (G, K) float64: relative runtime change of each
    option (0 for the modal/default one). base: runtime of the all-modal config, ns. noise: relative
    standard deviation of measurement noise.
    """

    node_config_ids: np.ndarray
    group_of: np.ndarray
    table: np.ndarray
    n_out: np.ndarray
    n_opnd: np.ndarray
    major: np.ndarray
    jump: np.ndarray
    base: float
    noise: float

    @property
    def n_groups(self) -> int:
        return len(self.n_out)

    def truth(self, choices: np.ndarray) -> np.ndarray:
        """Noise-free runtimes (c,) float64 ns of configs given as (c, G) group choices."""
        extra = np.zeros(choices.shape[0], np.float64)
        for g in range(self.n_groups):
            extra += self.jump[g][choices[:, g]]
        return self.base * (1.0 + extra)

    def feature_chunks(self, choices: np.ndarray, rows_per_chunk: int) -> Iterator[np.ndarray]:
        """node_config_feat in row chunks: (k, nc, 18) float32 each; never the whole array."""
        nodes = np.arange(len(self.group_of))[None, :]
        for a in range(0, choices.shape[0], rows_per_chunk):
            node_choice = choices[a : a + rows_per_chunk][:, self.group_of]
            yield self.table[nodes, node_choice]

    def features(self, choices: np.ndarray) -> np.ndarray:
        """The whole (c, nc, 18) float32 node_config_feat (small files and tests only)."""
        nodes = np.arange(len(self.group_of))[None, :]
        return self.table[nodes, choices[:, self.group_of]]


def _tie_groups(
    configurable: list[ConfigurableNode], rng: np.random.Generator, family: str, c_hint: int
) -> list[list[int]]:
    """Partition configurable nodes into tie groups of nodes with identical option tables."""
    classes: dict[bytes, list[int]] = {}
    for k, cfg in enumerate(configurable):
        key = bytes([cfg.opcode]) + cfg.out.tobytes() + b"|" + cfg.opnd.tobytes()
        classes.setdefault(key, []).append(k)
    split_p = 0.12 if family == "xla" else 0.3
    groups: list[list[int]] = []
    for members in classes.values():
        count = 1 + int(rng.binomial(len(members) - 1, split_p)) if len(members) > 1 else 1
        order = rng.permutation(members)
        parts = [[int(m)] for m in order[:count]]
        if len(order) > count:
            weights = rng.dirichlet(np.full(count, 0.7))
            for m, g in zip(
                order[count:], rng.choice(count, size=len(order) - count, p=weights), strict=True
            ):
                parts[int(g)].append(int(m))
        groups += [sorted(p) for p in parts]

    def entropy(g: list[int]) -> float:  # rough nats per row a group contributes
        cfg = configurable[g[0]]
        if cfg.opcode == RESHAPE:
            return 0.6 if len(cfg.out) > 1 else 0.0
        return 0.3 + math.log(len(cfg.opnd))

    # enough independent choices that natural collisions stay rare (they are redrawn anyway)
    need = (1.2 if family == "xla" else 1.6) * math.log(max(c_hint, 2)) + 1.0
    while sum(entropy(g) for g in groups) < need:
        big = max(range(len(groups)), key=lambda i: len(groups[i]))
        if len(groups[big]) < 2:
            break
        members = groups.pop(big)
        cut = len(members) // 2
        groups += [members[:cut], members[cut:]]
    return sorted(groups, key=lambda g: g[0])


def plan_layout(
    graph: SynthGraph, rng: np.random.Generator, family: str, c_hint: int
) -> LayoutPlan:
    """Tie groups, option tables and the runtime model of one layout program."""
    cfgs = graph.configurable
    groups = _tie_groups(cfgs, rng, family, c_hint)
    nc, ng = len(cfgs), len(groups)
    group_of = np.zeros(nc, np.int64)
    n_out = np.zeros(ng, np.int64)
    n_opnd = np.zeros(ng, np.int64)
    major = np.zeros(ng, bool)
    weight = np.zeros(ng, np.float64)
    vectors: list[np.ndarray] = []
    for g, members in enumerate(groups):
        cfg = cfgs[members[0]]
        group_of[members] = g
        n_out[g], n_opnd[g] = len(cfg.out), len(cfg.opnd)
        major[g] = cfg.opcode != RESHAPE and len(cfg.out) > 1
        # additive over member nodes, each term visible in that node's features
        if major[g]:
            weight[g] = sum(math.sqrt(cfgs[m].cost) for m in members)
        else:
            weight[g] = sum(min(1.0, cfgs[m].cost / 1e6) for m in members)
        out = np.repeat(cfg.out, len(cfg.opnd), axis=0)
        opnd = np.tile(cfg.opnd, (len(cfg.out), 1))
        vectors.append(np.where(out != UNSET, out, opnd))
    k_max = int((n_out * n_opnd).max()) if ng else 1
    table = np.empty((nc, k_max, 18), np.float32)
    for j in range(nc):
        v = vectors[group_of[j]]
        table[j, : len(v)] = v
        table[j, len(v) :] = v[0]
    scale = loguniform(rng, 0.03, 6.0)  # the largest group's jump, relative to the base runtime
    w_max = weight[major].max() if major.any() else 1.0
    opnd_scale = 3e-4 * min(1.0, 8.0 / max(1, int(major.sum())))
    jump = np.zeros((ng, k_max), np.float64)
    for g in range(ng):
        rel = weight[g] / w_max
        o = np.arange(n_out[g] * n_opnd[g]) // n_opnd[g]
        i = np.arange(n_out[g] * n_opnd[g]) % n_opnd[g]
        if major[g]:
            out_term = scale * rel * (1.0 + 0.35 * (o - 1))
            opnd_term = opnd_scale * rel * (1.0 + 0.25 * (i - 1))
        else:  # reshapes: small
            out_term = 2e-4 * weight[g] * (1.0 + 0.5 * (o - 1))
            opnd_term = np.zeros_like(out_term)
        jump[g, : len(o)] = np.where(o > 0, out_term, 0.0) + np.where(i > 0, opnd_term, 0.0)
    return LayoutPlan(
        node_config_ids=graph.node_config_ids,
        group_of=group_of,
        table=table,
        n_out=n_out,
        n_opnd=n_opnd,
        major=major,
        jump=jump,
        base=2e7 + 0.05 * graph.work,
        noise=loguniform(rng, 1e-4, 6e-4),
    )


class _Sampler:
    """Draws group choices for one collection ('default': few non-modal outputs per row, genetic
    search around the best; 'random': independent non-modal outputs)."""

    def __init__(self, plan: LayoutPlan, rng: np.random.Generator, search: str) -> None:
        self.plan, self.search = plan, search
        ng = plan.n_groups
        self.p_opnd = [rng.dirichlet(np.full(int(k), 6.0)) for k in plan.n_opnd]
        self.p_reshape = rng.uniform(0.1, 0.5, size=ng)
        self.p_random = rng.uniform(*NONMODAL_P_RANDOM, size=ng)
        self.majors = np.flatnonzero(plan.major)
        w = rng.dirichlet(np.full(len(self.majors), 1.0)) if len(self.majors) else np.zeros(0)
        self.major_cdf = np.cumsum(w)

    def draw(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """(count, G) uint8 choices."""
        plan = self.plan
        ng = plan.n_groups
        out = np.zeros((count, ng), np.int64)
        opnd = np.zeros((count, ng), np.int64)
        for g in range(ng):
            if plan.n_opnd[g] > 1:
                opnd[:, g] = rng.choice(int(plan.n_opnd[g]), size=count, p=self.p_opnd[g])
            if plan.n_out[g] > 1 and not plan.major[g]:
                flip = rng.random(count) < self.p_reshape[g]
                out[:, g] = np.where(flip, 1 + rng.integers(0, plan.n_out[g] - 1, size=count), 0)
        if len(self.majors):
            if self.search == "random":
                for g in self.majors:
                    flip = rng.random(count) < self.p_random[g]
                    out[:, g] = np.where(
                        flip, 1 + rng.integers(0, plan.n_out[g] - 1, size=count), 0
                    )
            else:
                flips = rng.choice(len(NONMODAL_ROWS_DEFAULT), size=count, p=NONMODAL_ROWS_DEFAULT)
                for j in range(1, len(NONMODAL_ROWS_DEFAULT)):
                    rows = np.flatnonzero(flips >= j)
                    pick = np.searchsorted(
                        self.major_cdf, rng.random(len(rows)) * self.major_cdf[-1]
                    )
                    g = self.majors[np.minimum(pick, len(self.majors) - 1)]
                    out[rows, g] = 1 + rng.integers(0, plan.n_out[g] - 1)
        return (out * plan.n_opnd[None, :] + opnd).astype(np.uint8)


def _first_occurrence(choices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(is_first (c,) bool, group size of each row's value (c,) int64) of identical rows."""
    c = choices.shape[0]
    if choices.shape[1] == 0:
        first = np.zeros(c, bool)
        first[:1] = True
        return first, np.full(c, c, np.int64)
    view = np.ascontiguousarray(choices).view(np.dtype((np.void, choices.shape[1])))[:, 0]
    _, first_idx, inverse, counts = np.unique(
        view, return_index=True, return_inverse=True, return_counts=True
    )
    first = np.zeros(c, bool)
    first[first_idx] = True
    return first, counts[inverse]


def draw_choices(
    plan: LayoutPlan, rng: np.random.Generator, search: str, count: int, dup_share: float
) -> np.ndarray:
    """(count, G) uint8 group choices with about ``dup_share`` duplicate rows.

    Natural collisions are redrawn (a few rounds), then whole rows are re-sampled from earlier rows
    (mostly original rows; a quarter of them follow earlier copies, giving a heavy tail) until the duplicate count reaches round(dup_share · count).
    """
    sampler = _Sampler(plan, rng, search)
    choices = sampler.draw(rng, count)
    for _ in range(8):
        first, _ = _first_occurrence(choices)
        again = np.flatnonzero(~first)
        if len(again) == 0:
            break
        choices[again] = sampler.draw(rng, len(again))
    first, sizes = _first_occurrence(choices)
    need = round(dup_share * count) - int((~first).sum())
    singles = np.flatnonzero(sizes == 1)
    singles = singles[singles > 0]
    if need > 0 and len(singles):
        rows = np.sort(rng.choice(singles, size=min(need, len(singles)), replace=False))
        copied = np.zeros(count, bool)
        copied[rows] = True
        # a source: mostly a uniformly drawn earlier original row; sometimes any earlier row, whose
        # value is then itself re-drawn (popular configs get more popular: a heavier tail)
        originals = np.flatnonzero(~copied)
        below = np.searchsorted(originals, rows)
        source = np.arange(count)
        source[rows] = originals[np.floor(below * rng.random(len(rows))).astype(np.int64)]
        anywhere = rng.random(len(rows)) < 0.25
        source[rows[anywhere]] = np.floor(rows[anywhere] * rng.random(int(anywhere.sum()))).astype(
            np.int64
        )
        while True:  # follow copy chains to a row that is not itself a copy
            nxt = source[source]
            if np.array_equal(nxt, source):
                break
            source = nxt
        choices = choices[source]
    return choices
