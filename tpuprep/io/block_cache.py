"""``BlockCache``: a local folder of byte blocks that processes on one host share (the bucket cache's
disk side; ``io.cache_store`` decides which blocks an object has and fetches them).

A block is named by its *key* (what it holds: an object's URL, version and byte range; the caller
makes it), stored under ``<cache_dir>/tpuprep-cache/blocks/<sha256 of the key>``, and listed in the
index ``<cache_dir>/tpuprep-cache/index.sqlite`` (SQLite: one row per block the cache wrote — name,
key, size, the device and inode of the file it wrote, state, last use). The index is the cache's
record of what it wrote: a block is read only when its row says the cache wrote that very file
(device, inode, size), and only a file of a row's device and inode is ever deleted (evicted, or
found with another size: damaged). A user's file in ``cache_dir`` (or anywhere else) is never read
as a block nor deleted (MosaicML streaming #988 deleted local-only shards), and a file the cache
once wrote but that was replaced since is left alone.

Every block appears whole. A block is first *reserved* (a ``pending`` row, in one transaction that
also makes room for it): its bytes go to a temporary file in ``tmp/`` that the writer holds an
exclusive ``flock`` on; when complete the temporary is hard-linked to its name (``os.link`` never
replaces anything) and its row becomes ``ready`` in one transaction. Nobody reads a pending block:
another process that wants it waits on the writer's ``flock`` (a dead writer's lock is released by
the kernel, so a pending row whose temporary is not locked is stale: removed at the next
reservation), for at most ``WAIT_SECONDS``, then reads the bytes itself without caching them.

Trouble while caching a block never stops a read nor leaves the block pending under a live
process's lock (the others would wait ``WAIT_SECONDS`` for it on every read): a claim the index
refuses (locked past its timeout, a full disk) reserves nothing and the bytes are read without the
cache; a commit that fails (the disk full or failing, no hard links on the filesystem, the index
refusing) or is stopped gives its reservation up and its caller uses the bytes once; a row the index
cannot drop now stays pending with its temporary unlocked, for the next reservation to settle. Only
a temporary that is gone counts as unlocked: one that cannot be opened (no descriptor left) has a
writer that may live.

Durable: a block's bytes are synced (``fsync``) before it is linked to its name, and the index
(SQLite's WAL, ``synchronous=FULL``) syncs each transaction as it commits: its reservation is on
disk before its block is linked. So a host crash (power loss) leaves under a name the whole block or
nothing, and no block file the index does not list (it would never be evicted, and its name never
written again); a block a crash interrupted is settled as a dead writer's. Measured on this project's
machine (a shared VM): +6 to +10 ms per 16 MiB block committed (its first fetch only; a fetch of
16 MiB at 20 ms per request takes about a second), +0.5 ms per claim and commit of the index.

Size: the rows (ready and pending) never sum to more than ``capacity`` bytes: a reservation evicts
the least recently used ready blocks first, and a block larger than the capacity, or one for which
no room can be made (the rest reserved by others), is not cached: ``claim`` says so and the caller
reads those bytes without the cache (never a hang: MosaicML streaming #417).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import itertools
import os
import sqlite3
import stat
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import FatalError, one_line

FOLDER = "tpuprep-cache"
"""The cache's own folder inside the ``cache_dir`` a user gives (their other files stay beside it)."""
WAIT_SECONDS = 120.0
"""How long a reader waits for another process to finish writing a block it needs, before it reads
those bytes itself without caching them."""
TOUCH_SECONDS = 5.0
"""A block's last use is written to the index at most this often per process (the LRU order)."""
OPEN_BLOCKS = 16
"""Block files a process keeps open (least recently used closed first). A block another process
evicts stays readable through an open descriptor (the bytes are still the block's) until it is closed."""

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS blocks (
    name TEXT PRIMARY KEY,      -- the file's name in blocks/ (sha256 of key)
    key TEXT NOT NULL,          -- what it holds (object URL, version, byte range)
    size INTEGER NOT NULL,      -- bytes
    state TEXT NOT NULL,        -- 'pending' (being written to temp) or 'ready' (at blocks/name)
    temp TEXT,                  -- pending: the temporary's name in tmp/
    ident TEXT,                 -- 'device:inode' of the file the cache wrote (temporary, then block)
    used REAL NOT NULL          -- last use (time.time()); the LRU order
);
CREATE INDEX IF NOT EXISTS blocks_by_use ON blocks (state, used);
"""
_FORKED: list[sqlite3.Connection] = []  # connections a forked child inherited: never used, never closed


def block_name(key: str) -> str:
    """The file name of the block ``key`` (64 hex digits)."""
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass
class Reservation:
    """A block this process is writing: ``fd`` is its temporary (open, ``flock``-ed; -1 once the
    reservation is settled by ``commit`` or ``abandon``), ``size`` the bytes it must receive."""

    name: str
    key: str
    size: int
    temp: str
    fd: int


@dataclass
class Claims:
    """What ``BlockCache.claim`` decided for each block wanted: ``ready`` (written meanwhile: read it),
    ``reserved`` (this process writes it), ``busy`` (another process is writing it: name → its
    temporary, to ``wait`` on) and ``uncached`` (no room: read its bytes without the cache)."""

    ready: list[str] = field(default_factory=list)
    reserved: list[Reservation] = field(default_factory=list)
    busy: dict[str, str] = field(default_factory=dict)
    uncached: list[str] = field(default_factory=list)


class BlockCache:
    """The blocks in ``folder``/tpuprep-cache, at most ``capacity`` bytes of them (None: unbounded).

    One object per process and folder (``block_cache``); its methods are thread-safe. Raises
    ``FatalError`` (one line naming the folder) when the folder cannot be created or its index opened.
    """

    def __init__(self, folder: str | os.PathLike, capacity: int | None):
        self.folder = Path(folder)
        self.capacity = capacity
        self.home = self.folder / FOLDER
        self.blocks, self.tmp = self.home / "blocks", self.home / "tmp"
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        self._pid = -1
        self._open: OrderedDict[str, int] = OrderedDict()  # name -> fd of a ready block (validated)
        self._touched: dict[str, float] = {}
        self._serial = itertools.count()
        try:
            self.blocks.mkdir(parents=True, exist_ok=True)
            self.tmp.mkdir(exist_ok=True)
            self._connection()
        except (OSError, sqlite3.Error) as exc:
            raise FatalError(f"cache_dir {self.folder}: cannot be used as a cache: {_why(exc)}") from None

    # ------------------------------------------------------------------------------- the index

    def _connection(self) -> sqlite3.Connection:
        """This process's connection to the index (a forked child opens its own: SQLite connections
        must not cross a fork). Processes opening it take turns (an ``flock`` on the cache's folder):
        SQLite answers "database is locked" at once, without waiting, to one that makes a new index
        WAL while another does (seen in 1 of 12 starts of six processes on a new folder)."""
        if self._pid != os.getpid():
            if self._db is not None:
                _FORKED.append(self._db)
                self._open.clear()  # the descriptors were inherited; the parent closes its own
            turn = os.open(self.home, os.O_RDONLY | _O_CLOEXEC)
            try:
                fcntl.flock(turn, fcntl.LOCK_EX)
                db = sqlite3.connect(self.home / "index.sqlite", timeout=60, isolation_level=None,
                                     check_same_thread=False)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=FULL")  # each change durable at its commit: see Durable
                db.executescript(_SCHEMA)
            finally:
                os.close(turn)
            self._db, self._pid = db, os.getpid()
        return self._db

    @contextlib.contextmanager
    def _transaction(self):
        """One write transaction; rolled back on any error, a refused COMMIT included (a transaction
        left open would keep the index's write lock from every other process)."""
        db = self._connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    # ------------------------------------------------------------------------------- reading

    def read(self, name: str, ranges: list[tuple[int, int]]) -> list[bytes] | None:
        """The bytes [start, end) of each range of the ready block ``name``; None when the cache holds
        no such block (never written, evicted, or the file there is not the one the cache wrote)."""
        with self._lock:
            fd = self._fd(name)
            if fd is None:
                return None
            out = [os.pread(fd, end - start, start) for start, end in ranges]
        if any(len(b) != end - start for b, (start, end) in zip(out, ranges, strict=True)):
            raise ValueError(f"a read past the end of cached block {name}")  # a caller's bug, never data
        return out

    def holds(self, name: str) -> bool:
        """Whether ``name`` is a ready block of this cache (and is opened for reads)."""
        with self._lock:
            return self._fd(name) is not None

    def size_of(self, name: str) -> int | None:
        """The size of the ready block ``name``, or None."""
        with self._lock:
            fd = self._fd(name)
            return None if fd is None else os.fstat(fd).st_size

    def _fd(self, name: str) -> int | None:
        """An open descriptor of the ready block ``name``, checked to be the file the cache wrote."""
        self._connection()
        fd = self._open.get(name)
        if fd is not None:
            self._open.move_to_end(name)
            self._touch(name)
            return fd
        row = self._connection().execute("SELECT size, ident FROM blocks WHERE name = ? AND state = 'ready'",
                                         (name,)).fetchone()
        if row is None:
            return None
        size, ident = row
        try:
            fd = os.open(self.blocks / name, os.O_RDONLY | os.O_NOFOLLOW | _O_CLOEXEC)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ELOOP):  # gone, or a symbolic link: not the cache's file
                self._forget(name, ident, size)
            return None  # otherwise (no descriptor left, ...) this read goes without the cache
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != size or _ident(st) != ident:
            os.close(fd)
            self._forget(name, ident, size)  # not the block the cache wrote: not read
            return None
        self._keep(name, fd)
        self._touch(name, force=True)
        return fd

    def _keep(self, name: str, fd: int) -> None:
        self._open[name] = fd
        while len(self._open) > OPEN_BLOCKS:
            os.close(self._open.popitem(last=False)[1])

    def _touch(self, name: str, force: bool = False) -> None:
        now = time.time()
        if force or now - self._touched.get(name, 0.0) > TOUCH_SECONDS:
            self._touched[name] = now
            with contextlib.suppress(sqlite3.OperationalError):  # busy: the order is a hint
                self._connection().execute("UPDATE blocks SET used = ? WHERE name = ?", (now, name))

    def _forget(self, name: str, ident: str, size: int) -> None:
        """The file at ``name`` was not the block its row names (the file ``ident``, device:inode, of
        ``size`` bytes) when this process looked: decided again in a write transaction, where no other
        process evicts or writes a block. The row goes if it still names ``ident`` and the file there
        is not that file (gone, a symbolic link, a user's file: left alone) or is that file with
        another size (damaged: the cache's own, deleted). A row that names another file now (the block
        evicted and written again since the row was read), or the file there whole again (written
        again into a reused inode), is a block: kept. The index refusing: nothing, for now."""
        path = self.blocks / name
        with contextlib.suppress(OSError, sqlite3.Error), self._transaction() as db:
            if db.execute("SELECT 1 FROM blocks WHERE name = ? AND state = 'ready' AND ident = ?",
                          (name, ident)).fetchone() is None:
                return
            st = _lstat(path)
            if st is not None and stat.S_ISREG(st.st_mode) and _ident(st) == ident:
                if st.st_size == size:
                    return
                os.unlink(path)
            db.execute("DELETE FROM blocks WHERE name = ? AND ident = ?", (name, ident))

    # ------------------------------------------------------------------------------- writing

    def claim(self, wanted: list[tuple[str, str, int]], keep: set[str] | frozenset = frozenset()) -> Claims:
        """Decide, in one transaction, for each block (name, key, size) not held: reserve it for this
        process (making room by evicting least recently used blocks, never those named in ``keep``:
        the blocks the caller is about to read), or say another process is writing it, or that it
        cannot be cached (larger than the capacity, or no room left). When the index refuses the
        transaction (locked past its timeout, a full disk) nothing is reserved: every block is
        ``uncached``. Each reservation must end in ``commit`` or ``abandon``."""
        out = Claims()
        try:
            with self._lock, self._transaction() as db:
                self._sweep(db)
                keep = set(keep) | {name for name, _, _ in wanted}
                for name, key, size in wanted:
                    row = db.execute("SELECT state, temp FROM blocks WHERE name = ?", (name,)).fetchone()
                    if row is not None and row[0] == "ready":
                        out.ready.append(name)
                    elif row is not None:
                        out.busy[name] = row[1]
                    elif not self._room(db, size, keep):
                        out.uncached.append(name)
                    else:
                        out.reserved.append(self._reserve(db, name, key, size))
        except BaseException as exc:
            for res in out.reserved:  # their rows were rolled back: nobody else would remove these
                with contextlib.suppress(OSError):
                    os.unlink(self.tmp / res.temp)
                _close(res)
            if not isinstance(exc, OSError | sqlite3.Error):
                raise
            return Claims(uncached=[name for name, _, _ in wanted])
        return out

    def _room(self, db: sqlite3.Connection, size: int, keep: set[str]) -> bool:
        """Evict least recently used ready blocks (not those in ``keep``) until ``size`` more bytes fit."""
        if self.capacity is None:
            return True
        total = db.execute("SELECT COALESCE(SUM(size), 0) FROM blocks").fetchone()[0]
        if size > self.capacity:
            return False
        if total + size <= self.capacity:
            return True
        for name, used_bytes, ident in db.execute("SELECT name, size, ident FROM blocks WHERE state = 'ready' "
                                                  "ORDER BY used").fetchall():
            if name in keep:
                continue
            self._evict(db, name, ident)
            total -= used_bytes
            if total + size <= self.capacity:
                return True
        return False

    def _evict(self, db: sqlite3.Connection, name: str, ident: str) -> None:
        """Delete the block ``name`` if the file there is the one the cache wrote; drop its row."""
        _unlink_if(self.blocks / name, ident)
        db.execute("DELETE FROM blocks WHERE name = ?", (name,))
        fd = self._open.pop(name, None)
        if fd is not None:
            os.close(fd)

    def _reserve(self, db: sqlite3.Connection, name: str, key: str, size: int) -> Reservation:
        while True:
            temp = f"{name}.{os.getpid()}.{next(self._serial)}"
            try:
                fd = os.open(self.tmp / temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _O_CLOEXEC,
                             0o644)
                break
            except FileExistsError:  # left by a process that had this pid: not this one's
                continue
        res = Reservation(name, key, size, temp, fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: nobody else can hold it
            db.execute("INSERT INTO blocks (name, key, size, state, temp, ident, used) VALUES "
                       "(?, ?, ?, 'pending', ?, ?, ?)", (name, key, size, temp, _ident(os.fstat(fd)), time.time()))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(self.tmp / temp)
            _close(res)
            raise
        return res

    def _sweep(self, db: sqlite3.Connection) -> None:
        """Settle pending rows whose writer died (its temporary no longer ``flock``-ed): a block it had
        already linked whole to its name (the file there is the temporary's, by device and inode)
        becomes ready; otherwise the row goes, and the temporary with it (the cache's own file)."""
        for name, temp, ident in db.execute("SELECT name, temp, ident FROM blocks WHERE state = 'pending'"
                                            ).fetchall():
            if _held(self.tmp / temp, unsure=True):  # unsure: its writer may live, its row stays
                continue
            _unlink_if(self.tmp / temp, ident)
            if _is(self.blocks / name, ident):
                db.execute("UPDATE blocks SET state = 'ready', temp = NULL WHERE name = ?", (name,))
            else:
                db.execute("DELETE FROM blocks WHERE name = ? AND state = 'pending'", (name,))

    def commit(self, res: Reservation, data: bytes | memoryview) -> bool:
        """Write ``data`` (exactly ``res.size`` bytes) and make the block ready; True when it is now
        cached. False when it could not be placed — a file the cache did not write sits at its name,
        the disk is full or fails, the filesystem has no hard links, the index refuses (locked past
        its timeout, full) — and the caller uses ``data`` once without the cache. Either way the
        reservation is settled (no row left pending under a lock this process holds: that would make
        every other process wait ``WAIT_SECONDS`` for it): its row goes, or, when the block is whole
        at its name but the index could not record it, the next claim's sweep adopts it."""
        if len(data) != res.size:
            self.abandon(res)
            raise ValueError(f"block {res.key}: {len(data)} bytes, {res.size} expected")
        linked = False
        try:
            view, done = memoryview(data), 0
            while done < res.size:
                done += os.pwrite(res.fd, view[done:], done)
            os.fsync(res.fd)  # its bytes on disk before it has its name: a crash leaves no wrong block
            with self._lock, self._transaction() as db:
                try:
                    os.link(self.tmp / res.temp, self.blocks / res.name)  # never replaces a file
                    linked = True
                except FileExistsError:  # not the cache's file (its own would have a row)
                    pass
                if linked:
                    db.execute("UPDATE blocks SET state = 'ready', temp = NULL, used = ? WHERE name = ?",
                               (time.time(), res.name))
                else:
                    db.execute("DELETE FROM blocks WHERE name = ? AND state = 'pending'", (res.name,))
                os.unlink(self.tmp / res.temp)
        except BaseException as exc:
            if linked:  # whole at its name, its row still pending: let go, the next sweep adopts it
                _close(res)
            else:
                self.abandon(res)
            if not isinstance(exc, OSError | sqlite3.Error):
                raise
            return False
        if linked:
            fcntl.flock(res.fd, fcntl.LOCK_UN)
            fd, res.fd = res.fd, -1
            with self._lock:
                self._keep(res.name, fd)
        else:
            _close(res)
        return linked

    def abandon(self, res: Reservation) -> None:
        """Give up a reservation (its fetch failed): row and temporary removed, descriptor closed.
        Settles it once (again: nothing) and raises nothing of its own: when the index refuses, the
        row stays pending with its temporary no longer locked, and the next claim's sweep removes
        both."""
        if res.fd < 0:
            return
        try:
            with self._lock, self._transaction() as db:
                db.execute("DELETE FROM blocks WHERE name = ? AND state = 'pending' AND temp = ?",
                           (res.name, res.temp))
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.tmp / res.temp)
        except (OSError, sqlite3.Error):
            pass
        finally:
            _close(res)

    def wait(self, temps: list[str], deadline: float) -> bool:
        """Wait until the writers of these temporaries (``Claims.busy``) are done (finished or dead);
        False when ``deadline`` (``time.monotonic()``) came first."""
        for temp in temps:
            while _held(self.tmp / temp, fcntl.LOCK_SH, unsure=False):  # unsure: read without waiting
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.02)
        return True

    # ------------------------------------------------------------------------------- for people

    def usage(self) -> dict:
        """{"ready": blocks, "pending": blocks, "bytes": bytes of both} (for tests and benchmarks)."""
        with self._lock:
            rows = self._connection().execute("SELECT state, COUNT(*), COALESCE(SUM(size), 0) FROM blocks "
                                              "GROUP BY state").fetchall()
        counts = {state: (n, b) for state, n, b in rows}
        return {"ready": counts.get("ready", (0, 0))[0], "pending": counts.get("pending", (0, 0))[0],
                "bytes": sum(b for _, b in counts.values())}


