"""Forward passes of the three model kinds on an ``HloBuilder``: ``StepState`` (loop-carried or
parameter state of a step), ``Model`` (weights and layers: dense, layer/batch norm, GELU,
softmax, dropout with RNG key chains, cross-entropy), ``Growth`` (when to stop adding blocks),
and the conv net, transformer encoder and embedding-MLP forwards.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .constants import (
    ADD,
    DIVIDE,
    EXPONENTIAL,
    F32,
    LOG,
    LOGISTIC,
    MAXIMUM,
    MINIMUM,
    MULTIPLY,
    NEGATE,
    OR,
    PRED,
    RNG,
    RSQRT,
    S32,
    SHIFT_LEFT,
    SHIFT_RIGHT_LOGICAL,
    SUBTRACT,
    TANH,
    TUPLE_T,
    U32,
)
from .graph import Shape, Window, conv_dn, same_window
from .hlo import HloBuilder


class StepState:
    """Loop-carried (one tuple parameter) or entry-parameter state of a model step."""

    def __init__(self, b: HloBuilder, tuple_param: bool) -> None:
        self.b = b
        self.tp = b.param(Shape(TUPLE_T)) if tuple_param else None
        self.slots: list[list] = []  # [shape, input node, output node]

    def get(self, shape: Shape, *, grad: bool = False) -> int:
        if self.tp is None:
            node = self.b.param(shape, grad=grad)
        else:
            node = self.b.gte(self.tp, len(self.slots), shape)
            self.b.grad[node] = grad
        self.slots.append([shape, node, node])
        return node

    def set_output(self, node_in: int, node_out: int) -> None:
        for slot in self.slots:
            if slot[1] == node_in:
                slot[2] = node_out
                return
        raise KeyError(node_in)

    @property
    def shapes(self) -> tuple[Shape, ...]:
        return tuple(slot[0] for slot in self.slots)

    def finish(self, extra: Sequence[int] = ()) -> int:
        """Root tuple: every slot's output (a loop body must return its parameter's shape)."""
        if self.tp is not None:
            self.b.shape[self.tp] = Shape(TUPLE_T, (), self.shapes)
        return self.b.tuple([slot[2] for slot in self.slots] + list(extra))


class Model:
    """Layer helpers over one computation: weights, activations, losses.

    Activations and weights are f32; with mm_et = bf16 (mixed precision) the operands of every
    convolution and dot are converted to bf16 and their results back to f32.
    """

    def __init__(
        self, b: HloBuilder, st: StepState, rng: np.random.Generator, mm_et: int, train: bool
    ) -> None:
        self.b, self.st, self.rng, self.mm_et, self.train = b, st, rng, mm_et, train
        self.et = F32 if train else mm_et  # inference runs end to end in its matmul precision
        self.weights: list[int] = []
        self.keys: list[int] = []

    def weight(self, dims: Sequence[int], *, matrix: bool = False) -> int:
        """A weight: f32 master copy when training; inference stores matmul weights in mm_et."""
        et = F32 if self.train else self.mm_et
        w = self.st.get(Shape(et, tuple(int(d) for d in dims)), grad=self.train)
        self.weights.append(w)
        return w

    def mm_in(self, x: int) -> int:
        return self.b.convert(x, self.mm_et) if self.mm_et != self.b.shape[x].et else x

    def mm_out(self, y: int) -> int:
        return self.b.convert(y, F32) if self.b.shape[y].et != F32 else y

    def matmul(self, x: int, w: int, dims: Sequence[int], contraction: float | None = None) -> int:
        return self.mm_out(self.b.dot(self.mm_in(x), self.mm_in(w), dims, contraction))

    def input(self, dims: Sequence[int], et: int | None = None) -> int:
        return self.st.get(Shape(self.et if et is None else et, tuple(int(d) for d in dims)))

    def dims(self, x: int) -> tuple[int, ...]:
        return self.b.shape[x].dims

    def bias(self, y: int) -> int:
        dims = self.dims(y)
        vec = self.weight((dims[-1],))
        return self.b.binary(ADD, y, self.b.bcast(vec, dims, (len(dims) - 1,)))

    def relu(self, y: int) -> int:
        return self.b.binary(MAXIMUM, y, self.b.full(self.et, self.dims(y)))

    def dense(self, x: int, n_out: int, *, bias: bool = True) -> int:
        dims = self.dims(x)
        w = self.weight((dims[-1], n_out), matrix=True)
        y = self.matmul(x, w, (*dims[:-1], n_out))
        return self.bias(y) if bias else y

    def layernorm(self, x: int) -> int:
        b, dims = self.b, self.dims(x)
        r = len(dims)
        keep = tuple(range(r - 1))
        mean = b.binary(MULTIPLY, b.reduce(x, (r - 1,)), b.full(self.et, dims[:-1], "inv"))
        centred = b.binary(SUBTRACT, x, b.bcast(mean, dims, keep))
        var = b.reduce(b.binary(MULTIPLY, centred, centred), (r - 1,))
        var = b.binary(MULTIPLY, var, b.full(self.et, dims[:-1], "inv"))
        rs = b.unary(RSQRT, b.binary(ADD, var, b.full(self.et, dims[:-1], "eps")))
        y = b.binary(MULTIPLY, centred, b.bcast(rs, dims, keep))
        gamma = self.weight((dims[-1],))
        y = b.binary(MULTIPLY, y, b.bcast(gamma, dims, (r - 1,)))
        return self.bias(y)

    def gelu(self, x: int, erf: bool = False) -> int:
        b, dims = self.b, self.dims(x)
        if erf:  # x/2 · (1 + erf(x/√2)), erf expanded into a clamped rational polynomial
            z = b.binary(MULTIPLY, x, b.full(self.et, dims, "rsqrt2"))
            z = b.binary(
                MINIMUM,
                b.binary(MAXIMUM, z, b.full(self.et, dims, "lo")),
                b.full(self.et, dims, "hi"),
            )
            z2 = b.binary(MULTIPLY, z, z)
            num, den = z2, z2
            for k in range(3):
                num = b.binary(ADD, b.binary(MULTIPLY, num, z2), b.full(self.et, dims, ("p", k)))
                den = b.binary(ADD, b.binary(MULTIPLY, den, z2), b.full(self.et, dims, ("q", k)))
            erf_z = b.binary(DIVIDE, b.binary(MULTIPLY, z, num), den)
            half = b.binary(MULTIPLY, x, b.full(self.et, dims, "half"))
            return b.binary(MULTIPLY, half, b.binary(ADD, erf_z, b.full(self.et, dims, "one")))
        cube = b.binary(MULTIPLY, x, b.binary(MULTIPLY, x, x))
        inner = b.binary(ADD, x, b.binary(MULTIPLY, cube, b.full(self.et, dims, "c1")))
        t = b.unary(TANH, b.binary(MULTIPLY, inner, b.full(self.et, dims, "c2")))
        half = b.binary(MULTIPLY, x, b.full(self.et, dims, "half"))
        return b.binary(MULTIPLY, half, b.binary(ADD, t, b.full(self.et, dims, "one")))

    def softmax(self, x: int) -> int:
        b, dims = self.b, self.dims(x)
        r = len(dims)
        keep = tuple(range(r - 1))
        mx = b.reduce(x, (r - 1,), "max")
        e = b.unary(EXPONENTIAL, b.binary(SUBTRACT, x, b.bcast(mx, dims, keep)))
        s = b.reduce(e, (r - 1,))
        return b.binary(DIVIDE, e, b.bcast(s, dims, keep))

    def key_chain(self) -> None:
        """Scalar u32 RNG key derivation (threefry-like add/shift/or rounds) for dropout."""
        b = self.b
        seed = self.st.get(Shape(U32))
        x = seed
        for _ in range(int(self.rng.integers(3, 9))):
            y = b.add(ADD, Shape(U32), (x, b.constant(U32)))
            hi = b.add(SHIFT_RIGHT_LOGICAL, Shape(U32), (y, b.constant(U32)))
            lo = b.add(SHIFT_LEFT, Shape(U32), (y, b.constant(U32)))  # shift-left
            x = b.add(OR, Shape(U32), (hi, lo))
            self.keys.append(x)
        self.st.set_output(seed, x)

    def dropout(self, x: int) -> int:
        if not self.train or self.rng.random() < 0.5:
            return x
        b, dims = self.b, self.dims(x)
        if self.keys:
            key = self.keys[int(self.rng.integers(len(self.keys)))]
            bits = b.add(RNG, Shape(U32, dims), (key, b.constant(U32)))
            noise = b.add(12, Shape(F32, dims), (bits,))  # bitcast-convert
        else:
            noise = b.rng_uniform(self.et, dims)
        mask = b.compare(noise, b.full(self.et, dims, "keep"))
        scaled = b.binary(MULTIPLY, x, b.full(self.et, dims, "scale"))
        return b.select(mask, scaled, b.full(self.et, dims))

    def xent(self, logits: int, labels: int) -> int:
        """Mean softmax cross-entropy of (B, C) logits against (B,) s32 labels: a scalar."""
        b, dims = self.b, self.dims(logits)
        mx = b.reduce(logits, (1,), "max")
        shifted = b.binary(SUBTRACT, logits, b.bcast(mx, dims, (0,)))
        lse = b.unary(LOG, b.reduce(b.unary(EXPONENTIAL, shifted), (1,)))
        logp = b.binary(SUBTRACT, shifted, b.bcast(lse, dims, (0,)))
        hit = b.compare(b.iota(S32, dims, 1), b.bcast(labels, dims, (0,)))
        onehot = b.convert(hit, self.et)
        total = b.reduce(b.binary(MULTIPLY, onehot, logp), (0, 1))
        return b.binary(MULTIPLY, b.unary(NEGATE, total), b.constant(self.et))


class Growth:
    """When to stop adding forward blocks: projected final size vs the node / nc targets."""

    def __init__(self, m: Model, n_end: int, nc_min: int) -> None:
        self.m, self.n_end, self.nc_min = m, n_end, nc_min
        self.start = len(m.b)

    def more(self) -> bool:
        b, m = self.m.b, self.m
        grown = len(b) - self.start
        tail = 1.6 * grown + 15 * len(m.weights) + 60 if m.train else 12
        factor = (
            3.0 if m.train else 1.0
        )  # configurable nodes per forward one, after the backward pass
        first = grown == 0
        return first or len(b) + tail < self.n_end or len(b.cfg) * factor < self.nc_min * 1.03


def _conv_block(m: Model, x: int) -> int:
    b, rng = m.b, m.rng
    dims = m.dims(x)
    r = len(dims)
    spatial, cin = dims[1:-1], dims[-1]
    k = int(rng.choice([1, 3, 3, 3, 5, 7] if min(spatial) >= 7 else [1, 3]))
    k = min(k, min(spatial))
    stride = int(rng.choice([1, 1, 1, 2])) if min(spatial) >= 8 else 1
    if cin <= 4 and min(spatial) >= 100:
        k, stride = int(rng.choice([7, 11])), int(rng.choice([2, 4]))
    cout = int(rng.choice([16, 32, 48, 64, 96, 128, 192, 256, 384, 512]))
    if cin >= 64:
        cout = int(min(2048, max(cout, cin * rng.choice([1, 1, 2]))))
    w = m.weight((*(k,) * (r - 2), cin, cout), matrix=True)
    out_sp, window = same_window(spatial, k, stride)
    y = m.mm_out(
        b.conv(m.mm_in(x), m.mm_in(w), (dims[0], *out_sp, cout), conv_dn(r, "fwd"), window)
    )
    if rng.random() < (0.7 if m.train else 0.45):
        y = m.bias(y)
    if not m.train and rng.random() < 0.35:  # folded inference batch norm: scale and shift
        scale = m.weight((cout,))
        y = m.bias(b.binary(MULTIPLY, y, b.bcast(scale, m.dims(y), (r - 1,))))
    elif rng.random() < 0.4:  # batch norm over all but the feature dim
        axes = tuple(range(r - 1))
        ydims = m.dims(y)
        mean = b.binary(MULTIPLY, b.reduce(y, axes), b.full(m.et, (cout,), "inv"))
        centred = b.binary(SUBTRACT, y, b.bcast(mean, ydims, (r - 1,)))
        var = b.reduce(b.binary(MULTIPLY, centred, centred), axes)
        rs = b.unary(RSQRT, b.binary(ADD, var, b.full(m.et, (cout,), "eps")))
        y = b.binary(MULTIPLY, centred, b.bcast(rs, ydims, (r - 1,)))
    if m.dims(y) == dims and rng.random() < 0.5:  # residual connection
        y = b.binary(ADD, y, x)
    act = rng.random()
    if act < 0.15:  # swish
        return b.binary(MULTIPLY, y, b.unary(LOGISTIC, y))  # logistic
    if act < 0.3:  # relu6
        return b.binary(MINIMUM, m.relu(y), b.full(m.et, m.dims(y), "six"))
    return m.relu(y) if act < 0.92 else y


def _inception_block(m: Model, x: int) -> int:
    """Parallel 1×1 / 1×1→k×k / pool→1×1 branches concatenated along the feature dim."""
    b, rng = m.b, m.rng
    dims = m.dims(x)
    r = len(dims)
    branches = []
    for kind in rng.permutation(["1x1", "kxk", "pool", "kxk"][: int(rng.integers(2, 5))]):
        y = x
        if kind == "pool":
            k = 3 if min(dims[1:-1]) >= 3 else 1
            pads = (0, *((k - 1) // 2,) * (r - 2), 0)
            window = Window(
                (1, *(k,) * (r - 2), 1), (1,) * r, pads, pads, (1,) * r, (1,) * r, (False,) * r
            )
            y = b.reduce_window(y, window, dims)
        width = int(rng.choice([16, 32, 48, 64, 96, 128]))
        for k in (1, int(rng.choice([3, 5]))) if kind == "kxk" else (1,):
            cin = m.dims(y)[-1]
            w = m.weight((*(min(k, min(dims[1:-1])),) * (r - 2), cin, width), matrix=True)
            _, window = same_window(dims[1:-1], min(k, min(dims[1:-1])), 1)
            y = b.conv(m.mm_in(y), m.mm_in(w), (*dims[:-1], width), conv_dn(r, "fwd"), window)
            y = m.relu(m.bias(m.mm_out(y)))
        branches.append(y)
    return b.concat(branches, r - 1)


def _pool(m: Model, x: int) -> int:
    dims = m.dims(x)
    r = len(dims)
    k = int(m.rng.choice([2, 3]))
    spatial = [(n - k) // 2 + 1 for n in dims[1:-1]]
    size = (1, *(k,) * (r - 2), 1)
    stride = (1, *(2,) * (r - 2), 1)
    zeros, ones = (0,) * r, (1,) * r
    window = Window(size, stride, zeros, zeros, ones, ones, (False,) * r)
    return m.b.reduce_window(x, window, (dims[0], *spatial, dims[-1]))


def vision_forward(m: Model, grow: Growth) -> tuple[int, int]:
    """Conv net forward pass; returns (logits (B, classes), labels (B,) s32 or -1 when not training)."""
    b, rng = m.b, m.rng
    rank = int(rng.choice([4] * 8 + [5, 3]))
    batch = int(rng.choice([8, 16, 32, 64, 128, 256]))
    side = (
        int(rng.choice([32, 56, 64, 96, 128, 224])) if rank <= 4 else int(rng.choice([16, 32, 64]))
    )
    x = m.input((batch, *(side,) * (rank - 2), int(rng.choice([1, 3, 4]))))
    labels = m.input((batch,), S32) if m.train else -1
    inception = rng.random() < 0.35
    while grow.more():
        r = rng.random()
        if min(m.dims(x)[1:-1]) >= 8 and r < 0.15:
            x = _pool(m, x)
        elif inception and r < 0.45:
            x = _inception_block(m, x)
        else:
            x = _conv_block(m, x)
    dims = m.dims(x)
    x = b.reshape(x, (dims[0], math.prod(dims[1:])))
    for _ in range(int(rng.integers(0, 3)) if grow.n_end > 800 else 0):
        x = m.relu(m.dense(x, int(rng.choice([256, 512, 1024, 4096]))))
    return m.dense(x, int(rng.choice([10, 100, 1000]))), labels


def _attention(m: Model, x: int, mask: int, heads: int, einsum: bool) -> int:
    b = m.b
    bsz, seq, hidden = m.dims(x)
    d = hidden // heads

    def project() -> int:
        if einsum:  # dense_einsum: (B,S,H) x (H,A,D) -> (B,S,A,D), no reshape
            w = m.weight((hidden, heads, d), matrix=True)
            y = m.bias(m.matmul(x, w, (bsz, seq, heads, d)))
        else:
            y = b.reshape(m.dense(x, hidden), (bsz, seq, heads, d))
        return b.transpose(y, (0, 2, 1, 3))

    q, k, v = project(), project(), project()
    scores = m.matmul(q, k, (bsz, heads, seq, seq))
    scores = b.binary(MULTIPLY, scores, b.full(m.et, (bsz, heads, seq, seq), "scale"))
    if b.shape[mask].et == PRED:  # masked positions get -inf
        hide = b.bcast(mask, (bsz, heads, seq, seq), (0, 3))
        scores = b.select(hide, scores, b.full(m.et, (bsz, heads, seq, seq), "-inf"))
    else:
        scores = b.binary(ADD, scores, b.bcast(mask, (bsz, heads, seq, seq), (0, 3)))
    probs = m.dropout(m.softmax(scores))
    ctx = b.transpose(m.matmul(probs, v, (bsz, heads, seq, d)), (0, 2, 1, 3))
    if einsum:
        w = m.weight((heads, d, hidden), matrix=True)
        out = m.bias(m.matmul(ctx, w, (bsz, seq, hidden), contraction=heads * d))
    else:
        out = m.dense(b.reshape(ctx, (bsz, seq, hidden)), hidden)
    return m.layernorm(b.binary(ADD, x, m.dropout(out)))


def transformer_forward(m: Model, grow: Growth, hidden: int | None) -> tuple[int, int]:
    """Encoder forward pass; returns (logits (B, classes), labels (B,) s32 or -1 when not training)."""
    b, rng = m.b, m.rng
    batch = int(rng.choice([8, 16, 32, 64]))
    seq = int(rng.choice([64, 128, 256, 384, 512]))
    hidden = hidden or int(rng.choice([128, 256, 512, 768, 1024]))
    heads = max(1, hidden // 64)
    vocab = int(rng.choice([8192, 30522, 32000, 50257]))
    ids = m.input((batch, seq), S32)
    x = b.gather(m.weight((vocab, hidden)), ids, (batch, seq, hidden))
    pos = b.slice(m.weight((512 if seq <= 512 else seq, hidden)), (0, 0), (seq, hidden))
    x = m.layernorm(b.binary(ADD, x, b.bcast(pos, (batch, seq, hidden), (1, 2))))
    raw_mask = m.input((batch, seq), S32)
    keep = b.convert(raw_mask, F32)
    mask = b.binary(
        MULTIPLY,
        b.binary(SUBTRACT, b.full(F32, (batch, seq), "one"), keep),
        b.full(F32, (batch, seq), "neg"),
    )
    labels = m.input((batch,), S32) if m.train else -1
    einsum, erf = rng.random() < 0.5, rng.random() < 0.5
    while grow.more():
        x = _attention(m, x, mask, heads, einsum)
        h = m.dropout(m.dense(m.gelu(m.dense(x, 4 * hidden), erf), hidden))
        x = m.layernorm(b.binary(ADD, x, h))
    cls = b.reshape(b.slice(x, (0, 0, 0), (batch, 1, hidden)), (batch, hidden))
    pooled = b.unary(TANH, m.dense(cls, hidden))
    return m.dense(pooled, int(rng.choice([2, 3, 5, 1000]))), labels


def dense_forward(m: Model, grow: Growth) -> tuple[int, int]:
    """Embedding + MLP forward pass; returns (logits (B, classes), labels (B,) s32 or -1 when not training)."""
    b, rng = m.b, m.rng
    batch = int(rng.choice([32, 64, 128, 256, 1024]))
    fields, emb = int(rng.choice([2, 4, 8, 16])), int(rng.choice([16, 32, 64]))
    ids = m.input((batch, fields), S32)
    table = m.weight((int(rng.choice([1000, 10000, 100000])), emb))
    x = b.reshape(b.gather(table, ids, (batch, fields, emb)), (batch, fields * emb))
    labels = m.input((batch,), S32) if m.train else -1
    while grow.more():
        width = int(rng.choice([64, 128, 256, 512, 1024]))
        y = m.dense(x, width)
        if rng.random() < 0.4:
            y = m.layernorm(y)
        if rng.random() < 0.3:
            y = b.unary(TANH, y)
        elif rng.random() < 0.12:
            y = b.reshape(b.reshape(y, (batch, 4, width // 4)), (batch, width))
        else:
            y = m.relu(y)
        x = m.dropout(y)
    return m.dense(x, int(rng.choice([2, 10, 100]))), labels
