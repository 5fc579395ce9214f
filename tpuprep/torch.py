"""PyTorch adapter (``pip install tpuprep[torch]``): ``ConfigBatchDataset``, an ``IterableDataset`` over
``ConfigBatches``.

Each item is one batch as a ``BatchTensors`` (a ``dict``; ``sampling.batches.batch_arrays``): tensors of
the NumPy dtypes (node_feat (n, 140) float32, node_opcode (n,) uint8, edge_index (m, 2) int32, rows (k,)
int64, node_config_feat (k, nc, 18) int8 or config_feat (k, 24) float32, config_runtime (k,) int64 ns when
the split has runtimes, ...) plus ``graph_id`` and ``collection`` (str), ``epoch`` and ``position``
(int). An item's tensors are views of one fresh buffer of its own (writable; the structures they were
copied from are shared read-only arrays). Use ``DataLoader(ds, batch_size=None, num_workers=n)``: each
worker reads every n-th batch of the rank's share, and the loader's round-robin gives them back in the
single-process order, with any start method (fork, spawn, forkserver). A worker hands its batches to the
main process through a ring of shared memory (``sampling.transfer``; ``transfer_bytes``, 16 MiB per
worker): the main process only copies each batch out into its own buffer. A ``collate_fn`` in the
workers keeps to the ring when it returns the items unchanged (or lists of them) or
``tpuprep.pyg.to_data`` graphs (``stage``); a changed item crosses with its bytes.

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

import os
import threading
from collections.abc import Iterator
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from .sampling.batches import BatchesAdapter, ConfigBatch, ConfigBatches, batch_arrays
from .sampling.transfer import HEADER, Ring, aligned_offsets

__all__ = ["TRANSFER_BYTES", "BatchTensors", "ConfigBatchDataset", "to_tensors"]

#: bytes of shared memory each DataLoader worker hands its batches over through (a batch of more than
#: half of it goes through the DataLoader's pipe instead)
TRANSFER_BYTES = 16 << 20


class ConfigBatchDataset(BatchesAdapter, IterableDataset):
    """The batches of a ``ConfigBatches`` as ``BatchTensors``, split over DataLoader workers (``len``,
    ``set_epoch``: ``BatchesAdapter``; ``state_dict`` / ``load_state_dict``: in the main process a rank
    state, in a DataLoader worker that worker's own state — the ``StatefulDataLoader`` protocol)."""

    def __init__(self, batches: ConfigBatches, warm_up: bool = True, transfer_bytes: int = TRANSFER_BYTES):
        """``warm_up``: read the first batch of the rank's share here, once (``ConfigBatches.warm_up``),
        so that fork-started DataLoader workers inherit the loaded kernels and that graph's structure.
        ``transfer_bytes``: the shared memory each worker hands batches over through (0: none, every
        batch through the DataLoader's pipe)."""
        super().__init__()
        if isinstance(transfer_bytes, bool) or not isinstance(transfer_bytes, int) or transfer_bytes < 0:
            raise ValueError(f"transfer_bytes must be an int ≥ 0, got {transfer_bytes!r}")
        self.batches = batches
        self.transfer_bytes = transfer_bytes
        if warm_up and get_worker_info() is None:
            batches.warm_up()

    def __iter__(self) -> Iterator[BatchTensors]:
        info = get_worker_info()
        if info is not None:  # this process is a worker holding its own copy of the batches
            self.batches.set_worker(info.id, info.num_workers)
            _SENDER.transfer_bytes = self.transfer_bytes
        return map(_tensors_of, iter(self.batches))  # iter() begins the pass now

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


class BatchTensors(dict):
    """One batch as a dict of tensors (and ``graph_id``, ``collection``, ``epoch``, ``position``): what
    ``ConfigBatchDataset`` yields. A plain dict to its users; pickled by a DataLoader worker for the
    main process, it travels through the worker's shared ring (``sampling.transfer``), and the main
    process rebuilds it with tensors in one fresh buffer of its own."""

    staged: tuple[Any, ...] | None = None
    """In a DataLoader worker: (ring key, start, end, layout) of the ring region its tensors view
    (``_Sender.stage``), so that pickling it sends only where its bytes are."""

    def __copy__(self) -> BatchTensors:  # DataLoader's default_convert copies the item in the worker
        out = BatchTensors(self)
        out.staged = self.staged
        return out


def _tensors_of(batch: ConfigBatch) -> BatchTensors:
    """A batch as the item this process yields. In a DataLoader worker the item only goes to the main
    process, which builds the user's one-buffer item from it: its arrays are copied once, straight into
    a region of the worker's ring (``_Sender.stage``; the item's tensors view that region, and pickling it
    sends only where it is). Without room in the ring the sample's own arrays (fresh, writable) are
    wrapped, only the cached structure is copied, and pickling copies the bytes (``_reduce``)."""
    arrays = batch_arrays(batch)
    if get_worker_info() is None:
        return to_tensors(arrays)
    staged = _SENDER.stage(arrays)
    if staged is not None:
        return staged
    wrapped = {key: torch.from_numpy(value) for key, value in arrays.items()
               if isinstance(value, np.ndarray) and value.flags.owndata and value.flags.writeable}
    out = to_tensors({key: value for key, value in arrays.items() if key not in wrapped})
    return BatchTensors((key, wrapped[key] if key in wrapped else out[key]) for key in arrays)


def to_tensors(arrays: dict[str, Any]) -> BatchTensors:
    """NumPy arrays → tensors (copies, so writable and owned by the item); other values unchanged.

    All tensors of one item are views of one fresh uint8 buffer (each at a 16-byte aligned offset)."""
    values = _arrays_of(arrays)
    layout, total = _layout(values)
    buffer = torch.empty(total, dtype=torch.uint8)
    _pack(values, layout, buffer.numpy())
    out = BatchTensors(arrays)
    out.update(_views(buffer, 0, layout))
    return out


# One batch's arrays laid end to end in one uint8 buffer: its layout is one (key, torch dtype, shape,
# offset, nbytes) per array, at 16-byte aligned offsets (``sampling.transfer.aligned_offsets``). The same
# layout packs an item's own buffer (``to_tensors``), a ring region (``_Sender.stage``) or a pickle's
# bytes (``_reduce``), and views them back as tensors (``_views``, ``_rebuild``).
Layout = list[tuple[str, torch.dtype, tuple[int, ...], int, int]]


def _arrays_of(values: dict[str, Any]) -> dict[str, np.ndarray]:
    """The NumPy arrays (C-contiguous) among ``values``, CPU tensors as NumPy views, in their order."""
    arrays = {key: value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value
              for key, value in values.items()}
    return {key: value if value.flags.c_contiguous else np.ascontiguousarray(value)  # shape kept, 0-d too
            for key, value in arrays.items() if isinstance(value, np.ndarray)}


def _layout(arrays: dict[str, np.ndarray]) -> tuple[Layout, int]:
    """(layout, total bytes) of ``arrays`` laid end to end."""
    offsets, total = aligned_offsets([a.nbytes for a in arrays.values()])
    return [(key, _torch_dtype(a.dtype), a.shape, offset, a.nbytes)
            for (key, a), offset in zip(arrays.items(), offsets, strict=True)], total


def _pack(arrays: dict[str, np.ndarray], layout: Layout, target: np.ndarray) -> None:
    """Copy ``arrays``' bytes into ``target`` (a (total,) uint8 array) at their ``layout`` offsets."""
    for (_, _, _, offset, nbytes), a in zip(layout, arrays.values(), strict=True):
        target[offset:offset + nbytes] = a.reshape(-1).view(np.uint8)


def _views(buffer: torch.Tensor, base: int, layout: Layout) -> dict[str, torch.Tensor]:
    """The tensors of ``layout`` as views of the uint8 ``buffer`` from byte ``base`` on."""
    return {key: buffer[base + offset:base + offset + nbytes].view(dtype).view(shape)
            for key, dtype, shape, offset, nbytes in layout}


_TORCH_DTYPES: dict[np.dtype, torch.dtype] = {}


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    """The torch dtype of a NumPy dtype (as ``torch.from_numpy`` maps it)."""
    if dtype not in _TORCH_DTYPES:
        _TORCH_DTYPES[dtype] = torch.from_numpy(np.empty(0, dtype)).dtype
    return _TORCH_DTYPES[dtype]


# -- handing batches over from a DataLoader worker ---------------------------------------------------

class _Sender:
    """This worker process's ring: a shared uint8 tensor of ``transfer_bytes``, made at the first batch
    sent, sent itself with that batch (its file descriptor crosses once) and referred to by key after."""

    def __init__(self) -> None:
        self.transfer_bytes = TRANSFER_BYTES
        self.lock = threading.Lock()
        self.pid: int | None = None
        self.key: tuple[int, str] | None = None
        self.tensor: torch.Tensor | None = None
        self.ring: Ring | None = None
        self.sent = False

    def reserve(self, nbytes: int) -> int | None:
        """The start of a region of ``nbytes`` of this process's ring for the next batch, or None (no
        ring, or no room now). Call with ``lock`` held."""
        if self.pid != os.getpid():  # a new worker process (fork copies the parent's sender)
            self.pid, self.tensor, self.ring, self.sent = os.getpid(), None, None, False
            self.key = (os.getpid(), os.urandom(8).hex())
            if self.transfer_bytes > HEADER:
                self.tensor = torch.zeros(self.transfer_bytes, dtype=torch.uint8).share_memory_()
                self.ring = Ring(self.tensor.numpy())
        if self.ring is None:
            return None
        return self.ring.reserve(nbytes)

    def reference(self) -> tuple[Any, torch.Tensor | None]:
        """(ring key, the ring's tensor the first time, else None) for a pickle about to be sent: the
        main process receives the ring's file descriptor once, with the first batch pickled (batches are
        pickled in the order they are sent). Call with ``lock`` held."""
        ref = (self.key, None if self.sent else self.tensor)
        self.sent = True
        return ref

    def stage(self, arrays: dict[str, Any]) -> BatchTensors | None:
        """``arrays`` (a batch: NumPy arrays or CPU tensors, and plain values) copied into a new region
        of the ring, as a ``BatchTensors`` whose tensors view that region (``staged`` says where), or
        None without room."""
        values = _arrays_of(arrays)
        layout, total = _layout(values)
        with self.lock:
            start = self.reserve(total)
            if start is None:
                return None
            _pack(values, layout, self.ring.region(start, total))
            item = BatchTensors(arrays)
            item.update(_views(self.tensor, HEADER + start % self.ring.capacity, layout))
            item.staged = (self.key, start, start + total, layout)
        return item


_SENDER = _Sender()
_RECEIVED: dict[tuple[int, str], Ring] = {}  # main process: the rings of the workers that sent batches
_RECEIVED_LOCK = threading.Lock()


def stage(values: dict[str, Any]) -> BatchTensors | None:
    """For an adapter that makes its own item in a DataLoader worker (``tpuprep.pyg.to_data`` as a
    ``collate_fn``): ``values`` (CPU tensors or NumPy arrays, and plain values) copied into one new
    region of this worker's ring, as a ``BatchTensors`` whose tensors view it and whose pickle sends
    only where it is (the adapter rebuilds its item from the ``BatchTensors`` the main process gets).
    None outside a worker, without a ring, or without room. Stage in the worker's main thread, as the
    item is made, so that items are staged in the order they are sent."""
    if get_worker_info() is None:
        return None
    return _SENDER.stage(values)


def in_ring(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` views this process's ring: memory a later batch reuses once the main process
    has read past it, so it must not leave the worker as a view (copy it)."""
    return (_SENDER.pid == os.getpid() and _SENDER.tensor is not None
            and tensor.untyped_storage().data_ptr() == _SENDER.tensor.data_ptr())


def _reduce(item: BatchTensors) -> tuple[Any, tuple[Any, ...]]:
    """How ``ForkingPickler`` (the DataLoader's queues) pickles a ``BatchTensors``: in a DataLoader
    worker, a batch still staged in the worker's ring (``_Sender.stage``) as where its bytes are, any
    other with its bytes in the pickle; elsewhere as a plain dict of tensors.

    A batch that was not staged never takes ring space here: this runs in the worker's queue feeder
    thread, later than the worker's main thread may have staged the next batches, and a region
    reserved now would come after theirs in the ring but before them in the queue — the main process
    would release past their regions before reading them, and the producer could overwrite them."""
    if get_worker_info() is None:
        return BatchTensors, (dict(item),)
    tensors = {k: v for k, v in item.items() if isinstance(v, torch.Tensor)}
    others = {k: v for k, v in item.items() if not isinstance(v, torch.Tensor)}
    if _still_staged(item, tensors):  # its bytes are in the ring already: send where
        _, start, end, layout = item.staged
        with _SENDER.lock:
            ref = _SENDER.reference()
        return _rebuild, ((*ref, start, end), None, layout, others, tuple(item))
    arrays = _arrays_of(tensors)
    layout, total = _layout(arrays)
    blob = np.zeros(total, np.uint8)
    _pack(arrays, layout, blob)
    return _rebuild, (None, blob.tobytes(), layout, others, tuple(item))


def _still_staged(item: BatchTensors, tensors: dict[str, torch.Tensor]) -> bool:
    """Whether ``item``'s tensors are still exactly the ring views ``_Sender.stage`` made (a collate
    function in the worker may have replaced or reshaped some), in this worker process."""
    if item.staged is None or item.staged[0] != _SENDER.key or _SENDER.tensor is None:
        return False
    _, start, _, layout = item.staged
    base = _SENDER.tensor.data_ptr() + HEADER + start % _SENDER.ring.capacity
    if len(layout) != len(tensors):
        return False
    for name, dtype, shape, offset, _nbytes in layout:
        t = tensors.get(name)
        if t is None or t.dtype != dtype or tuple(t.shape) != shape:
            return False
        if t.numel() and t.data_ptr() != base + offset:  # an empty tensor's data_ptr is 0: no bytes to check
            return False
    return True


def _rebuild(ref: tuple[Any, ...] | None, blob: bytes | None, layout: list[tuple[Any, ...]],
             others: dict[str, Any], keys: tuple[str, ...]) -> BatchTensors:
    """The main process's side of ``_reduce``: a ``BatchTensors`` whose tensors are views of one fresh
    buffer, filled from the worker's ring (then released to the worker) or from the pickled bytes."""
    total = layout[-1][3] + layout[-1][4] if layout else 0
    buffer = torch.empty(total, dtype=torch.uint8)
    raw = buffer.numpy()
    if ref is None:
        raw[:] = np.frombuffer(blob, np.uint8, total)
    else:
        key, tensor, start, end = ref
        with _RECEIVED_LOCK:
            if tensor is not None:
                _forget_dead_senders()
                _RECEIVED[key] = Ring(tensor.numpy())
            ring = _RECEIVED.get(key)
        if ring is None:
            raise RuntimeError("a batch refers to the shared memory of a DataLoader worker this process never "
                               "received: a batch pickled in a DataLoader worker is unpickled by its DataLoader only")
        if end > start and end <= ring.consumed:
            raise RuntimeError("a batch refers to a region of a DataLoader worker's shared memory that this process "
                               "has read past, which the worker may have reused: a worker's items must reach "
                               "this process once each, in the order it made them (does its collate_fn return "
                               "an item twice, or an item after the graph made from it?)")
        raw[:] = ring.region(start, total)
        ring.release(end)
    values = others | _views(buffer, 0, layout)
    return BatchTensors((key, values[key]) for key in keys)  # the worker's key order


def _forget_dead_senders() -> None:
    """Drop the rings of worker processes that have ended (their shared memory is freed with the last
    reference)."""
    for key in list(_RECEIVED):
        try:
            os.kill(key[0], 0)
        except ProcessLookupError:
            del _RECEIVED[key]
        except PermissionError:
            pass


ForkingPickler.register(BatchTensors, _reduce)
