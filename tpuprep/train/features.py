"""Per-graph model inputs built once from a GraphRecord (docs/spec.md §4): features, sparse operators, regions.

Node input features (F = 177 columns, float):
  * cols 0..133 of ``node_feat`` standardised with the collection's train statistics
    ``(x − mean) / std_safe`` (``tpuprep.safe_normalizer``, the rule behind ``Dataset.normalizer``:
    std ≤ 0 or non-finite → 1, non-finite mean → 0), clipped to ±``CLIP`` — except the −1-padded
    sequences 31–36, 95–98, 101–104, which are small axis indices and stay as they are;
  * cols 134..139 (layout_minor_to_major, −1-padded) as a 7-way one-hot each (values −1..5), 42 columns —
    the same value space as the layout configuration slots;
  * one flag column: 1.0 on configurable nodes.
The opcode (0..120) goes through a learned embedding in the model.

Message passing uses two row-normalised operators over the pruned edges ``[u, v]`` (u consumes v):
``P_in`` averages over a node's producers (operands) and ``P_out`` over its consumers, so information
flows in both directions with direction-specific weights.

Regions (layout only): ``R_0`` = the configurable nodes, ``R_l = R_{l−1} ∪ N(R_{l−1})`` (undirected
neighbours), each stored with ``R_{l−1}`` as its prefix. After l message-passing steps only nodes in
``R_l`` depend on the configuration, so the model computes everything else once per graph and step,
and per config only the rows of ``R_l`` (``sub_in[l]`` / ``sub_out[l]`` are the operators restricted to
rows ``R_l`` and columns ``R_{l−1}``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import encode_base7, safe_normalizer
from ..tpugraphs import OPCODE_CONVOLUTION, OPCODE_DOT
from .kernels import csr_spmm_batched

N_NUM = 134
RAW_COLS = np.array([*range(31, 37), *range(95, 99), *range(101, 105)], np.int64)
LAYOUT_COLS = np.arange(134, 140)
N_LAYOUT_VALUES = 7  # −1..5
N_FEAT = N_NUM + len(LAYOUT_COLS) * N_LAYOUT_VALUES + 1  # 177
N_OPCODES = 128  # ids 0..120 in the data; anything else maps to 0 ("unknown")
N_SLOTS = 18
N_TILE_FEAT = 24
N_DERIVED = 9
CLIP = 10.0


@dataclass(frozen=True)
class Csr:
    """A sparse (n_rows × n_cols) operator in CSR form: indptr (n_rows+1,) int64, indices / weights (nnz,)."""

    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray
    n_rows: int
    n_cols: int

    @staticmethod
    def from_coo(rows: np.ndarray, cols: np.ndarray, weights: np.ndarray, n_rows: int, n_cols: int) -> Csr:
        """Build from COO triplets; entries are ordered by (row, col, input order) — deterministic."""
        rows = np.asarray(rows, np.int64)
        cols = np.asarray(cols, np.int64)
        order = np.lexsort((cols, rows))
        indptr = np.zeros(n_rows + 1, np.int64)
        np.cumsum(np.bincount(rows, minlength=n_rows), out=indptr[1:])
        return Csr(indptr, np.ascontiguousarray(cols[order]), np.ascontiguousarray(weights[order]),
                   n_rows, n_cols)

    def coo(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, cols, weights) of the stored entries."""
        rows = np.repeat(np.arange(self.n_rows, dtype=np.int64), np.diff(self.indptr))
        return rows, self.indices, self.weights

    def transpose(self) -> Csr:
        """The transposed operator (n_cols × n_rows)."""
        rows, cols, w = self.coo()
        return Csr.from_coo(cols, rows, w, self.n_cols, self.n_rows)

    def astype(self, dtype: Any) -> Csr:
        """The same operator with weights cast to ``dtype``."""
        return Csr(self.indptr, self.indices, self.weights.astype(dtype), self.n_rows, self.n_cols)

    def apply(self, x: np.ndarray) -> np.ndarray:
        """Batched product: x (B, n_cols, H) → (B, n_rows, H), or x (n_cols, H) → (n_rows, H)."""
        squeeze = x.ndim == 2
        xb = x[None] if squeeze else x
        out = np.empty((xb.shape[0], self.n_rows, xb.shape[2]), xb.dtype)
        if self.n_rows:
            csr_spmm_batched(self.indptr, self.indices, self.weights.astype(xb.dtype, copy=False),
                             np.ascontiguousarray(xb), out)
        return out[0] if squeeze else out

    def dense(self) -> np.ndarray:
        """Dense (n_rows, n_cols) float64 copy (tests and debugging only)."""
        d = np.zeros((self.n_rows, self.n_cols))
        rows, cols, w = self.coo()
        np.add.at(d, (rows, cols), w)
        return d


