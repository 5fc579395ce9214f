"""PyTorch Geometric adapter (``pip install 'tpuprep[pyg]'``): batches of ``ConfigBatches`` as
``torch_geometric.data.Data`` and ``Batch`` objects.

``to_data(item)`` turns one batch — a ``ConfigBatch`` of ``tpuprep.ConfigBatches``, an item of
``tpuprep.torch.ConfigBatchDataset`` (a dict of tensors) or ``sampling.batches.batch_arrays(batch)`` —
into a :class:`ConfigGraph`, a ``Data`` holding one graph and its k sampled configs:

====================== ======================= =============================================================
key                    shape, dtype            meaning
====================== ======================= =============================================================
``x``                  (n, 140) float32        ``node_feat`` as stored (not standardised)
``node_opcode``        (n,) int64              opcode ids (``nn.Embedding`` input)
``edge_index``         (2, m) int64            **data flow**: row 0 the operand, row 1 the node that uses it
``node_config_ids``    (nc,) int64             layout: the configurable nodes (indices into ``x``)
``config_node_mask``   (n,) bool               layout: True on the configurable nodes
``node_config_feat``   (k, nc, 18) int8        layout: each config's layouts of the configurable nodes
``config_feat``        (k, 24) float32         tile: each config's features
``config_runtime``     (k,) int64 ns           not on the test split
``config_runtime_normalizers`` (k,) int64 ns   tile, not on the test split
``rows``               (k,) int64              the configs' unique-config rows (``load_graph`` order)
``group_size``         (k,) int64              original configs each unique config stands for
``config_mask``        (k,) bool               True on real configs, False on padding (``k=``)
====================== ======================= =============================================================

plus ``graph_id`` and ``collection`` (str), ``epoch`` and ``position`` (int), and any other plain value the
item carries.

**Edge direction.** TpuGraphs stores ``edge_index`` as (m, 2) rows ``[u, v]``: node u uses node v's output.
PyG's message passing sends messages from ``edge_index[0]`` (source) to ``edge_index[1]`` (target)
(``flow="source_to_target"``), so ``to_data`` writes each edge as ``(v, u)``: a layer aggregates at a node
the values of its operands, as data flows through the program. ``edge_index.flip(0)`` is the other
direction (a node hears from its users); GraphSAGE-style rankers usually use both.

**Several graphs in one ``Batch``.** ``to_batch(items, k=None)`` is ``Batch.from_data_list`` of the items'
``ConfigGraph``: node-level keys are concatenated as PyG does (``edge_index`` and ``node_config_ids`` offset
by the nodes before them), ``node_config_feat`` along its configurable-node axis to (k, Σnc, 18), and the
per-config keys stacked to (B, k, …). Graphs with fewer unique configs than the others are padded to a
common k (the largest, or ``k=``) with ``config_mask`` False; padding values are those of
``tpuprep.sampling.padding`` (node_config_feat −1, rows −1, config_feat 0, group_size 0,
normalizers 1, runtimes as there).

**In a DataLoader.** ``DataLoader(ConfigBatchDataset(batches), batch_size=None, num_workers=n,
collate_fn=to_data)`` yields one ``ConfigGraph`` per step, converted in the worker processes: a worker
copies each graph into its ring of shared memory (``tpuprep.torch.stage``; the graph's pickle says only
where it is) and the main process copies it out, so every graph it yields holds its tensors in one fresh
buffer of its own, as ``ConfigBatchDataset`` items do (without room in the ring, the graph's own copies
cross with their bytes). For a ``Batch`` of B graphs per step, ``batch_size=B, collate_fn=list`` and
``to_batch(items)`` in the main process: the items cross through the ring. ``collate_fn=to_batch`` works
too (the Batch is made in the worker), but PyG writes each of its tensors to a shared-memory file of its
own, which the main process fetches one by one: several times slower (docs/readers.md, PyTorch
Geometric). Both functions are picklable for spawn workers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import torch
from torch.utils.data import get_worker_info
from torch_geometric.data import Batch, Data

from .sampling.batches import batch_arrays
from .sampling.padding import LAYOUT
from .torch import BatchTensors, in_ring, stage

__all__ = ["CONFIG_KEYS", "ConfigGraph", "to_batch", "to_data"]

CONFIG_KEYS = ("node_config_feat", "config_feat", "config_runtime", "config_runtime_normalizers", "rows",
               "group_size", "config_mask")
"""The per-config keys of a :class:`ConfigGraph` (their first axis is the k configs)."""
_INT64 = ("node_opcode", "node_config_ids", "rows", "group_size", "config_runtime", "config_runtime_normalizers")


class ConfigGraph(Data):
    """One graph and its k sampled configs (the keys of the module docstring), batchable by PyG:
    ``node_config_ids`` is offset like ``edge_index``, ``node_config_feat`` concatenated along its
    configurable-node axis, the other per-config keys stacked (B, k, …)."""

    def __inc__(self, key: str, value: Any, *args: Any, **kwargs: Any) -> Any:
        if key == "node_config_ids":
            return self.num_nodes
        return super().__inc__(key, value, *args, **kwargs)

    def __cat_dim__(self, key: str, value: Any, *args: Any, **kwargs: Any) -> Any:
        if key == "node_config_feat":
            return 1
        if key in CONFIG_KEYS:
            return None  # stacked along a new first axis
        return super().__cat_dim__(key, value, *args, **kwargs)


def to_data(item: Any, k: int | None = None) -> ConfigGraph:
    """One batch (a ``ConfigBatch``, a ``ConfigBatchDataset`` item or a ``batch_arrays`` dict) → a
    :class:`ConfigGraph`; with ``k``, its configs padded to exactly k (``config_mask`` False on padding;
    more than k configs is a ValueError).

    In a DataLoader worker (``collate_fn=to_data``) the graph's tensors are copied into the worker's
    ring (``tpuprep.torch.stage``) and the graph crosses to the main process as where they are; there
    its tensors are views of one fresh buffer of its own. Without room in the ring they are the
    graph's own copies, and cross with their bytes."""
    values = _graph_values(item, k)
    if get_worker_info() is None:
        return ConfigGraph(**values)
    staged = stage(values)
    if staged is None:  # no room: no tensor may stay a view of the ring (a ConfigBatchDataset item's)
        return ConfigGraph(**{key: value.clone() if isinstance(value, torch.Tensor) and in_ring(value) else value
                              for key, value in values.items()})
    graph = ConfigGraph(**staged)
    graph.__dict__["_staged"] = staged.staged  # beside its store (Data would put a _key in the store's __dict__)
    return graph


