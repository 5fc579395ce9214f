"""The training half of a model step: a generic reverse-mode pass over the recorded tape
(``backward``: dot and input/filter-grad conv gradients, select-and-scatter, scatter, pads, ...)
and ``optimizer`` (LR schedule, all-reduce, global-norm or value clipping, NaN guards, SGD,
momentum, Adam).
"""

from __future__ import annotations

import math

import numpy as np

from . import constants as xla
from .graph import Shape, Window, conv_dn
from .hlo import HloBuilder
from .model import Model


def _grad_rule(b: HloBuilder, entry: tuple, k: int, g: int) -> int | None:
    """Gradient of tape entry (kind, out, ins, info) with respect to its k-th input, given dL/dout = g."""
    kind, out, ins, info = entry
    x = ins[k]
    s = b.shape[x]
    if kind == xla.ADD:
        return g
    if kind == xla.SUBTRACT:
        return g if k == 0 else b.unary(xla.NEGATE, g)
    if kind == xla.MULTIPLY:
        return b.binary(xla.MULTIPLY, g, ins[1 - k])
    if kind == xla.DIVIDE:
        if k == 0:
            return b.binary(xla.DIVIDE, g, ins[1])
        return b.unary(xla.NEGATE, b.binary(xla.DIVIDE, b.binary(xla.MULTIPLY, g, out), ins[1]))
    if kind in (xla.MAXIMUM, xla.MINIMUM):
        mask = b.compare(x, ins[1 - k])
        return b.select(mask, g, b.full(s.et, s.dims))
    if kind == xla.LOGISTIC:
        slope = b.binary(xla.MULTIPLY, out, b.binary(xla.SUBTRACT, b.full(s.et, s.dims, "one"), out))
        return b.binary(xla.MULTIPLY, g, slope)
    if kind == xla.SQRT:
        return b.binary(xla.DIVIDE, g, b.binary(xla.MULTIPLY, out, b.full(s.et, s.dims, "two")))
    if kind == xla.EXPONENTIAL:
        return b.binary(xla.MULTIPLY, g, out)
    if kind == xla.LOG:
        return b.binary(xla.DIVIDE, g, x)
    if kind == xla.TANH:
        sq = b.binary(xla.MULTIPLY, out, out)
        return b.binary(xla.MULTIPLY, g, b.binary(xla.SUBTRACT, b.full(s.et, s.dims, "one"), sq))
    if kind == xla.RSQRT:
        cube = b.binary(xla.MULTIPLY, out, b.binary(xla.MULTIPLY, out, out))
        return b.binary(xla.MULTIPLY, g, b.binary(xla.MULTIPLY, cube, b.full(s.et, s.dims, "half")))
    if kind == xla.NEGATE:
        return b.unary(xla.NEGATE, g)
    if kind == xla.CONVERT:
        return b.convert(g, s.et)
    if kind == xla.BROADCAST:
        axes = tuple(d for d in range(b.shape[out].rank) if d not in info)
        return b.reduce(g, axes) if axes else g
    if kind == xla.REDUCE:
        axes, red = info
        keep = tuple(d for d in range(s.rank) if d not in axes)
        spread = b.bcast(g, s.dims, keep)
        if red == "max":
            hit = b.compare(x, b.bcast(out, s.dims, keep))
            spread = b.select(hit, spread, b.full(s.et, s.dims))
        return spread
    if kind == xla.RESHAPE:
        return b.reshape(g, s.dims)
    if kind == xla.TRANSPOSE:
        return b.transpose(g, tuple(int(i) for i in np.argsort(info)))
    if kind == xla.DOT:
        # either gradient does as many multiply-adds as the forward dot: |out| · its contraction
        grad_k = math.prod(b.shape[out].dims) * float(info) / max(math.prod(s.dims), 1)
        return b.dot(g, ins[1], s.dims, grad_k) if k == 0 else b.dot(ins[0], g, s.dims, grad_k)
    if kind == xla.CONVOLUTION:
        return _conv_grad(b, entry, k, g)
    if kind == xla.REDUCE_WINDOW:
        return b.select_and_scatter(x, g, info)
    if kind == xla.GATHER:
        return b.scatter(b.full(s.et, s.dims), ins[1], g) if k == 0 else None
    if kind == xla.SLICE:
        starts, limits = info
        return b.pad(g, starts, [d - lim for d, lim in zip(s.dims, limits, strict=True)], s.dims)
    if kind == xla.CONCATENATE:
        offset = sum(b.shape[i].dims[info] for i in ins[:k])
        starts = [0] * s.rank
        starts[info] = offset
        limits = list(b.shape[out].dims)
        limits[info] = offset + s.dims[info]
        return b.slice(g, starts, limits)
    if kind == xla.SELECT:
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
                grads[x] = b.binary(xla.ADD, grads[x], gx) if x in grads else gx
    b.recording = True
    return grads