@dataclass
class PreparedGraph:
    """Config-independent model inputs of one graph (built by :func:`prepare_graph`).

    x (n, 177) float; opcode (n,) int64 in 0..127; p_in / p_out (n × n) mean operators with
    transposes; config_pos (nc,) int64 (layout) — positions of configurable nodes among kept nodes;
    cfg_dims (nc, 6) float64 output dims and cfg_default (nc, 6) int64 node layout of those nodes;
    cfg_modal (nc, 3) int64 the base-7 codes of each node's most frequent output, operand-0 and
    operand-1 blocks over the graph's configs (weighted by group size; each block on its own,
    :func:`modal_block_codes`); cfg_cost (nc,) float64 √(multiply-adds) of each node
    (:func:`node_work`) ÷ the largest over the graph's configurable nodes, in (0, 1]; cfg_compute (nc,)
    bool the convolutions and dots among them (the compute ops; the rest are reshapes); tile_extents (6,)
    float64 (tile) the extents the output bounds divide (:func:`tile_iteration_dims`);
    regions[l] (|R_l|,) int64 for l = 0..L; sub_in[l] / sub_out[l] (|R_l| × |R_{l−1}|, index 0 unused).
    """

    graph_id: str
    kind: str
    n_nodes: int
    x: np.ndarray
    opcode: np.ndarray
    p_in: Csr
    p_out: Csr
    p_in_t: Csr
    p_out_t: Csr
    config_pos: np.ndarray
    cfg_dims: np.ndarray | None = None
    cfg_default: np.ndarray | None = None
    cfg_modal: np.ndarray | None = None
    cfg_cost: np.ndarray | None = None
    cfg_compute: np.ndarray | None = None
    tile_extents: np.ndarray | None = None
    regions: list[np.ndarray] = field(default_factory=list)
    sub_in: list[Csr | None] = field(default_factory=list)
    sub_out: list[Csr | None] = field(default_factory=list)
    sub_in_t: list[Csr | None] = field(default_factory=list)
    sub_out_t: list[Csr | None] = field(default_factory=list)


