"""Handing batches from a DataLoader worker to the main process through memory they share (issue #38
item 5): a single-producer, single-consumer ring of byte regions. Pure NumPy over a uint8 buffer; the
torch adapter puts the buffer in shared memory and does the pickling (``tpuprep/torch.py``).

Why: a batch is ~0.1–7 MB (its graph's structure and k configs). Handed over as tensors, each batch
costs a fresh shared-memory file plus a file descriptor fetched from the worker through a socket (the
worker's resource-sharer thread, which waits for the GIL); pickled through the DataLoader's pipe, it
costs a dozen 64 KiB pipe reads and writes. With the ring, the worker copies a batch's bytes into the
next free region once and sends (start, end); the main process copies them out into the batch's own
buffer and says how far it has read. The main process then does about a fifth of what making the
batch cost: 0.21 ms of CPU per batch of 64 configs against 1.00 ms (benchmarks/loaders.py, the steady
state; benchmarks/RESULTS.md §27).

Layout: a ``HEADER``-byte header, then ``capacity`` bytes of regions. Positions are monotonic byte
counters; a region [start, end) lives at ``HEADER + start mod capacity`` and never wraps (a region that
would cross the end starts at the next lap instead). The header's first int64 is ``consumed``: the end of
the last region the consumer copied out, written by the consumer only. The producer reserves [start,
end) only if end − consumed ≤ capacity, so it never overwrites a region the consumer has not read; it
never waits (``reserve`` returns None, and the caller sends the bytes another way). The consumer must
read the regions of one producer in the order they were reserved (a DataLoader worker's batches reach
the main process in the order it sent them, and the torch adapter reserves only in the worker's main
thread as it makes a batch, never later in the queue feeder thread that pickles it); a region it never
reads is skipped once a later one is.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

HEADER = 64
ALIGN = 16  # every array of a batch starts at a multiple of 16 bytes

_FENCE = threading.Lock()


def fence() -> None:
    """A full memory barrier between this process's earlier and later accesses to shared memory (a lock
    acquired and released): the consumer's copy-out is complete before it publishes ``consumed``, and
    the producer reads ``consumed`` before it writes a region."""
    with _FENCE:
        pass


def aligned_offsets(sizes: Sequence[int]) -> tuple[list[int], int]:
    """(offsets, total) of arrays of ``sizes`` bytes laid end to end, each at a multiple of ``ALIGN``."""
    offsets, total = [], 0
    for size in sizes:
        offsets.append(total)
        total += -(-int(size) // ALIGN) * ALIGN
    return offsets, total


class Ring:
    """A ring over ``buffer`` ((HEADER + capacity,) uint8, shared by one producer and one consumer).
    The producer calls ``reserve`` and writes ``region``; the consumer reads ``region`` and calls
    ``release``. ``head`` is the producer's own (the end of its last reservation)."""

    def __init__(self, buffer: np.ndarray):
        if buffer.dtype != np.uint8 or buffer.ndim != 1 or len(buffer) <= HEADER:
            raise ValueError(f"a ring needs a 1-D uint8 buffer of more than {HEADER} bytes")
        self.buffer = buffer
        self.capacity = len(buffer) - HEADER
        self.head = 0
        self._consumed = buffer[:8].view(np.int64)

    @property
    def consumed(self) -> int:
        """The end of the last region the consumer read (0 before any)."""
        return int(self._consumed[0])

    def reserve(self, nbytes: int) -> int | None:
        """The start of a free region of ``nbytes`` bytes, now the producer's, or None when the
        consumer has not read enough yet or ``nbytes`` is over half the capacity."""
        if nbytes > self.capacity // 2:
            return None
        fence()
        start = self.head
        offset = start % self.capacity
        if offset + nbytes > self.capacity:  # would cross the end: start the next lap
            start += self.capacity - offset
        if start + nbytes - self.consumed > self.capacity:
            return None
        self.head = start + nbytes
        return start

    def region(self, start: int, nbytes: int) -> np.ndarray:
        """The (nbytes,) uint8 view of the region reserved at ``start``."""
        offset = HEADER + start % self.capacity
        return self.buffer[offset:offset + nbytes]

    def release(self, end: int) -> None:
        """The consumer has copied out every region up to ``end``: the producer may reuse them."""
        fence()
        if end > self.consumed:
            self._consumed[0] = end
