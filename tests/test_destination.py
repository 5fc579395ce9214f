"""``shards/destination.py`` is one implementation over a ``Store``: the same ``contents``,
``selection``, ``clear``, ``probe`` and ``Lock`` run on a local folder and on an S3 bucket (the moto
server of ``tests/s3server.py``), and each backend keeps its own guarantees — locally an ``flock``
released by the kernel when its holder dies, links/FIFOs never followed, foreign folders never
entered; in a bucket a conditional-write lock object that is renewed and taken over when stale."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tpuprep.errors import FatalError, UsageError
from tpuprep.io import locks
from tpuprep.io.local_store import LocalStore
from tpuprep.io.storage import resolve
from tpuprep.io.store import Store
from tpuprep.shards import destination
from tpuprep.shards.layout import LOCK, MANIFEST

SHARD = "tile/xla/graphs/train-00000-of-00001.parquet"
CONFIGS = "layout/xla/random/configs/valid-00000-of-00002.parquet"
PART = ".tpuprep/parts/tile/xla/test/t_test.json"
MANIFEST_DOC = {"collections": {"tile:xla": {"splits": {"train": {}}},
                                "layout:xla:random": {"splits": {"valid": {}, "test": {}}}}}


@pytest.fixture(params=["local", "s3"])
def dst(request, tmp_path) -> Store:
    """An empty ``--dst``: a local folder, or a prefix in a fresh bucket of the moto server."""
    if request.param == "local":
        return resolve(tmp_path / "out")
    return resolve(f"{request.getfixturevalue('bucket')}/out")


CARD_TEXT = b"---\nlicense: other\n---\n\n# TpuGraphs, preprocessed by tpuprep\n\nSchema version 3.2\n"
"""How every dataset card tpuprep writes begins (``card.render_card``)."""


def _put(store: Store, rels: list[str]) -> None:
    for rel in rels:
        store.write_bytes(rel, CARD_TEXT if rel == "README.md" else b"x")


# -------------------------------------------------------------------------- contents and clear


def test_contents_sorts_own_and_foreign_entries_the_same_on_every_backend(dst):
    assert destination.contents(dst).empty  # absent: holds nothing
    _put(dst, [SHARD, CONFIGS, PART, "README.md", "notes.txt", "tile/xla/graphs/mine.parquet",
               "mydata/a.bin"])
    dst.write_bytes(LOCK, b"{}")
    got = destination.contents(dst)
    assert sorted(got.files) == sorted([SHARD, CONFIGS, PART, "README.md"])
    assert got.held == {("tile:xla", "train"), ("layout:xla:random", "valid"), ("tile:xla", "test")}
    assert got.lock and not got.empty
    # a folder tpuprep does not create is foreign; a local one is not entered, so it is named once
    foreign = {"notes.txt", "tile/xla/graphs/mine.parquet", "mydata/" if isinstance(dst, LocalStore) else "mydata/a.bin"}
    assert set(got.foreign) == foreign
    if isinstance(dst, LocalStore):
        assert got.dirs[0].count("/") >= got.dirs[-1].count("/")  # deepest first
        assert {"tile", "tile/xla", "tile/xla/graphs", ".tpuprep/parts/tile/xla/test"} <= set(got.dirs)


def test_clear_deletes_only_what_it_is_given_and_keeps_a_folder_something_was_put_into(dst):
    _put(dst, [SHARD, CONFIGS, "README.md"])
    own = destination.contents(dst)
    _put(dst, ["layout/xla/random/configs/later.bin"])  # put there meanwhile: its folder stays
    destination.clear(dst, own.files, own.dirs)
    assert dst.listing() == ["layout/xla/random/configs/later.bin"]
    if isinstance(dst, LocalStore):
        assert not os.path.exists(dst.path("tile"))  # emptied own folders are gone
        assert sorted(os.listdir(dst.root)) == ["layout"]


def test_the_local_scan_never_follows_links_and_refuses_fifos_and_lock_links(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s")
    store = resolve(tmp_path / "out")
    _put(store, [SHARD])
    os.symlink(outside / "secret.txt", store.path("tile/xla/graphs/train-00001-of-00002.parquet"))
    os.symlink(outside, store.path("tile/xla/configs"))  # an own folder's name, as a link
    os.mkfifo(store.path(MANIFEST))
    os.symlink(outside / "secret.txt", store.path(LOCK))
    os.makedirs(store.path("layout/xla/random/notes"))
    got = destination.contents(store)
    assert got.files == [SHARD] and not got.lock
    assert sorted(got.foreign) == sorted([LOCK, MANIFEST, "layout/xla/random/notes/", "tile/xla/configs",
                                          "tile/xla/graphs/train-00001-of-00002.parquet"])
    destination.clear(store, got.files, got.dirs)
    assert (outside / "secret.txt").read_text() == "s" and os.path.islink(store.path("tile/xla/configs"))


def test_a_temporary_is_tpuprep_s_in_a_folder_and_foreign_in_a_bucket(dst):
    """Locally a killed writer leaves ``.<name>.tmp-<pid>``: tpuprep's own, removed by --overwrite. An
    object appears only when complete, so such a name in a bucket is someone else's."""
    tmp = "tile/xla/graphs/.train-00000-of-00001.parquet.tmp-123"
    _put(dst, [tmp])
    got = destination.contents(dst)
    assert (got.files, got.foreign) == (([tmp], []) if isinstance(dst, LocalStore) else ([], [tmp]))


