"""The bucket cache's disk side, ``io.block_cache.BlockCache``, on its own (no object store): a block
appears whole and only once complete, the cache stays within its bytes (least recently used out), a
block larger than the cache is not cached (never a wait), a file the cache did not write is never read
as a block nor deleted, a dead writer's block is settled by the next process, and processes waiting
for a block another is writing get it once it is whole (issue #38 item 3). Real processes, real
``flock``s, a real SQLite index."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import multiprocessing
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from tpuprep.errors import FatalError
from tpuprep.io import block_cache as bc
from tpuprep.io.block_cache import BlockCache, Claims, block_name


def _want(tag: str, size: int) -> tuple[str, str, int]:
    return block_name(tag), tag, size


def _put(cache: BlockCache, tag: str, data: bytes) -> str:
    """Reserve, write and commit the block ``tag``; its name."""
    claims = cache.claim([_want(tag, len(data))])
    assert len(claims.reserved) == 1, claims
    assert cache.commit(claims.reserved[0], data)
    return block_name(tag)


def _files(cache: BlockCache) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in cache.blocks.iterdir()}


@pytest.fixture
def fresh(monkeypatch):
    """No ``BlockCache`` shared between tests of one process; last uses written at every read."""
    monkeypatch.setattr(bc, "_CACHES", {})
    monkeypatch.setattr(bc, "TOUCH_SECONDS", 0.0)


def test_a_block_is_read_only_once_whole(tmp_path, fresh):
    cache = BlockCache(tmp_path, None)
    name = block_name("a")
    claims = cache.claim([_want("a", 10)])
    res = claims.reserved[0]
    assert cache.read(name, [(0, 10)]) is None  # pending: nobody reads it
    assert not (cache.blocks / name).exists()
    other = BlockCache(tmp_path, None)  # another handle (another process would see the same)
    again = other.claim([_want("a", 10)])
    assert list(again.busy) == [name] and not again.reserved
    assert cache.commit(res, b"0123456789")
    assert cache.read(name, [(2, 5), (0, 10)]) == [b"234", b"0123456789"]
    assert other.read(name, [(9, 10)]) == [b"9"]
    assert not list(cache.tmp.iterdir())  # the temporary is gone
    assert cache.usage() == {"ready": 1, "pending": 0, "bytes": 10}


def test_a_commit_of_the_wrong_size_is_refused_and_nothing_kept(tmp_path, fresh):
    cache = BlockCache(tmp_path, None)
    res = cache.claim([_want("a", 10)]).reserved[0]
    with pytest.raises(ValueError, match="9 bytes, 10 expected"):
        cache.commit(res, b"012345678")
    assert cache.usage()["bytes"] == 0 and not list(cache.tmp.iterdir()) and not _files(cache)


def test_least_recently_used_blocks_go_first_and_the_bytes_stay_within_the_cap(tmp_path, fresh):
    cache = BlockCache(tmp_path, 30)
    names = [_put(cache, tag, tag.encode() * 10) for tag in "abc"]
    assert sum(_files(cache).values()) == 30
    cache.read(names[0], [(0, 1)])  # a used again: b is now the least recently used
    _put(cache, "d", b"d" * 10)
    assert set(_files(cache)) == {names[0], names[2], block_name("d")}
    _put(cache, "e", b"e" * 25)  # needs three blocks' room: a, c, d go (oldest first), e stays alone
    assert _files(cache) == {block_name("e"): 25}
    assert cache.usage() == {"ready": 1, "pending": 0, "bytes": 25}


def test_a_block_larger_than_the_cache_is_read_without_it(tmp_path, fresh):
    cache = BlockCache(tmp_path, 8)
    started = time.monotonic()
    claims = cache.claim([_want("big", 9), _want("small", 8)])
    assert claims.uncached == [block_name("big")] and [r.key for r in claims.reserved] == ["small"]
    assert time.monotonic() - started < 5
    assert BlockCache(tmp_path / "zero", 0).claim([_want("x", 1)]).uncached == [block_name("x")]
    zero = BlockCache(tmp_path / "zero", 0)
    res = zero.claim([_want("empty", 0)]).reserved  # an empty block fits even a cache of 0 bytes
    assert zero.commit(res[0], b"") and zero.read(block_name("empty"), [(0, 0)]) == [b""]


def test_pending_blocks_count_against_the_cap_so_no_room_means_uncached(tmp_path, fresh):
    cache = BlockCache(tmp_path, 20)
    first = cache.claim([_want("a", 15)])
    second = BlockCache(tmp_path, 20).claim([_want("b", 10)])  # a's 15 bytes are reserved, not evictable
    assert second.uncached == [block_name("b")]
    cache.commit(first.reserved[0], b"a" * 15)
    third = BlockCache(tmp_path, 20).claim([_want("b", 10)])  # now a is ready: evicted for b
    assert [r.key for r in third.reserved] == ["b"] and not (cache.blocks / block_name("a")).exists()


def test_files_the_cache_did_not_write_are_never_read_nor_deleted(tmp_path, fresh):
    (tmp_path / "users-notes.txt").write_text("mine")
    cache = BlockCache(tmp_path, 20)
    (cache.home / "readme.txt").write_text("also mine")
    stray = cache.blocks / block_name("never-written")
    stray.write_bytes(b"not a block")
    a = _put(cache, "a", b"a" * 10)
    b = _put(cache, "b", b"b" * 10)
    replaced, swapped = cache.blocks / a, cache.blocks / b  # a user puts other files where blocks were
    for path in (replaced, swapped):
        path.unlink()
        path.write_bytes(b"Z" * 10)
    fresh_handle = BlockCache(tmp_path, 20)
    assert fresh_handle.read(a, [(0, 10)]) is None  # same name and size, not the file the cache wrote
    for tag in "cdefgh":  # eviction goes round many times (b's row is evicted, its file left alone)
        _put(fresh_handle, tag, tag.encode() * 10)
    assert replaced.read_bytes() == b"Z" * 10 and stray.read_bytes() == b"not a block"
    assert swapped.read_bytes() == b"Z" * 10
    assert (tmp_path / "users-notes.txt").read_text() == "mine"
    assert (cache.home / "readme.txt").read_text() == "also mine"
    claims = fresh_handle.claim([_want("a", 10)])  # a again: its name is taken by the user's file
    assert not fresh_handle.commit(claims.reserved[0], b"a" * 10)  # not placed, nothing replaced
    assert replaced.read_bytes() == b"Z" * 10 and not list(cache.tmp.iterdir())


def test_a_full_disk_leaves_the_block_uncached(tmp_path, fresh, monkeypatch):
    cache = BlockCache(tmp_path, None)
    res = cache.claim([_want("a", 10)]).reserved[0]

    def full(*_args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    assert not cache.commit(res, b"a" * 10)
    assert cache.usage()["bytes"] == 0 and not list(cache.tmp.iterdir()) and not _files(cache)


def test_a_folder_that_cannot_be_a_cache_is_one_line(tmp_path, fresh):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(FatalError, match=r"^cache_dir .*file: cannot be used as a cache: "):
        BlockCache(blocker, None)


# ----------------------------------------------------------------------------------- processes


def _reserve_and_die(folder: str, link_first: bool) -> None:
    """Reserve block "a", write it, (optionally link it whole to its name,) then be killed."""
    cache = BlockCache(folder, 100)
    res = cache.claim([_want("a", 4)]).reserved[0]
    os.pwrite(res.fd, b"aaaa", 0)
    if link_first:
        os.link(cache.tmp / res.temp, cache.blocks / res.name)
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize("link_first", [False, True])
def test_a_dead_writers_block_is_settled_by_the_next_claim(tmp_path, fresh, link_first):
    proc = multiprocessing.get_context("fork").Process(target=_reserve_and_die, args=(str(tmp_path), link_first))
    proc.start()
    proc.join(30)
    assert proc.exitcode == -signal.SIGKILL
    cache = BlockCache(tmp_path, 100)
    assert cache.usage()["pending"] == 1
    claims = cache.claim([_want("a", 4)])
    if link_first:  # it had placed the whole block: adopted, its temporary removed
        assert claims.ready == [block_name("a")] and cache.read(block_name("a"), [(0, 4)]) == [b"aaaa"]
    else:  # its half-done temporary is deleted, the block reserved anew
        assert [r.key for r in claims.reserved] == ["a"]
        assert cache.commit(claims.reserved[0], b"AAAA")
        assert cache.read(block_name("a"), [(0, 4)]) == [b"AAAA"]
    assert not list(cache.tmp.iterdir())


def _write_slowly(folder: str, started, data: bytes) -> None:
    cache = BlockCache(folder, None)
    res = cache.claim([_want("a", len(data))]).reserved[0]
    started.set()
    time.sleep(1.0)
    cache.commit(res, data)


def test_a_reader_waits_for_the_writer_and_then_reads_the_whole_block(tmp_path, fresh):
    ctx = multiprocessing.get_context("spawn")
    started = ctx.Event()
    proc = ctx.Process(target=_write_slowly, args=(str(tmp_path), started, b"x" * 1000))
    proc.start()
    assert started.wait(60)
    cache = BlockCache(tmp_path, None)
    claims = cache.claim([_want("a", 1000)])
    assert list(claims.busy) == [block_name("a")]
    assert cache.read(block_name("a"), [(0, 1000)]) is None
    assert cache.wait(list(claims.busy.values()), time.monotonic() + 60)
    assert cache.read(block_name("a"), [(0, 1000)]) == [b"x" * 1000]
    proc.join(30)


def test_a_wait_ends_at_its_deadline(tmp_path, fresh):
    cache = BlockCache(tmp_path, None)
    claims = cache.claim([_want("a", 4)])
    other = BlockCache(tmp_path, None)
    busy = other.claim([_want("a", 4)]).busy
    started = time.monotonic()
    assert not other.wait(list(busy.values()), time.monotonic() + 0.3)
    assert 0.25 < time.monotonic() - started < 5
    cache.abandon(claims.reserved[0])
    assert other.wait(list(busy.values()), time.monotonic() + 5)  # an abandoned block: done at once
    assert cache.usage() == {"ready": 0, "pending": 0, "bytes": 0}


def _hammer(folder: str, seed: int, out) -> None:
    """Many claims and reads of 12 blocks of 100 bytes in a cache of 500, in random order."""
    import random

    rng = random.Random(seed)
    cache = BlockCache(folder, 500)
    bad = 0
    for _ in range(300):
        tag = f"b{rng.randrange(12)}"
        data = tag.encode().ljust(100, b".")
        name = block_name(tag)
        got = cache.read(name, [(0, 100)])
        if got is None:
            claims = cache.claim([_want(tag, 100)])
            for res in claims.reserved:
                cache.commit(res, data)
            if claims.busy:
                cache.wait(list(claims.busy.values()), time.monotonic() + 60)
            got = cache.read(name, [(0, 100)])
        if got is not None and got[0] != data:
            bad += 1
    out.put(bad)


def test_processes_sharing_a_small_cache_never_read_a_wrong_or_partial_block(tmp_path, fresh):
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_hammer, args=(str(tmp_path), seed, out)) for seed in range(3)]
    for p in procs:
        p.start()
    bad = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(30)
    assert bad == [0, 0, 0]
    cache = BlockCache(tmp_path, 500)
    usage = cache.usage()
    assert usage["pending"] == 0 and usage["bytes"] <= 500
    assert sum(_files(cache).values()) <= 500 and not list(cache.tmp.iterdir())
    rows = sqlite3.connect(cache.home / "index.sqlite").execute("SELECT name FROM blocks").fetchall()
    assert {r[0] for r in rows} == set(_files(cache))


def test_the_index_path_is_inside_the_cache_folder(tmp_path, fresh):
    cache = BlockCache(tmp_path / "c", 1)
    assert cache.home == Path(tmp_path / "c" / bc.FOLDER) and (cache.home / "index.sqlite").is_file()


# ------------------------------------------------------------------ races and failures at each seam


def _rows(cache: BlockCache) -> dict[str, tuple[str, str]]:
    """name -> (state, ident) of every row of the index (read with a connection of its own)."""
    with sqlite3.connect(cache.home / "index.sqlite") as db:
        return {n: (s, i) for n, s, i in db.execute("SELECT name, state, ident FROM blocks")}


def _ident_of(path: Path) -> str:
    st = os.stat(path, follow_symlinks=False)
    return f"{st.st_dev}:{st.st_ino}"


def _between(monkeypatch, path: Path, action) -> list:
    """Run ``action(open, args)`` the first time this process opens ``path`` (after a reader read the
    block's row, before it opens its file: the seam a reader and other processes race at); it returns
    what that open returns (or raises). The list it returns fills once that happened."""
    real_open, done = os.open, []

    def seam(file, flags, *args, **kwargs):
        if not done and Path(os.fsdecode(file)) == path:
            done.append(True)
            return action(lambda: real_open(file, flags, *args, **kwargs))
        return real_open(file, flags, *args, **kwargs)

    monkeypatch.setattr(bc.os, "open", seam)
    return done


def test_a_reader_racing_an_eviction_and_a_rewrite_keeps_the_new_blocks_row(tmp_path, fresh, monkeypatch):
    """The reader reads a's row, then another process evicts a and writes it again before the reader
    opens the file: the reader finds a file that is not the one its row named, and must not drop the
    row of the new one (that file would never be evicted nor a written again: fetched forever)."""
    other = BlockCache(tmp_path, 10)  # another process, in a cache of room for one block
    name = _put(other, "a", b"a" * 10)
    reader = BlockCache(tmp_path, 10)
    third = BlockCache(tmp_path, 10)  # a third process has a's file open: its inode is not reused
    assert third.read(name, [(0, 1)]) == [b"a"]
    old = _ident_of(reader.blocks / name)

    def evict_and_rewrite(open_):
        _put(other, "b", b"b" * 10)  # a evicted
        _put(other, "a", b"a" * 10)  # b evicted, a written again: another file
        assert _ident_of(reader.blocks / name) != old
        return open_()

    raced = _between(monkeypatch, reader.blocks / name, evict_and_rewrite)
    assert reader.read(name, [(0, 10)]) in (None, [b"a" * 10])
    assert raced
    assert _rows(reader) == {name: ("ready", _ident_of(reader.blocks / name))}
    assert reader.read(name, [(0, 10)]) == [b"a" * 10]
    _put(other, "c", b"c" * 10)  # a's new file is the cache's: evicted, the disk stays within the cap
    assert _files(other) == {block_name("c"): 10}


@pytest.mark.parametrize("trouble", ["deleted", "symlink", "descriptors"])
def test_a_block_that_cannot_be_opened_is_forgotten_only_when_it_is_not_there(tmp_path, fresh, monkeypatch,
                                                                            trouble):
    """A block file gone, or a symbolic link in its place, drops its row (the link and its target left
    alone); no descriptor left (EMFILE) is this read's trouble: read without the cache, row kept."""
    cache = BlockCache(tmp_path, None)
    name = _put(BlockCache(tmp_path, None), "a", b"a" * 10)
    path, users = cache.blocks / name, tmp_path / "users-file"
    if trouble == "deleted":
        path.unlink()
    elif trouble == "symlink":
        users.write_bytes(b"U" * 10)
        path.unlink()
        path.symlink_to(users)
    else:
        def no_descriptor(_open):
            raise OSError(errno.EMFILE, "Too many open files")

        _between(monkeypatch, path, no_descriptor)
    assert cache.read(name, [(0, 10)]) is None
    if trouble == "descriptors":
        assert cache.read(name, [(0, 10)]) == [b"a" * 10] and cache.usage()["ready"] == 1
        return
    assert cache.usage()["ready"] == 0
    if trouble == "symlink":
        assert path.is_symlink() and users.read_bytes() == b"U" * 10


def held_temporaries(cache: BlockCache) -> list[str]:
    """The temporaries of ``cache`` this process still has a descriptor of, but not as a block (a
    leaked one keeps its ``flock``: every other process would wait for it). A block this process
    wrote stays open through the temporary's name, gone since, while the block's name holds it."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if str(cache.tmp) in target and (not target.endswith(" (deleted)") or os.fstat(int(fd)).st_nlink == 0):
                out.append(target)
    return out


def _settled(tmp_path: Path, tag: str, size: int) -> Claims:
    """Another process claims block ``tag`` at once (never waits: ``busy`` would be a 120 s wait)."""
    started = time.monotonic()
    claims = BlockCache(tmp_path, None).claim([_want(tag, size)])
    assert not claims.busy and time.monotonic() - started < 5, claims
    return claims


class _FailingIndex:
    """The index connection of a cache whose statements containing ``text`` fail as a full disk does."""

    def __init__(self, db: sqlite3.Connection, text: str):
        self.db, self.text = db, text

    def execute(self, sql: str, *args):
        if self.text in sql:
            raise sqlite3.OperationalError("database or disk is full")
        return self.db.execute(sql, *args)

    def __getattr__(self, name: str):
        return getattr(self.db, name)


@pytest.mark.parametrize("trouble", ["link", "write"])
def test_a_commit_that_fails_settles_its_reservation(tmp_path, fresh, monkeypatch, trouble):
    """No hard links on this filesystem (EPERM), a disk that fails a write (EIO): the commit says False
    (the caller uses its bytes once), nothing of the block is kept, its temporary is neither left nor
    held (another process would wait 120 s on each read of it)."""
    cache = BlockCache(tmp_path, None)
    res = cache.claim([_want("a", 10)]).reserved[0]

    def refused(*_args, **_kwargs):
        raise OSError(errno.EPERM if trouble == "link" else errno.EIO, "refused")

    monkeypatch.setattr(os, trouble if trouble == "link" else "pwrite", refused)
    assert not cache.commit(res, b"a" * 10)
    monkeypatch.undo()
    assert not held_temporaries(cache) and not list(cache.tmp.iterdir()) and not _files(cache) and not _rows(cache)
    assert [r.key for r in _settled(tmp_path, "a", 10).reserved] == ["a"]


def test_a_commit_the_index_refuses_leaves_nothing_held(tmp_path, fresh):
    """The index locked by another process for longer than its busy timeout ("database is locked"):
    the commit says False; its row stays pending (the index cannot be changed) but its temporary is no
    longer locked, so the next claim settles it instead of waiting for it."""
    cache = BlockCache(tmp_path, None)
    res = cache.claim([_want("a", 10)]).reserved[0]
    cache._connection().execute("PRAGMA busy_timeout = 100")
    blocker = sqlite3.connect(cache.home / "index.sqlite", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    assert not cache.commit(res, b"a" * 10)
    blocker.execute("ROLLBACK")
    assert not held_temporaries(cache) and not _files(cache)
    assert [r.key for r in _settled(tmp_path, "a", 10).reserved] == ["a"]


def test_a_block_linked_but_not_recorded_is_adopted_by_the_next_claim(tmp_path, fresh):
    """The block is whole at its name when the index refuses to record it (full): the commit says
    False and lets go of its temporary; the next claim finds the file the writer linked (as after a
    writer that died there) and makes it ready. Nothing left pending or held, nothing written twice."""
    cache = BlockCache(tmp_path, None)
    res = cache.claim([_want("a", 10)]).reserved[0]
    cache._db = _FailingIndex(cache._db, "SET state = 'ready'")
    assert not cache.commit(res, b"a" * 10)
    assert not held_temporaries(cache)
    claims = _settled(tmp_path, "a", 10)
    assert claims.ready == [block_name("a")] and not list(cache.tmp.iterdir())
    assert BlockCache(tmp_path, None).read(block_name("a"), [(0, 10)]) == [b"a" * 10]


def test_a_transaction_whose_commit_fails_is_rolled_back(tmp_path, fresh):
    """COMMIT refused (a full disk): the transaction must not stay open on the connection (it would
    hold the index's write lock: every other process's claim would wait, then fail)."""
    cache = BlockCache(tmp_path, None)
    res = cache.claim([_want("a", 10)]).reserved[0]
    cache._db = _FailingIndex(cache._db, "COMMIT")
    assert not cache.commit(res, b"a" * 10)
    assert not cache._db.in_transaction and not held_temporaries(cache)
    other = BlockCache(tmp_path, None)
    other._connection().execute("PRAGMA busy_timeout = 2000")
    assert other.claim([_want("a", 10)]).ready == [block_name("a")]  # linked whole: adopted
    assert other.read(block_name("a"), [(0, 10)]) == [b"a" * 10]


@pytest.mark.parametrize("trouble", ["locked", "second-insert"])
def test_a_claim_the_index_refuses_reads_without_the_cache_and_leaves_nothing(tmp_path, fresh, trouble):
    """The index locked past its timeout, or full at the second reservation of a claim: every block
    wanted is read without the cache (no error), and the temporaries already made are removed (their
    rows were rolled back: nobody would ever clean them)."""
    cache = BlockCache(tmp_path, None)
    if trouble == "locked":
        cache._connection().execute("PRAGMA busy_timeout = 100")
        blocker = sqlite3.connect(cache.home / "index.sqlite", isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
    else:
        inserts = iter([False, True])
        real = cache._connection()

        class SecondInsertFails(_FailingIndex):
            def execute(self, sql, *args):
                if sql.startswith("INSERT") and next(inserts):
                    raise sqlite3.OperationalError("database or disk is full")
                return real.execute(sql, *args)

        cache._db = SecondInsertFails(real, "")
    claims = cache.claim([_want("a", 10), _want("b", 10)])
    assert claims.uncached == [block_name("a"), block_name("b")] and not claims.reserved
    if trouble == "locked":
        blocker.execute("ROLLBACK")
    assert not held_temporaries(cache) and not list(cache.tmp.iterdir()) and not _rows(cache)


def test_a_sweep_that_cannot_probe_a_lock_keeps_the_writers_temporary(tmp_path, fresh, monkeypatch):
    """Another process's claim sweeps pending rows while out of descriptors (EMFILE on opening the
    temporary to probe its lock): a writer it cannot see to be dead is alive; its block stays."""
    writer = BlockCache(tmp_path, None)
    res = writer.claim([_want("a", 4)]).reserved[0]
    real_open = os.open

    def out_of_descriptors(file, flags, *args, **kwargs):
        if Path(os.fsdecode(file)) == writer.tmp / res.temp:
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(file, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", out_of_descriptors)
    other = BlockCache(tmp_path, None)
    assert list(other.claim([_want("b", 4)]).reserved)  # its sweep met a's pending row
    # waiting for a while unable to see its lock: not waited for (its bytes are read without the cache)
    started = time.monotonic()
    assert other.wait([res.temp], time.monotonic() + 30) and time.monotonic() - started < 5
    monkeypatch.undo()
    assert (writer.tmp / res.temp).exists() and _rows(writer)[res.name][0] == "pending"
    assert writer.commit(res, b"aaaa") and other.read(res.name, [(0, 4)]) == [b"aaaa"]


def test_abandon_settles_a_reservation_once_and_never_raises(tmp_path, fresh):
    cache = BlockCache(tmp_path, None)
    res = cache.claim([_want("a", 4)]).reserved[0]
    cache._db = _FailingIndex(cache._db, "DELETE")
    cache.abandon(res)  # the row cannot go now: its temporary is let go, for the next claim's sweep
    cache.abandon(res)  # nothing more (its descriptor, maybe another file's by now, is not closed again)
    assert not held_temporaries(cache)
    assert [r.key for r in _settled(tmp_path, "a", 4).reserved] == ["a"]


def test_a_block_written_again_before_a_reader_forgets_it_is_kept(tmp_path, fresh, monkeypatch):
    """The reader found no file at a's name (evicted meanwhile); by the time it drops a's row the block
    was written again into a file with the same device and inode (ext4 hands a freed inode straight
    back; other processes evict and write while this one waits for the index's write lock). That row
    names the file there, whole: it stays (dropped, the file would have no row: never evicted, never
    written again). Reproduced by the state the reader meets: no file at the open, the block after."""
    name = _put(BlockCache(tmp_path, None), "a", b"a" * 10)
    reader = BlockCache(tmp_path, None)

    def evicted_then(_open):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory")

    _between(monkeypatch, reader.blocks / name, evicted_then)
    assert reader.read(name, [(0, 10)]) is None
    assert reader.usage()["ready"] == 1 and reader.read(name, [(0, 10)]) == [b"a" * 10]


def test_a_block_whose_size_changed_is_deleted_and_written_again(tmp_path, fresh):
    """The cache's own file (its device and inode) of another size than it wrote (truncated; a crash
    before its bytes reached the disk): never read; deleted with its row, so the block is written
    again (left there without a row, every later commit of it would find its name taken)."""
    cache = BlockCache(tmp_path, None)
    name = _put(BlockCache(tmp_path, None), "a", b"a" * 10)
    os.truncate(cache.blocks / name, 4)
    assert cache.read(name, [(0, 4)]) is None
    assert not _files(cache) and not _rows(cache)
    assert _put(cache, "a", b"a" * 10) == name and cache.read(name, [(0, 10)]) == [b"a" * 10]


def test_processes_opening_a_new_index_take_turns(tmp_path, fresh):
    """Making a new index WAL while another process does the same is "database is locked" at once
    (SQLite does not wait there: 1 start in 12 of six processes on a new folder failed so): those
    who open the index take turns, an ``flock`` on the cache's folder; a second one waits its turn."""
    home = BlockCache(tmp_path, None).home
    turn = os.open(home, os.O_RDONLY)
    fcntl.flock(turn, fcntl.LOCK_EX)  # another process opening the index
    made: list[BlockCache] = []
    opener = threading.Thread(target=lambda: made.append(BlockCache(tmp_path, None)))
    opener.start()
    opener.join(0.5)
    assert opener.is_alive() and not made
    os.close(turn)
    opener.join(30)
    assert made and made[0].usage()["ready"] == 0


