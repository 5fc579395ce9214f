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
    "build_kernels",
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


def build_kernels() -> tuple:
    """The kernels ``warm`` compiles (those a build calls; the kernels they call are compiled with them)."""
    from . import dedup, prune, repad, tied

    return (prune.hop_distance, prune._select, repad._repad, tied._pack_rows, tied._add_configs,
            tied._gather_planes, dedup._add_rows)


def warm() -> None:
    """Compile (or load from the disk cache) the kernels a build runs, each for the one signature it
    uses: what ``convert.convert_file`` calls on a layout graph streamed from an npz (read-only float32
    chunks) and on a tile graph. Other kernels (reading, training, float64 inputs) compile on first use;
    ``tests/test_numba_cache.py`` checks that a build after ``warm`` compiles nothing more."""
    import numpy as np

    edges = np.array([[1, 0], [2, 1]], np.int64)
    kept = prune_graph(edges, 3, np.array([1], np.int64), 1)
    repad_node_feat(np.zeros((3, 140), np.float32), np.zeros(3, np.uint8), edges, kept.node_index)
    layout = LayoutCollector(2, 1, with_runtime=True)
    layout.add(np.full((2, 1, 18), -1, np.float32), np.array([2, 1], np.int64))
    layout.finish().codes.stored_planes()
    tile = Deduplicator(2, 24, with_runtime=True, with_normalizer=True)
    tile.add(float_keys(np.zeros((2, 24), np.float32)), np.array([2, 1], np.int64), np.array([1, 1], np.int64))
    tile.finish()
