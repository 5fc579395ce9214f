"""Slow, obvious reference implementations of the tpuprep kernels, written from docs/spec.md §2 only.

These are oracles for the tests: plain Python (BFS over an adjacency dict, dicts keyed by row values,
``fractions.Fraction``) or small NumPy loops, with no attempt at speed. They must never import
``tpuprep``; a test compares a kernel with one of these, never a kernel with itself.
"""

from __future__ import annotations

import math
from collections import deque
from fractions import Fraction
from typing import NamedTuple

import numpy as np

# --------------------------------------------------------------------------------------------------
# §2.1 Pruning
# --------------------------------------------------------------------------------------------------


def ref_hop_distance(edge_index, num_nodes, sources, max_hops):
    """Undirected hop distance to the nearest source, as a list; −1 when farther than ``max_hops``."""
    adjacency: dict[int, set[int]] = {i: set() for i in range(num_nodes)}
    for u, v in np.asarray(edge_index).reshape(-1, 2).tolist():
        adjacency[u].add(v)
        adjacency[v].add(u)
    dist = {}
    queue = deque()
    for s in np.asarray(sources).reshape(-1).tolist():
        if s not in dist:
            dist[s] = 0
            queue.append(s)
    while queue:
        u = queue.popleft()
        if dist[u] == max_hops:
            continue
        for w in adjacency[u]:
            if w not in dist:
                dist[w] = dist[u] + 1
                queue.append(w)
    return [dist.get(i, -1) for i in range(num_nodes)]


class RefPruned(NamedTuple):
    node_index: np.ndarray  # (n',) int32
    edge_index: np.ndarray  # (m', 2) int32
    node_config_ids: np.ndarray  # (nc,) int32


def ref_prune(edge_index, num_nodes, node_config_ids, hops):
    """docs/spec.md §2.1: keep configurable nodes and nodes within K hops; edges with both ends kept and one end
    within max(K − 1, 0) hops; kept nodes ascending, edges in original order, everything remapped."""
    dist = ref_hop_distance(edge_index, num_nodes, node_config_ids, hops)
    kept = [i for i in range(num_nodes) if dist[i] != -1]
    new_id = {old: new for new, old in enumerate(kept)}
    edge_hops = max(hops - 1, 0)
    edges = []
    for u, v in np.asarray(edge_index).reshape(-1, 2).tolist():
        if u in new_id and v in new_id and (dist[u] <= edge_hops or dist[v] <= edge_hops):
            edges.append([new_id[u], new_id[v]])
    config = [new_id[i] for i in np.asarray(node_config_ids).reshape(-1).tolist()]
    return RefPruned(
        np.array(kept, dtype=np.int32),
        np.array(edges, dtype=np.int32).reshape(-1, 2),
        np.array(config, dtype=np.int32),
    )


def ref_remap_node_splits(node_splits, node_index):
    """Each boundary b becomes the number of kept nodes with original index < b."""
    kept = np.asarray(node_index).tolist()
    return np.array(
        [sum(1 for i in kept if i < b) for b in np.asarray(node_splits).reshape(-1).tolist()],
        dtype=np.int32,
    )


# --------------------------------------------------------------------------------------------------
# §2.2 Re-padding
# --------------------------------------------------------------------------------------------------

COL_TUPLE = 18
DIM_COLS = list(range(21, 27))
COL_PRODUCT = 28
LAYOUT_COLS = list(range(134, 140))
INPUT_SPATIAL_COLS = list(range(95, 99))
KERNEL_SPATIAL_COLS = list(range(101, 105))
CONVOLUTION = 26


def ref_output_rank(row) -> int:
    """Output rank of one (140,) node_feat row, by the docs/spec.md §2.2 rule."""
    row = [float(x) for x in row]
    if row[COL_TUPLE] == 1:
        return 0
    dims = [row[c] for c in DIM_COLS]
    nonzero = [d for d in range(6) if dims[d] != 0]
    r_dims = nonzero[-1] + 1 if nonzero else 0
    if not nonzero and row[COL_PRODUCT] == 1:
        return 0
    # the least r above every layout entry (axes 0..r-1): floor, so that -0.5 names no axis, as -1 does
    r_perm = 1 + math.floor(max(row[c] for c in LAYOUT_COLS))
    # a layout entry can only name one of the 6 axes; a larger value (bad input) cannot make r > 6
    return min(max(r_dims, r_perm), 6)


DIMENSION_COLS = list(range(31, 37))
# docs/spec.md §2.2, written out here by opcode name (ids of TPUGRAPHS.md §6), not taken from tpuprep
NOT_OPCODES = {0, 97, 101}  # "unknown" and the two unused ids; anything above 120 is not an opcode either
ONE_DIMENSION = {22: "concatenate", 43: "get-dimension-size", 44: "set-dimension-size", 48: "iota",
                 93: "sort", 104: "all-gather", 111: "reduce-scatter", 112: "all-gather-start"}
