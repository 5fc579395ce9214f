"""What the reader derives without reading configs: the rows a sample draws (``sample_rows``), a layout
graph's per-unique-config columns from its structure (``unique_config_columns``), stored codes spread
over tied nodes (``expand_tied``), the rule that makes train statistics safe to divide by
(``safe_normalizer``), and ``DerivedCache``, the dataset's one cache of what samples need of a layout
graph besides its codes (its tie array and those columns), bounded in bytes. Pure NumPy;
``tpuprep.shards.reader`` re-exports the public names.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple, Protocol

import numpy as np

from . import arguments


class LayoutStructure(Protocol):
    """What ``unique_config_columns`` and ``DerivedCache`` read of a ``GraphRecord`` (the reader's, which
    imports this module)."""

    graph_id: str
    kind: str
    config_inverse: np.ndarray
    config_runtime_original: np.ndarray | None
    config_node_tie: np.ndarray | None


def expand_tied(stored: np.ndarray, tie: np.ndarray) -> np.ndarray:
    """Stored codes (k, nt, 3) int32 → per-node codes (k, nc, 3) int32 through ``tie`` (nc,) int32
    (``BadShards``-worthy ``IndexError`` when a tie names no stored column). No copy when nothing is tied."""
    if len(tie) == stored.shape[1] and np.array_equal(tie, np.arange(len(tie))):
        return stored
    if len(tie) and (tie.min() < 0 or tie.max() >= stored.shape[1]):
        raise IndexError(f"config_node_tie names column {int(tie.max())}, the codes hold {stored.shape[1]}")
    return np.take(stored, tie, axis=1)  # ~4x faster than stored[:, tie]


def safe_normalizer(mean: np.ndarray, std: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The one rule that makes train statistics safe to divide by: (mean, std_safe), float64 copies of
    the same shape. A non-finite mean becomes 0; a std that is 0 (a column constant over the train
    split), negative or non-finite becomes 1, so ``(x - mean) / std_safe`` is finite and leaves a
    constant column centred instead of dividing by zero."""
    mean = np.array(mean, np.float64)
    std = np.array(std, np.float64)
    mean[~np.isfinite(mean)] = 0.0
    std[~np.isfinite(std) | (std <= 0)] = 1.0
    return mean, std


def sample_rows(num_unique: int, k: int, seed: int = 0) -> np.ndarray:
    """The rows ``sample_configs`` draws: ``numpy.random.default_rng(seed).choice(num_unique,
    min(k, num_unique), replace=False)`` as (k',) int64, in the order drawn (distinct). ``TypeError`` /
    ``ValueError`` naming the argument unless each is an integer ≥ 0."""
    num_unique = arguments.count("num_unique", num_unique)
    k = arguments.count("k", k)
    rng = np.random.default_rng(arguments.seed(seed))
    return rng.choice(num_unique, min(k, num_unique), replace=False).astype(np.int64)


def unique_config_columns(structure: LayoutStructure) -> dict[str, np.ndarray | None]:
    """The per-unique-config columns of a layout graph, derived from its structure alone
    (``load_graph(graph_id, configs=False)``: ``config_inverse`` (c,) and ``config_runtime_original``
    (c,)), equal to the stored ones by the dedup rules (unique ids in order of first occurrence; each
    keeps its group's smallest runtime): ``group_size``, ``first_index`` (c_u,) int32, ``runtime`` and
    ``runtime_spread`` (c_u,) int64 ns (None on test). O(c log c) NumPy, no shard read: what
    ``DerivedCache`` keeps, so that a sample reads only the configs' ids and codes.
    ``ValueError`` when ``config_inverse`` does not number the groups in order of first occurrence."""
    inverse = np.asarray(structure.config_inverse, np.int64)
    if structure.kind != "layout":
        raise ValueError(f"{structure.graph_id} is a tile graph: only layout columns are derived")
    if not len(inverse):
        timed = structure.config_runtime_original is not None
        return _frozen({"group_size": np.zeros(0, np.int32), "first_index": np.zeros(0, np.int32),
                        "runtime": np.zeros(0, np.int64) if timed else None,
                        "runtime_spread": np.zeros(0, np.int64) if timed else None})
    running = np.maximum.accumulate(inverse)
    first = np.flatnonzero(np.r_[True, running[1:] > running[:-1]])
    if inverse[0] != 0 or not np.array_equal(inverse[first], np.arange(len(first))):
        raise ValueError(f"{structure.graph_id}: config_inverse does not number its groups in order "
                         "of first occurrence")
    group_size = np.bincount(inverse, minlength=len(first))
    out: dict[str, np.ndarray | None] = {"group_size": group_size.astype(np.int32),
                                         "first_index": first.astype(np.int32),
                                         "runtime": None, "runtime_spread": None}
    if structure.config_runtime_original is not None:
        order = np.argsort(inverse, kind="stable")
        starts = np.zeros(len(first), np.int64)
        np.cumsum(group_size[:-1], out=starts[1:])
        runtimes = np.asarray(structure.config_runtime_original, np.int64)[order]
        out["runtime"] = np.minimum.reduceat(runtimes, starts)
        out["runtime_spread"] = np.maximum.reduceat(runtimes, starts) - out["runtime"]
    return _frozen(out)


def _frozen(columns: dict[str, np.ndarray | None]) -> dict[str, np.ndarray | None]:
    """``columns`` with every array made read-only (as every array a ``GraphRecord`` hands out)."""
    for value in columns.values():
        if value is not None:
            value.flags.writeable = False
    return columns


DERIVED_BYTES = 64 << 20
"""Most bytes a ``DerivedCache`` keeps by default (24 bytes per unique config plus 4 per configurable node:
2.4 MB for a graph of 100,000 configs)."""


class Derived(NamedTuple):
    """What a sample of a layout graph needs besides its codes: ``tie`` (nc,) int32, the stored codes column
    of each configurable node (``config_node_tie``), and ``columns``, its ``unique_config_columns``. Every
    array is read-only."""

    tie: np.ndarray
    columns: dict[str, np.ndarray | None]

    @property
    def nbytes(self) -> int:
        return self.tie.nbytes + sum(a.nbytes for a in self.columns.values() if a is not None)


class DerivedCache:
    """The ``Derived`` of layout graphs, each made once from the graph's structure (``structure_of(graph id)``,
    e.g. ``GraphLoader.structure``) and kept in an LRU of at most ``max_bytes`` bytes together (the most
    recent entry always stays). Nothing else of a dataset keeps a graph's tie array or derived columns."""

    def __init__(self, structure_of: Callable[[str], LayoutStructure], max_bytes: int = DERIVED_BYTES):
        self.structure_of, self.max_bytes = structure_of, max_bytes
        self.entries: OrderedDict[str, Derived] = OrderedDict()
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, graph_id: str) -> Derived:
        """The ``Derived`` of a layout graph: kept, or made now (``ValueError`` from
        ``unique_config_columns`` when its structure does not number its groups in order)."""
        if graph_id in self.entries:
            self.entries.move_to_end(graph_id)
            return self.entries[graph_id]
        structure = self.structure_of(graph_id)
        entry = Derived(structure.config_node_tie, unique_config_columns(structure))
        self.entries[graph_id] = entry
        self.nbytes += entry.nbytes
        while len(self.entries) > 1 and self.nbytes > self.max_bytes:
            self.nbytes -= self.entries.popitem(last=False)[1].nbytes
        return entry
