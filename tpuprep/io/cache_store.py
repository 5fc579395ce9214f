"""``CachedStore``: a ``RemoteStore`` whose shard objects (and manifest) are read through a local cache
folder shared by the processes of one host (``open_dataset(url, cache_dir=DIR, cache_bytes=N)``).

What is cached, and why (issue #38 item 3; docs/readers.md, "A local cache of bucket shards"): blocks
of an object keyed by (URL, version, size, byte range), on a fixed grid of ``block_bytes`` (16 MiB)
over the object, plus its *tail* — the Parquet footer and the last 64 KiB before it, what pyarrow
reads first — cached as one block of its own. So opening a dataset's shards (which reads every
footer) fetches footers, not shards; a sampled read fetches the whole blocks its row groups lie in,
so the next epoch, whose other random rows lie in the same blocks, needs nothing from the bucket; and
a large graphs shard of which one graph is read is fetched only around that graph's row group.
Measured on a full-size layout graph (a 46 MB configs shard, one batch of 64 rows per epoch,
``benchmarks/remote_reading.py --epochs``): its 64 random row groups touch every block of 4 MiB or
more, so such blocks cost what the whole object costs in the first epoch (46 MB; 11 requests at 16
MiB, 19 at 4 MiB) and nothing after; blocks of 1 MiB left a quarter unfetched, which the next epoch
fetched (9.3 MB); a cache of the exact byte ranges read would fetch 71–97 % of the next epoch's
bytes again (other random rows).

Never stale: ``open_shard_file`` asks the object's size and version (ETag, generation) with one
request, fresh (no listing cached by fsspec), and the blocks of that version are another key than
those of any other: a replaced or rewritten object is fetched again. Every fetch is conditional on
the version opened (``RemoteStore.get_ranges``: S3 ``If-Match``), so a ``ShardFile`` returns the bytes
of that version or raises ``FileReplaced`` — the reader's "the shard folder changed after it was
opened" — whenever a read has to go to the bucket; what it already has cached is that version's.

The disk side (a block appears whole, processes share the folder, LRU within ``cache_bytes``, nothing
deleted that the cache did not write) is ``io.block_cache.BlockCache``. An object store that reports no
version for an object is not cached (its reads are the plain ``RemoteStore``'s).
"""

from __future__ import annotations

import numbers
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

from .block_cache import WAIT_SECONDS, BlockCache, Reservation, block_cache, block_name
from .remote_store import RemoteShardFile, RemoteStore, _Window, object_version
from .store import FileTooLarge, NotARegularFile, ShardFile

BLOCK_BYTES = 16 << 20
"""The grid of cached blocks over an object (the last block and the tail are shorter)."""
TAIL_BYTES = 64 << 10
"""The end of an object fetched first and cached with its Parquet footer (pyarrow's first read)."""
FETCH_BYTES = 64 << 20
"""At most this many bytes of blocks are fetched at once (one round of concurrent ranged GETs)."""


def cached(store: RemoteStore, cache_dir: str, cache_bytes: int | None) -> CachedStore:
    """``store`` read through the cache folder ``cache_dir`` holding at most ``cache_bytes`` bytes
    (None: unbounded), both as ``check_cache`` returned them. ``FatalError`` when the folder cannot be
    created or used (refused now, not at the first read)."""
    block_cache(cache_dir, cache_bytes)
    return CachedStore(root=store.root, display=store.display, fs=store.fs, protocol=store.protocol,
                       options=store.options, cache_dir=cache_dir, cache_bytes=cache_bytes)


