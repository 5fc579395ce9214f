"""Re-padding the zero-padded sequences of ``node_feat`` with −1 (docs/spec.md §2.2).

TpuGraphs pads four variable-length sequences with 0, which cannot be told apart from axis 0.
This kernel recovers each node's output rank r and rewrites the padding as −1:

- r = 0 for tuples (col 18 == 1) and for scalars (cols 21–26 all zero and shape product, col 28, == 1);
  otherwise r = max(r_dims, r_perm) with r_dims = 1 + index of the last non-zero of cols 21–26 and
  r_perm = 1 + max(cols 134–139).
- cols 134+r .. 139 (layout_minor_to_major) become −1;
- convolutions (opcode 26) keep s = max(r − 2, 0) spatial dims: cols 95+s .. 98 and 101+s .. 104 become
  −1; every other node gets −1 in all of 95–98 and 101–104;
- cols 31–36 (``dimensions``) are left alone: their length is not recoverable in general.

A node whose first r layout entries are not a permutation of 0..r−1 is flagged as an anomaly and
counted in the build report; its first r entries are never "fixed" (the padding after them is still
set to −1, as for every node).
"""

from __future__ import annotations

import numpy as np

from ..tpugraphs import (
    COL_CONV_INPUT_SPATIAL,
    COL_CONV_KERNEL_SPATIAL,
    COL_LAYOUT,
    COL_SHAPE_PRODUCT,
    COL_TUPLE,
    OPCODE_CONVOLUTION,
)
from .jit import kernel


@kernel
def output_rank(row):
    """Output rank (0..6) of one node from its (140,) feature row, by the rule of the module doc."""
    if row[COL_TUPLE] == 1.0:
        return 0
    r_dims = 0
    for d in range(6):
        if row[21 + d] != 0.0:
            r_dims = d + 1
    if r_dims == 0 and row[COL_SHAPE_PRODUCT] == 1.0:
        return 0
    largest = row[COL_LAYOUT]
    for d in range(1, 6):
        if row[COL_LAYOUT + d] > largest:
            largest = row[COL_LAYOUT + d]
    r_perm = int(min(max(largest, -1.0), 5.0)) + 1  # 1 + max(cols 134-139), kept within 0..6
    return max(r_dims, r_perm)


@kernel
def _repad(node_feat, node_opcode, out, anomalous):
    n = node_feat.shape[0]
    count = 0
    seen = np.zeros(6, np.bool_)
    for i in range(n):
        row = node_feat[i]
        for j in range(row.shape[0]):
            out[i, j] = row[j]
        r = output_rank(row)
        # the layout must be a permutation of 0..r-1
        bad = False
        seen[:] = False
        for d in range(r):
            v = row[COL_LAYOUT + d]
            k = int(v)
            if v != k or k < 0 or k >= r or seen[k]:
                bad = True
                break
            seen[k] = True
        anomalous[i] = bad
        if bad:
            count += 1
        for d in range(r, 6):
            out[i, COL_LAYOUT + d] = -1.0
        spatial = max(r - 2, 0) if node_opcode[i] == OPCODE_CONVOLUTION else 0
        for d in range(min(spatial, 4), 4):
            out[i, COL_CONV_INPUT_SPATIAL + d] = -1.0
            out[i, COL_CONV_KERNEL_SPATIAL + d] = -1.0
    return count


def repad_node_feat(node_feat: np.ndarray, node_opcode: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Re-pad a (n, 140) float32 feature matrix; returns (new (n, 140) float32, anomaly mask (n,) bool).

    node_opcode: (n,) integer HLO opcode ids. The input is not modified.
    """
    feat = np.ascontiguousarray(node_feat, dtype=np.float32)
    opcode = np.ascontiguousarray(node_opcode, dtype=np.uint8)
    out = np.empty_like(feat)
    anomalous = np.empty(feat.shape[0], np.bool_)
    _repad(feat, opcode, out, anomalous)
    return out, anomalous
