"""Whole layout programs: one model step (forward, then loss, backward pass and optimizer, or the
inference outputs), small while loops, and ``build_program``, which emits every computation of a
program in order.
"""

from __future__ import annotations

import numpy as np

from .constants import ADD, BF16, F32, MULTIPLY, S32, TANH, TUPLE_T
from .graph import Shape, SynthGraph
from .hlo import HloBuilder
from .model import Growth, Model, StepState, dense_forward, transformer_forward, vision_forward
from .names import program_kind
from .training import backward, optimizer


def _inference_outputs(m: Model, logits: int) -> int:
    """Post-processing of an inference step: optional argmax; an eval loop accumulates metrics."""
    b, rng, st = m.b, m.rng, m.st
    outs = [logits]
    if rng.random() < 0.6:  # argmax over classes
        dims = b.shape[logits].dims
        best = b.bcast(b.reduce(logits, (1,), "max"), dims, (0,))
        idx = b.select(b.compare(logits, best), b.iota(S32, dims, 1), b.full(S32, dims, "big"))
        outs.append(b.reduce(idx, (1,), "min"))
    if st.tp is not None:
        for out in outs:
            total = b.reduce(
                b.convert(out, F32) if b.shape[out].et != F32 else out,
                tuple(range(b.shape[out].rank)),
            )
            acc = st.get(Shape(F32))
            st.set_output(acc, b.add(ADD, Shape(F32), (acc, total)))
        count = st.get(Shape(S32))
        st.set_output(count, b.add(ADD, Shape(S32), (count, b.constant(S32))))
    if st.tp is not None or len(outs) == 1:
        return outs[0]
    return b.tuple(outs)


def _model_step(
    b: HloBuilder, rng: np.random.Generator, st: StepState, kind: str, train: bool, n_end: int,
    nc_min: int, hidden: int | None,
) -> int:  # fmt: skip
    """Emit one model step into the current computation; returns the node to report (loss/logits)."""
    m = Model(b, st, rng, BF16 if rng.random() < 0.3 else F32, train)
    step = st.get(Shape(S32)) if train else None
    if train and rng.random() < 0.7:
        m.key_chain()
    grow = Growth(m, n_end, nc_min)
    if kind == "vision":
        logits, labels = vision_forward(m, grow)
    elif kind == "transformer":
        logits, labels = transformer_forward(m, grow, hidden)
    else:
        logits, labels = dense_forward(m, grow)
    if not train:
        return _inference_outputs(m, logits)
    loss = m.xent(logits, labels)
    if st.tp is not None:  # a training loop carries a running loss
        total = st.get(Shape(F32))
        st.set_output(total, b.add(ADD, Shape(F32), (total, loss)))
    assert step is not None
    optimizer(m, backward(b, loss), step)
    st.set_output(step, b.add(ADD, Shape(S32), (step, b.constant(S32))))
    return loss


def _small_loop(b: HloBuilder, rng: np.random.Generator, et: int, configurable: bool) -> tuple:
    """A small while loop (body, cond) emitted before its caller; returns (body, cond, shapes)."""
    rows, cols = int(rng.choice([8, 16, 32, 64, 128])), int(rng.choice([16, 32, 64, 128, 256]))
    shapes = (Shape(S32), Shape(et, (rows, cols)), Shape(et, (cols, cols)))
    b.begin()
    tp = b.param(Shape(TUPLE_T, (), shapes))
    i, x, w = (b.gte(tp, k) for k in range(3))
    i1 = b.add(ADD, Shape(S32), (i, b.constant(S32)))
    if configurable:
        y = b.unary(TANH, b.dot(x, w, (rows, cols)))
        if rng.random() < 0.5:
            y = b.reshape(b.reshape(y, (rows, 2, cols // 2)), (rows, cols))
    else:
        y = b.binary(ADD, b.binary(MULTIPLY, x, b.full(et, (rows, cols))), x)
    body = b.end(b.tuple([i1, y, w]), split=rng.random() < 0.6)
    b.begin()
    p = b.param(Shape(TUPLE_T, (), shapes))
    cond = b.end(b.compare(b.gte(p, 0), b.constant(S32)), split=True)
    return body, cond, shapes


def build_program(
    rng: np.random.Generator, family: str, name: str, n_target: int, *, nc_min: int = 0,
    isolated: bool = False,
) -> SynthGraph:  # fmt: skip
    """Synthesize one layout program of about n_target nodes (at least nc_min configurable ones).

    Computations in emission order: scalar reducers, small while loops (some with configurable
    nodes), the main training loop's body and condition (half of the training programs), the entry.
    """
    kind, train = program_kind(family, name)
    if kind == "transformer" and n_target < 700:
        train = False  # a transformer training step needs more nodes than a tiny budget
    hidden = None
    if "_H-" in name:
        hidden = int(name.split("_H-")[1].split("_")[0])
    b = HloBuilder(rng, alt_layout_p=0.015)
    b.make_reducers(int(np.clip(n_target * 0.045, 8, 600)))
    loops = [
        _small_loop(b, rng, F32, configurable=rng.random() < 0.6)
        for _ in range(int(rng.integers(0, 2 + n_target // 3000)))
    ]
    n_end = n_target - 12 * len(loops) - 6
    in_loop = rng.random() < 0.5
    main = None
    if in_loop:
        b.begin()
        st = StepState(b, tuple_param=True)
        _model_step(b, rng, st, kind, train, int(n_end * 0.93), nc_min, hidden)
        body = b.end(st.finish(), split=rng.random() < 0.3)
        b.begin()
        p = b.param(Shape(TUPLE_T, (), st.shapes))
        step_slot = max(k for k, s in enumerate(st.shapes) if s.et == S32 and not s.dims)
        cond = b.end(b.compare(b.gte(p, step_slot), b.constant(S32)), split=True)
        main = (body, cond, st.shapes)
    b.begin()
    outputs: list[int] = []
    if isolated:
        b.isolated_configurable(F32)
    for body_root, cond_root, shapes in [*loops, *([main] if main else [])]:
        if rng.random() < 0.85:  # the loop state arrives as one tuple argument
            args = b.param(Shape(TUPLE_T, (), shapes))
            init = b.tuple([b.gte(args, k) for k in range(len(shapes))])
        else:
            init = b.tuple([b.param(s) for s in shapes])
        result = b.while_(init, body_root, cond_root)
        picks = rng.choice(
            len(shapes), size=min(len(shapes), int(rng.integers(1, 7))), replace=False
        )
        outputs += [b.gte(result, int(k)) for k in sorted(picks)]
    if main is None:
        st = StepState(b, tuple_param=rng.random() < 0.9)
        report = _model_step(b, rng, st, kind, train, n_end, nc_min, hidden)
        if rng.random() < 0.3:
            b.outfeed(report, b.after_all())
        outputs = [slot[2] for slot in st.slots if slot[2] != slot[1]] + [report, *outputs]
        if st.tp is not None:
            b.shape[st.tp] = Shape(TUPLE_T, (), st.shapes)
    if rng.random() < 0.3:  # a zero-size tensor: interior/trailing zero dims keep rank > 0
        outputs.append(b.constant(F32, [int(rng.integers(2, 9)), 0][: int(rng.integers(1, 3))]))
    b.end(b.tuple(outputs))
    graph = b.finish()
    graph.meta.update(name=name, kind=kind, train=train)
    return graph