def test_selection_reads_the_manifest_on_every_backend(dst):
    assert destination.selection(dst) == set()
    dst.write_bytes(MANIFEST, json.dumps(MANIFEST_DOC).encode())
    assert destination.selection(dst) == {("tile:xla", "train"), ("layout:xla:random", "valid"),
                                          ("layout:xla:random", "test")}
    for garbage in (b"{not json", b"\xff\xfe", b"[]", b'{"collections": 3}'):
        dst.write_bytes(MANIFEST, garbage)
        assert destination.selection(dst) == set()


def test_selection_never_waits_on_a_fifo_or_follows_a_link(tmp_path):
    store = resolve(tmp_path / "out")
    store.makedirs()
    (tmp_path / "real.json").write_text(json.dumps(MANIFEST_DOC))
    os.symlink(tmp_path / "real.json", store.path(MANIFEST))
    assert destination.selection(store) == set()
    os.unlink(store.path(MANIFEST))
    os.mkfifo(store.path(MANIFEST))
    assert destination.selection(store) == set()  # at once: O_NONBLOCK, then not a regular file


def test_resume_into_a_dst_whose_manifest_is_a_fifo_is_refused_at_once(tmp_path):
    """A FIFO named manifest.json made ``--resume`` hang: the manifest was read before the contents
    were checked. It is foreign now, and the manifest is read only when it is tpuprep's file."""
    from tpuprep.synth import synthesize

    synthesize(tmp_path / "src", "tiny", 0, collections=["tile:xla"])
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / MANIFEST)
    done = subprocess.run([sys.executable, "-c", "from tpuprep.cli import main; main()", "build", "--src",
                           str(tmp_path / "src" / "npz"), "--dst", str(out), "--resume", "-q"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "did not write (manifest.json)" in done.stderr


# ----------------------------------------------------------------------------------------- the lock


def test_one_lock_refuses_a_second_holder_names_the_first_and_goes_away(dst):
    destination.probe(dst)  # nobody holds it
    with destination.Lock.acquire(dst) as lock:
        record = json.loads(dst.read_bytes(LOCK))
        assert record["pid"] == os.getpid() and record["host"] == socket.gethostname() and record["started"]
        lock.check()
        holder = f"another tpuprep build (pid {os.getpid()} on {socket.gethostname()}, started "
        with pytest.raises(UsageError, match="being written by") as busy:
            destination.probe(dst)
        assert holder in str(busy.value) and dst.display in str(busy.value)
        with pytest.raises(UsageError, match="being written by"):  # an flock is per open file: also here
            destination.Lock.acquire(dst)
        assert destination.contents(dst).lock and destination.contents(dst).empty
    assert dst.listing() == []  # released: the lock file or object is gone
    lock.release()  # twice is harmless
    destination.probe(dst)


HOLDER = """
import sys, time
from tpuprep.io.storage import resolve
from tpuprep.shards import destination
lock = destination.Lock.acquire(resolve(sys.argv[1]))
print("held", flush=True)
time.sleep(600)
"""


def test_a_local_lock_is_an_flock_that_a_killed_holder_gives_up(tmp_path):
    store = resolve(tmp_path / "out")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, store.root], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UsageError, match=f"pid {holder.pid} on .*released by the system"):
            destination.Lock.acquire(store)
        with pytest.raises(UsageError, match=f"pid {holder.pid} on "):
            destination.probe(store)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert os.path.exists(store.path(LOCK))  # left behind by the killed holder, but nobody holds it
    destination.probe(store)
    with destination.Lock.acquire(store) as lock:
        assert json.loads(store.read_bytes(LOCK))["pid"] == os.getpid()
        lock.check()
    assert not os.path.exists(store.path(LOCK))