def check_cache(cache_dir: object, cache_bytes: object) -> tuple[str, int | None]:
    """(the absolute path of ``cache_dir``, ``cache_bytes``), or ``TypeError`` / ``ValueError`` in one
    line naming the argument: ``cache_dir`` a local folder (``str`` or path, not a URL), ``cache_bytes``
    None (unbounded) or an integer ≥ 0 (Python or NumPy, not bool), and only with a ``cache_dir``."""
    if cache_dir is None:
        raise ValueError("cache_bytes is the size of a cache_dir: give cache_dir too")
    if not isinstance(cache_dir, str | os.PathLike):
        raise TypeError(f"cache_dir must be a local folder (str or path), got {type(cache_dir).__name__} "
                        f"{cache_dir!r}")
    text = os.fspath(cache_dir)
    if isinstance(text, bytes) or not text or "://" in text:
        raise ValueError(f"cache_dir must be a local folder, got {cache_dir!r}")
    if cache_bytes is not None and (isinstance(cache_bytes, bool) or not isinstance(cache_bytes, numbers.Integral)):
        raise TypeError(f"cache_bytes must be an integer ≥ 0 or None, got {type(cache_bytes).__name__} "
                        f"{cache_bytes!r}")
    if cache_bytes is not None and cache_bytes < 0:
        raise ValueError(f"cache_bytes must be ≥ 0, got {int(cache_bytes)}")
    return os.path.abspath(os.path.expanduser(text)), None if cache_bytes is None else int(cache_bytes)


@dataclass(frozen=True)
class CachedStore(RemoteStore):
    """A ``RemoteStore`` (every method its own) whose ``open_shard_file`` and ``read_bytes`` go through
    the cache folder ``cache_dir`` (at most ``cache_bytes`` bytes; None: unbounded) in blocks of
    ``block_bytes``. Picklable: a process that unpickles it uses the same folder."""

    cache_dir: str = ""
    cache_bytes: int | None = None
    block_bytes: int = BLOCK_BYTES

    def __post_init__(self) -> None:
        if isinstance(self.block_bytes, bool) or not isinstance(self.block_bytes, int) or self.block_bytes < 1:
            raise ValueError(f"block_bytes must be an int ≥ 1, got {self.block_bytes!r}")

    @property
    def cache(self) -> BlockCache:
        """This process's ``BlockCache`` of the folder."""
        return block_cache(self.cache_dir, self.cache_bytes)

    def _pinned(self, rel: str) -> RemoteShardFile:
        """The object's size and version asked now (one request, never fsspec's cached listing)."""
        self.fs.invalidate_cache(self.path(rel))
        return RemoteStore.open_shard_file(self, rel)

    def open_shard_file(self, rel: str) -> ShardFile:
        pinned = self._pinned(rel)
        return CachedShardFile(self, pinned) if pinned.version else pinned

    def read_bytes(self, rel: str, *, limit: int | None = None, follow_links: bool = False) -> bytes:
        """The whole object (a manifest) through the cache: its size and version asked first (one
        request), then its blocks. ``FileTooLarge`` over ``limit`` before anything is fetched."""
        self.fs.invalidate_cache(self.path(rel))
        info = self.fs.info(self.path(rel))
        if info.get("type") != "file":
            raise NotARegularFile(self.url(rel), "a prefix, not an object")
        size = int(info.get("size") or 0)
        if limit is not None and size > limit:
            raise FileTooLarge(size)
        version = object_version(info)
        if not version:
            return RemoteStore.read_bytes(self, rel, limit=limit, follow_links=follow_links)
        return CachedShardFile(self, RemoteShardFile(self, self.url(rel), size, version)).read_ranges([(0, size)])[0]


@dataclass(frozen=True)
class Extent:
    """A cached piece of an object: bytes [lo, hi), named ``name`` in the cache (key ``key``)."""

    name: str
    key: str
    lo: int
    hi: int

    @property
    def size(self) -> int:
        return self.hi - self.lo


