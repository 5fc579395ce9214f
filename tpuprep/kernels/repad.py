"""Re-padding the zero-padded sequences of ``node_feat`` with −1 (docs/spec.md §2.2).

TpuGraphs pads four variable-length sequences with 0, which cannot be told apart from axis 0.
This kernel recovers each sequence's length and rewrites the padding after it as −1:

- the output rank r: 0 for tuples (col 18 == 1) and for scalars (cols 21–26 all zero and shape
  product, col 28, == 1); otherwise r = max(r_dims, r_perm) with r_dims = 1 + index of the last
  non-zero of cols 21–26 and r_perm = 1 + ⌊max(cols 134–139)⌋ within 0..6 (the least r above every
  layout entry: −0.5 or −3 name no axis, 2.5 names axes up to 2);
- cols 134+r .. 139 (layout_minor_to_major) become −1;
- convolutions (opcode 26) keep s = max(r − 2, 0) spatial dims: cols 95+s .. 98 and 101+s .. 104 become
  −1; every other node gets −1 in all of 95–98 and 101–104;
- cols 31–36 (the HLO ``dimensions`` attribute) keep L entries, L by the node's opcode (``DIMENSIONS_KIND``):
  0 for most opcodes; 1 for concatenate, iota, sort, get/set-dimension-size and the one-dimension
  collectives; r for transpose and map; the operand's rank for broadcast; (largest operand rank) − r for a
  reduce with an array result. Operands are the nodes a node uses (``edge_index`` rows [u, v]: u uses v),
  ranks those of the whole graph (pruning comes after). Where L cannot be told (reverse, all-to-all, a
  variadic reduce, a broadcast without exactly one operand, an unknown opcode) cols 31–36 stay as they
  are and the node is counted as *undecided*.

A node is flagged as an anomaly (and counted in the build report) when its first r layout entries are
not a permutation of 0..r−1 — they are never "fixed"; the padding after them is still set to −1 — or
when its ``dimensions`` contradict L (a negative entry among the first L, or an entry after them that
is neither 0 nor −1): then cols 31–36 stay as they are.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..tpugraphs import (
    COL_CONV_INPUT_SPATIAL,
    COL_CONV_KERNEL_SPATIAL,
    COL_DIMENSIONS,
    COL_LAYOUT,
    COL_SHAPE_PRODUCT,
    COL_TUPLE,
    KNOWN_OPCODES,
    OPCODE_BROADCAST,
    OPCODE_CONVOLUTION,
    OPCODE_REDUCE,
    OPCODES_ONE_DIMENSION,
    OPCODES_RANK_DIMENSIONS,
    OPCODES_UNDECIDED_DIMENSIONS,
)
from .jit import frozen, kernel

UNDECIDED, EMPTY, ONE, RANK, OPERAND_RANK, REDUCED = range(6)
"""How an opcode's ``dimensions`` length L is found: UNDECIDED (it cannot be), EMPTY (0), ONE (1),
RANK (the node's own output rank), OPERAND_RANK (its one operand's rank), REDUCED (largest operand rank
− own rank, for an array result)."""


def dimensions_kinds() -> np.ndarray:
    """(256,) int8: the ``dimensions`` kind of every opcode id (UNDECIDED for ids that are not opcodes)."""
    kinds = np.full(256, UNDECIDED, np.int8)
    kinds[list(KNOWN_OPCODES)] = EMPTY
    kinds[list(OPCODES_ONE_DIMENSION)] = ONE
    kinds[list(OPCODES_RANK_DIMENSIONS)] = RANK
    kinds[OPCODE_BROADCAST] = OPERAND_RANK
    kinds[OPCODE_REDUCE] = REDUCED
    kinds[list(OPCODES_UNDECIDED_DIMENSIONS)] = UNDECIDED
    return kinds


DIMENSIONS_KIND = dimensions_kinds()
"""(256,) int8 by opcode id; passed to the kernel as data, so that a cached kernel never keeps an old table."""


class Repadded(NamedTuple):
    """What ``repad_node_feat`` returns for the n' selected nodes."""

    node_feat: np.ndarray  # (n', 140) float32, re-padded
    anomalous: np.ndarray  # (n',) bool: layout not a permutation, or dimensions contradicting their rule
    undecided: np.ndarray  # (n',) bool: the length of dimensions (cols 31–36) could not be told


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
    r_perm = math.floor(min(max(largest, -1.0), 5.0)) + 1  # 1 + floor(max(cols 134-139)), within 0..6
    return max(r_dims, r_perm)