def _lr_schedule(b: HloBuilder, rng: np.random.Generator, step: int) -> int:
    """Scalar learning-rate schedule from the s32 step counter (warm-up, decay): an f32 scalar."""
    t = b.convert(step, xla.F32)
    lr = b.add(xla.MULTIPLY, Shape(xla.F32), (t, b.constant(xla.F32)))
    for _ in range(int(rng.integers(1, 4))):
        op = int(rng.choice([xla.MINIMUM, xla.MAXIMUM, xla.DIVIDE, xla.ADD, xla.MULTIPLY]))
        lr = b.add(op, Shape(xla.F32), (lr, b.constant(xla.F32)))
        if rng.random() < 0.4:
            lr = b.add(int(rng.choice([xla.RSQRT, xla.SQRT, xla.EXPONENTIAL])), Shape(xla.F32), (lr,))
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
            sq = b.reduce(b.binary(xla.MULTIPLY, g, g), tuple(range(b.shape[g].rank)))
            norm = sq if norm is None else b.add(xla.ADD, Shape(xla.F32), (norm, sq))
        norm = b.add(xla.SQRT, Shape(xla.F32), (norm,))
        scale = b.add(
            xla.DIVIDE,
            Shape(xla.F32),
            (b.constant(xla.F32), b.add(xla.MAXIMUM, Shape(xla.F32), (norm, b.constant(xla.F32)))),
        )
        pairs = [(w, b.binary(xla.MULTIPLY, g, b.bcast(scale, b.shape[g].dims))) for w, g in pairs]
    adam = rng.random() < 0.5
    clamp, guard = rng.random() < 0.5, m.mm_et == xla.BF16 or rng.random() < 0.3
    for w, g in pairs:
        dims = b.shape[w].dims
        if guard:  # mixed precision: drop non-finite gradients
            g = b.add(xla.SELECT, b.shape[g], (b.compare(g, g), g, b.full(xla.F32, dims)))
        if clamp:  # clip by value
            g = b.add(xla.CLAMP, b.shape[g], (b.full(xla.F32, dims, "lo"), g, b.full(xla.F32, dims, "hi")))
        if adam:
            mom, vel = m.st.get(Shape(xla.F32, dims)), m.st.get(Shape(xla.F32, dims))
            m1 = b.binary(
                xla.ADD,
                b.binary(xla.MULTIPLY, mom, b.full(xla.F32, dims, "b1")),
                b.binary(xla.MULTIPLY, g, b.full(xla.F32, dims, "1-b1")),
            )
            v1 = b.binary(
                xla.ADD,
                b.binary(xla.MULTIPLY, vel, b.full(xla.F32, dims, "b2")),
                b.binary(xla.MULTIPLY, b.binary(xla.MULTIPLY, g, g), b.full(xla.F32, dims, "1-b2")),
            )
            m.st.set_output(mom, m1)
            m.st.set_output(vel, v1)
            denom = b.binary(xla.ADD, b.unary(xla.SQRT, v1), b.full(xla.F32, dims, "eps"))
            g = b.binary(xla.DIVIDE, m1, denom)
            if rng.random() < 0.5:  # decoupled weight decay
                g = b.binary(xla.ADD, g, b.binary(xla.MULTIPLY, w, b.full(xla.F32, dims, "wd")))
        elif momentum:
            v = m.st.get(Shape(xla.F32, dims))
            g = b.binary(xla.ADD, b.binary(xla.MULTIPLY, v, b.full(xla.F32, dims, "beta")), g)
            m.st.set_output(v, g)
        update = b.binary(xla.MULTIPLY, g, b.bcast(lr, dims))
        m.st.set_output(w, b.binary(xla.SUBTRACT, w, update))
