"""Pruning a layout graph to its configurable nodes and their K-hop neighbourhood (docs/spec.md §2.1).

Rules, for K = ``hops``:
- a node is kept when its undirected hop distance to the nearest configurable node is ≤ K;
- an edge is kept when both endpoints are kept and at least one endpoint lies within max(K − 1, 0)
  hops of a configurable node (K = 1: edges with a configurable endpoint, the TGraph rule);
- kept nodes keep their ascending original order, kept edges their original order.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .jit import frozen, kernel


class PrunedGraph(NamedTuple):
    """The kept part of a graph, in the ids of the kept nodes.

    node_index: (n',) int32, original id of every kept node, ascending.
    edge_index: (m', 2) int32, kept edges remapped to kept-node ids, original order.
    node_config_ids: (nc,) int32, configurable nodes remapped to kept-node ids.
    """

    node_index: np.ndarray
    edge_index: np.ndarray
    node_config_ids: np.ndarray


@kernel
def hop_distance(edge_index, num_nodes, sources, max_hops):
    """Undirected hop distance from the nearest source, capped: (n,) int32, −1 beyond ``max_hops``.

    edge_index: (m, 2) integer node ids; sources: (k,) integer node ids.
    """
    m = edge_index.shape[0]
    degree = np.zeros(num_nodes + 1, np.int64)
    for e in range(m):
        degree[edge_index[e, 0] + 1] += 1
        degree[edge_index[e, 1] + 1] += 1
    offsets = np.cumsum(degree)
    fill = offsets[:-1].copy()
    neighbours = np.empty(2 * m, np.int64)
    for e in range(m):
        u = edge_index[e, 0]
        v = edge_index[e, 1]
        neighbours[fill[u]] = v
        fill[u] += 1
        neighbours[fill[v]] = u
        fill[v] += 1

    dist = np.full(num_nodes, -1, np.int32)
    frontier = np.empty(num_nodes, np.int64)
    size = 0
    for s in sources:
        if dist[s] != 0:
            dist[s] = 0
            frontier[size] = s
            size += 1
    head = 0
    while head < size:
        u = frontier[head]
        head += 1
        d = dist[u]
        if d >= max_hops:
            continue
        for j in range(offsets[u], offsets[u + 1]):
            w = neighbours[j]
            if dist[w] < 0:
                dist[w] = d + 1
                frontier[size] = w
                size += 1
    return dist


@kernel
def _select(edge_index, dist, node_config_ids, edge_hops):
    n = dist.shape[0]
    new_id = np.full(n, -1, np.int32)
    kept = 0
    for i in range(n):
        if dist[i] >= 0:
            new_id[i] = kept
            kept += 1
    node_index = np.empty(kept, np.int32)
    for i in range(n):
        if new_id[i] >= 0:
            node_index[new_id[i]] = i

    m = edge_index.shape[0]
    edges = np.empty((m, 2), np.int32)
    m_kept = 0
    for e in range(m):
        u = edge_index[e, 0]
        v = edge_index[e, 1]
        du = dist[u]
        dv = dist[v]
        if du < 0 or dv < 0:
            continue
        if du <= edge_hops or dv <= edge_hops:
            edges[m_kept, 0] = new_id[u]
            edges[m_kept, 1] = new_id[v]
            m_kept += 1

    config_ids = np.empty(node_config_ids.shape[0], np.int32)
    for k in range(node_config_ids.shape[0]):
        config_ids[k] = new_id[node_config_ids[k]]
    return node_index, edges[:m_kept].copy(), config_ids


def prune_graph(
    edge_index: np.ndarray, num_nodes: int, node_config_ids: np.ndarray, hops: int
) -> PrunedGraph:
    """Keep the configurable nodes, their ``hops``-hop neighbourhood and the edges of docs/spec.md §2.1.

    edge_index: (m, 2) int32/int64 rows [u, v] with ids in 0..num_nodes−1;
    node_config_ids: (nc,) int32/int64 configurable node ids; hops: K ≥ 0.
    """
    if hops < 0:
        raise ValueError(f"hops must be >= 0, got {hops}")
    edge_index = frozen(np.ascontiguousarray(edge_index, dtype=np.int64).reshape(-1, 2))
    config_ids = frozen(np.ascontiguousarray(node_config_ids, dtype=np.int64))
    dist = hop_distance(edge_index, int(num_nodes), config_ids, int(hops))
    node_index, edges, new_config_ids = _select(edge_index, dist, config_ids, max(hops - 1, 0))
    return PrunedGraph(node_index, edges, new_config_ids)


def keep_all(edge_index: np.ndarray, num_nodes: int, node_config_ids: np.ndarray) -> PrunedGraph:
    """The identity "pruning" of ``--no-prune``: every node and edge, as int32."""
    return PrunedGraph(
        np.arange(num_nodes, dtype=np.int32),
        np.ascontiguousarray(edge_index, dtype=np.int32).reshape(-1, 2),
        np.ascontiguousarray(node_config_ids, dtype=np.int32),
    )


def remap_node_splits(node_splits: np.ndarray, node_index: np.ndarray) -> np.ndarray:
    """Each boundary b becomes the number of kept nodes with original index < b: (s,) int32.

    node_splits: (s,) or (1, s) integer boundaries; node_index: (n',) ascending kept ids.
    """
    bounds = np.asarray(node_splits).reshape(-1)
    return np.searchsorted(node_index, bounds, side="left").astype(np.int32)