def clean_stats(mean: np.ndarray, std: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Validate (134,) mean / std and make them safe with the dataset's own rule
    (``tpuprep.safe_normalizer``: non-finite means → 0, std ≤ 0 or non-finite → 1). float64 copies."""
    mean = np.asarray(mean, np.float64).reshape(-1)
    std = np.asarray(std, np.float64).reshape(-1)
    if mean.shape != (N_NUM,) or std.shape != (N_NUM,):
        raise ValueError(f"feature stats must have shape ({N_NUM},), got {mean.shape} and {std.shape}")
    return safe_normalizer(mean, std)


def node_features(node_feat: np.ndarray, mean: np.ndarray, std: np.ndarray,
                  config_pos: np.ndarray | None, dtype: Any = np.float32) -> np.ndarray:
    """Model input features (n, 177) from node_feat (n, 140) float32 and cleaned stats (134,)."""
    nf = np.asarray(node_feat, np.float64)
    if nf.ndim != 2 or nf.shape[1] != 140:
        raise ValueError(f"node_feat must have shape (n, 140), got {nf.shape}")
    n = nf.shape[0]
    out = np.zeros((n, N_FEAT), np.float64)
    z = (nf[:, :N_NUM] - mean) / std
    np.clip(z, -CLIP, CLIP, out=z)
    z[:, RAW_COLS] = nf[:, RAW_COLS]
    out[:, :N_NUM] = z
    lay = np.clip(np.rint(nf[:, LAYOUT_COLS]).astype(np.int64) + 1, 0, N_LAYOUT_VALUES - 1)
    cols = N_NUM + np.arange(len(LAYOUT_COLS)) * N_LAYOUT_VALUES + lay  # (n, 6)
    out[np.arange(n)[:, None], cols] = 1.0
    if config_pos is not None and len(config_pos):
        out[config_pos, N_FEAT - 1] = 1.0
    return out.astype(dtype)


N_TILE_SHAPE = 18  # tile inputs derived from the kernel's iteration space (tile_config_features)
N_TILE_INPUT = N_TILE_FEAT + N_TILE_SHAPE
OUTPUT_BOUNDS = slice(8, 14)  # config_feat: kernel_bounds 0–7, output_bounds 8–15, input_bounds 16–23


TILE_UNITS = (8.0, 128.0)  # elements per bound step on the second-minor and minor-most dims (sublanes, lanes)


def tile_bounds_set(config_feat: np.ndarray) -> np.ndarray:
    """(6,) bool: which output-bound positions (cols 8–13 of config_feat (c, 24)) any config sets (> 0).
    An OR over configs, so it can be accumulated block by block (``a | tile_bounds_set(block)``)."""
    cf = np.asarray(config_feat, np.float64)
    return (cf[:, OUTPUT_BOUNDS] > 0).any(axis=0) if len(cf) else np.zeros(6, bool)


def tile_iteration_dims(node_feat: np.ndarray, config_feat: np.ndarray | None,
                        edge_index: np.ndarray | None = None, bounds_set: np.ndarray | None = None,
                        ) -> np.ndarray:
    """(6,) float64: the extents the output tile bounds of a tile kernel divide, in bound order, 0 past r.

    The bounds cover r positions (those any config sets, cols 8–13 of config_feat (c, 24)) and run over
    the iteration space's dims **major to minor by its layout** (node_feat cols 134–139), which the real
    files show: every bound ≤ ceil(extent / unit) in that order (:data:`TILE_UNITS`). The iteration
    space is the kernel's output (the last node) when it has rank r; when the output is a tuple, the
    largest rank-r element of the called computation's root tuple (edges [u, v]: u uses v; ties → the
    later node); else the largest rank-r tensor of the kernel. No output bounds, no such node: zeros.
    ``bounds_set`` (6,) bool (:func:`tile_bounds_set` over all configs) replaces ``config_feat`` (then
    None) when the configs are streamed instead of held.
    """
    out = np.zeros(6, np.float64)
    set_ = tile_bounds_set(config_feat) if bounds_set is None else np.asarray(bounds_set, bool)
    r = int(6 - np.argmax(set_[::-1])) if set_.any() else 0
    if r == 0:
        return out
    nf = np.asarray(node_feat, np.float64)
    rank = output_rank(nf[:, 21:27])
    fits = (rank == r) & (nf[:, 18] != 1)
    if not fits.any():
        return out
    root = len(nf) - 1

    def largest(nodes: np.ndarray) -> int:
        nodes = np.sort(nodes[fits[nodes]])[::-1]
        return int(nodes[np.argmax(nf[nodes, 28])]) if len(nodes) else -1

    best = root if fits[root] else -1
    if best < 0 and nf[root, 18] == 1 and edge_index is not None:
        e = np.asarray(edge_index, np.int64).reshape(-1, 2)
        called = [v for v in e[e[:, 0] == root, 1] if nf[v, 18] == 1 and nf[v, 0] == 1]  # tuple roots
        if called:
            best = largest(e[np.isin(e[:, 0], called), 1])
    if best < 0:
        best = largest(np.arange(len(nf)))
    dims = nf[best, 21:21 + r]
    minor_to_major = np.rint(nf[best, 134:134 + r]).astype(np.int64)
    if sorted(minor_to_major.tolist()) == list(range(r)):
        dims = dims[minor_to_major[::-1]]
    out[:r] = dims
    return out


def tile_config_features(config_feat: np.ndarray, dtype: Any = np.float32,
                         extents: np.ndarray | None = None) -> np.ndarray:
    """Tile model inputs (k, N_TILE_INPUT = 42) from config_feat (k, 24) and the kernel's iteration
    space ``extents`` (6,) in bound order (:func:`tile_iteration_dims`; None = unknown, zeros).

    Columns 0–23: log1p(max(config_feat, 0)). Columns 24–41, per output-bound position d = 0..5 where
    bound b_d and extent e_d are both known (0 elsewhere), with the tile span s_d = min(b_d · unit_d,
    e_d) (unit: 128 on the last bounded position, 8 on the one before, else 1; :data:`TILE_UNITS`):
    log2 e_d / 10; log2(e_d / s_d) / 10 (log tiles along d); the padding of whole tiles,
    ceil(e_d / s_d) · s_d / e_d − 1.
    """
    cf = np.asarray(config_feat, np.float64)
    if cf.ndim != 2 or cf.shape[1] != N_TILE_FEAT:
        raise ValueError(f"config_feat must have shape (k, {N_TILE_FEAT}), got {cf.shape}")
    out = np.zeros((cf.shape[0], N_TILE_INPUT), np.float64)
    out[:, :N_TILE_FEAT] = np.log1p(np.maximum(cf, 0.0))
    if extents is not None:
        e = np.asarray(extents, np.float64).reshape(6)
        r = int(np.count_nonzero(e))
        unit = np.ones(6)
        unit[max(r - 2, 0):r] = TILE_UNITS[2 - min(r, 2):]
        b = cf[:, OUTPUT_BOUNDS]
        known = (b > 0) & (e > 0)[None, :]
        safe_e = np.where(e > 0, e, 1.0)[None, :]
        span = np.where(known, np.minimum(b * unit[None, :], safe_e), 1.0)
        out[:, 24:30] = np.where(known, np.log2(safe_e) / 10.0, 0.0)
        out[:, 30:36] = np.where(known, np.log2(safe_e / span) / 10.0, 0.0)
        out[:, 36:42] = np.where(known, np.ceil(safe_e / span) * span / safe_e - 1.0, 0.0)
    return out.astype(dtype)


def mean_operators(edge_index: np.ndarray, n: int, dtype: Any) -> tuple[Csr, Csr]:
    """(P_in, P_out): mean over producers and mean over consumers for edges [u, v] (u consumes v)."""
    e = np.asarray(edge_index, np.int64).reshape(-1, 2)
    if e.size and (e.min() < 0 or e.max() >= n):
        raise ValueError(f"edge_index refers to a node outside 0..{n - 1}")
    u, v = e[:, 0], e[:, 1]
    indeg = np.bincount(u, minlength=n).astype(np.float64)
    outdeg = np.bincount(v, minlength=n).astype(np.float64)
    w_in = (1.0 / indeg[u]) if len(u) else np.zeros(0)
    w_out = (1.0 / outdeg[v]) if len(v) else np.zeros(0)
    p_in = Csr.from_coo(u, v, w_in.astype(dtype), n, n)
    p_out = Csr.from_coo(v, u, w_out.astype(dtype), n, n)
    return p_in, p_out


def grow_regions(edge_index: np.ndarray, n: int, seeds: np.ndarray, layers: int) -> list[np.ndarray]:
    """R_0 = seeds (distinct, in the given order); R_l = R_{l−1} then its new undirected neighbours (ascending)."""
    e = np.asarray(edge_index, np.int64).reshape(-1, 2)
    u, v = e[:, 0], e[:, 1]
    seeds = np.asarray(seeds, np.int64)
    if len(np.unique(seeds)) != len(seeds):
        raise ValueError("configurable node ids must be distinct")
    regions = [seeds.copy()]
    for _ in range(layers):
        prev = regions[-1]
        mark = np.zeros(n, np.bool_)
        mark[prev] = True
        reach = np.zeros(n, np.bool_)
        reach[v[mark[u]]] = True
        reach[u[mark[v]]] = True
        new = np.flatnonzero(reach & ~mark)
        regions.append(np.concatenate([prev, new]).astype(np.int64))
    return regions


def restrict(op: Csr, rows: np.ndarray, cols: np.ndarray) -> Csr:
    """The operator restricted to the given global rows and columns, re-indexed locally."""
    n = op.n_rows
    row_pos = np.full(n, -1, np.int64)
    row_pos[rows] = np.arange(len(rows))
    col_pos = np.full(op.n_cols, -1, np.int64)
    col_pos[cols] = np.arange(len(cols))
    r, c, w = op.coo()
    lr, lc = row_pos[r], col_pos[c]
    keep = (lr >= 0) & (lc >= 0)
    return Csr.from_coo(lr[keep], lc[keep], w[keep], len(rows), len(cols))


@dataclass
class ConfigDigest:
    """What :func:`prepare_graph` needs from a graph's configs, computed without holding them all
    (``tpuprep.train.stream.config_digest`` streams them): cfg_modal (nc, 3) int64 (layout,
    :func:`modal_block_codes`); bounds_set (6,) bool (tile, :func:`tile_bounds_set`)."""

    cfg_modal: np.ndarray | None = None
    bounds_set: np.ndarray | None = None


def prepare_graph(record: Any, kind: str, mean: np.ndarray, std: np.ndarray, layers: int,
                  dtype: Any = np.float32, digest: ConfigDigest | None = None) -> PreparedGraph:
    """Build the config-independent inputs of ``record`` (a GraphRecord) for a model with ``layers`` steps.

    kind: "layout" or "tile"; mean / std: cleaned (134,) stats (:func:`clean_stats`). The config-derived
    inputs (layout modal blocks, tile bound positions) come from ``digest`` when given, so ``record``
    may be a structure read with ``load_graph(gid, configs=False)``; else from the record's configs.
    """
    node_feat = np.asarray(record.node_feat)
    n = int(node_feat.shape[0])
    edge_index = np.asarray(record.edge_index, np.int64).reshape(-1, 2)
    if kind == "layout":
        if record.node_config_ids is None:
            raise ValueError(f"{record.graph_id}: a layout graph needs node_config_ids")
        config_pos = np.asarray(record.node_config_ids, np.int64)
        if config_pos.size and (config_pos.min() < 0 or config_pos.max() >= n):
            raise ValueError(f"{record.graph_id}: node_config_ids refer to nodes outside 0..{n - 1}")
    else:
        config_pos = np.zeros(0, np.int64)
    x = node_features(node_feat, mean, std, config_pos, dtype)
    opcode = np.asarray(record.node_opcode).astype(np.int64)
    opcode = np.where((opcode >= 0) & (opcode < N_OPCODES), opcode, 0)
    p_in, p_out = mean_operators(edge_index, n, dtype)
    pg = PreparedGraph(record.graph_id, kind, n, x, opcode, p_in, p_out, p_in.transpose(),
                       p_out.transpose(), config_pos)
    if kind == "tile":
        if digest is None:
            pg.tile_extents = tile_iteration_dims(node_feat, np.asarray(record.config_feat), edge_index)
        else:
            pg.tile_extents = tile_iteration_dims(node_feat, None, edge_index, digest.bounds_set)
    if kind == "layout":
        pg.cfg_dims = np.asarray(node_feat[config_pos, 21:27], np.float64)
        pg.cfg_default = np.rint(np.asarray(node_feat[config_pos, 134:140], np.float64)).astype(np.int64)
        pg.cfg_modal = modal_block_codes(record) if digest is None else np.asarray(digest.cfg_modal, np.int64)
        cost = np.sqrt(node_work(node_feat, opcode, edge_index, config_pos))
        pg.cfg_cost = cost / cost.max() if cost.size else cost
        pg.cfg_compute = np.isin(opcode[config_pos], (OPCODE_CONVOLUTION, OPCODE_DOT))
        pg.regions = grow_regions(edge_index, n, config_pos, layers)
        pg.sub_in, pg.sub_out, pg.sub_in_t, pg.sub_out_t = [None], [None], [None], [None]
        for lay in range(1, layers + 1):
            si = restrict(p_in, pg.regions[lay], pg.regions[lay - 1])
            so = restrict(p_out, pg.regions[lay], pg.regions[lay - 1])
            pg.sub_in.append(si)
            pg.sub_out.append(so)
            pg.sub_in_t.append(si.transpose())
            pg.sub_out_t.append(so.transpose())
    return pg


def output_rank(dims: np.ndarray) -> np.ndarray:
    """(n,) int64 output rank from output dims (n, 6) (node_feat cols 21–26): 1 + the last non-zero dim,
    0 for tuples and scalars. (The pipeline's re-padding rule, ``kernels.repad.output_rank``, also
    reads the layout columns and so counts a trailing zero-size dim; these features never needed it.)"""
    nonzero = np.asarray(dims) > 0
    return np.where(nonzero.any(axis=1), 6 - np.argmax(nonzero[:, ::-1], axis=1), 0).astype(np.int64)


def dot_contraction(elements: np.ndarray, dims: np.ndarray, rank: np.ndarray, out: int, lhs: int,
                    rhs: int) -> float:
    """Contraction size k (the product of the contracted dims) of dot ``out`` = ``lhs`` · ``rhs``, ≥ 1.

    elements (n,) float64, dims (n, 6) float64 and rank (n,) int64 are per-node arrays; out / lhs / rhs
    index them. An HLO dot's output is [batch…, lhs free…, rhs free…] and |lhs|·|rhs| / |out| =
    batch · k², so k follows once the batch dims are known: the leading dims on which both operands and
    the output agree, at most rank(lhs) + rank(rhs) − rank(out) − 2 of them (one contracted dim at
    least). Batch dims must not count: a [b,m,k]·[b,k,n] dot does b·m·n·k multiply-adds, not b·m·n·k·√b.
    """
    most = min(int(rank[lhs] + rank[rhs] - rank[out]) - 2, int(rank[out]), int(rank[lhs]), int(rank[rhs]))
    batch_rank = 0
    while batch_rank < most and dims[lhs, batch_rank] == dims[rhs, batch_rank] == dims[out, batch_rank]:
        batch_rank += 1
    batch = float(np.prod(np.maximum(dims[out, :batch_rank], 1.0)))
    return max(1.0, math.sqrt(elements[lhs] * elements[rhs] / (elements[out] * batch)))


def node_work(node_feat: np.ndarray, opcode: np.ndarray, edge_index: np.ndarray,
              nodes: np.ndarray) -> np.ndarray:
    """(len(nodes),) float64 multiply-adds of each node: output elements (col 28) × window size (col 44)
    for a convolution, × contraction size for a dot (:func:`dot_contraction`, from its operands'
    shapes), × 1 otherwise; at least 1. Operands are the nodes it consumes (edge rows [u, v]: u uses v;
    a single operand is a dot of a tensor with itself, edges being deduplicated); a dot with no kept
    operand counts k = 1."""
    elements = np.maximum(np.asarray(node_feat[:, 28], np.float64), 1.0)
    dims = np.asarray(node_feat[:, 21:27], np.float64)
    rank = output_rank(dims)
    work = elements[nodes] * np.where(opcode[nodes] == OPCODE_CONVOLUTION,
                                      np.maximum(np.asarray(node_feat[nodes, 44], np.float64), 1.0), 1.0)
    for i in np.flatnonzero(opcode[nodes] == OPCODE_DOT):
        operands = edge_index[edge_index[:, 0] == nodes[i], 1]
        if len(operands) in (1, 2):
            work[i] *= dot_contraction(elements, dims, rank, int(nodes[i]), int(operands[0]),
                                       int(operands[-1]))
    return work


N_SUMMARY = 5
COMPUTE_SHARE = 3
"""The column of :func:`config_summary` the model's prior term reads (``model.py``): the share of the
compute ops' work whose output left its modal block."""