RANK_DIMENSIONS = {56: "map", 98: "transpose"}
BROADCAST, REDUCE = 13, 70
UNDECIDED = {6: "all-to-all", 76: "reverse"}


def ref_dimensions_length(opcode, rank, is_tuple, operand_ranks):
    """Entries of an instruction's ``dimensions`` (cols 31–36, at most 6 kept), or None when the npz
    cannot tell: ``operand_ranks`` maps each distinct operand node (edge_index rows [u, v]) to its rank."""
    opcode = int(opcode)
    if opcode in NOT_OPCODES or opcode > 120 or opcode in UNDECIDED:
        return None
    if opcode in ONE_DIMENSION:
        return 1
    if opcode in RANK_DIMENSIONS:
        return min(rank, 6)
    if opcode == BROADCAST:
        return min(next(iter(operand_ranks.values())), 6) if len(operand_ranks) == 1 else None
    if opcode == REDUCE:
        if is_tuple or not operand_ranks or max(operand_ranks.values()) < rank:
            return None
        return min(max(operand_ranks.values()) - rank, 6)
    return 0


def ref_repad(node_feat, node_opcode, edge_index, node_index=None):
    """docs/spec.md §2.2 on the rows ``node_index`` (all when None) of a whole graph's (n, 140) matrix:
    returns (re-padded float32 copy of those rows, anomaly mask bool, undecided mask bool)."""
    whole = np.array(node_feat, dtype=np.float32, copy=True)
    n = whole.shape[0]
    rows = list(range(n)) if node_index is None else [int(i) for i in np.asarray(node_index).reshape(-1)]
    ranks = [ref_output_rank(whole[i]) for i in range(n)]
    operands: dict[int, dict[int, int]] = {i: {} for i in range(n)}
    for u, v in np.asarray(edge_index).reshape(-1, 2).tolist():
        operands[u][v] = ranks[v]
    feat = whole[rows] if rows else np.zeros((0, whole.shape[1]), np.float32)
    anomalous = np.zeros(len(rows), dtype=bool)
    undecided = np.zeros(len(rows), dtype=bool)
    for k, i in enumerate(rows):
        r = ranks[i]
        layout = [float(feat[k, c]) for c in LAYOUT_COLS[:r]]
        anomalous[k] = sorted(layout) != [float(d) for d in range(r)]
        for c in LAYOUT_COLS[r:]:
            feat[k, c] = -1
        s = max(r - 2, 0) if int(node_opcode[i]) == CONVOLUTION else 0
        for c in INPUT_SPATIAL_COLS[s:] + KERNEL_SPATIAL_COLS[s:]:
            feat[k, c] = -1
        length = ref_dimensions_length(node_opcode[i], r, float(feat[k, COL_TUPLE]) == 1, operands[i])
        if length is None:
            undecided[k] = True
            continue
        values = [float(feat[k, c]) for c in DIMENSION_COLS]
        if any(v < 0 for v in values[:length]) or any(v not in (0.0, -1.0) for v in values[length:]):
            anomalous[k] = True  # the data contradict the rule: left as they are
            continue
        for c in DIMENSION_COLS[length:]:
            feat[k, c] = -1
    return feat, anomalous, undecided


# --------------------------------------------------------------------------------------------------
# §2.4 Base-7 packing
# --------------------------------------------------------------------------------------------------


def ref_first_bad_value(values):
    """(row, node, slot) of the first value (row-major) that is not an integer in −1..5, else None."""
    values = np.asarray(values)
    for row in range(values.shape[0]):
        for node in range(values.shape[1]):
            for slot in range(values.shape[2]):
                v = float(values[row, node, slot])
                if not (math.isfinite(v) and v == int(v) and -1 <= v <= 5):
                    return row, node, slot
    return None


def ref_encode_base7(values):
    """(..., 18) integers in −1..5 → (..., 3) int32, code_t = Σ_i (v_{6t+i} + 1) · 7^i."""
    x = np.asarray(values).astype(np.int64)
    assert x.shape[-1] == 18
    assert ((x >= -1) & (x <= 5)).all()
    out = np.zeros((*x.shape[:-1], 3), dtype=np.int64)
    for t in range(3):
        for i in range(6):
            out[..., t] += (x[..., 6 * t + i] + 1) * 7**i
    return out.astype(np.int32)


