"""The reference rules ``verify`` recomputes in plain NumPy (docs/spec.md §2): the kept nodes and
edges of pruning, the re-padding of node features, the per-graph feature moments, and the base-7
codes of layout configs in the form the shards store them (§2.4: tie columns, byte planes), so that
verify compares codes with codes and never decodes (no integer division, no kernel)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import tpugraphs as tg
from ..options import REPAD_RULE
from ..tpugraphs import FEATURE_STATS_COLUMNS, LAYOUT_SLOTS, OPCODE_CONVOLUTION


@dataclass
class InputFacts:
    """What an input file and the build options say a graph's shards must hold (recomputed here).

    Counts of the input (``*_before``, ``configs``) and of the kept graph (``*_after``), re-padding
    anomalies and nodes whose ``dimensions`` length is undecided among the kept nodes (0 with
    ``--no-repad``), configurable nodes (None for tile).
    """

    nodes_before: int
    edges_before: int
    configs: int
    nodes_after: int
    edges_after: int
    anomalies: int
    undecided: int
    config_nodes: int | None


def hop_distances(edge_index: np.ndarray, n: int, sources: np.ndarray, max_hops: int) -> np.ndarray:
    """Undirected hop distance from ``sources`` (−1 beyond ``max_hops``) by frontier expansion."""
    dist = np.full(n, -1, np.int64)
    dist[sources] = 0
    u, v = edge_index[:, 0], edge_index[:, 1]
    for d in range(1, max_hops + 1):
        frontier = dist == d - 1
        reached = np.zeros(n, bool)
        reached[v[frontier[u]]] = True
        reached[u[frontier[v]]] = True
        new = reached & (dist < 0)
        if not new.any():
            break
        dist[new] = d
    return dist


def expected_structure(edge_index, n, config_ids, options) -> tuple[np.ndarray, np.ndarray]:
    if not options["prune"] or config_ids is None:
        return np.arange(n), np.ones(len(edge_index), bool)
    k = options["hops"]
    dist = hop_distances(edge_index, n, config_ids, k)
    keep_node = dist >= 0
    du, dv = dist[edge_index[:, 0]], dist[edge_index[:, 1]]
    near = max(k - 1, 0)
    keep_edge = keep_node[edge_index[:, 0]] & keep_node[edge_index[:, 1]] & (
        ((du >= 0) & (du <= near)) | ((dv >= 0) & (dv <= near)))
    return np.flatnonzero(keep_node), keep_edge


def dimensions_lengths(opcode: np.ndarray, r: np.ndarray, is_tuple: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """docs/spec.md §2.2's length L of every node's ``dimensions`` (cols 31–36), −1 where it cannot be
    told: ``opcode`` (n,), output ranks ``r`` (n,) int64, ``is_tuple`` (n,) bool, the whole graph's
    ``edges`` (m, 2) int64 [user, operand]."""
    n = len(r)
    op = np.asarray(opcode).astype(np.int64)
    pairs = np.unique(edges.reshape(-1, 2), axis=0)  # distinct (user, operand)
    distinct = np.bincount(pairs[:, 0], minlength=n)
    largest = np.full(n, -1, np.int64)
    np.maximum.at(largest, pairs[:, 0], r[pairs[:, 1]])
    single = np.zeros(n, np.int64)
    single[pairs[:, 0]] = r[pairs[:, 1]]  # the operand's rank where there is exactly one
    length = np.where(np.isin(op, tg.KNOWN_OPCODES), 0, -1)
    length[np.isin(op, tg.OPCODES_ONE_DIMENSION)] = 1
    length = np.where(np.isin(op, tg.OPCODES_RANK_DIMENSIONS), r, length)
    broadcast = op == tg.OPCODE_BROADCAST
    length[broadcast] = np.where(distinct[broadcast] == 1, single[broadcast], -1)
    reduce = op == tg.OPCODE_REDUCE
    length[reduce] = np.where(~is_tuple[reduce] & (largest[reduce] >= r[reduce]), largest[reduce] - r[reduce], -1)
    length[np.isin(op, tg.OPCODES_UNDECIDED_DIMENSIONS)] = -1
    return np.minimum(length, 6)


def repad_reference(feat: np.ndarray, opcode: np.ndarray, edges: np.ndarray, nodes: np.ndarray,
                    rule: int = REPAD_RULE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """docs/spec.md §2.2 in plain NumPy on the rows ``nodes`` (n',) of a whole graph's ``feat`` (n, 140)
    float32, ``opcode`` (n,) and ``edges`` (m, 2) int64: (the re-padded rows (n', 140) float32, the
    anomaly mask (n',) bool: first r layout entries not a permutation of 0..r−1, or ``dimensions``
    contradicting their length; the undecided mask (n',) bool: that length cannot be told). ``rule`` 1
    is the rule of manifests before ``repad_rule`` was recorded: cols 31–36 untouched, none undecided."""
    is_tuple = feat[:, tg.COL_TUPLE] == 1.0
    dims = feat[:, tg.COLS_SHAPE_DIMS] != 0
    r_dims = np.where(dims.any(1), 6 - np.argmax(dims[:, ::-1], axis=1), 0)
    r_perm = np.floor(np.clip(feat[:, tg.COLS_LAYOUT].max(1), -1.0, 5.0)).astype(np.int64) + 1
    r = np.maximum(r_dims, r_perm)
    r[(r_dims == 0) & (feat[:, tg.COL_SHAPE_PRODUCT] == 1.0)] = 0
    r[is_tuple] = 0
    length = dimensions_lengths(opcode, r, is_tuple, np.asarray(edges, np.int64))[nodes]
    feat, r, opcode = feat[nodes], r[nodes], np.asarray(opcode)[nodes]
    layout = feat[:, tg.COLS_LAYOUT]
    out = feat.copy()
    slot = np.arange(6)
    out[:, tg.COLS_LAYOUT][slot[None, :] >= r[:, None]] = -1.0
    spatial = np.where(opcode == OPCODE_CONVOLUTION, np.minimum(np.maximum(r - 2, 0), 4), 0)
    pad = np.arange(4)[None, :] >= spatial[:, None]
    out[:, tg.COL_CONV_INPUT_SPATIAL : tg.COL_CONV_INPUT_SPATIAL + 4][pad] = -1.0
    out[:, tg.COL_CONV_KERNEL_SPATIAL : tg.COL_CONV_KERNEL_SPATIAL + 4][pad] = -1.0
    head = slot[None, :] < r[:, None]
    fine = (layout == np.trunc(layout)) & (layout >= 0) & (layout < r[:, None])
    value = np.where(head & fine, layout, -1).astype(np.int64)
    repeated = np.stack([(value == k).sum(1) for k in range(6)], axis=1) > 1
    anomalous = (head & ~fine).any(1) | repeated.any(1)
    if rule < 2:
        return out, anomalous, np.zeros(len(r), bool)
    given = feat[:, tg.COLS_DIMENSIONS]
    kept = slot[None, :] < length[:, None]
    contradicted = (length >= 0) & ((kept & (given < 0)) | (~kept & (given != 0) & (given != -1))).any(1)
    out[:, tg.COLS_DIMENSIONS][(length[:, None] >= 0) & ~contradicted[:, None] & ~kept] = -1.0
    return out, anomalous | contradicted, length < 0


def feature_moments(node_feat: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """(count, mean (134,), sum of squared deviations (134,)) of node_feat[:, :134] in float64."""
    x = np.asarray(node_feat, np.float64)[:, :FEATURE_STATS_COLUMNS]
    if not len(x):
        return 0, np.zeros(FEATURE_STATS_COLUMNS), np.zeros(FEATURE_STATS_COLUMNS)
    mean = x.mean(axis=0)
    return len(x), mean, ((x - mean) ** 2).sum(axis=0)



CODE_LIMIT = 7**6
"""Every base-7 code of a block of six values −1..5 lies in 0..CODE_LIMIT−1 (< 2^17)."""
_OFFSET = np.float32((CODE_LIMIT - 1) // 6)  # Σ_i 7^i over the six slots: code = Σ value·7^i + _OFFSET
_WEIGHTS = np.kron(np.eye(3, 4, dtype=np.float32), (7.0 ** np.arange(6)).astype(np.float32)[:, None])
"""(18, 4) float32: column t < 3 holds 7^0..7^5 in rows 6t..6t+5, column 3 is zero (a node's four
sums are 16 bytes: two int64 to move and compare), so values (.., 18) @ _WEIGHTS + _OFFSET are
the three codes, exact in float32 (|sum| < 2^24) for integer values in −1..5."""
ENCODE_BYTES = 1 << 20
"""Input bytes per step of ``LayoutEncoder.encode``: its few passes over a step stay in the cache."""


def codes_from_planes(planes: np.ndarray) -> np.ndarray:
    """Stored ``codes`` values (k, 4n) uint8, byte p of int32 j at p·n + j (docs/schema.md) → (k, n)
    int32, every byte kept (a code ≥ 2^17 or < 0 comes back as such, never masked)."""
    k, width = planes.shape
    n = width // 4
    return np.ascontiguousarray(planes.reshape(k, 4, n).transpose(0, 2, 1)).view("<i4").reshape(k, n)


def tie_columns(tie: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """For ``config_node_tie`` (nc,) (the stored column of each configurable node): (the first node of
    every column 0..nt−1 (nt,), the other nodes (nc − nt,), their columns' first nodes), or None
    unless the columns are numbered 0..nt−1 in order of first appearance (docs/schema.md)."""
    tie = np.asarray(tie, np.int64)
    if not len(tie):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    if tie.min() < 0:
        return None
    nt = int(tie.max()) + 1
    first = np.full(nt, len(tie), np.int64)
    np.minimum.at(first, tie, np.arange(len(tie)))
    if first[-1] == len(tie) or not bool((np.diff(first) > 0).all()):
        return None
    others = np.flatnonzero(first[tie] != np.arange(len(tie)))
    return first, others, first[tie[others]]


class LayoutEncoder:
    """docs/spec.md §2.4 for the input rows of one layout graph, in plain NumPy: every value an integer
    in −1..5, digit = value + 1, ``code_t = Σ_i digit_{6t+i} · 7^i``, tied nodes' codes equal to their
    column's, and the codes of the stored columns as the shards hold them (``columns``: ``tie_columns``
    of the graph's ``config_node_tie``)."""

    def __init__(self, columns: tuple[np.ndarray, np.ndarray, np.ndarray]):
        self.reps, self.others, self.other_reps = columns
        self._scratch: dict[tuple, np.ndarray] = {}

    def _buffer(self, shape: tuple, dtype) -> np.ndarray:
        size = int(np.prod(shape))
        key = (np.dtype(dtype).str,)
        buf = self._scratch.get(key)
        if buf is None or buf.size < size:
            buf = self._scratch[key] = np.empty(size, dtype)
        return buf[:size].reshape(shape)

    def encode(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Input rows ``values`` (k, nc, 18) (any numeric dtype) → (ok (k,) bool: the row holds only
        integers in −1..5 and its tied nodes' codes equal their column's; codes (k, nt, 3) int32 of the
        stored columns, meaningful where ok)."""
        k, nt = len(values), len(self.reps)
        nc = nt + len(self.others)
        codes = np.empty((k, nt, 3), np.int32)
        if values.shape[1:] != (nc, LAYOUT_SLOTS):
            return np.zeros(k, bool), codes
        ok = np.ones(k, bool)
        step = max(1, ENCODE_BYTES // max(1, values[0].nbytes))
        with np.errstate(invalid="ignore", over="ignore"):
            for s in range(0, k, step):
                x = values[s : s + step]
                m = len(x)
                small = self._buffer(x.shape, np.int8)
                np.copyto(small, x, casting="unsafe")
                exact = self._buffer(x.shape, bool)
                np.equal(small, x, out=exact)
                row_ok = exact.reshape(m, -1).all(1)
                row_ok &= (small.reshape(m, -1).view(np.uint8) + np.uint8(1)).max(1) <= 6  # −1..5 → 0..6
                exact_values = x if x.dtype == np.float32 else small.astype(np.float32)
                sums = self._buffer((m * nc, 4), np.float32)
                np.matmul(exact_values.reshape(m * nc, LAYOUT_SLOTS), _WEIGHTS, out=sums)
                sums += _OFFSET  # the codes: no −0.0 left (its bits would differ from 0.0's below)
                nodes = sums.view(np.int64).reshape(m, nc, 2)  # a node's codes as 16 bytes, compared bitwise
                if len(self.others):
                    same = np.take(nodes, self.others, 1) == np.take(nodes, self.other_reps, 1)
                    row_ok &= same.reshape(m, -1).all(1)
                    nodes = np.take(nodes, self.reps, 1)
                np.copyto(codes[s : s + m], nodes.view(np.float32).reshape(m, nt, 4)[:, :, :3], casting="unsafe")
                ok[s : s + m] = row_ok
        return ok, codes


class RowKeys:
    """Keys of rows of n base-7 codes (each in 0..CODE_LIMIT−1) that are equal exactly when the rows
    are, but for a chance of at most 2^-128 per pair of different rows, whatever the rows: each key is
    m sums Σ_j code_j · r_j of random integers r_j < 2^b drawn from the operating system when the
    object is made (after the data exist), exact in float64 (every sum < 2^53). Two different rows
    differ in some code j; for any values of the other r, at most one r_j of 2^b gives them an equal
    sum, so each of the m independent sums is equal with probability ≤ 2^-b, and b·m ≥ 128."""

    def __init__(self, n: int):
        bits = 53 - 17 - max(1, int(n)).bit_length()  # n codes < 2^17 times r < 2^bits: sums < 2^53
        if bits < 8:
            raise ValueError(f"rows of {n} codes are too long for exact keys")
        self.m = -(-128 // bits)
        self.r = np.random.default_rng().integers(0, 1 << bits, size=(n, self.m)).astype(np.float64)

    def sums(self, codes: np.ndarray) -> np.ndarray:
        """(k, n) int32 codes in 0..CODE_LIMIT−1 → their (k, m) float64 sums (integers, exact)."""
        return np.ascontiguousarray(codes.reshape(len(codes), -1).astype(np.float64) @ self.r)

    def keys(self, codes: np.ndarray) -> np.ndarray:
        """(k, n) int32 codes in 0..CODE_LIMIT−1 → (k,) keys (void, 8·m bytes each; compare with ==)."""
        return self.sums(codes).view(np.dtype((np.void, 8 * self.m))).reshape(len(codes))
