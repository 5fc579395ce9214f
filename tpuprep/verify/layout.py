"""``verify``'s check of a layout graph's configs in the stored domain: every original config row of the
input, encoded by verify's own NumPy (``reference.LayoutEncoder``: base-7 codes of the graph's stored
tie columns), against the ``codes`` the shards hold for its unique config (``stored``: the byte planes
joined to int32, never decoded to layout values).

Both sides stream in order. The input row where a unique config first occurs is compared with that
config's stored codes directly (int32 for int32, every byte of the value); every other row (a repeat)
by a key of its codes (``reference.RowKeys``: a random linear hash drawn per graph, exact in float64,
equal for different codes with probability ≤ 2^-128) against the key of its unique config's stored
codes. "Unique configs pairwise distinct" is "the stored rows' keys distinct" (distinct keys are
proof; equal keys are equal codes but for the same ≤ 2^-128). Held at a time: one input chunk, about
one block of stored rows, and one key per unique config (O(c) per graph whatever nc).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

import numpy as np

from ..shards.reader import Dataset, GraphRecord
from .reading import InputReader
from .reference import CODE_LIMIT, LayoutEncoder, RowKeys, tie_columns
from .stored import PER_CONFIG, StoredBlock, stored_blocks

VERIFY_BLOCK_BYTES = 16 << 20
"""Input bytes per chunk of ``node_config_feat`` read, and stored codes bytes per block read, in ``verify``."""


@dataclasses.dataclass
class LayoutRead:
    """What ``layout_pass`` read of a graph: ``g`` with its per-unique-config columns (runtime,
    runtime_spread, group_size, first_index) filled in from the shards, the number of stored configs
    rows, and a key (``RowKeys``) per unique config (None when the rows could not be compared)."""

    g: GraphRecord
    stored: int
    keys: np.ndarray | None


class _Stored:
    """The stored rows of a graph read block by block: numbering checked, per-config columns kept, and
    the key (``RowKeys``) of every row's codes; a row holding a code outside 0..7^6−1 gets a key of its
    own that no input row has (a negative sum)."""

    def __init__(self, blocks: Iterator[StoredBlock], gid: str, keyer: RowKeys, capacity: int,
                 problems: list[str]):
        self.blocks, self.gid, self.keyer, self.problems = blocks, gid, keyer, problems
        self.done = 0
        self.columns: dict[str, list] = {name: [] for name in PER_CONFIG}
        self._keys = np.zeros((max(capacity, 1), keyer.m), np.float64)

    @property
    def keys(self) -> np.ndarray:
        """(rows read,) the keys of the stored rows read so far (a view, valid until the next pull)."""
        return self._keys[: self.done].view(np.dtype((np.void, 8 * self.keyer.m))).reshape(self.done)

    def pull(self) -> StoredBlock | bool | None:
        """The next block; False at the end; None (with a problem) when it is not numbered
        ``done``, ``done`` + 1, ... (config_id 0..c_u−1 in order)."""
        block = next(self.blocks, None)
        if block is None:
            return False
        k = len(block.config_id)
        if not np.array_equal(block.config_id, np.arange(self.done, self.done + k)):
            self.problems.append(f"{self.gid}: configs rows are not config_id 0..c_u-1 in order")
            return None
        for name, parts in self.columns.items():
            parts.append(block.columns[name])
        if self.done + k > len(self._keys):
            self._keys = np.concatenate([self._keys, np.zeros((max(self.done + k, 2 * len(self._keys)) - len(self._keys),
                                                                self.keyer.m))])
        valid = ((block.codes >= 0) & (block.codes < CODE_LIMIT)).all(1)
        sums = self._keys[self.done : self.done + k]
        sums[:] = self.keyer.sums(block.codes if valid.all() else np.where(valid[:, None], block.codes, 0))
        sums[~valid, 0] = -1.0 - self.done - np.flatnonzero(~valid)
        self.done += k
        return block

    def joined(self, g: GraphRecord) -> GraphRecord:
        if not self.done:
            runtimes = None if g.config_runtime_original is None else np.zeros(0, np.int64)
            joined = {"config_runtime": runtimes, "config_runtime_spread": runtimes,
                      "group_size": np.zeros(0, np.int32), "first_index": np.zeros(0, np.int32)}
        else:
            joined = {("config_" + name if name.startswith("runtime") else name):
                      None if any(p is None for p in parts) else np.concatenate(parts)
                      for name, parts in self.columns.items()}
        return dataclasses.replace(g, **joined)


def first_occurrences(inv: np.ndarray, u: int) -> np.ndarray | None:
    """Where each of the ``u`` unique configs first occurs in ``inv`` (c,) int64, when they are numbered in
    first-occurrence order and each occurs; else None."""
    c = len(inv)
    if not u or not c or inv.min() < 0 or inv.max() >= u:
        return None
    first = np.full(u, c, np.int64)
    np.minimum.at(first, inv, np.arange(c))
    return first if first[-1] < c and bool((np.diff(first) > 0).all()) else None


def _chunks(r: InputReader) -> Iterator[tuple[int, np.ndarray]]:
    m = r.f.member("node_config_feat")
    row_bytes = int(np.prod(m.shape[1:], dtype=np.int64)) * m.dtype.itemsize
    return r.iter_rows("node_config_feat", max(1, VERIFY_BLOCK_BYTES // max(row_bytes, 1)))


def _not_reconstructed(problems: list[str], gid: str, start: int, same: np.ndarray) -> bool:
    if same.all():
        return False
    problems.append(f"{gid}: original config row {start + int(np.flatnonzero(~same)[0])} is not reconstructed")
    return True


@cache
def _blas():
    import numpy  # noqa: F401  (NumPy's BLAS must be loaded before the scan)
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


@contextmanager
def one_blas_thread():
    """Run the block with one BLAS thread: the encoder's and the keys' matmuls are tall and thin, and
    OpenBLAS's threads spin between calls (measured: 6x the CPU of one thread on ``bench``'s layout
    graphs); workers are capped already, a serial run or a library caller is not."""
    with _blas().limit(limits=1, user_api="blas"):
        yield


def layout_pass(ds: Dataset, r: InputReader, g: GraphRecord, problems: list[str]) -> LayoutRead | None:
    """With one BLAS thread (``one_blas_thread``): ``_layout_pass``."""
    with one_blas_thread():
        return _layout_pass(ds, r, g, problems)


def _layout_pass(ds: Dataset, r: InputReader, g: GraphRecord, problems: list[str]) -> LayoutRead | None:
    """Compare every original config row of the input (read through ``r``) with the stored codes of its
    unique config (``config_inverse``), in one pass over both when the unique configs are numbered in
    first-occurrence order (else — ``_check_groups`` reports it — every stored row first, then every
    input row by key). None, with a problem, when the stored rows are not numbered 0..c_u−1 in order
    or ``config_node_tie`` does not number its stored columns 0..nt−1 in order of first appearance."""
    gid = g.graph_id
    columns = tie_columns(g.config_node_tie)
    if columns is None:
        problems.append(f"{gid}: config_node_tie does not number its stored columns 0..nt-1 in order of "
                        "first appearance")
        return None
    nt = len(columns[0])
    encoder, keyer = LayoutEncoder(columns), RowKeys(3 * nt)
    stored = _Stored(stored_blocks(ds, g, nt, VERIFY_BLOCK_BYTES), gid, keyer, g.num_unique_configs, problems)
    inv = g.config_inverse.astype(np.int64)
    first = first_occurrences(inv, g.num_unique_configs)
    if first is None:
        return _two_passes(r, g, stored, encoder, inv, problems)
    held: list[np.ndarray] = []  # the stored codes of configs held_from.. (k, 3·nt) int32
    held_from = 0
    for start, chunk in _chunks(r):
        k = len(chunk)
        same, codes = encoder.encode(chunk)
        codes = codes.reshape(k, -1)
        want = inv[start : start + k]
        is_first = first[want] == np.arange(start, start + k)
        fresh = want[is_first]  # the unique configs first seen here: consecutive ids, in order
        while len(fresh) and stored.done <= fresh[-1]:
            block = stored.pull()
            if block is None:
                return None
            if block is False:
                break
            held.append(block.codes)
        if len(fresh):
            values = held[0] if len(held) == 1 else np.concatenate(held) if held else np.zeros((0, 3 * nt), np.int32)
            n = int(np.count_nonzero(fresh < stored.done))  # a prefix: the configs the shards hold
            equal = np.zeros(len(fresh), bool)
            if n:
                lo = int(fresh[0]) - held_from  # fresh ids are consecutive: a slice of values
                mine = codes if n == k else codes[is_first][:n]
                equal[:n] = (mine == values[lo : lo + n]).all(1)
            same[is_first] &= equal
            drop = min(int(fresh[-1]) + 1, stored.done) - held_from  # later first occurrences need later configs
            held[:] = [values[drop:]]
            held_from += drop
        if not is_first.all():
            repeat = want[~is_first]  # each refers to an earlier row's config: read already, if the shards hold it
            there = repeat < stored.done  # a config the shards lack cannot equal its row
            match = np.zeros(len(repeat), bool)
            if there.any():
                match[there] = keyer.keys(codes[~is_first][there]) == stored.keys[repeat[there]]
            same[~is_first] &= match
        if _not_reconstructed(problems, gid, start, same):
            break
    held.clear()
    while (block := stored.pull()):
        pass
    if block is None:
        return None
    return LayoutRead(stored.joined(g), stored.done, stored.keys)


def _two_passes(r: InputReader, g: GraphRecord, stored: _Stored, encoder: LayoutEncoder, inv: np.ndarray,
                problems: list[str]) -> LayoutRead | None:
    """``layout_pass`` when ``config_inverse`` does not number the unique configs in first-occurrence
    order: every stored row's key first, then every input row's key against its unique config's."""
    while (block := stored.pull()):
        pass
    if block is None:
        return None
    keys = stored.keys
    if len(keys) and len(inv) and inv.min() >= 0 and inv.max() < len(keys):
        for start, chunk in _chunks(r):
            same, codes = encoder.encode(chunk)
            same &= stored.keyer.keys(codes.reshape(len(chunk), -1)) == keys[inv[start : start + len(chunk)]]
            if _not_reconstructed(problems, g.graph_id, start, same):
                break
    return LayoutRead(stored.joined(g), stored.done, keys)
