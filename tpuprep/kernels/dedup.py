"""Streaming deduplication of configurations (docs/spec.md §2.3), memory linear in c.

Rows are fixed-width int32 keys (layout: the (nc, 3) base-7 codes of a config, an exact key; tile: the
24 ``config_feat`` values as float32 bit patterns after −0.0 → 0.0, i.e. compared by value). Keys go
into an open-addressing hash table sized for all c rows up front, so memory is O(c · width), never
O(c²). Unique configs are numbered 0..c_u−1 in order of first occurrence. Each keeps the row with the
smallest runtime (tile: smallest runtime / normalizer, compared exactly as fractions); ties go to the
earliest row.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .jit import frozen, kernel

_EMPTY = -1


class DedupResult(NamedTuple):
    """Unique configs in order of first occurrence.

    keys: (c_u, width) int32 unique keys; inverse: (c,) int32 unique id of every original row;
    group_size, first_index, best_index: (c_u,) int32 (best_index = original row kept as the
    representative); runtime: (c_u,) int64 ns of that row, None when no runtimes were given (test split);
    normalizer: (c_u,) int64 of that row (tile), else None.
    """

    keys: np.ndarray
    inverse: np.ndarray
    group_size: np.ndarray
    first_index: np.ndarray
    best_index: np.ndarray
    runtime: np.ndarray | None
    normalizer: np.ndarray | None


@kernel
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@kernel
def _hash_row(row):
    """64-bit hash of an int32 row: four independent multiply lanes (no long dependency chain),
    combined and finished with the splitmix64 mixer. Only speed depends on its quality: equal
    hashes are always confirmed by comparing the rows."""
    k = np.uint64(0x9E3779B97F4A7C15)
    h0 = np.uint64(0x243F6A8885A308D3)
    h1 = np.uint64(0x13198A2E03707344)
    h2 = np.uint64(0xA4093822299F31D0)
    h3 = np.uint64(0x082EFA98EC4E6C89)
    n = row.shape[0]
    i = 0
    while i + 4 <= n:
        h0 = (h0 + np.uint64(np.uint32(row[i]))) * k
        h1 = (h1 + np.uint64(np.uint32(row[i + 1]))) * k
        h2 = (h2 + np.uint64(np.uint32(row[i + 2]))) * k
        h3 = (h3 + np.uint64(np.uint32(row[i + 3]))) * k
        i += 4
    while i < n:
        h0 = (h0 + np.uint64(np.uint32(row[i]))) * k
        i += 1
    h = h0 ^ _rotl(h1, 17) ^ _rotl(h2, 31) ^ _rotl(h3, 47) ^ np.uint64(n)
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


@kernel
def _product128(a, b):
    """(hi, lo) uint64 halves of the exact 128-bit product of non-negative int64 ``a`` and ``b``
    (schoolbook multiplication on 32-bit halves)."""
    mask = np.uint64(0xFFFFFFFF)
    s32 = np.uint64(32)
    a_lo, a_hi = np.uint64(a) & mask, np.uint64(a) >> s32
    b_lo, b_hi = np.uint64(b) & mask, np.uint64(b) >> s32
    ll = a_lo * b_lo
    lh = a_lo * b_hi
    hl = a_hi * b_lo
    mid = (ll >> s32) + (lh & mask) + (hl & mask)
    lo = (ll & mask) | ((mid & mask) << s32)
    hi = a_hi * b_hi + (lh >> s32) + (hl >> s32) + (mid >> s32)
    return hi, lo


@kernel
def _product_less(a, b, c, d):
    """Exact a·b < c·d for non-negative int64 values (128-bit products)."""
    hi1, lo1 = _product128(a, b)
    hi2, lo2 = _product128(c, d)
    return hi1 < hi2 or (hi1 == hi2 and lo1 < lo2)


@kernel
def _add_rows(
    keys, first_row, runtime, normalizer, use_runtime, use_normalizer,
    table, hashes, unique_keys, state, inverse, group_size, first_index, best_index,
    best_runtime, best_normalizer,
):
    mask = np.uint64(table.shape[0] - 1)
    n_unique = state[0]
    width = keys.shape[1]
    for r in range(keys.shape[0]):
        row = keys[r]
        h = _hash_row(row)
        slot = h & mask
        uid = -1
        while True:
            cand = table[slot]
            if cand == _EMPTY:
                break
            if hashes[cand] == h:
                same = True
                for j in range(width):
                    if unique_keys[cand, j] != row[j]:
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
            table[slot] = uid
            hashes[uid] = h
            for j in range(width):
                unique_keys[uid, j] = row[j]
            group_size[uid] = 1
            first_index[uid] = original
            best_index[uid] = original
            if use_runtime:
                best_runtime[uid] = runtime[r]
            if use_normalizer:
                best_normalizer[uid] = normalizer[r]
        else:
            group_size[uid] += 1
            if use_runtime:
                if use_normalizer:
                    better = _product_less(
                        runtime[r], best_normalizer[uid], best_runtime[uid], normalizer[r]
                    )
                else:
                    better = runtime[r] < best_runtime[uid]
                if better:
                    best_index[uid] = original
                    best_runtime[uid] = runtime[r]
                    if use_normalizer:
                        best_normalizer[uid] = normalizer[r]
        inverse[original] = uid
    state[0] = n_unique


class Deduplicator:
    """Feed the c rows of one graph in order, in chunks of any size; then ``finish()``.

    num_rows: c, the total number of rows that will be added; width: int32 values per key.
    with_runtime / with_normalizer: whether ``add`` receives runtimes (train/valid) and tile
    normalizers. Memory: the unique keys (at most c × width int32; pages are touched only as
    unique rows arrive) plus O(c) bookkeeping.
    """

    def __init__(self, num_rows: int, width: int, *, with_runtime: bool, with_normalizer: bool = False):
        if with_normalizer and not with_runtime:
            raise ValueError("normalizers need runtimes")
        self.num_rows = int(num_rows)
        self.width = int(width)
        self.with_runtime = with_runtime
        self.with_normalizer = with_normalizer
        capacity = 1 << max(4, int(2 * max(self.num_rows, 1) - 1).bit_length())
        self._table = np.full(capacity, _EMPTY, np.int32)
        self._hashes = np.empty(self.num_rows, np.uint64)
        self._unique = np.empty((self.num_rows, self.width), np.int32)
        self._state = np.zeros(1, np.int64)
        self._inverse = np.empty(self.num_rows, np.int32)
        self._group_size = np.empty(self.num_rows, np.int32)
        self._first_index = np.empty(self.num_rows, np.int32)
        self._best_index = np.empty(self.num_rows, np.int32)
        self._runtime = np.empty(self.num_rows if with_runtime else 0, np.int64)
        self._normalizer = np.empty(self.num_rows if with_normalizer else 0, np.int64)
        self._next_row = 0

    def add(self, keys: np.ndarray, runtime: np.ndarray | None = None, normalizer: np.ndarray | None = None) -> None:
        """Add the next k rows: keys (k, width) int32, runtime (k,) int64, normalizer (k,) int64."""
        keys = np.asarray(keys)
        k = keys.shape[0] if keys.ndim else 0
        keys = np.ascontiguousarray(keys, dtype=np.int32).reshape(k, self.width)
        if self._next_row + k > self.num_rows:
            raise ValueError(f"more than the announced {self.num_rows} rows")
        empty = np.empty(0, np.int64)
        rt = np.ascontiguousarray(runtime, dtype=np.int64) if self.with_runtime else empty
        nz = np.ascontiguousarray(normalizer, dtype=np.int64) if self.with_normalizer else empty
        if self.with_runtime and rt.shape != (k,):
            raise ValueError(f"runtime must have shape ({k},), got {rt.shape}")
        if self.with_normalizer and nz.shape != (k,):
            raise ValueError(f"normalizer must have shape ({k},), got {nz.shape}")
        _add_rows(
            frozen(keys), self._next_row, frozen(rt), frozen(nz), self.with_runtime, self.with_normalizer,
            self._table, self._hashes, self._unique, self._state, self._inverse,
            self._group_size, self._first_index, self._best_index, self._runtime, self._normalizer,
        )
        self._next_row += k

    def finish(self) -> DedupResult:
        if self._next_row != self.num_rows:
            raise ValueError(f"got {self._next_row} rows, announced {self.num_rows}")
        u = int(self._state[0])
        return DedupResult(
            keys=self._unique[:u],
            inverse=self._inverse,
            group_size=self._group_size[:u].copy(),
            first_index=self._first_index[:u].copy(),
            best_index=self._best_index[:u].copy(),
            runtime=self._runtime[:u].copy() if self.with_runtime else None,
            normalizer=self._normalizer[:u].copy() if self.with_normalizer else None,
        )


def float_keys(values: np.ndarray) -> np.ndarray:
    """Exact int32 keys for float32 rows compared by value: −0.0 becomes 0.0, then the bit pattern.

    values: (k, w) float, no NaN (callers validate). Returns (k, w) int32.
    """
    normalised = np.ascontiguousarray(values, dtype=np.float32) + np.float32(0.0)
    return normalised.view(np.int32)


def dedup_rows(
    keys: np.ndarray,
    runtime: np.ndarray | None = None,
    normalizer: np.ndarray | None = None,
) -> DedupResult:
    """Deduplicate all rows of ``keys`` (c, width) int32 at once (convenience over ``Deduplicator``)."""
    keys = np.ascontiguousarray(keys, dtype=np.int32)
    keys = keys.reshape(keys.shape[0], int(np.prod(keys.shape[1:], dtype=np.int64)))
    d = Deduplicator(
        keys.shape[0], keys.shape[1], with_runtime=runtime is not None, with_normalizer=normalizer is not None
    )
    d.add(keys, runtime, normalizer)
    return d.finish()