def _hold_inherited(ready, done) -> None:
    ready.set()
    done.wait(60)


def test_a_temporary_inherited_by_a_forked_child_is_not_held_once_settled(tmp_path, fresh):
    """A process forks (a DataLoader starting its workers) while it writes a block: the child shares
    the temporary's open file and so its ``flock``. Abandoned when the index refuses to drop its row,
    the block must not look written-to while the child lives: the next claim settles it (another
    process would wait 120 s on each read of it)."""
    cache = BlockCache(tmp_path, None)
    res = cache.claim([_want("a", 4)]).reserved[0]
    cache._db = _FailingIndex(cache._db, "DELETE")
    ctx = multiprocessing.get_context("fork")
    ready, done = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold_inherited, args=(ready, done))
    child.start()
    try:
        assert ready.wait(30)
        cache.abandon(res)
        assert [r.key for r in _settled(tmp_path, "a", 4).reserved] == ["a"]
    finally:
        done.set()
        child.join(30)


def test_a_block_is_on_disk_before_it_has_its_name_and_its_row_is_durable(tmp_path, fresh, monkeypatch):
    """A host crash (power loss) must leave no block of the right size and wrong bytes under its name,
    and no block file the index forgot (never evicted nor written again): the temporary is synced
    before it is linked to its name, and each change of the index is durable when committed (WAL,
    ``synchronous=FULL``: a reservation is on disk before its block is linked)."""
    cache = BlockCache(tmp_path, None)
    res = cache.claim([_want("a", 10)]).reserved[0]
    events: list[tuple[str, object]] = []
    real_fsync, real_link = os.fsync, os.link
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", os.fstat(fd).st_ino)), real_fsync(fd)))
    monkeypatch.setattr(os, "link", lambda src, dst, **kw: (events.append(("link", os.stat(src).st_ino)),
                                                             real_link(src, dst, **kw)))
    temp = os.fstat(res.fd).st_ino
    assert cache.commit(res, b"a" * 10)
    assert events == [("fsync", temp), ("link", temp)]
    assert cache._connection().execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert cache._connection().execute("PRAGMA journal_mode").fetchone()[0] == "wal"
