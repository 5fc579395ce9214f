"""PyTorch adapter (``pip install tpuprep[torch]``): ``ConfigBatchDataset``, an ``IterableDataset`` over
``ConfigBatches``.

Each item is one batch as a dict (``sampling.batches.batch_arrays``): tensors of the NumPy dtypes
(node_feat (n, 140) float32, node_opcode (n,) uint8, edge_index (m, 2) int32, rows (k,) int64,
node_config_feat (k, nc, 18) int8 or config_feat (k, 24) float32, config_runtime (k,) int64 ns when the
split has runtimes, ...) plus ``graph_id`` (str), ``epoch`` and ``position`` (int). Tensors are copies
(the structures are shared read-only arrays). Use ``DataLoader(ds, batch_size=None, num_workers=n)``:
each worker reads every n-th batch of the rank's share, and the loader's round-robin gives them back
in the single-process order, with any start method (fork, spawn, forkserver).

Epochs: call ``ds.set_epoch(e)`` on the dataset object the loader holds before every epoch; workers read
the epoch (and a resume point) from memory they share with it at each ``iter(loader)``, so
``persistent_workers=True`` yields epoch e exactly as ``num_workers=0`` does, and keeps each worker's
structures cache across epochs (non-persistent workers start each epoch with an empty one). Under DDP
every rank yields ``len(ds)`` batches (``ConfigBatches``: padded or ``drop_last``), so no rank waits
for another in a collective.

Resume, two ways:

- torchdata's ``StatefulDataLoader`` (``pip install tpuprep[torch]`` brings torchdata): ``loader.state_dict()``
  after any batch, then a new loader of the same settings and number of workers, ``load_state_dict``,
  ``set_epoch`` of the saved epoch, iterate: exactly the batches the uninterrupted run had left, in order.
  The loader calls this dataset's ``state_dict`` / ``load_state_dict`` in each worker, which save and
  resume that worker's own progress (``ConfigBatches.worker_state``).
- ``ds.state_dict(position)`` with ``position = batch["position"]`` of the last batch consumed (without
  workers ``ds.state_dict()`` knows it; with workers it refuses to guess), then ``ds.load_state_dict(state)``
  (the same loader, even with persistent workers) or on a new ``ConfigBatchDataset`` of the same settings,
  of any rank, world size and number of workers (``ConfigBatches.load_state_dict``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from .sampling.batches import BatchesAdapter, ConfigBatches, batch_arrays

__all__ = ["ConfigBatchDataset"]


class ConfigBatchDataset(BatchesAdapter, IterableDataset):
    """The batches of a ``ConfigBatches`` as dicts of tensors, split over DataLoader workers (``len``,
    ``set_epoch``: ``BatchesAdapter``; ``state_dict`` / ``load_state_dict``: in the main process a rank
    state, in a DataLoader worker that worker's own state — the ``StatefulDataLoader`` protocol)."""

    def __init__(self, batches: ConfigBatches, warm_up: bool = True):
        """``warm_up``: read the first batch of the rank's share here, once (``ConfigBatches.warm_up``),
        so that fork-started DataLoader workers inherit the loaded kernels and that graph's structure."""
        super().__init__()
        self.batches = batches
        if warm_up and get_worker_info() is None:
            batches.warm_up()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        if info is not None:  # this process is a worker holding its own copy of the batches
            self.batches.set_worker(info.id, info.num_workers)
        return (to_tensors(batch_arrays(batch)) for batch in iter(self.batches))  # iter() begins the pass now

    def state_dict(self, position: int | None = None) -> dict[str, Any]:
        """In the main process: ``ConfigBatches.state_dict(position)`` (a rank state; ``position`` =
        the last consumed batch's ``batch["position"]``, needed with DataLoader workers, whose progress
        this process cannot see). In a DataLoader worker (``StatefulDataLoader`` asks each worker after
        each batch): ``ConfigBatches.worker_state()``, that worker's own progress."""
        if get_worker_info() is not None:
            return self.batches.worker_state()
        return self.batches.state_dict(position)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """In the main process: ``ConfigBatches.load_state_dict``. In a DataLoader worker (where
        ``StatefulDataLoader`` hands each worker its saved state): ``ConfigBatches.load_worker_state``."""
        info = get_worker_info()
        if info is None:
            self.batches.load_state_dict(state)
            return
        self.batches.set_worker(info.id, info.num_workers)
        self.batches.load_worker_state(state)


def to_tensors(arrays: dict[str, Any]) -> dict[str, Any]:
    """NumPy arrays → tensors (copies, so writable and owned by the item); other values unchanged.

    All tensors of one item are views of one fresh uint8 buffer (each at a 16-byte aligned offset): a
    DataLoader worker hands the main process one shared-memory block per item instead of one per
    tensor (each costs a file descriptor passed through a socket, ~0.5-1 ms)."""
    arrays_in = {key: np.asarray(value) for key, value in arrays.items() if isinstance(value, np.ndarray)}
    offsets, total = {}, 0
    for key, value in arrays_in.items():
        offsets[key] = total
        total += -(-value.nbytes // _ALIGN) * _ALIGN
    buffer = torch.empty(total, dtype=torch.uint8)
    raw = buffer.numpy()
    out = dict(arrays)
    for key, value in arrays_in.items():
        start, stop = offsets[key], offsets[key] + value.nbytes
        raw[start:stop].view(value.dtype).reshape(value.shape)[...] = value
        out[key] = buffer[start:stop].view(_torch_dtype(value.dtype)).view(value.shape)
    return out


_ALIGN = 16


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    """The torch dtype of a NumPy dtype (as ``torch.from_numpy`` maps it)."""
    return torch.from_numpy(np.empty(0, dtype)).dtype