_CACHES: dict[tuple[str, int | None, int], BlockCache] = {}
_CACHES_LOCK = threading.Lock()


def block_cache(folder: str | os.PathLike, capacity: int | None) -> BlockCache:
    """This process's ``BlockCache`` of ``folder`` with ``capacity`` (one per process: a store
    unpickled in a DataLoader worker gets the worker's own). Keyed by the folder's real path; an
    absolute ``folder`` is also remembered as given, so later calls (a ``CachedStore`` asks at every
    read) skip ``os.path.realpath`` (measured 5 µs a call, more for a deeper folder)."""
    text, pid = os.fspath(folder), os.getpid()
    given = (text, capacity, pid)
    found = _CACHES.get(given)
    if found is not None:
        return found
    key = (os.path.realpath(text), capacity, pid)
    with _CACHES_LOCK:
        if key not in _CACHES:
            _CACHES[key] = BlockCache(folder, capacity)
        if os.path.isabs(text):
            _CACHES[given] = _CACHES[key]
        return _CACHES[key]


def _ident(st: os.stat_result) -> str:
    return f"{st.st_dev}:{st.st_ino}"


def _lstat(path: Path) -> os.stat_result | None:
    """``path``'s status (no link followed), None when nothing is there."""
    try:
        return os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _is(path: Path, ident: str | None) -> bool:
    """Whether ``path`` is the regular file ``ident`` (device:inode) names (no link followed)."""
    st = _lstat(path)
    return st is not None and stat.S_ISREG(st.st_mode) and _ident(st) == ident


def _unlink_if(path: Path, ident: str | None) -> None:
    """Delete ``path`` only if it is the regular file ``ident`` (device:inode) names."""
    if _is(path, ident):
        os.unlink(path)


def _close(res: Reservation) -> None:
    """Release the ``flock`` of the temporary of ``res`` and close it, once; ``res.fd`` is then -1.
    Released explicitly: a child forked meanwhile shares the open file, and closing only this
    descriptor would leave the lock held (the block looking written-to) while the child lives."""
    if res.fd >= 0:
        fd, res.fd = res.fd, -1
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _held(temp: Path, probe: int = fcntl.LOCK_EX, *, unsure: bool) -> bool:
    """Whether a live process holds the ``flock`` of this temporary against ``probe`` (False when the
    temporary is gone; ``unsure`` when it cannot be opened to know: no descriptor left, ...).
    ``LOCK_EX`` asks whether its writer lives, ``LOCK_SH`` whether it still writes."""
    try:
        fd = os.open(temp, os.O_RDONLY | os.O_NOFOLLOW | _O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return unsure
    try:
        fcntl.flock(fd, probe | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also releases the lock just taken
    return False


def _why(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else one_line(exc)