def ref_decode_base7(codes):
    """(..., 3) codes in 0..7^6−1 → (..., 18) int8 values in −1..5."""
    c = np.asarray(codes).astype(np.int64)
    out = np.zeros((*c.shape[:-1], 18), dtype=np.int64)
    rest = c.copy()
    for i in range(6):
        for t in range(3):
            out[..., 6 * t + i] = rest[..., t] % 7 - 1
        rest //= 7
    return out.astype(np.int8)


def ref_encode_row(row18) -> tuple[int, int, int]:
    """Pure-Python encode of one 18-value node configuration (for hand-checked examples)."""
    return tuple(sum((int(row18[6 * t + i]) + 1) * 7**i for i in range(6)) for t in range(3))


# --------------------------------------------------------------------------------------------------
# §2.3 Deduplication
# --------------------------------------------------------------------------------------------------


class RefDedup(NamedTuple):
    unique_rows: np.ndarray  # (c_u, ...) the first occurrence of every unique row
    inverse: np.ndarray  # (c,) int32
    group_size: np.ndarray  # (c_u,) int32
    first_index: np.ndarray  # (c_u,) int32
    best_index: np.ndarray  # (c_u,) int32 (= first_index without runtimes)
    runtime: np.ndarray | None  # (c_u,) int64
    normalizer: np.ndarray | None  # (c_u,) int64


def _value_key(row) -> bytes:
    """A key equal for rows equal by value: float64 with every zero made +0.0 (so −0.0 == 0.0)."""
    r = np.asarray(row, dtype=np.float64).reshape(-1)
    if np.isnan(r).any():
        raise ValueError("NaN has no value to compare")
    return np.where(r == 0.0, 0.0, r).tobytes()


def ref_dedup(rows, runtime=None, normalizer=None) -> RefDedup:
    """docs/spec.md §2.3 with a dict: first-occurrence numbering, minimum runtime (tile: minimum
    runtime / normalizer as exact Fractions), ties to the earliest row."""
    rows = np.asarray(rows)
    c = rows.shape[0]
    ids: dict[bytes, int] = {}
    inverse = []
    first, size, best = [], [], []
    rt = None if runtime is None else [int(x) for x in np.asarray(runtime).tolist()]
    nz = None if normalizer is None else [int(x) for x in np.asarray(normalizer).tolist()]

    def score(i):
        if nz is not None:
            return Fraction(rt[i], nz[i])
        return rt[i]

    for i in range(c):
        key = _value_key(rows[i])
        if key not in ids:
            ids[key] = len(first)
            first.append(i)
            size.append(0)
            best.append(i)
        u = ids[key]
        inverse.append(u)
        size[u] += 1
        if rt is not None and score(i) < score(best[u]):
            best[u] = i
    return RefDedup(
        unique_rows=rows[first] if first else rows[:0],
        inverse=np.array(inverse, dtype=np.int32),
        group_size=np.array(size, dtype=np.int32),
        first_index=np.array(first, dtype=np.int32),
        best_index=np.array(best, dtype=np.int32),
        runtime=None if rt is None else np.array([rt[b] for b in best], dtype=np.int64),
        normalizer=None if nz is None else np.array([nz[b] for b in best], dtype=np.int64),
    )


def ref_tie(codes) -> np.ndarray:
    """§2.4 tied configurable nodes with a dict: codes (c_u, nc, 3) → tie (nc,) int32, node j's stored
    column, equal for nodes whose codes are equal in every config, numbered by first appearance."""
    codes = np.asarray(codes)
    seen: dict[bytes, int] = {}
    return np.array([seen.setdefault(codes[:, j].tobytes(), len(seen)) for j in range(codes.shape[1])],
                    dtype=np.int32)


def ref_stored_columns(tie) -> list[int]:
    """The first node of each stored column of a tie array, in column order."""
    first: dict[int, int] = {}
    for j, t in enumerate(np.asarray(tie).tolist()):
        first.setdefault(t, j)
    return [first[t] for t in sorted(first)]


def ref_byte_planes(codes) -> np.ndarray:
    """Schema 3 ``codes`` values with Python integers: codes (k, n) int → (k, 4n) uint8, where byte
    p·n + i of a row is byte p (0 least significant) of its code i."""
    codes = np.asarray(codes)
    out = np.zeros((codes.shape[0], 4 * codes.shape[1]), np.uint8)
    for r in range(codes.shape[0]):
        for i in range(codes.shape[1]):
            value = int(codes[r, i]) % 2**32  # two's complement, as int32 bytes
            for p in range(4):
                out[r, p * codes.shape[1] + i] = (value >> (8 * p)) & 0xFF
    return out


def group_size_histogram(group_size) -> dict[int, int]:
    """{group size: number of unique configs with that size}."""
    hist: dict[int, int] = {}
    for g in np.asarray(group_size).tolist():
        hist[g] = hist.get(g, 0) + 1
    return hist
