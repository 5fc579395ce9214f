"""The reference rules ``verify`` recomputes in plain NumPy (docs/spec.md §2): the kept nodes and
edges of pruning, the re-padding of node features, and the per-graph feature moments."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..tpugraphs import FEATURE_STATS_COLUMNS, OPCODE_CONVOLUTION


@dataclass
class InputFacts:
    """What an input file and the build options say a graph's shards must hold (recomputed here).

    Counts of the input (``*_before``, ``configs``) and of the kept graph (``*_after``), re-padding
    anomalies among the kept nodes (0 with ``--no-repad``), configurable nodes (None for tile).
    """

    nodes_before: int
    edges_before: int
    configs: int
    nodes_after: int
    edges_after: int
    anomalies: int
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


def repad_reference(feat: np.ndarray, opcode: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """docs/spec.md §2.2 in plain NumPy: the re-padded copy (n, 140) float32 of ``feat`` (n, 140) float32 and the
    anomaly mask (n,) bool (first r layout entries not a permutation of 0..r−1); ``opcode`` (n,)."""
    dims = feat[:, 21:27] != 0
    r_dims = np.where(dims.any(1), 6 - np.argmax(dims[:, ::-1], axis=1), 0)
    layout = feat[:, 134:140]
    r_perm = np.trunc(np.clip(layout.max(1), -1.0, 5.0)).astype(np.int64) + 1
    r = np.maximum(r_dims, r_perm)
    r[(r_dims == 0) & (feat[:, 28] == 1.0)] = 0
    r[feat[:, 18] == 1.0] = 0
    out = feat.copy()
    slot = np.arange(6)
    out[:, 134:140][slot[None, :] >= r[:, None]] = -1.0
    spatial = np.where(np.asarray(opcode) == OPCODE_CONVOLUTION, np.minimum(np.maximum(r - 2, 0), 4), 0)
    pad = np.arange(4)[None, :] >= spatial[:, None]
    out[:, 95:99][pad] = -1.0
    out[:, 101:105][pad] = -1.0
    head = slot[None, :] < r[:, None]
    fine = (layout == np.trunc(layout)) & (layout >= 0) & (layout < r[:, None])
    value = np.where(head & fine, layout, -1).astype(np.int64)
    repeated = np.stack([(value == k).sum(1) for k in range(6)], axis=1) > 1
    anomalous = (head & ~fine).any(1) | repeated.any(1)
    return out, anomalous


def feature_moments(node_feat: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """(count, mean (134,), sum of squared deviations (134,)) of node_feat[:, :134] in float64."""
    x = np.asarray(node_feat, np.float64)[:, :FEATURE_STATS_COLUMNS]
    if not len(x):
        return 0, np.zeros(FEATURE_STATS_COLUMNS), np.zeros(FEATURE_STATS_COLUMNS)
    mean = x.mean(axis=0)
    return len(x), mean, ((x - mean) ** 2).sum(axis=0)