def config_summary(pg: PreparedGraph, feats: np.ndarray, violation: np.ndarray) -> np.ndarray:
    """(B, N_SUMMARY) config-level features that go straight into the head — the additive structure of
    real runtimes (a jump per group that leaves its modal layout, growing with its work):

    0 the violation ratio; 1 the share of configurable nodes whose output block left its modal one
    (mean of feat 6); 2 the share of the graph's configurable work that did (Σ feat 7 ÷ Σ ``cfg_cost``);
    3 (``COMPUTE_SHARE``) the same share over the compute ops only (convolutions and dots,
    ``cfg_compute``: a reshape's relayout is a copy, a cost of another kind and size); 4 the share of
    the compute ops' work whose operand blocks left their modal ones (Σ feat 8 over them ÷ their
    Σ ``cfg_cost``). A graph without a compute op has 0 in 3 and 4.
    """
    assert pg.cfg_cost is not None and pg.cfg_compute is not None
    b, nc = feats.shape[0], feats.shape[1]
    out = np.zeros((b, N_SUMMARY), feats.dtype)
    out[:, 0] = violation
    if nc:
        out[:, 1] = feats[:, :, 6].mean(axis=1)
        out[:, 2] = feats[:, :, 7].sum(axis=1) / max(float(pg.cfg_cost.sum()), 1e-12)
        compute = pg.cfg_compute
        work = max(float(pg.cfg_cost[compute].sum()), 1e-12)
        out[:, 3] = feats[:, compute, 7].sum(axis=1) / work
        out[:, 4] = feats[:, compute, 8].sum(axis=1) / work
    return out