def test_a_local_lock_needs_a_place_for_its_file(tmp_path):
    store = resolve(tmp_path / "out")
    store.makedirs()
    os.mkdir(store.path(LOCK))  # a folder where the lock file goes
    with pytest.raises(FatalError, match=f"cannot create its lock file {LOCK}"):
        destination.Lock.acquire(store)


def test_a_lock_whose_record_cannot_be_written_is_not_kept(tmp_path, monkeypatch):
    """ENOSPC writing the holder's record: the flock must go with the failed attempt, else this process
    refuses its own next build of the folder ("being written by another build", its own pid)."""
    import errno

    store = resolve(tmp_path / "out")
    store.makedirs()
    real = os.pwrite

    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(locks.os, "pwrite", full)
    with pytest.raises(OSError, match="No space left"):
        destination.Lock.acquire(store)
    monkeypatch.setattr(locks.os, "pwrite", real)
    with destination.Lock.acquire(store) as lock:
        lock.check()


def test_a_renewal_in_flight_never_writes_the_lock_object_back_after_release(monkeypatch):
    """release() removed the object while a slow renewal was still writing it: the renewal then put it
    back, and other hosts' builds were refused until it went stale (600 s)."""
    import threading

    monkeypatch.setattr(locks, "LOCK_RENEW_SECONDS", 0.01)
    store = resolve("memory://tpuprep-lease-test/dst")
    writing, go_on = threading.Event(), threading.Event()
    real = type(store).write_bytes

    def slow(self, rel, data, **kw):
        if not kw.get("exclusive"):  # a renewal: stop in the middle until release has been called
            writing.set()
            go_on.wait(10)
        return real(self, rel, data, **kw)

    monkeypatch.setattr(type(store), "write_bytes", slow)
    lease = locks.LeaseLock(store, LOCK)
    lease.take()
    assert writing.wait(5)
    releaser = threading.Thread(target=lease.release)
    releaser.start()
    time.sleep(5.5)  # a renewal slower than release's 5 s wait for the renewing thread (slow S3)
    go_on.set()
    releaser.join(10)
    assert not releaser.is_alive()
    time.sleep(0.1)
    assert not store.exists(LOCK), "the lock object came back after release"


def test_a_live_lock_object_is_refused_and_a_stale_one_taken_over(bucket):
    store = resolve(f"{bucket}/locked")
    live = {"owner": "x", "pid": 1, "host": "elsewhere.example", "started": "2026-01-01T00:00:00Z",
            "renewed": time.time()}
    store.write_bytes(LOCK, json.dumps(live).encode())
    with pytest.raises(UsageError, match=r"pid 1 on elsewhere\.example, .* not renewed for 600 s is taken over"):
        destination.Lock.acquire(store)
    with pytest.raises(UsageError, match=r"elsewhere\.example"):
        destination.probe(store)
    store.write_bytes(LOCK, json.dumps(live | {"renewed": time.time() - locks.LOCK_STALE_SECONDS - 60}).encode())
    destination.probe(store)  # stale: nobody live holds it
    with destination.Lock.acquire(store) as lock:
        assert json.loads(store.read_bytes(LOCK))["owner"] != "x"
        lock.check()
    assert store.listing() == []


def test_a_running_build_renews_its_lock_object_and_removes_it_at_the_end(bucket, monkeypatch):
    monkeypatch.setattr(locks, "LOCK_RENEW_SECONDS", 0.05)
    store = resolve(f"{bucket}/renewed")
    with destination.Lock.acquire(store) as lock:
        first = json.loads(store.read_bytes(LOCK))["renewed"]
        deadline = time.monotonic() + 30
        while json.loads(store.read_bytes(LOCK))["renewed"] == first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert json.loads(store.read_bytes(LOCK))["renewed"] > first
        lock.check()
    assert store.listing() == []


def test_a_lock_object_taken_over_fails_the_check_and_is_not_removed(bucket):
    store = resolve(f"{bucket}/stolen")
    thief = json.dumps({"owner": "thief", "renewed": time.time()}).encode()
    with destination.Lock.acquire(store) as lock:
        store.write_bytes(LOCK, thief)
        with pytest.raises(FatalError, match="took over this build's lock"):
            lock.check()
    assert store.read_bytes(LOCK) == thief  # the thief's lock is left alone


