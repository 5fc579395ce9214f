"""The training half of a model step: a generic reverse-mode pass over the recorded tape
(``backward``: dot and input/filter-grad conv gradients, select-and-scatter, scatter, pads, ...)
and ``optimizer`` (LR schedule, all-reduce, global-norm or value clipping, NaN guards, SGD,
momentum, Adam).
"""

from __future__ import annotations

import math

import numpy as np

from .constants import (
    ADD,
    BF16,
    BROADCAST,
    CLAMP,
    CONCATENATE,
    CONVERT,
    CONVOLUTION,
    DIVIDE,
    DOT,
    EXPONENTIAL,
    F32,
    GATHER,
    LOG,
    LOGISTIC,
    MAXIMUM,
    MINIMUM,
    MULTIPLY,
    NEGATE,
    REDUCE,
    REDUCE_WINDOW,
    RESHAPE,
    RSQRT,
    SELECT,
    SLICE,
    SQRT,
    SUBTRACT,
    TANH,
    TRANSPOSE,
)
from .graph import Shape, Window, conv_dn
from .hlo import HloBuilder
from .model import Model


def _grad_rule(b: HloBuilder, entry: tuple, k: int, g: int) -> int | None:
    """Gradient of tape entry (kind, out, ins, info) with respect to its k-th input, given dL/dout = g."""
    kind, out, ins, info = entry
    x = ins[k]
    s = b.shape[x]
    if kind == ADD:
        return g
    if kind == SUBTRACT:
        return g if k == 0 else b.unary(NEGATE, g)
    if kind == MULTIPLY:
        return b.binary(MULTIPLY, g, ins[1 - k])
    if kind == DIVIDE:
        if k == 0:
            return b.binary(DIVIDE, g, ins[1])
        return b.unary(NEGATE, b.binary(DIVIDE, b.binary(MULTIPLY, g, out), ins[1]))
    if kind in (MAXIMUM, MINIMUM):
        mask = b.compare(x, ins[1 - k])
        return b.select(mask, g, b.full(s.et, s.dims))
    if kind == LOGISTIC:
        slope = b.binary(MULTIPLY, out, b.binary(SUBTRACT, b.full(s.et, s.dims, "one"), out))
        return b.binary(MULTIPLY, g, slope)
    if kind == SQRT:
        return b.binary(DIVIDE, g, b.binary(MULTIPLY, out, b.full(s.et, s.dims, "two")))
    if kind == EXPONENTIAL:
        return b.binary(MULTIPLY, g, out)
    if kind == LOG:
        return b.binary(DIVIDE, g, x)
    if kind == TANH:
        sq = b.binary(MULTIPLY, out, out)
        return b.binary(MULTIPLY, g, b.binary(SUBTRACT, b.full(s.et, s.dims, "one"), sq))
    if kind == RSQRT:
        cube = b.binary(MULTIPLY, out, b.binary(MULTIPLY, out, out))
        return b.binary(MULTIPLY, g, b.binary(MULTIPLY, cube, b.full(s.et, s.dims, "half")))
    if kind == NEGATE:
        return b.unary(NEGATE, g)
    if kind == CONVERT:
        return b.convert(g, s.et)
    if kind == BROADCAST:
        axes = tuple(d for d in range(b.shape[out].rank) if d not in info)
        return b.reduce(g, axes) if axes else g
    if kind == REDUCE:
        axes, red = info
        keep = tuple(d for d in range(s.rank) if d not in axes)
        spread = b.bcast(g, s.dims, keep)
        if red == "max":
            hit = b.compare(x, b.bcast(out, s.dims, keep))
            spread = b.select(hit, spread, b.full(s.et, s.dims))
        return spread
    if kind == RESHAPE:
        return b.reshape(g, s.dims)
    if kind == TRANSPOSE:
        return b.transpose(g, tuple(int(i) for i in np.argsort(info)))
    if kind == DOT:
        # either gradient does as many multiply-adds as the forward dot: |out| · its contraction
        grad_k = math.prod(b.shape[out].dims) * float(info) / max(math.prod(s.dims), 1)
        return b.dot(g, ins[1], s.dims, grad_k) if k == 0 else b.dot(ins[0], g, s.dims, grad_k)
    if kind == CONVOLUTION:
        return _conv_grad(b, entry, k, g)
    if kind == REDUCE_WINDOW:
        return b.select_and_scatter(x, g, info)
    if kind == GATHER:
        return b.scatter(b.full(s.et, s.dims), ins[1], g) if k == 0 else None
    if kind == SLICE:
        starts, limits = info
        return b.pad(g, starts, [d - lim for d, lim in zip(s.dims, limits, strict=True)], s.dims)
    if kind == CONCATENATE:
        offset = sum(b.shape[i].dims[info] for i in ins[:k])
        starts = [0] * s.rank
        starts[info] = offset
        limits = list(b.shape[out].dims)
        limits[info] = offset + s.dims[info]
        return b.slice(g, starts, limits)
    if kind == SELECT:
        if k == 0:
            return None
        zero = b.full(s.et, s.dims)
        return b.select(ins[0], g, zero) if k == 1 else b.select(ins[0], zero, g)
    return None


