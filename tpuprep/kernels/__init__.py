"""Numba kernels over plain NumPy arrays: the hot path of tpuprep (docs/spec.md §2)."""

from .base7 import ConfigValueError, decode_base7, encode_base7, pack_chunk
from .dedup import Deduplicator, DedupResult, dedup_rows, float_keys
from .planes import join_columns, join_planes, split_planes
from .prune import PrunedGraph, keep_all, prune_graph, remap_node_splits
from .repad import Repadded, repad_node_feat
from .tied import LayoutCollector, LayoutDedupResult, TiedCodes, keep_spare_store

__all__ = [
    "ConfigValueError",
    "DedupResult",
    "Deduplicator",
    "LayoutCollector",
    "LayoutDedupResult",
    "PrunedGraph",
    "Repadded",
    "TiedCodes",
    "decode_base7",
    "dedup_rows",
    "encode_base7",
    "float_keys",
    "join_columns",
    "join_planes",
    "keep_all",
    "keep_spare_store",
    "pack_chunk",
    "prune_graph",
    "remap_node_splits",
    "repad_node_feat",
    "split_planes",
    "warm",
]


def warm() -> None:
    """Run every kernel once on tiny inputs (compiles, or loads from the disk cache)."""
    import numpy as np

    edges = np.array([[1, 0], [2, 1]], np.int64)
    prune_graph(edges, 3, np.array([1], np.int64), 1)
    repad_node_feat(np.zeros((2, 140), np.float32), np.array([26, 0], np.uint8), edges[:1])
    codes = pack_chunk(np.full((2, 1, 18), -1, np.float32))
    # chunks streamed from a member are read-only views of the inflated bytes (a type of their own)
    pack_chunk(np.frombuffer(np.full(18, -1, np.float32).tobytes(), np.float32).reshape(1, 1, 18))
    pack_chunk(np.full((1, 1, 18), -1, np.float64))
    dedup_rows(codes.reshape(2, -1), np.array([2, 1], np.int64))
    dedup_rows(codes.reshape(2, -1))
    dedup_rows(codes.reshape(2, -1), np.array([2, 1], np.int64), np.array([1, 1], np.int64))
    for values in (np.full((2, 2, 18), -1, np.float32), np.full((2, 2, 18), -1, np.float64)):
        for dedup in (True, False):
            layout = LayoutCollector(2, 2, with_runtime=dedup, dedup=dedup)
            layout.add(values[:1], np.array([2], np.int64) if dedup else None)
            layout.add(values[1:], np.array([1], np.int64) if dedup else None)
            tied = layout.finish().codes
            tied.stored()
            tied.stored_planes()
    stored = split_planes(codes.reshape(2, -1))
    join_planes(stored)
    join_planes(np.frombuffer(stored.tobytes(), np.uint8).reshape(stored.shape))  # as read from a shard
    join_columns(np.frombuffer(stored.tobytes(), np.uint8).reshape(stored.shape), np.zeros(2, np.int64))
    # a streamed chunk: a read-only view of the inflated bytes
    chunk = np.frombuffer(np.full(36, -1, np.float32).tobytes(), np.float32).reshape(1, 2, 18)
    LayoutCollector(1, 2, with_runtime=False).add(chunk)