def _graph_values(item: Any, k: int | None) -> dict[str, Any]:
    """The keyword arguments of ``item``'s :class:`ConfigGraph` (``to_data``)."""
    arrays = batch_arrays(item) if hasattr(item, "structure") else item
    if not isinstance(arrays, Mapping) or "edge_index" not in arrays or "node_feat" not in arrays:
        raise TypeError(f"to_data takes a ConfigBatch or a batch dict, got {type(item).__name__}")
    t = {key: _tensor(value) for key, value in arrays.items() if _is_array(value)}
    plain = {key: value for key, value in arrays.items() if not _is_array(value)}
    n = int(t["node_feat"].shape[0])
    edges = t["edge_index"].to(torch.int64).reshape(-1, 2)
    out: dict[str, Any] = {"x": t["node_feat"], "edge_index": edges.flip(1).T.contiguous(), "num_nodes": n}
    for key, value in t.items():
        if key not in ("node_feat", "edge_index"):
            out[key] = value.to(torch.int64) if key in _INT64 else value
    if "node_config_ids" in out:
        mask = torch.zeros(n, dtype=torch.bool)
        mask[out["node_config_ids"]] = True
        out["config_node_mask"] = mask
    count = int(out["rows"].shape[0])
    out["config_mask"] = torch.ones(count, dtype=torch.bool)
    if k is not None:
        if count > k:
            raise ValueError(f"k must be at least the batch's {count} configs, got {k}")
        for key in CONFIG_KEYS:
            if key in out:
                out[key] = _pad_configs(key, out[key], k)
    return out | plain


def _reduce_graph(graph: ConfigGraph) -> tuple[Any, tuple[Any, ...]]:
    """How ``ForkingPickler`` (a DataLoader's queues) pickles a :class:`ConfigGraph`: its keys as a
    ``tpuprep.torch.BatchTensors`` (in a worker: through the ring when ``to_data`` staged the graph
    there and it is unchanged, else with its bytes, never as views of the ring), rebuilt as a graph."""
    item = BatchTensors(graph.to_dict())
    item.staged = graph.__dict__.get("_staged")
    extra = {key: value for key, value in graph.__dict__.items() if key not in ("_store", "_staged")}
    return _graph_of, (item, extra)


def _graph_of(item: BatchTensors, extra: dict[str, Any]) -> ConfigGraph:
    """The main process's side of ``_reduce_graph``."""
    graph = ConfigGraph(**item)
    graph.__dict__.update(extra)
    return graph


ForkingPickler.register(ConfigGraph, _reduce_graph)


def to_batch(items: Sequence[Any], k: int | None = None) -> Batch:
    """Several batches (one graph each) → one ``torch_geometric.data.Batch``, every graph's configs padded
    to ``k`` (default: the most any of them has)."""
    if not items:
        raise ValueError("to_batch needs at least one batch")
    graphs = [ConfigGraph(**_graph_values(item, None)) for item in items]  # from_data_list copies them
    k = max(len(g.rows) for g in graphs) if k is None else k
    for key in CONFIG_KEYS:
        missing = [g.graph_id for g in graphs if (key in g) != (key in graphs[0])]
        if missing:
            raise ValueError(f"cannot batch graphs with and without {key}: {missing[0]} differs from "
                             f"{graphs[0].graph_id} (mixed kinds or splits)")
    for g in graphs:
        if len(g.rows) > k:
            raise ValueError(f"k must be at least {g.graph_id}'s {len(g.rows)} configs, got {k}")
        for key in CONFIG_KEYS:
            if key in g:
                g[key] = _pad_configs(key, g[key], k)
    return Batch.from_data_list(graphs)


def _is_array(value: Any) -> bool:
    return isinstance(value, np.ndarray | torch.Tensor)


def _tensor(value: np.ndarray | torch.Tensor) -> torch.Tensor:
    """A tensor: a NumPy array copied (the structures are shared read-only arrays), a tensor as it is
    (an item's own; ``to_data`` copies any that views a worker's ring)."""
    return value if isinstance(value, torch.Tensor) else torch.from_numpy(np.array(value))


def _pad_configs(key: str, value: torch.Tensor, k: int) -> torch.Tensor:
    """``value`` (count, …) padded along its first axis to k with the key's padding value."""
    count = value.shape[0]
    if count == k:
        return value
    fill = False if key == "config_mask" else LAYOUT[key][1]
    pad = torch.full((k - count, *value.shape[1:]), fill, dtype=value.dtype)
    return torch.cat([value, pad])
