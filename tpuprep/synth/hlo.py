"""The HLO builder: ``HloBuilder`` emits instructions computation by computation (reducers, loops,
entry), records the forward tape for the backward pass, builds the layout options of every
configurable node (conv/dot minor pairs, bitcast-compatible reshape permutations) and featurizes
everything by the tpu_graphs recipe into a ``SynthGraph``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from .constants import (
    ADD,
    AFTER_ALL,
    ALL_REDUCE,
    BROADCAST,
    COL_DIMENSIONS,
    COL_DIMS,
    COL_DIMS_PROD,
    COL_DIMS_SUM,
    COL_DYN_SLICE,
    COL_IS_ROOT,
    COL_LAYOUT,
    COL_PAD,
    COL_PARAM_NUM,
    COL_SLICE,
    COL_TUPLE_SIZE,
    COL_WINDOW,
    COMPARE,
    CONCATENATE,
    CONSTANT,
    CONVERT,
    CONVOLUTION,
    DOT,
    DYNAMIC_SLICE,
    F32,
    GATHER,
    GET_TUPLE_ELEMENT,
    IOTA,
    MAXIMUM,
    MINIMUM,
    OR,
    OUTFEED,
    PAD,
    PARAMETER,
    PRED,
    PRODUCT_COLUMNS,
    REDUCE,
    REDUCE_WINDOW,
    RESHAPE,
    RNG,
    S32,
    SCATTER,
    SELECT,
    SELECT_AND_SCATTER,
    SLICE,
    TOKEN_T,
    TRANSPOSE,
    TUPLE,
    TUPLE_T,
    UNSET,
    WHILE,
)
from .graph import ConfigurableNode, Shape, SynthGraph, Window, aggregate, conv_feats


def _vec(out: Sequence[int] = (), in0: Sequence[int] = (), in1: Sequence[int] = ()) -> np.ndarray:
    """One (18,) float32 layout-config vector: blocks for output, operand 0, operand 1; −1 when unset."""
    v = np.full(18, UNSET, np.float32)
    v[0 : len(out)] = out
    v[6 : 6 + len(in0)] = in0
    v[12 : 12 + len(in1)] = in1
    return v


def _pair_options(a: int, b: int, layout: Sequence[int]) -> list[tuple[int, int]]:
    """The two 2-most-minor orders of dims a and b; first the one this tensor's own layout uses."""
    pos = {d: k for k, d in enumerate(layout)}
    first, second = (a, b) if pos.get(a, 99) <= pos.get(b, 99) else (b, a)
    return [(first, second), (second, first)]


def _minor_pairs(layout: Sequence[int], rank: int) -> list[tuple[int, ...]]:
    """Options for a dot tensor: its two most-minor dims in the tensor's own order, then swapped."""
    if rank >= 2:
        a, b = int(layout[0]), int(layout[1])
        return [(a, b), (b, a)]
    return [(0,)] if rank == 1 else [()]


def _segments(a: Sequence[int], b: Sequence[int]) -> list[tuple[list[int], list[int]]] | None:
    """Aligned groups of non-unit dims of a reshape (input a, output b) with equal products."""
    if 0 in a or 0 in b:
        return None
    ia = [i for i, d in enumerate(a) if d != 1]
    ib = [j for j, d in enumerate(b) if d != 1]
    segs: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(ia) and j < len(ib):
        si, sj = [ia[i]], [ib[j]]
        pa, pb = a[ia[i]], b[ib[j]]
        i += 1
        j += 1
        while pa != pb:
            if pa < pb and i < len(ia):
                si.append(ia[i])
                pa *= a[ia[i]]
                i += 1
            elif pb < pa and j < len(ib):
                sj.append(ib[j])
                pb *= b[ib[j]]
                j += 1
            else:
                return None
        segs.append((si, sj))
    if i != len(ia) or j != len(ib):
        return None
    return segs