MODAL_SAMPLE = 4096
"""Unique configs looked at to find each node's modal blocks (evenly spaced over the graph's)."""


def modal_rows(num_unique: int) -> np.ndarray:
    """The unique-config rows (k,) int64, sorted, that :func:`modal_block_codes` counts: at most
    ``MODAL_SAMPLE`` evenly spaced over 0..num_unique−1 (all of them in a smaller graph)."""
    return np.unique(np.linspace(0, num_unique - 1, min(num_unique, MODAL_SAMPLE)).astype(np.int64))


def modal_block_codes(record: Any) -> np.ndarray:
    """(nc, 3) int64: per configurable node, the base-7 code of its most frequent output (slots 0–5),
    operand-0 (6–11) and operand-1 (12–17) block, each on its own, over the graph's original configs,
    i.e. unique configs weighted by ``group_size``; ties → smallest code. At most ``MODAL_SAMPLE``
    evenly spaced unique configs are counted (:func:`modal_rows`). Uses only the config data every split
    has (no runtimes), so test graphs get it too."""
    codes = np.asarray(record.config_codes)  # (c_u, nc, 3): a block as one base-7 code (TGraph convention)
    rows = modal_rows(codes.shape[0])
    return modal_of(codes[rows], np.asarray(record.group_size)[rows])


