"""Data types of a synthetic HLO graph: ``Shape``, ``Window`` (and its node_feat values),
convolution geometry (dimension numbers, SAME-padded windows, the conv node_feat values),
``ConfigurableNode`` (layout options and work of one configurable node) and ``SynthGraph`` (the
graph members of an npz).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .constants import COL_CONV, COL_FGC, COL_WINDOW, ET_BYTES, TUPLE_T


@dataclass(frozen=True)
class Shape:
    """An HLO shape: element type (node_feat one-hot column), dims, and tuple elements."""

    et: int
    dims: tuple[int, ...] = ()
    elems: tuple[Shape, ...] = ()

    @property
    def rank(self) -> int:
        return 0 if self.et == TUPLE_T else len(self.dims)

    @property
    def size(self) -> int:
        return math.prod(self.dims)

    @property
    def nbytes(self) -> int:
        if self.et == TUPLE_T:
            return sum(e.nbytes for e in self.elems)
        return self.size * ET_BYTES.get(self.et, 0)

    def with_dims(self, dims: Sequence[int]) -> Shape:
        return Shape(self.et, tuple(int(d) for d in dims))


@dataclass(frozen=True)
class Window:
    """An HLO window over k dims: per-dim size, stride, low/high padding, dilations, reversal."""

    size: tuple[int, ...]
    stride: tuple[int, ...]
    pad_lo: tuple[int, ...]
    pad_hi: tuple[int, ...]
    wdil: tuple[int, ...]
    bdil: tuple[int, ...]
    rev: tuple[bool, ...]

    def features(self) -> list[float]:
        """The 56 node_feat values of cols 37–92."""
        out: list[float] = []
        for seq in (self.size, self.stride, self.pad_lo, self.pad_hi, self.wdil, self.bdil):
            out += aggregate(seq, 6)
        flags = [1 if r else 0 for r in self.rev]
        out += [*flags[:6], *[0] * (6 - min(6, len(flags))), sum(flags), len(flags) - sum(flags)]
        return out


def aggregate(values: Sequence[int], lead: int) -> list[float]:
    """FixedNumericSequenceFeatures: the first ``lead`` values (0-padded), their sum and product."""
    vals = [int(v) for v in values]
    head = vals[:lead] + [0] * (lead - min(lead, len(vals)))
    return [*head, sum(vals), math.prod(vals)]


def _pad4(values: Sequence[int]) -> list[int]:
    return [*values[:4], *[0] * (4 - min(4, len(values)))]


@dataclass
class ConfigurableNode:
    """A configurable node: its layout options and its visible work.

    out: (n_out, 18) float32 option vectors for the output block (reshape: output and input blocks),
    row 0 = the modal layout (the node's own layout in node_feat). opnd: (n_opnd, 18) float32 options of
    the operand blocks, row 0 = default. cost: output elements × window size (conv) or contraction
    size (dot) or 1 (reshape) — computable from node_feat and the operands' node_feat.
    """

    node: int
    opcode: int
    out: np.ndarray
    opnd: np.ndarray
    cost: float


@dataclass
class SynthGraph:
    """One synthetic HLO graph: the graph members of an npz file.

    node_feat (n, 140) float32; node_opcode (n,) uint8; edge_index (m, 2) int64 rows [u, v] (u uses v,
    u > v), sorted and unique; node_splits (1, s) int64 (layout files; includes 0 and n); rank (n,)
    int64: the true output rank of every node (0 for tuples and scalars), the ground truth for the
    re-padding rule; configurable: the configurable nodes in ascending node order (layout);
    work: total output bytes of all nodes (drives the base runtime); meta: program facts (name, kind).
    """

    node_feat: np.ndarray
    node_opcode: np.ndarray
    edge_index: np.ndarray
    node_splits: np.ndarray
    rank: np.ndarray
    configurable: list[ConfigurableNode]
    work: float
    meta: dict = field(default_factory=dict)

    @property
    def node_config_ids(self) -> np.ndarray:
        """(nc,) int64 ids of the configurable nodes, strictly increasing."""
        return np.asarray([c.node for c in self.configurable], np.int64)


def conv_dn(rank: int, kind: str) -> tuple:
    """Convolution dimension numbers (in_b, in_f, in_sp, k_i, k_o, k_sp, out_b, out_f, kind).

    'fwd' NHWC/HWIO, 'input_grad' (kernel in/out swapped), 'filter_grad' (in (b=r-1, f=0),
    kernel (i=0, o=r-1), out (b=r-2, f=r-1)), as in STATS.md §2.
    """
    r = rank
    sp_mid, sp_low = tuple(range(1, r - 1)), tuple(range(0, r - 2))
    if kind == "fwd":
        return (0, r - 1, sp_mid, r - 2, r - 1, sp_low, 0, r - 1, kind)
    if kind == "input_grad":
        return (0, r - 1, sp_mid, r - 1, r - 2, sp_low, 0, r - 1, kind)
    return (r - 1, 0, sp_mid, 0, r - 1, sp_mid, r - 2, r - 1, kind)


def same_window(size_in: Sequence[int], k: int, s: int) -> tuple[list[int], Window]:
    """Output spatial sizes and window of a SAME-padded k×…×k convolution with stride s."""
    outs, lo, hi = [], [], []
    for n in size_in:
        o = -(-n // s)
        total = max((o - 1) * s + k - n, 0)
        outs.append(o)
        lo.append(total // 2)
        hi.append(total - total // 2)
    nsp = len(size_in)
    ones = (1,) * nsp
    window = Window((k,) * nsp, (s,) * nsp, tuple(lo), tuple(hi), ones, ones, (False,) * nsp)
    return outs, window


def conv_feats(dn: tuple, window: Window) -> dict[int, list[float]]:
    """node_feat values of a convolution (column -> consecutive values): its window (cols 37–92),
    dimension numbers ``dn`` as from ``conv_dn`` (cols 93–106) and feature/batch group counts 1."""
    in_b, in_f, in_sp, k_i, k_o, k_sp, out_b, out_f, _ = dn
    return {
        COL_WINDOW: window.features(),
        COL_CONV: [in_b, in_f, *_pad4(in_sp), k_i, k_o, *_pad4(k_sp), out_b, out_f],
        COL_FGC: [1, 1],
    }