class CachedShardFile(ShardFile):
    """An object of a ``CachedStore`` pinned to the version it had when opened (``RemoteShardFile``),
    read through the cache: its tail, then the grid blocks of the reads."""

    def __init__(self, store: CachedStore, remote: RemoteShardFile):
        self.store, self.remote = store, remote
        self.name, self.size, self.version, self.rel = remote.name, remote.size, remote.version, remote.rel
        self._tail_lo: int | None = None
        self._tail_bytes: bytes | None = None  # the tail, when it could not be cached

    def _extent(self, lo: int, hi: int, tag: str = "") -> Extent:
        key = f"{self.name}\n{self.version}\n{self.size}\n{tag or f'{lo}-{hi}'}"
        return Extent(block_name(key), key, lo, hi)

    # ------------------------------------------------------------------------------------ the tail

    def _tail(self) -> int:
        """Where the tail begins (cached, or fetched now: the last ``TAIL_BYTES`` and, for a Parquet
        footer longer than that, the rest of the footer)."""
        if self._tail_lo is not None:
            return self._tail_lo
        cache = self.store.cache
        probe = self._extent(0, 0, "tail")
        held = cache.size_of(probe.name)
        if held is not None and held <= self.size:
            self._tail_lo = self.size - held
            return self._tail_lo
        lo = max(0, self.size - TAIL_BYTES)
        data = self.remote.read_ranges([(lo, self.size)])[0]
        start = _footer_start(data, self.size)
        if start is not None and start < lo:
            data = self.remote.read_ranges([(start, lo)])[0] + data
            lo = start
        tail = self._extent(lo, self.size, "tail")
        claims = cache.claim([(tail.name, tail.key, tail.size)])
        try:
            placed = any(cache.commit(res, data) for res in claims.reserved)
        finally:
            for res in claims.reserved:  # a commit stopped (Ctrl-C): nothing left pending
                cache.abandon(res)
        if not placed and not claims.ready and not claims.busy:
            self._tail_bytes = data  # no room in the cache: kept with this file
        self._tail_lo = lo
        return lo

    # ------------------------------------------------------------------------------------ the blocks

    def _extents(self, start: int, end: int) -> list[Extent]:
        """The extents [start, end) lies in: grid blocks below the tail, then the tail."""
        tail, block = self._tail(), self.store.block_bytes
        out = []
        if start < tail:
            for i in range(start // block, (min(end, tail) - 1) // block + 1):
                out.append(self._extent(i * block, min((i + 1) * block, tail)))
        if end > tail:
            out.append(self._extent(tail, self.size, "tail"))
        return out

    def _ensure(self, extents: list[Extent]) -> dict[str, bytes]:
        """Make ``extents`` cached where the cache can hold them: the missing ones are reserved,
        fetched (conditional on the version, ``FETCH_BYTES`` at a time) and written; those another
        process is writing are waited for (``WAIT_SECONDS`` at most). Returns the bytes of extents
        fetched but not placed (a full disk), for this read only; extents neither cached nor returned
        are read without the cache (``_read``)."""
        cache = self.store.cache
        wanted = {e.name: e for e in extents if not self._in_memory(e)}
        missing = [e for e in wanted.values() if not cache.holds(e.name)]
        if not missing:
            return {}
        claims = cache.claim([(e.name, e.key, e.size) for e in missing], keep=set(wanted))
        kept: dict[str, bytes] = {}
        try:
            for batch in _batches(claims.reserved):
                blocks = self.remote.read_ranges([(wanted[r.name].lo, wanted[r.name].hi) for r in batch])
                for res, data in zip(batch, blocks, strict=True):
                    if not cache.commit(res, data):
                        kept[res.name] = data
        finally:
            # every reservation not committed — a failed fetch (the object replaced, a refused request),
            # a read stopped (Ctrl-C) — is given up: nothing kept, nothing left pending for others to
            # wait on (``abandon`` does nothing to those already settled)
            for res in claims.reserved:
                cache.abandon(res)
        if claims.busy:
            cache.wait(list(claims.busy.values()), time.monotonic() + WAIT_SECONDS)
        return kept

    # ------------------------------------------------------------------------------------ reads

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """The bytes of each range, from the cache (fetching the blocks it lacks first, at once)."""
        pieces = [self._extents(start, end) if end > start else [] for start, end in ranges]
        kept = self._ensure([e for exts in pieces for e in exts])
        return self._read(ranges, pieces, kept)

    def _read(self, ranges: list[tuple[int, int]], pieces: list[list[Extent]], kept: dict[str, bytes]) -> list[bytes]:
        """Each range assembled from its extents: from ``kept``, the tail kept in memory or the cache;
        what none of them holds (not cached: no room, evicted meanwhile) fetched exactly, at once."""
        cache = self.store.cache
        rows: list[list[bytes | tuple[int, int]]] = []
        uncached: list[tuple[int, int]] = []
        for (start, end), exts in zip(ranges, pieces, strict=True):
            row: list[bytes | tuple[int, int]] = []
            for e in exts:
                a, b = max(start, e.lo), min(end, e.hi)
                if e.name in kept:
                    row.append(kept[e.name][a - e.lo: b - e.lo])
                elif self._in_memory(e):
                    row.append(self._tail_bytes[a - e.lo: b - e.lo])
                elif (found := cache.read(e.name, [(a - e.lo, b - e.lo)])) is not None:
                    row.append(found[0])
                else:
                    uncached.append((a, b))
                    row.append((a, b))
            rows.append(row)
        fetched = dict(zip(uncached, self.remote.read_ranges(uncached), strict=True)) if uncached else {}
        return [b"".join(fetched[p] if isinstance(p, tuple) else p for p in row) for row in rows]

    def source(self) -> _Window:
        """A window whose every read goes through the cache (``fetch``)."""
        return _Window(self, [])

    def fetch(self, start: int, end: int) -> bytes:
        """Bytes [start, end) for a read of ``source``: through the cache."""
        return self.read_ranges([(start, end)])[0]

    def prefetched(self, ranges: list[tuple[int, int]]) -> _Window:
        """The blocks of these ranges made cached at once (one round of concurrent GETs for the missing
        ones), then a window reading through the cache; ranges the cache cannot hold (no room) are
        fetched exactly, at once, as without a cache, and kept with the window."""
        ranges = [(start, end) for start, end in ranges if end > start]
        pieces = [self._extents(start, end) for start, end in ranges]
        kept = self._ensure([e for exts in pieces for e in exts])
        cache = self.store.cache
        lacking = [r for r, exts in zip(ranges, pieces, strict=True)
                   if not all(e.name in kept or self._in_memory(e) or cache.holds(e.name) for e in exts)]
        fetched = self.remote.read_ranges(lacking) if lacking else []
        blocks = {e.name: (e.lo, kept[e.name]) for exts in pieces for e in exts if e.name in kept}
        return _Window(self, [*blocks.values(), *zip([a for a, _ in lacking], fetched, strict=True)])

    def _in_memory(self, e: Extent) -> bool:
        """Whether ``e`` is the tail this file keeps in memory (the cache had no room for it)."""
        return e.lo == self._tail_lo and self._tail_bytes is not None

    def verify(self) -> None:
        """Nothing to ask: every byte came from the pinned version (cached under its version, or fetched
        conditional on it)."""

    def close(self) -> None:
        """Nothing is held open by this file (the cache keeps its own descriptors)."""


def _batches(reserved: list[Reservation]) -> Iterator[list[Reservation]]:
    """``reserved`` in order, in runs of at most ``FETCH_BYTES`` (a larger block alone): one round of
    concurrent fetches each."""
    batch: list[Reservation] = []
    total = 0
    for res in reserved:
        if batch and total + res.size > FETCH_BYTES:
            yield batch
            batch, total = [], 0
        batch.append(res)
        total += res.size
    if batch:
        yield batch


def _footer_start(tail: bytes, size: int) -> int | None:
    """Where the Parquet footer of an object of ``size`` bytes ending in ``tail`` begins (its 4-byte
    length and ``PAR1`` end the file), or None when ``tail`` does not end as a Parquet file does."""
    if len(tail) < 8 or tail[-4:] != b"PAR1":
        return None
    start = size - 8 - int.from_bytes(tail[-8:-4], "little")
    return start if start >= 0 else None