COUNT_CHUNK = 1 << 21
"""Most codes :func:`modal_of` sorts at a time (a slice of its columns)."""


def modal_of(codes: np.ndarray, group_size: np.ndarray, chunk: int = COUNT_CHUNK) -> np.ndarray:
    """(nc, 3) int64: per node and block of ``codes`` (k, nc, 3) int (the blocks' base-7 codes of k unique
    configs), the code with the largest total ``group_size`` (k,); ties → smallest code; 0 when k = 0.

    Columns (node·3 + block) are counted ≤ ``chunk`` codes at a time: each is sorted, its runs of equal
    codes summed; besides ``codes``, memory stays bounded whatever k, nc and the distinct codes."""
    codes = np.asarray(codes)
    nc = codes.shape[1]
    flat = codes.reshape(codes.shape[0], nc * 3)  # (k, nc·3)
    k = flat.shape[0]
    size = np.asarray(group_size, np.float64)
    modal = np.zeros(nc * 3, np.int64)
    width = max(1, chunk // max(1, k))
    for lo in range(0, nc * 3 if k else 0, width):
        part = flat[:, lo:lo + width].T  # (w, k): one column per row
        order = np.argsort(part, axis=1, kind="stable")
        code = np.take_along_axis(part, order, 1)
        starts = np.ones(code.shape, bool)
        starts[:, 1:] = code[:, 1:] != code[:, :-1]
        at = np.flatnonzero(starts)  # the first of each run of equal codes, row-major
        weight = np.add.reduceat(size[order].ravel(), at)
        column, run_code = at // k, code.ravel()[at].astype(np.int64)
        best = np.lexsort((run_code, -weight, column))  # best first within a column
        first = best[np.r_[True, column[best][1:] != column[best][:-1]]]
        modal[lo + column[first]] = run_code[first]
    return modal.reshape(nc, 3)


def violation_ratio_of(position: np.ndarray, largest: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """The violation ratio (B,) float64 of seeds/002 §5.2: per config, the share of counted nodes whose
    scored layout position does not hold the node's largest output dim.

    position (B, nc) int: the output dim at the scored position (−1: unknown); largest (nc,) int: the
    largest output dim; rank (nc,) int: output rank. Counted: rank ≥ 2 and a known position; a config
    with no counted node scores 0.
    """
    counted = (rank[None] >= 2) & (position >= 0)
    n_counted = counted.sum(axis=1)
    violated = (counted & (position != largest[None])).sum(axis=1)
    return np.where(n_counted > 0, violated / np.maximum(n_counted, 1), 0.0)


def derived_config_features(pg: PreparedGraph, values: np.ndarray,
                            dtype: Any = np.float32) -> tuple[np.ndarray, np.ndarray]:
    """Hand-made layout features per configurable node and config, and the violation ratio per config.

    values (B, nc, 18) int8. Returns (feats (B, nc, N_DERIVED = 9), violation (B,)), both ``dtype``. With the output
    layout taken from the config, or from node_feat cols 134–139 when the block is all −1 (default):
    0 minor-most output dim is the largest dim (the 128-lane side, seeds/002 §5.2);
    1, 2 log2(1 + size) / 10 of the dims in the two most-minor positions; 3 operand-0 minor dim differs
    from the output's (a layout change, i.e. a copy); 4 the output block is the compiler default;
    5 the minor-most dim differs from the node's default layout; 6 the output block differs from the
    node's modal output block in this graph (``cfg_modal``: real runtimes jump when a group leaves its
    modal output layout, STATS §4); 7 feat 6 × the node's relative cost (``cfg_cost``: the jump grows with
    the node's work); 8 an operand block (slots 6–11 or 12–17) differs from the node's modal one, × its
    relative cost (the operand layout a compute op reads). Violation = mean of (1 − feat 0) over nodes of rank ≥ 2 (0 if none).
    """
    assert pg.cfg_dims is not None and pg.cfg_default is not None
    assert pg.cfg_modal is not None and pg.cfg_cost is not None
    v = np.asarray(values, np.int64)
    b, nc = v.shape[0], v.shape[1]
    feats = np.zeros((b, nc, N_DERIVED), np.float64)
    if nc == 0:
        return feats.astype(dtype), np.zeros(b, dtype)
    dims = pg.cfg_dims
    largest = dims.argmax(axis=1)
    rank = output_rank(dims)
    default = pg.cfg_default
    is_default = v[:, :, 0] < 0
    out = np.where(is_default[:, :, None], default[None], v[:, :, 0:6])
    inp = np.where((v[:, :, 6] < 0)[:, :, None], default[None], v[:, :, 6:12])
    m0, m1 = out[:, :, 0], out[:, :, 1]
    size = np.log2(1.0 + np.maximum(dims, 0.0)) / 10.0  # (nc, 6)
    node = np.arange(nc)[None, :]
    feats[:, :, 0] = (m0 == largest[None]) & (m0 >= 0)
    feats[:, :, 1] = np.where(m0 >= 0, size[node, np.clip(m0, 0, 5)], 0.0)
    feats[:, :, 2] = np.where(m1 >= 0, size[node, np.clip(m1, 0, 5)], 0.0)
    feats[:, :, 3] = (inp[:, :, 0] != m0) & (inp[:, :, 0] >= 0) & (m0 >= 0)
    feats[:, :, 4] = is_default
    feats[:, :, 5] = (m0 != default[None, :, 0]) & (m0 >= 0)
    codes = encode_base7(np.asarray(values, np.int8))  # (B, nc, 3): each block as one base-7 code, like cfg_modal
    off = codes != pg.cfg_modal[None]
    feats[:, :, 6] = off[:, :, 0]
    feats[:, :, 7] = feats[:, :, 6] * pg.cfg_cost[None]
    feats[:, :, 8] = (off[:, :, 1] | off[:, :, 2]) * pg.cfg_cost[None]
    viol = violation_ratio_of(m0, largest, rank)
    return feats.astype(dtype), viol.astype(dtype)
