"""Layout configurations packed, deduplicated and held once per tie column, while they stream past.

A graph's configurable nodes whose codes are equal in every config are *tied*; the shards store one
codes column per tie group (``config_node_tie``, docs/spec.md §2.4). ``LayoutCollector`` finds the groups as
the chunks of ``node_config_feat`` arrive, by refinement: it starts from one group and splits a group
whenever some of its nodes differ from the group's first node in a chunk. Groups only ever split, and a
node split off at row r equalled its old group's first node on every earlier row, so a unique config
kept in the columns of the groups known when it arrived can always be expanded back to every node.
Memory is therefore O(c_u · nt) int32 (nt: tie columns) instead of O(c_u · nc), plus O(c) bookkeeping;
on graphs with many tied nodes that is several times less (benchmarks/RESULTS.md §15).

Deduplication is exact, as in ``dedup.py``: 64-bit row hashes (computed while packing, with the row in
cache) find candidates, and every candidate is confirmed by comparing all nc × 3 codes. Unique configs
are numbered in order of first occurrence and keep the smallest runtime, ties to the earliest row.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

import numpy as np

from .base7 import SLOTS, ConfigValueError, all_valid, first_invalid, pack_valid
from .dedup import _hash_row
from .jit import frozen, kernel
from .planes import PLANES, split_row

_EMPTY = -1

_spare_lock = threading.Lock()
_keep_spare = False
_spare: np.ndarray | None = None


def keep_spare_store(on: bool = True) -> None:
    """Whether this process keeps the largest store buffer a finished graph leaves (``True`` in build
    workers) for the next ``LayoutCollector``, instead of freeing it with the graph.

    A store is up to c × nc × 3 int32 reserved, of which the unique configs' tie columns are touched
    (516 MB for a c = 100,040, nc = 1,119 graph). Fresh pages cost the kernel their zeroing, and on a
    freshly booted VM much more (the host backs guest memory on first touch): 13.7 % of the CPU of
    building that one file went to ``clear_page`` (benchmarks/RESULTS.md §15). Reused pages cost
    nothing. Off by default, so a library caller's process does not keep memory after ``build``.
    """
    global _keep_spare, _spare
    with _spare_lock:
        _keep_spare = bool(on)
        if not on:
            _spare = None


def _take_store(items: int) -> np.ndarray:
    """A flat int32 buffer of at least ``items``: the spare if it is big enough (its old contents are
    never read: a store is written before it is read), else a new one (a smaller spare is dropped)."""
    global _spare
    with _spare_lock:
        spare, _spare = _spare, None
    if spare is not None and spare.size >= items:
        return spare
    return np.empty(max(items, 1), np.int32)


def _give_back(store: np.ndarray) -> None:
    """Called when the last holder of a store is gone: keep it as the spare if spares are kept and it
    is the largest."""
    global _spare
    with _spare_lock:
        if _keep_spare and (_spare is None or _spare.size < store.size):
            _spare = store


@kernel
def _pack_rows(values, codes, hashes, rep, differs):
    """Validate k rows, then pack, hash and tie-check them row by row (each row hot in cache).

    values: (k, nc·18) float or int layout values; codes: (k, nc·3) int32 out (base-7, ``base7.py``);
    hashes: (k,) uint64 out (``_hash_row`` of each packed row); rep: (nc,) int32, the first node of
    every node's current tie group; differs: (nc,) bool, set where a node's codes differ from its
    group's first node in some row. Returns False, without packing, when some value is not an integer
    in −1..5. One validation pass over the whole chunk vectorises better than one per row
    (benchmarks/RESULTS.md §21).
    """
    if not all_valid(values.reshape(-1)):
        return False
    for r in range(codes.shape[0]):
        out = codes[r]
        pack_valid(values[r], out)
        hashes[r] = _hash_row(out)
        note_ties(out, rep, differs)
    return True


@kernel
def note_ties(row, rep, differs):
    """Set differs[j] where node j's codes in ``row`` differ from those of its group's first node rep[j].

    row: (nc·3,) int32 codes of one config; rep: (nc,) int32; differs: (nc,) bool, updated in place
    (a node already marked is not compared again)."""
    for j in range(rep.shape[0]):
        q = rep[j]
        if q != j and not differs[j]:
            differs[j] = (row[3 * j] != row[3 * q]) | (row[3 * j + 1] != row[3 * q + 1]) | (
                row[3 * j + 2] != row[3 * q + 2])


@kernel
def _add_configs(
    codes, hashes, first_row, runtime, use_runtime, dedup, columns, snap, snaps,
    table, row_hash, store, state, row_offset, row_snap, inverse, group_size, first_index, best_index,
    best_runtime,
):
    """Deduplicate k packed rows against the unique configs so far; keep new ones in ``columns``.

    codes: (k, nc·3) int32; hashes: (k,) uint64; columns: (w,) int32, the first node of each current
    tie group (a new unique config is kept as its w columns); snap: the index into snaps (S, nc) int32
    of the current node → column map. state: [unique configs, int32 items used in ``store``].

    Every row equals, at every node, its current group's first node (``_pack_rows`` and
    ``LayoutCollector._split`` make it so for the chunk), and current groups refine the groups of any
    stored config. So a row equals a stored config where it does at the w first nodes: w × 3 codes are
    compared, not nc × 3.
    """
    mask = np.uint64(table.shape[0] - 1)
    n_unique = state[0]
    used = state[1]
    w = columns.shape[0]
    for r in range(codes.shape[0]):
        row = codes[r]
        h = hashes[r]
        uid = -1
        slot = h & mask
        if dedup:
            while True:
                cand = table[slot]
                if cand == _EMPTY:
                    break
                if row_hash[cand] == h:
                    base = row_offset[cand]
                    where = snaps[row_snap[cand]]
                    same = True
                    for s in range(w):
                        j = columns[s]
                        at = base + 3 * where[j]
                        if store[at] != row[3 * j] or store[at + 1] != row[3 * j + 1] or store[at + 2] != row[3 * j + 2]:
                            same = False
                            break
                    if same:
                        uid = cand
                        break
                slot = (slot + np.uint64(1)) & mask
        original = first_row + r
        if uid < 0:
            uid = n_unique
            n_unique += 1
            if dedup:
                table[slot] = uid
            row_hash[uid] = h
            row_offset[uid] = used
            row_snap[uid] = snap
            for s in range(w):
                q = 3 * columns[s]
                store[used] = row[q]
                store[used + 1] = row[q + 1]
                store[used + 2] = row[q + 2]
                used += 3
            group_size[uid] = 1
            first_index[uid] = original
            best_index[uid] = original
            if use_runtime:
                best_runtime[uid] = runtime[r]
        else:
            group_size[uid] += 1
            if use_runtime and runtime[r] < best_runtime[uid]:
                best_index[uid] = original
                best_runtime[uid] = runtime[r]
        inverse[original] = uid
    state[0] = n_unique
    state[1] = used


@kernel
def _gather_row(store, base, where, nodes, out):
    """out[3m + t] = code t of node ``nodes[m]`` of the unique config stored from ``base`` under the node →
    column map ``where``: (3·len(nodes),) int32."""
    for m in range(nodes.shape[0]):
        at = base + 3 * where[nodes[m]]
        out[3 * m] = store[at]
        out[3 * m + 1] = store[at + 1]
        out[3 * m + 2] = store[at + 2]


@kernel
def _gather_rows(store, row_offset, row_snap, snaps, nodes, start, out):
    """out[i] = the codes of nodes ``nodes`` in unique config start + i: (k, 3·len(nodes)) int32."""
    for i in range(out.shape[0]):
        u = start + i
        _gather_row(store, row_offset[u], snaps[row_snap[u]], nodes, out[i])


@kernel
def _gather_planes(store, row_offset, row_snap, snaps, nodes, start, scratch, out):
    """out[i] = the codes of nodes ``nodes`` in unique config start + i in byte planes (``planes.py``):
    (k, 12·len(nodes)) uint8; scratch: (3·len(nodes),) int32, the row on its way (in cache)."""
    for i in range(out.shape[0]):
        u = start + i
        _gather_row(store, row_offset[u], snaps[row_snap[u]], nodes, scratch)
        split_row(scratch, out[i])


@dataclass
class TiedCodes:
    """The unique configs of a layout graph, each held in the tie columns known when it arrived.

    ``tie``: (nc,) int32, the stored column of every configurable node, numbered in order of first
    appearance (``tie[j] ≤ j``): the ``config_node_tie`` of the shards. ``num_rows``: c_u.
    ``stored(a, b)`` gives configs a..b−1 in the stored columns, (b−a, nt, 3) int32 (``stored_planes``: as the
    shards store them, in byte planes);
    ``full(a, b)`` expands them to every node, (b−a, nc, 3) int32. ``nbytes``: bytes held.
    """

    tie: np.ndarray
    num_rows: int
    _store: np.ndarray  # flat int32: unique config u's columns (width of its snapshot, 3) from _row_offset[u]
    _row_offset: np.ndarray  # (c_u,) int64
    _row_snap: np.ndarray  # (c_u,) int32: the snapshot u was stored under
    _snaps: np.ndarray  # (S, nc) int32: node → column under each snapshot

    @property
    def num_columns(self) -> int:
        return int(self.tie.max()) + 1 if len(self.tie) else 0

    @property
    def nbytes(self) -> int:
        used = 0 if not self.num_rows else int(self._row_offset[self.num_rows - 1]) + 3 * (
            int(self._snaps[self._row_snap[self.num_rows - 1]].max()) + 1)
        return 4 * used + self._snaps.nbytes + self._row_offset[: self.num_rows].nbytes + \
            self._row_snap[: self.num_rows].nbytes

    def _rows(self, start: int, stop: int | None) -> tuple[int, int]:
        start = max(0, start)
        return start, max(start, min(self.num_rows if stop is None else stop, self.num_rows))

    def _gather(self, start: int, stop: int | None, nodes: np.ndarray) -> np.ndarray:
        start, stop = self._rows(start, stop)
        out = np.empty((stop - start, len(nodes), 3), np.int32)
        _gather_rows(self._store, self._row_offset, self._row_snap, self._snaps, nodes.astype(np.int32), start,
                     out.reshape(stop - start, 3 * len(nodes)))
        return out

    def _stored_nodes(self) -> np.ndarray:
        """The first node of every stored column, in column order: (nt,) int32."""
        _, first = np.unique(self.tie, return_index=True)
        return first.astype(np.int32)

    def stored(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Configs start..stop−1 in the stored columns: (k, nt, 3) int32."""
        return self._gather(start, stop, self._stored_nodes())

    def stored_planes(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Configs start..stop−1 as the shards store them: each row's (nt, 3) codes in byte planes
        (``planes.split_planes``), (k, 12·nt) uint8, gathered and split in one pass."""
        start, stop = self._rows(start, stop)
        nodes = self._stored_nodes()
        out = np.empty((stop - start, PLANES * 3 * len(nodes)), np.uint8)
        _gather_planes(self._store, self._row_offset, self._row_snap, self._snaps, nodes, start,
                       np.empty(3 * len(nodes), np.int32), out)
        return out

    def full(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Configs start..stop−1 for every configurable node: (k, nc, 3) int32."""
        return self._gather(start, self.num_rows if stop is None else stop, np.arange(len(self.tie)))


@dataclass
class LayoutDedupResult:
    """What ``LayoutCollector.finish`` returns (the ``DedupResult`` fields, codes held tied).

    codes: ``TiedCodes``; inverse (c,) int32; group_size, first_index, best_index (c_u,) int32;
    runtime (c_u,) int64 ns of the kept row, None without runtimes (test split).
    """

    codes: TiedCodes
    inverse: np.ndarray
    group_size: np.ndarray
    first_index: np.ndarray
    best_index: np.ndarray
    runtime: np.ndarray | None


class LayoutCollector:
    """Feed the c rows of ``node_config_feat`` of one layout graph in order, in chunks of any size; then
    ``finish()``.

    num_rows: c; num_nodes: nc; with_runtime: whether ``add`` receives runtimes; dedup: False keeps
    every row as its own config (``--no-dedup``), still tie-compressed.
    """

    def __init__(self, num_rows: int, num_nodes: int, *, with_runtime: bool, dedup: bool = True):
        c, nc = int(num_rows), int(num_nodes)
        self.num_rows, self.num_nodes = c, nc
        self.with_runtime, self.dedup = with_runtime, dedup
        capacity = 1 << max(4, int(2 * max(c, 1) - 1).bit_length()) if dedup else 1
        self._table = np.full(capacity, _EMPTY, np.int32)
        self._row_hash = np.empty(c, np.uint64)
        # reserved, not touched: pages are used only as unique configs arrive, in their tie columns (a
        # build worker's spare from an earlier graph when it is big enough: keep_spare_store)
        self._store = _take_store(c * nc * 3)
        self._release = weakref.finalize(self, _give_back, self._store)
        self._state = np.zeros(2, np.int64)
        self._row_offset = np.empty(c, np.int64)
        self._row_snap = np.empty(c, np.int32)
        self._inverse = np.empty(c, np.int32)
        self._group_size = np.empty(c, np.int32)
        self._first_index = np.empty(c, np.int32)
        self._best_index = np.empty(c, np.int32)
        self._runtime = np.empty(c if with_runtime else 0, np.int64)
        self._group = np.zeros(nc, np.int32)  # running group id of every node (ids only ever appended)
        self._first = np.zeros(1 if nc else 0, np.int32)  # first node of each running group
        self._snaps = [self._group.copy()]
        self._codes = np.empty(0, np.int32)
        self._hashes = np.empty(0, np.uint64)
        self._next_row = 0

    def add(self, values: np.ndarray, runtime: np.ndarray | None = None) -> None:
        """Add the next k rows: values (k, nc, 18) layout values (float or int), runtime (k,) int64.

        Raises ``ConfigValueError`` naming the original row, node and slot of a value that is not an
        integer in −1..5."""
        k, nc = values.shape[0], self.num_nodes
        if values.shape[1:] != (nc, SLOTS):
            raise ValueError(f"expected rows of shape ({nc}, {SLOTS}), got {values.shape[1:]}")
        if self._next_row + k > self.num_rows:
            raise ValueError(f"more than the announced {self.num_rows} rows")
        rt = np.ascontiguousarray(runtime, dtype=np.int64) if self.with_runtime else np.empty(0, np.int64)
        if self.with_runtime and rt.shape != (k,):
            raise ValueError(f"runtime must have shape ({k},), got {rt.shape}")
        if values.dtype.kind == "f" and values.dtype.itemsize not in (4, 8):
            values = values.astype(np.float32 if values.dtype.itemsize < 4 else np.float64)
        flat = frozen(np.ascontiguousarray(values).reshape(k, nc * SLOTS))
        if self._codes.size < k * nc * 3:
            self._codes = np.empty(k * nc * 3, np.int32)
            self._hashes = np.empty(k, np.uint64)
        codes = self._codes[: k * nc * 3].reshape(k, nc * 3)
        hashes = self._hashes[:k]
        differs = np.zeros(nc, bool)
        if not _pack_rows(flat, codes, hashes, self._first[self._group], differs):
            bad = int(first_invalid(flat.reshape(-1)))
            row, rest = divmod(bad, nc * SLOTS)
            node, slot = divmod(rest, SLOTS)
            raise ConfigValueError(self._next_row + row, node, slot, float(flat[row, rest]))
        if differs.any():
            self._split(codes.reshape(k, nc, 3), np.flatnonzero(differs))
        _add_configs(
            codes, hashes, self._next_row, frozen(rt), self.with_runtime, self.dedup, self._first,
            len(self._snaps) - 1, self._snap_array(), self._table, self._row_hash, self._store, self._state,
            self._row_offset, self._row_snap, self._inverse, self._group_size, self._first_index,
            self._best_index, self._runtime,
        )
        self._next_row += k

    def _split(self, codes: np.ndarray, nodes: np.ndarray) -> None:
        """Split off ``nodes`` (they differ from their group's first node in ``codes`` (k, nc, 3)): nodes
        of one old group with equal codes in this chunk form one new group (exact: a dict on the bytes)."""
        new: dict[tuple[int, bytes], int] = {}
        first = list(self._first)
        for j in nodes:
            key = (int(self._group[j]), codes[:, j].tobytes())
            if key not in new:
                new[key] = len(first)
                first.append(int(j))
            self._group[j] = new[key]
        self._first = np.asarray(first, np.int32)
        self._snaps.append(self._group.copy())
        self._snap_cache = None

    _snap_cache: np.ndarray | None = None

    def _snap_array(self) -> np.ndarray:
        if self._snap_cache is None or len(self._snap_cache) != len(self._snaps):
            self._snap_cache = np.stack(self._snaps)
        return self._snap_cache

    def finish(self) -> LayoutDedupResult:
        if self._next_row != self.num_rows:
            raise ValueError(f"got {self._next_row} rows, announced {self.num_rows}")
        u = int(self._state[0])
        # number the final groups in order of first appearance over the nodes: tie[j] ≤ j
        _, first_seen, dense = np.unique(self._group, return_index=True, return_inverse=True)
        order = np.argsort(first_seen, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        tie = rank[dense].astype(np.int32) if self.num_nodes else np.zeros(0, np.int32)
        codes = TiedCodes(tie, u, self._store, self._row_offset, self._row_snap, self._snap_array())
        self._release.detach()  # the store is the codes' now: given back when they are gone
        weakref.finalize(codes, _give_back, self._store)
        self._store = np.empty(0, np.int32)
        return LayoutDedupResult(
            codes=codes,
            inverse=self._inverse,
            group_size=self._group_size[:u].copy(),
            first_index=self._first_index[:u].copy(),
            best_index=self._best_index[:u].copy(),
            runtime=self._runtime[:u].copy() if self.with_runtime else None,
        )
