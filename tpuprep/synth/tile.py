"""Tile kernels: ``build_tile_graph`` (fusion, convolution fusion, copy and reshape kernels) and
``tile_configs`` (distinct output-bound configs over the output's physical dims and their
noise-free times).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .constants import (
    ADD,
    BF16,
    BROADCAST,
    COL_DIMENSIONS,
    COMPARE,
    CONVERT,
    CONVOLUTION,
    COPY,
    DIVIDE,
    ET_BYTES,
    EXPONENTIAL,
    F32,
    FUSION,
    LOG,
    MAXIMUM,
    MULTIPLY,
    NEGATE,
    PRED,
    REDUCE,
    RESHAPE,
    RSQRT,
    SELECT,
    SUBTRACT,
    TANH,
    TUPLE_T,
)
from .graph import Shape, SynthGraph, conv_dn, conv_feats, same_window
from .hlo import HloBuilder
from .seeding import loguniform


def _tile_shape(rng: np.random.Generator, rank: int) -> tuple[int, ...]:
    menu = [
        1,
        2,
        3,
        5,
        7,
        8,
        12,
        14,
        16,
        26,
        28,
        32,
        56,
        64,
        96,
        128,
        192,
        256,
        384,
        512,
        1024,
        4096,
    ]
    while True:
        dims = [int(rng.choice(menu)) for _ in range(rank)]
        dims[0] = int(rng.choice([8, 16, 32, 64, 128]))
        if math.prod(dims) <= 1 << 23:
            return tuple(dims)


def _fused_body(
    b: HloBuilder,
    rng: np.random.Generator,
    et: int,
    dims: tuple[int, ...],
    size: int,
    start: Sequence[int] = (),
) -> tuple[int, list[Shape]]:
    """An elementwise/broadcast/reduce DAG over ``dims`` of about ``size`` nodes, fed by ``start``
    (else by 1–2 new parameters); returns (root, shapes of the parameters it added)."""
    params: list[Shape] = []
    pool = list(start)
    if not pool:
        pool = [b.param(Shape(et, dims)) for _ in range(int(rng.integers(1, 3)))]
        params = [b.shape[p] for p in pool]
    reduced = False
    while len(b) - b.comp_start < size:
        r = rng.random()
        x = pool[int(rng.integers(len(pool)))]
        if r < 0.35:
            y = pool[int(rng.integers(len(pool)))] if rng.random() < 0.6 else b.full(et, dims)
            op = int(rng.choice([ADD, MULTIPLY, SUBTRACT, MAXIMUM, DIVIDE]))
            pool.append(b.add(op, b.shape[x], (x, y)))
        elif r < 0.55:
            op = int(rng.choice([EXPONENTIAL, TANH, RSQRT, NEGATE, LOG, CONVERT]))
            shape = Shape(F32 if et == BF16 else BF16, dims) if op == CONVERT else b.shape[x]
            pool.append(b.add(op, shape, (x,)))
        elif r < 0.7:
            y = pool[int(rng.integers(len(pool)))]
            p = b.add(COMPARE, Shape(PRED, dims), (x, y))
            pool.append(b.add(SELECT, b.shape[x], (p, x, y)))
        elif r < 0.85 or reduced or not b.reducers:
            vec = b.param(Shape(et, dims[-1:]))
            params.append(b.shape[vec])
            pool.append(
                b.add(BROADCAST, Shape(et, dims), (vec,), feats={COL_DIMENSIONS: [len(dims) - 1]})
            )
        else:
            axis = len(dims) - 1
            red = b.add(
                REDUCE, Shape(b.shape[x].et, dims[:-1]), (x, b.constant(b.shape[x].et)),
                calls=(b.reducer("add", F32),), feats={COL_DIMENSIONS: [axis]},
            )  # fmt: skip
            reduced = True
            pool.append(
                b.add(
                    BROADCAST,
                    Shape(b.shape[x].et, dims),
                    (red,),
                    feats={COL_DIMENSIONS: list(range(len(dims) - 1))},
                )
            )
    used = {o for i in range(b.comp_start, len(b)) for o in b.operands[i]}
    live = [v for v in pool if v not in used]  # every value must reach the root
    if len(live) > 1 and rng.random() < 0.3:
        return b.tuple(live[-2:]) if len(live) == 2 else _combine(b, live, et), params
    return _combine(b, live, et), params


def _combine(b: HloBuilder, values: list[int], et: int) -> int:
    """Fold unused values into one output (convert first where element types differ)."""
    out = values[-1]
    for v in values[-2::-1]:
        if b.shape[v].et != b.shape[out].et:
            v = b.add(CONVERT, b.shape[out], (v,))
        out = b.add(ADD, b.shape[out], (out, v))
    return out


TILE_KINDS = ("fusion", "conv", "copy", "reshape")
TILE_KIND_P = (0.72, 0.1, 0.1, 0.08)


def build_tile_graph(
    rng: np.random.Generator, n_range: tuple[int, int], kind: str | None = None
) -> SynthGraph:
    """One tile kernel graph: a fusion or convolution fusion of n (log-uniform in n_range) nodes, or
    a 2-node copy or reshape kernel.

    meta: 'kind', 'iter_dims' (output iteration space the tile sizes bound, logical order),
    'iter_layout' (its minor_to_major: the output bounds run over the dims major to minor, as in the
    real files), 'kernel_dims' (conv fusions) and 'et'.
    """
    if kind is None:
        kind = str(rng.choice(TILE_KINDS, p=TILE_KIND_P))
    n_target = int(loguniform(rng, max(n_range[0], 5), max(n_range[1], 6)))
    if n_range[1] < 8 and kind in ("fusion", "conv"):
        kind = "copy"
    b = HloBuilder(rng, alt_layout_p=0.35)
    et = BF16 if rng.random() < 0.3 else F32
    rank = int(rng.choice([1, 2, 2, 3, 4, 4]))
    dims = _tile_shape(rng, rank)
    kernel_dims = None
    if kind in ("copy", "reshape"):
        b.begin()
        x = b.param(Shape(et, dims))
        if kind == "copy":
            layout = b.default_layout(Shape(et, dims), alt_p=0.5)
            b.end(b.add(COPY, Shape(et, dims), (x,), layout=layout))
        else:
            out = (
                (dims[0], math.prod(dims[1:]))
                if rank > 1
                else (dims[0] // 2, 2)
                if dims[0] % 2 == 0
                else (dims[0], 1)
            )
            b.end(b.add(RESHAPE, Shape(et, out), (x,)))
    else:
        if rng.random() < 0.6:
            b.make_reducers(int(rng.integers(1, 3)))
        b.begin()
        inner: list[Shape] = []
        start: list[int]
        if kind == "conv":
            dims = (int(rng.choice([8, 16, 32])), *(int(rng.choice([7, 12, 14, 28, 56])),) * 2,
                    int(rng.choice([64, 128, 192, 384])))  # fmt: skip
            k, cin = int(rng.choice([1, 3])), int(rng.choice([32, 64, 192, 256]))
            kernel_dims = (k, k, cin, dims[-1])
            x = b.param(Shape(et, (dims[0], dims[1], dims[2], cin)))
            w = b.param(Shape(et, kernel_dims))
            _, window = same_window(dims[1:3], k, 1)
            feats = conv_feats(conv_dn(4, "fwd"), window)
            start = [b.add(CONVOLUTION, Shape(et, dims), (x, w), feats=feats)]
            inner = [b.shape[x], b.shape[w]]
        else:
            start = []
        body, params = _fused_body(b, rng, et, dims, max(3, n_target // 2 - 2), start)
        fused_root = b.end(body)
        b.begin()
        args = [b.param(s) for s in (*inner, *params)]
        b.end(b.add(FUSION, b.shape[fused_root], args, calls=(fused_root,)))
    out = len(b) - 1
    # a 2-output fusion tiles its (equal-shape) outputs: the later one's layout
    if b.shape[out].et == TUPLE_T:
        out = b.operands[fused_root][-1]
    layout = b.layout[out] if kind != "reshape" else ()
    graph = b.finish()
    graph.meta.update(
        kind=kind, iter_dims=tuple(dims), iter_layout=tuple(layout), kernel_dims=kernel_dims, et=et
    )
    return graph


def _bound_candidates(extent: int, unit: int) -> np.ndarray:
    """Tile-size bound values for one dim: powers of two and divisors up to ceil(extent / unit)."""
    top = max(1, min(128, -(-extent // unit)))
    if top <= 32:
        return np.arange(1, top + 1, dtype=np.int64)
    values = {
        top,
        *(v for v in range(1, top + 1) if top % v == 0),
        *(1 << k for k in range(8) if 1 << k <= top),
    }
    return np.array(sorted(values), np.int64)


def _tile_units(dims: Sequence[int]) -> list[int]:
    """Elements per bound step along each dim of a physical (major-to-minor) shape: 128 lanes on the
    minor-most dim, 8 sublanes on the next, single elements elsewhere — what the real files show
    (every output bound ≤ ceil(extent / unit) in that order; e.g. (32, 26, 26, 192) laid out
    {3,0,2,1} has bounds up to (26, 26, 4, 2))."""
    units = [1] * len(dims)
    if dims:
        units[-1] = 128
    if len(dims) >= 2:
        units[-2] = 8
    return units


def _tile_bounds(rng: np.random.Generator, dims: Sequence[int], count: int) -> np.ndarray:
    """(count', ≤count) distinct bound vectors (rows) over dims; fewer when the space is small."""
    cands = [_bound_candidates(d, u) for d, u in zip(dims, _tile_units(dims), strict=True)]
    space = math.prod(len(c) for c in cands)
    count = min(count, space)
    rows = np.zeros((0, len(dims)), np.int64)
    for _ in range(20):
        draw = np.stack([c[rng.integers(0, len(c), size=2 * count + 8)] for c in cands], axis=1)
        rows = np.concatenate([rows, draw])
        _, idx = np.unique(rows, axis=0, return_index=True)
        rows = rows[np.sort(idx)]
        if len(rows) >= count:
            break
    return rows[:count]


def _bounds_feat(bounds: np.ndarray | None, count: int) -> np.ndarray:
    """(count, 8) float32: 6 leading bounds, sum, product (empty list: product 0)."""
    out = np.zeros((count, 8), np.float32)
    if bounds is not None and bounds.shape[1]:
        k = min(6, bounds.shape[1])
        out[:, :k] = bounds[:, :k]
        out[:, 6] = bounds.sum(1)
        out[:, 7] = bounds.prod(1)
    return out


def _tile_time(
    dims: Sequence[int], bounds: np.ndarray, bytes_per: int, operands: int
) -> np.ndarray:
    """Noise-free kernel time (ns) per bound row: padded traffic, per-tile overhead (saturating at
    20× the traffic) and a VMEM spill penalty for tiles over 2 MiB."""
    units = _tile_units(dims)
    tiles = np.ones(len(bounds))
    padded = np.ones(len(bounds))
    tile_elems = np.ones(len(bounds))
    for d, (extent, unit) in enumerate(zip(dims, units, strict=True)):
        span = np.minimum(bounds[:, d] * unit, max(extent, 1))
        n = np.ceil(extent / span)
        tiles *= n
        padded *= n * span
        tile_elems *= span
    traffic = padded * bytes_per * operands / 220.0
    overhead = 20.0 * traffic * (1.0 - np.exp(-tiles * 140.0 / (20.0 * traffic)))
    usage = tile_elems * bytes_per * operands
    spill = 1.0 + 1.5 * np.log2(np.maximum(usage / (2.0 * 2**20), 1.0))
    return 400.0 + (traffic + overhead) * spill


def tile_configs(
    graph: SynthGraph, rng: np.random.Generator, count: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """Tile configs of one kernel: (config_feat (c, 24) float32, truth (c,) float64 ns, default row)."""
    meta = graph.meta
    layout, kdims = meta["iter_layout"], meta["kernel_dims"]
    dims = tuple(meta["iter_dims"][a] for a in reversed(layout)) if layout else meta["iter_dims"]
    bytes_per = ET_BYTES[meta["et"]]
    operands = 1 + int(graph.node_opcode.size > 2)
    if meta["kind"] == "reshape":
        c = int(rng.integers(2, 4))
        size = math.prod(dims) * bytes_per
        return np.zeros((c, 24), np.float32), np.full(c, 300.0 + size / 200.0), 0
    out_b = _tile_bounds(rng, dims, max(count, 2))
    if len(out_b) == 1:  # a one-point space: the single config is measured twice
        out_b = np.repeat(out_b, 2, axis=0)
    c = len(out_b)
    truth = _tile_time(dims, out_b, bytes_per, operands)
    kern_b = None
    if kdims is not None:
        kern_b = _tile_bounds(rng, kdims, c)
        kern_b = kern_b[rng.integers(0, len(kern_b), size=c)]
        truth = truth + 0.5 * _tile_time(kdims, kern_b, bytes_per, 1)
    feat = np.concatenate(
        [_bounds_feat(kern_b, c), _bounds_feat(out_b, c), _bounds_feat(None, c)], axis=1
    )
    if c >= 3 and rng.random() < 0.2:  # a rare duplicate config, measured twice
        i, j = sorted(int(v) for v in rng.choice(c, size=2, replace=False))
        feat[j], truth[j] = feat[i], truth[i]
    order = np.argsort(truth, kind="stable")
    default = (
        int(order[0]) if rng.random() < 0.6 else int(order[int(rng.integers(0, max(1, c // 4)))])
    )
    return feat, truth, default
