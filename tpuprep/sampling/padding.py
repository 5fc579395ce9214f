"""Static shapes for compiled training steps (issue #28): pad a batch to one rung of a small ladder.

A ``jax.jit`` (or ``torch.compile``, XLA, TensorRT ...) step compiles once per distinct input shape. An
unpadded epoch of ``ConfigBatches`` has as many shapes as graph sizes (122 on tile:xla); padded to the
rungs of a ``ShapeLadder`` it has at most ``len(ladder)`` (8 by default).

A rung is a *triple* of sizes — nodes N, edges M, configurable nodes NC (layout; tile has none) — and a
batch goes to the first rung its graph fits: n < N (one padding node is always left: see below),
m ≤ M, nc ≤ NC. The config axis is padded to the fixed k. So the number of shape signatures of an
epoch is at most the number of rungs, whatever the collection holds.

``ShapeLadder.from_sizes`` builds the rungs from the per-graph sizes of a collection (every split, so
train, valid and test batches share the compiled shapes): node caps grow geometrically from the
smallest graph to the largest (whose rung is the top one, so no graph of the collection overflows);
each rung's edge and config-node caps are the largest of the graphs whose node count fits it.
``collection_sizes`` reads those sizes from the shards (three int columns of the ``graphs`` table).

``pad_batch`` pads the dict of NumPy arrays of a batch (``sampling.batches.batch_arrays``) and adds
boolean masks; ``unpad_batch`` inverts it exactly. Real entries always come first (masks are True on a
prefix). Padding values: node_feat 0.0, node_opcode 0, node_config_feat −1 (the "no layout" value),
config_feat 0.0, rows −1, group_size 0, config_runtime ``PAD_RUNTIME`` = 2**63 − 1 ns (the int64
maximum: slower than any real runtime, and real runtimes of 0 are valid, so a ranking loss that forgets
``config_mask`` ranks the padding configs last, never first), config_runtime_normalizers 1. Padded edges
are ``(N−1, N−1)`` and padded ``node_config_ids`` are ``N−1``: node N−1 is always a padding node, so
a message-passing layer that ignores ``edge_mask`` still never mixes a padding value into a real node
(nor a real one into padding, except into node N−1, which a loss must ignore through ``node_mask``).

This module is pure NumPy (``collection_sizes`` reads through the dataset's ``shards.scans``): any
stack can use it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["MASKS", "PAD_RUNTIME", "ShapeLadder", "collection_sizes", "pad_batch", "unpad_batch"]

DEFAULT_RUNGS = 8
ALIGN = 8  # rung sizes are multiples of 8 (vector-friendly; costs at most 7 rows per axis)

#: the config_runtime of a padding config (ns): the int64 maximum, slower than every real runtime
PAD_RUNTIME = int(np.iinfo(np.int64).max)

# key -> (axes: one of "node", "edge", "config", "cnode" or None per dimension, padding value)
LAYOUT: dict[str, tuple[tuple[str | None, ...], Any]] = {
    "node_feat": (("node", None), 0),
    "node_opcode": (("node",), 0),
    "edge_index": (("edge", None), None),  # padded with N−1 (a padding node)
    "node_config_ids": (("cnode",), None),  # padded with N−1 too
    "node_config_feat": (("config", "cnode", None), -1),
    "config_feat": (("config", None), 0),
    "rows": (("config",), -1),
    "group_size": (("config",), 0),
    "config_runtime": (("config",), PAD_RUNTIME),  # ranked after every real config
    "config_runtime_normalizers": (("config",), 1),
}
MASKS = {"node": "node_mask", "edge": "edge_mask", "config": "config_mask", "cnode": "config_node_mask"}
"""The mask key of each padded axis: (N,), (M,), (k,) and (NC,) bool, True on real entries."""


def _round_up(x: int, step: int = ALIGN) -> int:
    return -(-int(x) // step) * step


@dataclass(frozen=True)
class ShapeLadder:
    """Rungs of padded sizes, smallest first: ``nodes[i]`` N, ``edges[i]`` M and (layout)
    ``config_nodes[i]`` NC of rung i (tuples of ints, each non-decreasing; ``config_nodes`` is None for
    tile). A graph of (n, m, nc) goes to the first rung with n < N, m ≤ M, nc ≤ NC (``rung``)."""

    nodes: tuple[int, ...]
    edges: tuple[int, ...]
    config_nodes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        sizes = [self.nodes, self.edges] + ([self.config_nodes] if self.config_nodes is not None else [])
        if not self.nodes or any(len(s) != len(self.nodes) for s in sizes):
            raise ValueError(f"a ladder needs ≥ 1 rung and as many sizes per axis: {self}")
        for s in sizes:
            if any(b < a for a, b in itertools.pairwise(s)) or min(s) < 0:
                raise ValueError(f"ladder sizes must be ≥ 0 and non-decreasing: {s}")
        if min(self.nodes) < 1:
            raise ValueError("every rung needs ≥ 1 node (the padding node)")

    def __len__(self) -> int:
        return len(self.nodes)

    @classmethod
    def from_sizes(cls, nodes: Sequence[int] | np.ndarray, edges: Sequence[int] | np.ndarray,
                   config_nodes: Sequence[int] | np.ndarray | None = None,
                   rungs: int = DEFAULT_RUNGS) -> ShapeLadder:
        """The ladder of a collection from its graphs' sizes ((G,) ints each: num_nodes, num_edges and,
        for layout, num_config_nodes): at most ``rungs`` rungs whose node caps grow geometrically from
        the smallest n to the largest; a rung's M and NC are the largest m and nc of the graphs whose n
        is within its cap, so every listed graph fits a rung and the top rung holds the largest."""
        n = np.asarray(nodes, np.int64)
        m = np.asarray(edges, np.int64)
        nc = None if config_nodes is None else np.asarray(config_nodes, np.int64)
        if n.ndim != 1 or len(n) == 0 or m.shape != n.shape or (nc is not None and nc.shape != n.shape):
            raise ValueError("from_sizes needs ≥ 1 graph and as many sizes per axis")
        if isinstance(rungs, bool) or not isinstance(rungs, int) or rungs < 1:
            raise ValueError(f"rungs must be an int ≥ 1, got {rungs!r}")
        lo, hi = max(int(n.min()), 1), max(int(n.max()), 1)
        ratio = (hi / lo) ** (1 / max(rungs - 1, 1))
        caps = sorted({min(hi, math.ceil(lo * ratio ** i)) for i in range(rungs - 1)} | {hi})
        out_n, out_m, out_nc = [], [], []
        for cap in caps:
            inside = n <= cap
            if not inside.any():
                continue  # no graph would use this rung
            out_n.append(_round_up(cap + 1))  # + the padding node
            out_m.append(_round_up(m[inside].max()))
            if nc is not None:
                out_nc.append(_round_up(nc[inside].max()))
        rows = list(zip(out_n, out_m, out_nc or out_m, strict=True))
        keep = [j for j in range(len(rows)) if j + 1 == len(rows) or rows[j] != rows[j + 1]]  # rounding ties
        return cls(tuple(out_n[j] for j in keep), tuple(out_m[j] for j in keep),
                   tuple(out_nc[j] for j in keep) if nc is not None else None)

    def rung(self, num_nodes: int, num_edges: int, num_config_nodes: int | None = None) -> int:
        """Index of the first rung a graph of these sizes fits. ``ValueError`` if none does (a graph
        larger than the ladder's top rung: build the ladder from the sizes of every graph you pad)."""
        for i in range(len(self)):
            if (num_nodes < self.nodes[i] and num_edges <= self.edges[i]
                    and (self.config_nodes is None or num_config_nodes is None
                         or num_config_nodes <= self.config_nodes[i])):
                return i
        top = (self.nodes[-1] - 1, self.edges[-1], self.config_nodes[-1] if self.config_nodes else None)
        raise ValueError(f"a graph of {num_nodes} nodes, {num_edges} edges, {num_config_nodes} configurable "
                         f"nodes is larger than the ladder's top rung (n ≤ {top[0]}, m ≤ {top[1]}, "
                         f"nc ≤ {top[2]}): build the ladder from every graph it pads")

    def shape(self, i: int) -> dict[str, int]:
        """Rung i's sizes: {"node": N, "edge": M, "cnode": NC (layout)}."""
        out = {"node": self.nodes[i], "edge": self.edges[i]}
        if self.config_nodes is not None:
            out["cnode"] = self.config_nodes[i]
        return out


def collection_sizes(ds: Any, collection: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(num_nodes, num_edges, num_config_nodes or None for tile), each (G,) int64, of every graph of
    ``collection`` over all its splits, read from the shards' ``graphs`` table (three int columns, never
    the features) through the files the dataset opened (``shards.scans.graph_columns``): a shard changed
    since is ``BadShards``, "the shard folder changed after it was opened", never another build's sizes."""
    from ..shards.scans import graph_columns

    layout = collection.startswith("layout")
    cols = ["num_nodes", "num_edges"] + (["num_config_nodes"] if layout else [])
    got = graph_columns(ds.files, ds.manifest, collection, cols)
    return got["num_nodes"], got["num_edges"], got["num_config_nodes"] if layout else None


def pad_batch(arrays: dict[str, Any], ladder: ShapeLadder, k: int) -> dict[str, Any]:
    """A batch's arrays (``batch_arrays``: node_feat (n, 140) float32, node_opcode (n,) uint8,
    edge_index (m, 2) int32, rows (k', ) int64, ... with k' ≤ k) padded to the rung of its graph and to
    k configs, plus the masks ``node_mask`` (N,), ``edge_mask`` (M,), ``config_mask`` (k,) and, for
    layout, ``config_node_mask`` (NC,), bool, True on real entries. Dtypes are kept; keys this module
    does not know and non-array values are passed through unchanged; ``rung`` (int) is added. The
    result's arrays are new (writable); the input is not modified."""
    n = len(arrays["node_feat"])
    m = len(arrays["edge_index"])
    ids = arrays.get("node_config_ids")
    nc = None if ids is None else len(ids)
    i = ladder.rung(n, m, nc)
    size = ladder.shape(i)
    size["config"] = k
    have = {"node": n, "edge": m, "cnode": nc}
    out: dict[str, Any] = {}
    for key, value in arrays.items():
        if key not in LAYOUT or not isinstance(value, np.ndarray):
            out[key] = value
            continue
        axes, fill = LAYOUT[key]
        if fill is None:
            fill = size["node"] - 1
        if axes[0] == "config":
            have["config"] = len(value)
            if len(value) > k:
                raise ValueError(f"{key} has {len(value)} configs, more than k = {k}")
        if "cnode" in axes and "cnode" not in size:
            raise ValueError(f"{key} needs a ladder with config_nodes (a layout ladder)")
        shape = tuple(value.shape[d] if axis is None else size[axis] for d, axis in enumerate(axes))
        padded = np.full(shape, fill, value.dtype)
        padded[tuple(slice(0, s) for s in value.shape)] = value
        out[key] = padded
    for axis, key in MASKS.items():
        if axis in size and have.get(axis) is not None:
            mask = np.zeros(size[axis], bool)
            mask[:have[axis]] = True
            out[key] = mask
    out["rung"] = i
    return out


def unpad_batch(padded: dict[str, Any]) -> dict[str, Any]:
    """The inverse of ``pad_batch``: every padded array cut back to its real entries by the masks, the
    masks and ``rung`` dropped (arrays are copies)."""
    masks = {axis: np.asarray(padded[key]) for axis, key in MASKS.items() if key in padded}
    out: dict[str, Any] = {}
    for key, value in padded.items():
        if key in MASKS.values() or key == "rung":
            continue
        if key not in LAYOUT or not isinstance(value, np.ndarray):
            out[key] = value
            continue
        axes, _ = LAYOUT[key]
        for d, axis in enumerate(axes):
            if axis is not None:
                value = np.compress(masks[axis], value, axis=d)
        out[key] = value
    return out