@kernel
def _operands(node_feat, edge_index, rank, largest, only):
    """Fill rank (n,) with every node's output rank; largest (n,) with the largest rank among each
    node's operands (−1: none); only (n,) with its one distinct operand (−1: none, −2: several)."""
    for i in range(node_feat.shape[0]):
        rank[i] = output_rank(node_feat[i])
        largest[i] = -1
        only[i] = -1
    for e in range(edge_index.shape[0]):
        u = edge_index[e, 0]
        v = edge_index[e, 1]
        if rank[v] > largest[u]:
            largest[u] = rank[v]
        if only[u] == -1:
            only[u] = v
        elif only[u] != v:
            only[u] = -2


@kernel
def _dimensions_length(kind, r, tuple_result, largest, only, rank):
    """L (0..6) of one node's ``dimensions``, −1 when it cannot be told."""
    if kind == EMPTY:
        length = 0
    elif kind == ONE:
        length = 1
    elif kind == RANK:
        length = r
    elif kind == OPERAND_RANK:
        length = rank[only] if only >= 0 else -1
    elif kind == REDUCED:
        length = largest - r if not tuple_result and largest >= r else -1
    else:
        length = -1
    return min(length, 6)


@kernel
def _repad(node_feat, node_opcode, edge_index, node_index, kinds, out, anomalous, undecided):
    n = node_feat.shape[0]
    rank = np.empty(n, np.int64)
    largest = np.empty(n, np.int64)
    only = np.empty(n, np.int64)
    _operands(node_feat, edge_index, rank, largest, only)
    count = 0
    seen = np.zeros(6, np.bool_)
    for k in range(node_index.shape[0]):
        i = node_index[k]
        row = node_feat[i]
        for j in range(row.shape[0]):
            out[k, j] = row[j]
        r = rank[i]
        # the layout must be a permutation of 0..r-1
        bad = False
        seen[:] = False
        for d in range(r):
            v = row[COL_LAYOUT + d]
            q = int(v)
            if v != q or q < 0 or q >= r or seen[q]:
                bad = True
                break
            seen[q] = True
        for d in range(r, 6):
            out[k, COL_LAYOUT + d] = -1.0
        spatial = max(r - 2, 0) if node_opcode[i] == OPCODE_CONVOLUTION else 0
        for d in range(min(spatial, 4), 4):
            out[k, COL_CONV_INPUT_SPATIAL + d] = -1.0
            out[k, COL_CONV_KERNEL_SPATIAL + d] = -1.0
        length = _dimensions_length(kinds[node_opcode[i]], r, row[COL_TUPLE] == 1.0, largest[i], only[i], rank)
        undecided[k] = length < 0
        if length >= 0:
            contradicted = False
            for d in range(6):
                v = row[COL_DIMENSIONS + d]
                if (v < 0.0) if d < length else (v != 0.0 and v != -1.0):
                    contradicted = True
            if contradicted:
                bad = True
            else:
                for d in range(length, 6):
                    out[k, COL_DIMENSIONS + d] = -1.0
        anomalous[k] = bad
        if bad:
            count += 1
    return count


def repad_node_feat(node_feat: np.ndarray, node_opcode: np.ndarray, edge_index: np.ndarray,
                    node_index: np.ndarray | None = None) -> Repadded:
    """Re-pad the rows ``node_index`` (n',) of a whole graph's (n, 140) float32 ``node_feat`` (all n rows
    when None, in order); ``node_opcode`` (n,) integer opcode ids, ``edge_index`` (m, 2) integer
    [user, operand] rows of the whole graph, every id in 0..n−1 (the input reader checks this). The
    inputs are not modified."""
    feat = np.ascontiguousarray(node_feat, dtype=np.float32)
    opcode = np.ascontiguousarray(node_opcode, dtype=np.uint8)
    edges = np.ascontiguousarray(np.asarray(edge_index).reshape(-1, 2), dtype=np.int64)
    n = feat.shape[0]
    rows = np.arange(n, dtype=np.int64) if node_index is None else np.ascontiguousarray(node_index, dtype=np.int64)
    out = np.empty((len(rows), feat.shape[1]), np.float32)
    anomalous = np.empty(len(rows), np.bool_)
    undecided = np.empty(len(rows), np.bool_)
    _repad(frozen(feat), frozen(opcode), frozen(edges), frozen(rows), frozen(DIMENSIONS_KIND), out, anomalous,
           undecided)
    return Repadded(out, anomalous, undecided)