def test_a_dead_holder_on_this_host_is_stale_at_once():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    info = {"owner": "x", "pid": dead.pid, "host": socket.gethostname(), "renewed": time.time()}
    assert locks.lock_is_stale(info)
    assert not locks.lock_is_stale(info | {"pid": os.getpid()})
    assert not locks.lock_is_stale(info | {"host": "elsewhere.example"})
    assert locks.lock_is_stale({}) and locks.lock_is_stale(info | {"renewed": "yesterday"})


# ------------------------------------------------------------------- build.py's use of the one path


def test_a_local_dst_that_is_a_file_is_refused_and_a_bucket_prefix_beside_an_object_is_not(dst):
    from tpuprep.build import inspect_destination

    if isinstance(dst, LocalStore):
        os.makedirs(os.path.dirname(dst.root), exist_ok=True)
        with open(dst.root, "wb") as fh:
            fh.write(b"a file")
        with pytest.raises(UsageError, match=f"--dst {dst.display} exists and is not a folder"):
            inspect_destination(dst, resume=False, overwrite=False)
        return
    parent = resolve(dst.url().rsplit("/", 1)[0])
    parent.write_bytes("out", b"an object named like the prefix")  # not under it: the prefix is empty
    assert inspect_destination(dst, resume=False, overwrite=False).empty


def test_a_sidecar_that_is_a_link_is_not_a_finished_batch(tmp_path):
    from tpuprep.build import _reusable, plan_batches, process_batch
    from tpuprep.inputs import discover
    from tpuprep.options import BuildOptions
    from tpuprep.shards.layout import sidecar_relpath
    from tpuprep.synth import synthesize

    synthesize(tmp_path / "src", "tiny", 0, collections=["layout:xla:random"])
    inputs, _ = discover(tmp_path / "src" / "npz", ["layout:xla:random"], ["train"])
    batch = plan_batches(inputs)[0]
    staging = resolve(tmp_path / "out" / ".tpuprep")
    process_batch(batch, BuildOptions(), staging)
    assert _reusable(batch, BuildOptions(), staging) is not None
    sidecar = staging.path(sidecar_relpath(batch[0].relpath))
    os.rename(sidecar, tmp_path / "elsewhere.json")
    os.symlink(tmp_path / "elsewhere.json", sidecar)
    assert _reusable(batch, BuildOptions(), staging) is None  # never followed


# ------------------------------------------------------------------------- the card (issue #36 item 12)


@pytest.mark.parametrize(("text", "own"), [
    (CARD_TEXT, True),
    (CARD_TEXT.replace(b"\n", b"\r\n"), True),  # a checkout that turned it into CRLF
    (b"---\na: 1\n---\n# TpuGraphs, preprocessed by tpuprep\n", True),
    (b"# My notes\n\nDo not delete.\n", False),
    (b"", False),
    (b"# TpuGraphs, preprocessed by tpuprep\n", False),  # no front matter: not how tpuprep writes it
    (b"My intro\n---\n\n# TpuGraphs, preprocessed by tpuprep\n", False),  # a rule, not front matter
    (b"---\na: 1\n---\n\nMy own words first.\n# TpuGraphs, preprocessed by tpuprep\n", False),
    (b"---\na: 1\n\n# TpuGraphs, preprocessed by tpuprep\n", False),  # front matter never closed
    (b"---\na: 1\n---\n\n# TpuGraphs, preprocessed by tpuprep, and my notes\n", False),
])
def test_a_readme_is_tpuprep_s_only_when_it_is_a_card_tpuprep_wrote(dst, text, own):
    """A user's own README.md in --dst was taken for the card and replaced by --resume (deleted by
    --overwrite): it is foreign now, so both refuse the folder and it keeps every byte."""
    assert destination.is_tpuprep_card(text) == own
    dst.write_bytes("README.md", text)
    got = destination.contents(dst)
    assert (got.files, got.foreign) == ((["README.md"], []) if own else ([], ["README.md"]))
    assert dst.read_bytes("README.md") == text


def test_the_card_tpuprep_renders_is_recognised():
    from tpuprep.shards.card import render_card

    manifest = {"schema_version": "3.2", "versions": {"tpuprep": "0"}, "options": {}, "shards": [],
                "collections": {}, "quarantine": []}
    assert destination.is_tpuprep_card(render_card(manifest).encode())
