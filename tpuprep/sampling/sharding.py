"""How one epoch of ``ConfigBatches`` is dealt to ranks and DataLoader workers, and the small state the
main process shares with its workers.

An epoch's plan is N items (``sampling.plan``). A *layout* deals the items at plan positions ``base`` … N−1
(``base`` > 0 only for an epoch resumed after the world size changed) to ``world_size`` ranks so that
every rank gets the same number of items: T = ⌈(N − base) / w⌉·w virtual slots, slot v holding the item
at ``base + v mod (N − base)`` (the padding repeats the first items of the layout, as torch's
``DistributedSampler`` does), or, with ``drop_last``, T = ⌊(N − base) / w⌋·w (the last items dropped).
Rank r takes the slots r, r + w, r + 2w, … (its *share*, T / w items, in order); worker i of n takes the
share indices j ≥ start with (j − start) ≡ i (mod n), so the DataLoader's round-robin over its workers
gives back the share in order.

``SharedProgress`` holds what a DataLoader's workers must read from the main process at each
``iter()``: the epoch chosen by ``set_epoch`` and a pending resume point (``load_state_dict``), in a
``multiprocessing`` shared array that fork workers inherit and spawn/forkserver workers receive when the
dataset is pickled to start them (a plain ``pickle.dumps`` snapshots the values instead).
"""

from __future__ import annotations

import multiprocessing
from multiprocessing import context as mp_context
from typing import Any

import numpy as np

_EPOCH, _ACTIVE, _R_EPOCH, _R_BASE, _R_START, _R_READERS, _PASS_EPOCH, _PASS_BASE, _PASSES = range(9)
_SLOTS = 9


def share_length(num_items: int, world_size: int, drop_last: bool = False, base: int = 0) -> int:
    """Items every rank gets of the layout of plan positions ``base`` … ``num_items`` − 1."""
    left = max(num_items - base, 0)
    return left // world_size if drop_last else -(-left // world_size)


def share_indices(num_items: int, rank: int, world_size: int, worker: int = 0, num_workers: int = 1,
                  start: int = 0, drop_last: bool = False, base: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(plan positions, share indices), each (n,) int64, that rank ``rank`` / worker ``worker`` reads of
    an epoch of ``num_items`` items (layout from plan position ``base``, module docstring) when its
    rank's share resumes at share index ``start``. Every rank's share has ``share_length`` items."""
    length = share_length(num_items, world_size, drop_last, base)
    j = np.arange(min(start, length) + worker, length, num_workers, dtype=np.int64)
    return share_positions(j, num_items, rank, world_size, base), j


def share_positions(j: np.ndarray, num_items: int, rank: int, world_size: int, base: int = 0) -> np.ndarray:
    """(n,) int64 plan positions of share indices ``j`` (n,) of rank ``rank`` in the layout from ``base``:
    slot rank + j · world_size, which holds the item at base + slot mod (N − base)."""
    slots = rank + np.asarray(j, np.int64) * world_size
    left = num_items - base
    return base + slots % left if left > 0 else slots


def consumed_items(num_items: int, world_size: int, base: int, position: int) -> int:
    """Plan positions done (from 0) once every rank of a lockstep world has consumed ``position`` items
    of its share of the layout from ``base``: the slots below ``position · world_size``, capped at N."""
    return min(num_items, base + position * world_size)


class SharedProgress:
    """The epoch and the pending resume point, shared by a dataset and its DataLoader workers.

    A resume point (epoch, base, start) applies to the next pass over its epoch: each reader (the main
    process, or each of the n workers of a DataLoader) takes it once at ``begin``; when n readers have
    taken it, it is spent. ``begin`` also records the layout of the pass, so the main process can write
    a state for a batch its workers produced."""

    def __init__(self, values: list[int] | None = None):
        # spawn-context lock: named, so it can be reopened by spawn/forkserver workers (fork inherits it)
        self._array = multiprocessing.get_context("spawn").Array("q", _SLOTS)
        if values is not None:
            self._array[:] = values

    def __getstate__(self) -> dict[str, Any]:
        if mp_context.get_spawning_popen() is not None:  # a worker being started: share the memory
            return {"array": self._array}
        return {"values": list(self._array[:])}  # a plain pickle: a detached copy

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "array" in state:
            self._array = state["array"]
        else:
            self.__init__(state["values"])

    @property
    def epoch(self) -> int:
        return int(self._array[_EPOCH])

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch; a pending resume point of another epoch is dropped."""
        with self._array.get_lock():
            if self._array[_ACTIVE] and self._array[_R_EPOCH] != epoch:
                self._array[_ACTIVE] = 0
            self._array[_EPOCH] = epoch

    def resume(self, epoch: int, base: int, start: int) -> None:
        """Make the next pass over ``epoch`` (now the current epoch) start at share index ``start`` of
        the layout from ``base``."""
        with self._array.get_lock():
            self._array[_EPOCH], self._array[_R_EPOCH] = epoch, epoch
            self._array[_R_BASE], self._array[_R_START], self._array[_R_READERS] = base, start, 0
            self._array[_ACTIVE] = 1

    def pending(self) -> tuple[int, int, int] | None:
        """(epoch, base, start) of a resume point no reader has taken yet, else None."""
        with self._array.get_lock():
            a = self._array
            return (a[_R_EPOCH], a[_R_BASE], a[_R_START]) if a[_ACTIVE] and a[_R_READERS] == 0 else None

    def begin(self, worker: int, num_workers: int) -> tuple[int, int, int]:
        """(epoch, base, start) of the pass reader ``worker`` of ``num_workers`` begins now."""
        with self._array.get_lock():
            a = self._array
            epoch, base, start = a[_EPOCH], 0, 0
            if a[_ACTIVE] and a[_R_EPOCH] == epoch:
                base, start = a[_R_BASE], a[_R_START]
                a[_R_READERS] += 1
                if a[_R_READERS] >= num_workers:
                    a[_ACTIVE] = 0
            if worker == 0:
                a[_PASS_EPOCH], a[_PASS_BASE] = epoch, base
                a[_PASSES] += 1
            return int(epoch), int(base), int(start)

    def record_pass(self, worker: int, epoch: int, base: int) -> None:
        """Record the layout of a pass a reader began from a state of its own (a DataLoader worker's
        ``load_worker_state``), as ``begin`` does, without touching the shared resume point."""
        if worker == 0:
            with self._array.get_lock():
                a = self._array
                a[_PASS_EPOCH], a[_PASS_BASE] = epoch, base
                a[_PASSES] += 1

    def last_pass(self) -> tuple[int, int, int]:
        """(epoch, base, number of passes begun) of the latest pass any reader began."""
        a = self._array
        return int(a[_PASS_EPOCH]), int(a[_PASS_BASE]), int(a[_PASSES])