def _segment_layout(seg_dims: list[list[int]], order: Sequence[int], rank: int) -> tuple[int, ...]:
    """minor_to_major of one reshape side when its segments are laid out in ``order`` (minor first).

    Inside a segment dims stay row-major (descending), unit dims go most-major.
    """
    perm: list[int] = []
    for s in order:
        perm += sorted(seg_dims[s], reverse=True)
    perm += sorted((d for d in range(rank) if d not in perm), reverse=True)
    return tuple(perm)


class HloBuilder:
    """Accumulates HLO instructions computation by computation, in emission (= topological) order.

    Every instruction gets the next node id; operands must come from the current computation, and
    called computations are finished before their callers, so every edge [u, v] has u > v.
    """

    def __init__(self, rng: np.random.Generator, alt_layout_p: float = 0.02) -> None:
        self.rng = rng
        self.alt_layout_p = alt_layout_p
        self.op: list[int] = []
        self.shape: list[Shape] = []
        self.layout: list[tuple[int, ...]] = []
        self.operands: list[tuple[int, ...]] = []
        self.calls: list[tuple[int, ...]] = []
        self.grad: list[bool] = []
        self.feat_rows: list[int] = []
        self.feat_cols: list[int] = []
        self.feat_vals: list[float] = []
        self.roots: list[int] = []
        self.splits: list[int] = [0]
        self.cfg: list[ConfigurableNode] = []
        self.tape: list[tuple] = []
        self.reducers: dict[tuple[str, int], list[int]] = {}
        self.used_reducers: set[int] = set()
        self.recording = True
        self.comp_start = 0
        self.nparams = 0
        self.cache: dict[tuple, int] = {}

    def __len__(self) -> int:
        return len(self.op)

    # -- core -------------------------------------------------------------------------------------
    def default_layout(self, shape: Shape, alt_p: float | None = None) -> tuple[int, ...]:
        r = shape.rank
        if r < 2:
            return tuple(range(r))
        descending = tuple(range(r - 1, -1, -1))
        if self.rng.random() >= (self.alt_layout_p if alt_p is None else alt_p):
            return descending
        style = int(self.rng.integers(3))
        if style == 0 or r == 2:  # two most-minor dims swapped, e.g. (0, 1)
            return (r - 2, r - 1, *range(r - 3, -1, -1))
        if style == 1:  # batch most-minor, e.g. (0, 3, 2, 1)
            return (0, *range(r - 1, 0, -1))
        return (r - 1, 0, *range(r - 2, 0, -1))  # TPU-style, e.g. (3, 0, 2, 1)

    def add(
        self,
        op: int,
        shape: Shape,
        operands: Sequence[int] = (),
        *,
        calls: Sequence[int] = (),
        layout: Sequence[int] | None = None,
        feats: dict[int, Sequence[float]] | None = None,
    ) -> int:
        """Append one instruction; returns its node id. feats: node_feat column -> consecutive values."""
        i = len(self.op)
        if operands and min(operands) < self.comp_start:
            raise AssertionError("operand from another computation")
        self.op.append(op)
        self.shape.append(shape)
        self.operands.append(tuple(operands))
        self.calls.append(tuple(calls))
        self.layout.append(self.default_layout(shape) if layout is None else tuple(layout))
        self.grad.append(any(self.grad[o] for o in operands))
        if feats:
            for col, values in feats.items():
                for k, v in enumerate(values):
                    self.feat_rows.append(i)
                    self.feat_cols.append(col + k)
                    self.feat_vals.append(float(v))
        return i

    def record(self, kind: int, out: int, ins: Sequence[int], info: object = None) -> int:
        if self.recording and self.grad[out]:
            self.tape.append((kind, out, tuple(ins), info))
        return out

    def begin(self) -> None:
        self.comp_start = len(self.op)
        self.nparams = 0
        self.cache = {}

    def end(self, root: int, *, split: bool = False) -> int:
        if root != len(self.op) - 1:
            raise AssertionError("the root must be the last instruction of its computation")
        self.roots.append(root)
        if split:
            self.splits.append(len(self.op))
        return root

    # -- leaves -----------------------------------------------------------------------------------
    def param(self, shape: Shape, *, grad: bool = False) -> int:
        i = self.add(PARAMETER, shape, feats={COL_PARAM_NUM: [self.nparams]})
        self.nparams += 1
        self.grad[i] = grad
        return i

    def constant(self, et: int, dims: Sequence[int] = ()) -> int:
        """A constant; scalar constants are sometimes shared within a computation (partial CSE)."""
        key = ("constant", et, tuple(dims))
        if not dims and key in self.cache and self.rng.random() < 0.85:
            return self.cache[key]
        i = self.add(CONSTANT, Shape(et, tuple(dims)))
        self.cache[key] = i
        return i

    def full(self, et: int, dims: Sequence[int], tag: object = 0) -> int:
        """A broadcast scalar constant of shape dims (sometimes shared within the computation)."""
        dims = tuple(dims)
        if not dims:
            return self.constant(et)
        key = ("full", et, dims, tag)
        if key not in self.cache or self.rng.random() < 0.08:
            c = self.constant(et)
            self.cache[key] = self.add(BROADCAST, Shape(et, dims), (c,))
        return self.cache[key]

    def iota(self, et: int, dims: Sequence[int], axis: int) -> int:
        return self.add(IOTA, Shape(et, tuple(dims)), feats={COL_DIMENSIONS: [axis]})

    def rng_uniform(self, et: int, dims: Sequence[int]) -> int:
        lo, hi = self.constant(et), self.constant(et)
        return self.add(RNG, Shape(et, tuple(dims)), (lo, hi))

    # -- elementwise ------------------------------------------------------------------------------
    def unary(self, op: int, x: int, et: int | None = None) -> int:
        s = self.shape[x]
        out = self.add(op, Shape(s.et if et is None else et, s.dims), (x,))
        return self.record(op, out, (x,))

    def binary(self, op: int, x: int, y: int) -> int:
        out = self.add(op, self.shape[x], (x, y))
        return self.record(op, out, (x, y))

    def compare(self, x: int, y: int) -> int:
        out = self.add(COMPARE, Shape(PRED, self.shape[x].dims), (x, y))
        self.grad[out] = False
        return out

    def select(self, p: int, x: int, y: int) -> int:
        out = self.add(SELECT, self.shape[x], (p, x, y))
        return self.record(SELECT, out, (p, x, y))

    def convert(self, x: int, et: int) -> int:
        out = self.add(CONVERT, Shape(et, self.shape[x].dims), (x,))
        return self.record(CONVERT, out, (x,))

    def bcast(self, x: int, dims: Sequence[int], mapping: Sequence[int] = ()) -> int:
        out = self.add(
            BROADCAST, Shape(self.shape[x].et, tuple(dims)), (x,), feats={COL_DIMENSIONS: mapping}
        )
        return self.record(BROADCAST, out, (x,), tuple(mapping))

    # -- reducers and reductions ------------------------------------------------------------------
    def make_reducers(self, count: int) -> None:
        """Emit ``count`` scalar reducer computations (param, param, root) before everything else."""
        root_op = {"add": ADD, "max": MAXIMUM, "min": MINIMUM, "or": OR, "ge": COMPARE}
        kinds = [("add", F32), ("max", F32), ("ge", F32), ("min", S32)][:count]
        menu = [("add", F32), ("max", F32), ("ge", F32), ("min", S32), ("or", PRED), ("add", S32)]
        weights = np.array([0.72, 0.14, 0.05, 0.03, 0.03, 0.03])
        for k in self.rng.choice(len(menu), size=max(0, count - len(kinds)), p=weights):
            kinds.append(menu[int(k)])
        for kind, et in kinds:
            self.begin()
            a = self.param(Shape(et))
            b = self.param(Shape(et))
            out_et = PRED if kind == "ge" else et
            root = self.add(root_op[kind], Shape(out_et), (a, b))
            self.reducers.setdefault((kind, et), []).append(self.end(root))

    def reducer(self, kind: str, et: int) -> int:
        """A reducer computation's root: an unused one while any is left (XLA gives most reduce-like
        instructions their own region), else a shared one."""
        key = (kind, et) if (kind, et) in self.reducers else (kind, F32)
        if key not in self.reducers:
            key = next((k for k in self.reducers if k[0] == kind), None)
        if key is None:
            raise KeyError(f"no {kind} reducer")
        roots = self.reducers[key]
        fresh = [r for r in roots if r not in self.used_reducers]
        root = fresh[0] if fresh else roots[int(self.rng.integers(len(roots)))]
        self.used_reducers.add(root)
        return root

    def reduce(self, x: int, axes: Sequence[int], kind: str = "add") -> int:
        s = self.shape[x]
        axes = tuple(sorted(axes))
        dims = tuple(d for k, d in enumerate(s.dims) if k not in axes)
        init = self.constant(s.et)
        out = self.add(
            REDUCE,
            Shape(s.et, dims),
            (x, init),
            calls=(self.reducer(kind, s.et),),
            feats={COL_DIMENSIONS: axes},
        )
        return self.record(REDUCE, out, (x,), (axes, kind))

    def all_reduce(self, x: int) -> int:
        s = self.shape[x]
        return self.add(ALL_REDUCE, s, (x,), calls=(self.reducer("add", s.et),))

    # -- data movement ----------------------------------------------------------------------------
    def reshape(self, x: int, dims: Sequence[int]) -> int:
        s = self.shape[x]
        out = self.add(RESHAPE, s.with_dims(dims), (x,))
        options = self.reshape_options(s.dims, tuple(dims))
        self.cfg.append(
            ConfigurableNode(out, RESHAPE, options, _vec()[None, :], float(max(s.size, 1)))
        )
        return self.record(RESHAPE, out, (x,))

    def reshape_options(self, in_dims: tuple[int, ...], out_dims: tuple[int, ...]) -> np.ndarray:
        """Reshape layout options (n, 18): modal first; pairs of bitcast-compatible permutations."""
        ro, ri = len(out_dims), len(in_dims)
        default_in = tuple(range(ri - 1, -1, -1))
        if ro == 0:
            opts = [_vec(), _vec(in0=default_in)] if ri >= 1 else [_vec()]
            return np.stack(opts)
        if ro == 1:
            return np.stack([_vec(), _vec(out=(0,), in0=default_in)])
        opts = [_vec(out=tuple(range(ro - 1, -1, -1)), in0=default_in)]
        segs = _segments(in_dims, out_dims)
        if segs is not None and len(segs) >= 2:
            nseg = len(segs)
            default_order = tuple(range(nseg - 1, -1, -1))
            orders = [p for p in _permutations(nseg) if p != default_order]
            k = int(self.rng.integers(1, min(5, len(orders)) + 1))
            for idx in sorted(self.rng.choice(len(orders), size=k, replace=False)):
                order = orders[int(idx)]
                out = _segment_layout([s[1] for s in segs], order, ro)
                inp = _segment_layout([s[0] for s in segs], order, ri)
                opts.append(_vec(out=out, in0=inp))
        if len(opts) == 1 or self.rng.random() < 0.5:
            opts.append(_vec())
        return np.stack(opts)

    def transpose(self, x: int, perm: Sequence[int]) -> int:
        s = self.shape[x]
        perm = tuple(perm)
        dims = tuple(s.dims[p] for p in perm)
        layout = None
        if len(perm) >= 2 and self.rng.random() < 0.2:  # a transpose that is a physical bitcast
            inv = list(np.argsort(perm))
            layout = tuple(int(inv[d]) for d in self.layout[x])
        out = self.add(
            TRANSPOSE, s.with_dims(dims), (x,), layout=layout, feats={COL_DIMENSIONS: perm}
        )
        return self.record(TRANSPOSE, out, (x,), perm)

    def slice(self, x: int, starts: Sequence[int], limits: Sequence[int]) -> int:
        s = self.shape[x]
        dims = [hi - lo for lo, hi in zip(starts, limits, strict=True)]
        strides = [1] * len(dims)
        feats = {COL_SLICE: aggregate(starts, 2) + aggregate(strides, 2) + aggregate(limits, 2)}
        out = self.add(SLICE, s.with_dims(dims), (x,), feats=feats)
        return self.record(SLICE, out, (x,), (tuple(starts), tuple(limits)))

    def pad(self, x: int, lo: Sequence[int], hi: Sequence[int], dims: Sequence[int]) -> int:
        s = self.shape[x]
        value = self.constant(s.et)
        feats = {COL_PAD: aggregate(lo, 2) + aggregate(hi, 2)}
        return self.add(PAD, s.with_dims(dims), (x, value), feats=feats)

    def dynamic_slice(self, x: int, sizes: Sequence[int]) -> int:
        s = self.shape[x]
        idx = [self.constant(S32) for _ in range(min(2, len(sizes)))]
        feats = {COL_DYN_SLICE: aggregate(sizes, 2)}
        return self.add(DYNAMIC_SLICE, s.with_dims(sizes), (x, *idx), feats=feats)

    def concat(self, xs: Sequence[int], axis: int) -> int:
        s = self.shape[xs[0]]
        dims = list(s.dims)
        dims[axis] = sum(self.shape[x].dims[axis] for x in xs)
        out = self.add(CONCATENATE, s.with_dims(dims), tuple(xs), feats={COL_DIMENSIONS: [axis]})
        return self.record(CONCATENATE, out, tuple(xs), axis)

    def gather(self, table: int, ids: int, dims: Sequence[int]) -> int:
        out = self.add(GATHER, self.shape[table].with_dims(dims), (table, ids))
        return self.record(GATHER, out, (table, ids))

    def scatter(self, base: int, ids: int, updates: int) -> int:
        s = self.shape[base]
        return self.add(SCATTER, s, (base, ids, updates), calls=(self.reducer("add", s.et),))

    # -- tuples and control flow ------------------------------------------------------------------
    def tuple(self, items: Sequence[int]) -> int:
        shape = Shape(TUPLE_T, (), tuple(self.shape[i] for i in items))
        return self.add(TUPLE, shape, tuple(items))

    def gte(self, t: int, index: int, shape: Shape | None = None) -> int:
        return self.add(GET_TUPLE_ELEMENT, shape or self.shape[t].elems[index], (t,))

    def while_(self, init: int, body_root: int, cond_root: int) -> int:
        return self.add(WHILE, self.shape[init], (init,), calls=(body_root, cond_root))

    def after_all(self) -> int:
        return self.add(AFTER_ALL, Shape(TOKEN_T))

    def outfeed(self, x: int, token: int) -> int:
        return self.add(OUTFEED, Shape(TOKEN_T), (x, token))

    # -- configurable compute ---------------------------------------------------------------------
    def dot(self, x: int, y: int, dims: Sequence[int], contraction: float | None = None) -> int:
        """x · y with output dims; contraction: the product of the contracted dims (default: x's
        minor dim, right for every forward dot but the multi-dim einsum)."""
        sx, sy = self.shape[x], self.shape[y]
        out = self.add(DOT, sx.with_dims(dims), (x, y))
        outs = _minor_pairs(self.layout[out], len(dims))
        px, py = _minor_pairs(self.layout[x], sx.rank), _minor_pairs(self.layout[y], sy.rank)
        opnd = [_vec()] + [_vec(in0=a, in1=b) for a in px for b in py]
        if contraction is None:
            contraction = float(sx.dims[-1] if sx.dims else 1)
        cost = float(math.prod(dims)) * float(contraction)  # multiply-adds
        self.cfg.append(
            ConfigurableNode(out, DOT, np.stack([_vec(out=o) for o in outs]), np.stack(opnd), cost)
        )
        return self.record(DOT, out, (x, y), contraction)

    def conv(self, x: int, w: int, dims: Sequence[int], dn: tuple, window: Window) -> int:
        """Convolution; dn = (in_b, in_f, in_sp, k_i, k_o, k_sp, out_b, out_f, kind)."""
        in_b, in_f, _, k_i, k_o, _, out_b, out_f, kind = dn
        feats = conv_feats(dn, window)
        out = self.add(CONVOLUTION, self.shape[x].with_dims(dims), (x, w), feats=feats)
        outs = _pair_options(out_b, out_f, self.layout[out])
        ins = _pair_options(in_b, in_f, self.layout[x])
        ker = _pair_options(k_i, k_o, self.layout[w])
        opnd = np.stack([_vec(in0=a, in1=b) for a in ins for b in ker])
        cost = float(math.prod(dims)) * float(math.prod(window.size))
        self.cfg.append(
            ConfigurableNode(out, CONVOLUTION, np.stack([_vec(out=o) for o in outs]), opnd, cost)
        )
        return self.record(CONVOLUTION, out, (x, w), (kind, window))

    def reduce_window(self, x: int, window: Window, dims: Sequence[int], kind: str = "max") -> int:
        s = self.shape[x]
        init = self.constant(s.et)
        out = self.add(
            REDUCE_WINDOW,
            s.with_dims(dims),
            (x, init),
            calls=(self.reducer(kind, s.et),),
            feats={COL_WINDOW: window.features()},
        )
        return self.record(REDUCE_WINDOW, out, (x,), window)

    def select_and_scatter(self, x: int, source: int, window: Window) -> int:
        s = self.shape[x]
        init = self.constant(s.et)
        calls = (self.reducer("ge", s.et), self.reducer("add", s.et))
        feats = {COL_WINDOW: window.features()}
        return self.add(SELECT_AND_SCATTER, s, (x, source, init), calls=calls, feats=feats)

    def isolated_configurable(self, et: int) -> int:
        """A reshape with neither operands nor users: a quirk some published loaders crash on."""
        dims = (int(self.rng.choice([2, 4, 8])), int(self.rng.choice([16, 32, 128])))
        out = self.add(RESHAPE, Shape(et, dims))
        options = np.stack([_vec(out=(1, 0)), _vec(out=(0, 1))])
        self.cfg.append(
            ConfigurableNode(out, RESHAPE, options, _vec()[None, :], float(math.prod(dims)))
        )
        return out

    # -- output -----------------------------------------------------------------------------------
    def finish(self) -> SynthGraph:
        """Featurize (TpuGraphs node_feat recipe) and collect the edges: a SynthGraph."""
        n = len(self.op)
        feat = np.zeros((n, 140), np.float32)
        feat[:, list(PRODUCT_COLUMNS)] = 1.0
        rows = np.arange(n)
        feat[rows, [s.et for s in self.shape]] = 1.0
        dims = np.zeros((n, 6), np.float64)
        agg = np.zeros((n, 3), np.float64)  # sum, product, tuple size
        lay = np.zeros((n, 6), np.float32)
        rank = np.zeros(n, np.int64)
        for i, s in enumerate(self.shape):
            d = s.dims
            if d:
                dims[i, : len(d)] = d[:6]
            agg[i] = (sum(d), math.prod(d), len(s.elems))
            rank[i] = s.rank
            lo = self.layout[i]
            if lo:
                lay[i, : len(lo)] = lo[:6]
        feat[:, COL_DIMS : COL_DIMS + 6] = dims
        feat[:, COL_DIMS_SUM] = agg[:, 0]
        feat[:, COL_DIMS_PROD] = agg[:, 1]
        feat[:, COL_TUPLE_SIZE] = agg[:, 2]
        feat[:, COL_LAYOUT : COL_LAYOUT + 6] = lay
        if self.feat_rows:
            feat[self.feat_rows, self.feat_cols] = np.asarray(self.feat_vals, np.float64)
        feat[self.roots, COL_IS_ROOT] = 1.0
        pairs = [(u, v) for u in range(n) for v in (*self.operands[u], *self.calls[u])]
        if pairs:
            edges = np.unique(np.asarray(pairs, np.int64), axis=0)
        else:
            edges = np.zeros((0, 2), np.int64)
        splits = list(self.splits)
        if splits[-1] < n:
            splits.append(n)
        return SynthGraph(
            node_feat=feat,
            node_opcode=np.asarray(self.op, np.uint8),
            edge_index=edges,
            node_splits=np.asarray([splits], np.int64),
            rank=rank,
            configurable=list(self.cfg),
            work=float(sum(s.nbytes for s in self.shape)),
        )


def _permutations(k: int) -> list[tuple[int, ...]]:
    return list(itertools.permutations(range(k)))