def _conv_grad(b: HloBuilder, entry: tuple, k: int, g: int) -> int:
    """Input-grad (k = 0) or filter-grad (k = 1) convolution of a forward convolution."""
    _, _, (x, w), (_, win) = entry
    r = b.shape[x].rank
    nsp = r - 2
    ones = (1,) * nsp
    if k == 0:
        pads_lo = tuple(max(kk - 1 - p, 0) for kk, p in zip(win.size, win.pad_lo, strict=True))
        pads_hi = tuple(max(kk - 1 - p, 0) for kk, p in zip(win.size, win.pad_hi, strict=True))
        window = Window(win.size, ones, pads_lo, pads_hi, ones, win.stride, (True,) * nsp)
        return b.conv(g, w, b.shape[x].dims, conv_dn(r, "input_grad"), window)
    gsp = b.shape[g].dims[1:-1]
    window = Window(tuple(gsp), ones, win.pad_lo, win.pad_hi, win.stride, ones, (False,) * nsp)
    return b.conv(x, g, b.shape[w].dims, conv_dn(r, "filter_grad"), window)


def backward(b: HloBuilder, loss: int) -> dict[int, int]:
    """Emit the backward pass of every recorded op, last first; returns leaf -> gradient node."""
    b.recording = False
    grads = {loss: b.constant(b.shape[loss].et)}
    for entry in reversed(b.tape):
        g = grads.pop(entry[1], None)
        if g is None:
            continue
        for k, x in enumerate(entry[2]):
            if not b.grad[x]:
                continue
            gx = _grad_rule(b, entry, k, g)
            if gx is not None:
                grads[x] = b.binary(ADD, grads[x], gx) if x in grads else gx
    b.recording = True
    return grads


def _lr_schedule(b: HloBuilder, rng: np.random.Generator, step: int) -> int:
    """Scalar learning-rate schedule from the s32 step counter (warm-up, decay): an f32 scalar."""
    t = b.convert(step, F32)
    lr = b.add(MULTIPLY, Shape(F32), (t, b.constant(F32)))
    for _ in range(int(rng.integers(1, 4))):
        op = int(rng.choice([MINIMUM, MAXIMUM, DIVIDE, ADD, MULTIPLY]))
        lr = b.add(op, Shape(F32), (lr, b.constant(F32)))
        if rng.random() < 0.4:
            lr = b.add(int(rng.choice([RSQRT, SQRT, EXPONENTIAL])), Shape(F32), (lr,))
    return lr


def optimizer(m: Model, grads: dict[int, int], step: int) -> None:
    """SGD updates of every weight: schedule, optional all-reduce, global-norm clipping, momentum."""
    b, rng = m.b, m.rng
    all_reduce, momentum, clip = rng.random() < 0.25, rng.random() < 0.5, rng.random() < 0.6
    lr = _lr_schedule(b, rng, step)
    pairs = [(w, grads[w]) for w in m.weights if w in grads]
    if all_reduce:
        pairs = [(w, b.all_reduce(g)) for w, g in pairs]
    if clip and pairs:
        norm = None
        for _, g in pairs:
            sq = b.reduce(b.binary(MULTIPLY, g, g), tuple(range(b.shape[g].rank)))
            norm = sq if norm is None else b.add(ADD, Shape(F32), (norm, sq))
        norm = b.add(SQRT, Shape(F32), (norm,))
        scale = b.add(
            DIVIDE,
            Shape(F32),
            (b.constant(F32), b.add(MAXIMUM, Shape(F32), (norm, b.constant(F32)))),
        )
        pairs = [(w, b.binary(MULTIPLY, g, b.bcast(scale, b.shape[g].dims))) for w, g in pairs]
    adam = rng.random() < 0.5
    clamp, guard = rng.random() < 0.5, m.mm_et == BF16 or rng.random() < 0.3
    for w, g in pairs:
        dims = b.shape[w].dims
        if guard:  # mixed precision: drop non-finite gradients
            g = b.add(SELECT, b.shape[g], (b.compare(g, g), g, b.full(F32, dims)))
        if clamp:  # clip by value
            g = b.add(CLAMP, b.shape[g], (b.full(F32, dims, "lo"), g, b.full(F32, dims, "hi")))
        if adam:
            mom, vel = m.st.get(Shape(F32, dims)), m.st.get(Shape(F32, dims))
            m1 = b.binary(
                ADD,
                b.binary(MULTIPLY, mom, b.full(F32, dims, "b1")),
                b.binary(MULTIPLY, g, b.full(F32, dims, "1-b1")),
            )
            v1 = b.binary(
                ADD,
                b.binary(MULTIPLY, vel, b.full(F32, dims, "b2")),
                b.binary(MULTIPLY, b.binary(MULTIPLY, g, g), b.full(F32, dims, "1-b2")),
            )
            m.st.set_output(mom, m1)
            m.st.set_output(vel, v1)
            denom = b.binary(ADD, b.unary(SQRT, v1), b.full(F32, dims, "eps"))
            g = b.binary(DIVIDE, m1, denom)
            if rng.random() < 0.5:  # decoupled weight decay
                g = b.binary(ADD, g, b.binary(MULTIPLY, w, b.full(F32, dims, "wd")))
        elif momentum:
            v = m.st.get(Shape(F32, dims))
            g = b.binary(ADD, b.binary(MULTIPLY, v, b.full(F32, dims, "beta")), g)
            m.st.set_output(v, g)
        update = b.binary(MULTIPLY, g, b.bcast(lr, dims))
        m.st.set_output(w, b.binary(SUBTRACT, w, update))
