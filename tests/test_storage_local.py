"""One ``Store`` interface on every backend: a local folder and an fsspec store (``memory://``) answer
the same whole-file operations the same way, and the local one keeps its own guarantees (atomic
renames, hard links, no link followed)."""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path

import pytest

from tpuprep.io.storage import resolve
from tpuprep.io.store import Store


@pytest.fixture(params=["local", "memory"])
def store(request, tmp_path) -> Store:
    if request.param == "local":
        return resolve(tmp_path / "root")
    return resolve(f"memory://k-{uuid.uuid4().hex}/root")


def test_whole_file_operations_agree_on_every_backend(store, tmp_path):
    assert store.listing() == []
    assert not store.exists("a/b.bin")
    store.write_bytes("a/b.bin", b"one")
    store.write_bytes("top.json", b"{}", durable=True)
    assert store.exists("a/b.bin") and store.read_bytes("a/b.bin") == b"one"
    store.write_bytes("a/b.bin", b"two")  # replaces
    assert store.read_bytes("a/b.bin") == b"two"
    with pytest.raises(FileExistsError):
        store.write_bytes("a/b.bin", b"three", exclusive=True)
    assert store.read_bytes("a/b.bin") == b"two"
    store.write_bytes("lock", b"x", exclusive=True)

    local = tmp_path / "upload.bin"
    local.write_bytes(b"payload")
    store.put_file(local, "c/d/e.bin")
    store.copy("c/d/e.bin", "f/e.bin")
    store.get_file("f/e.bin", tmp_path / "back.bin")
    assert (tmp_path / "back.bin").read_bytes() == b"payload" and local.read_bytes() == b"payload"
    assert store.listing() == ["a/b.bin", "c/d/e.bin", "f/e.bin", "lock", "top.json"]
    assert store.child("c").listing() == ["d/e.bin"]

    store.remove(["c/d/e.bin", "lock"])
    store.remove([])
    assert store.listing() == ["a/b.bin", "f/e.bin", "top.json"]
    store.check_reachable()


def test_before_commit_runs_while_the_file_is_not_yet_visible(store):
    seen = []
    store.write_bytes("m.json", b"old")
    store.write_bytes("m.json", b"new", before_commit=lambda: seen.append(store.read_bytes("m.json")))
    assert seen == [b"old"] and store.read_bytes("m.json") == b"new"


def test_a_local_store_writes_by_rename_and_leaves_no_temporary(tmp_path, monkeypatch):
    store = resolve(tmp_path)
    store.write_bytes("x/m.json", b"old")

    def boom():
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        store.write_bytes("x/m.json", b"new", before_commit=boom)
    with pytest.raises(OSError, match="disk full"):
        store.write_bytes("x/n.json", b"new", exclusive=True, before_commit=boom)
    assert sorted(os.listdir(tmp_path / "x")) == ["m.json"]  # old file kept, no temporaries left
    assert store.read_bytes("x/m.json") == b"old"


def test_a_local_copy_is_a_hard_link_and_put_file_keeps_the_source(tmp_path):
    store = resolve(tmp_path / "root")
    store.write_bytes("part.parquet", b"rows")
    store.copy("part.parquet", "shards/s.parquet")
    src, dst = (os.stat(store.path(p)) for p in ("part.parquet", "shards/s.parquet"))
    assert (src.st_dev, src.st_ino) == (dst.st_dev, dst.st_ino)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"o")
    store.put_file(outside, "o.bin")
    assert os.stat(outside).st_ino == os.stat(store.path("o.bin")).st_ino and outside.exists()


def test_a_local_store_follows_no_link_and_prunes_empty_folders(tmp_path):
    store = resolve(tmp_path / "root")
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"secret")
    store.write_bytes("keep/k.bin", b"k")
    os.symlink(secret, store.path("keep/link"))
    os.symlink(tmp_path, store.path("dirlink"))
    with pytest.raises(OSError):
        store.read_bytes("keep/link")
    with pytest.raises(FileExistsError):
        store.write_bytes("keep/link", b"x", exclusive=True)
    assert secret.read_bytes() == b"secret"
    assert store.listing() == ["dirlink", "keep/k.bin", "keep/link"]  # links listed, never entered

    store.write_bytes("a/b/c.bin", b"c")
    store.remove(["a/b/c.bin", "keep/k.bin", "missing.bin"])  # a missing file is no error
    assert not os.path.exists(store.path("a"))  # emptied folders go, up to the root
    assert os.path.isdir(store.path("keep")) and os.path.isdir(store.root)  # non-empty ones stay


# ------------------------------------------------------------------ the build's steps on one Store


@pytest.fixture(scope="module")
def tiny_layout(tmp_path_factory):
    from tpuprep.synth import synthesize

    root = tmp_path_factory.mktemp("local-store-src")
    synthesize(root, "tiny", 0, collections=["layout:xla:random"])
    return root / "npz"


def _staged_and_merged(src, dst: Store) -> tuple[dict[str, bytes], dict]:
    """process_batch then merge_task, as a build's tasks run them, into ``dst``: (every file's
    bytes, the first batch's parts)."""
    from tpuprep.build import merge_task, plan_batches, process_batch
    from tpuprep.inputs import discover
    from tpuprep.options import BuildOptions

    opts = BuildOptions()
    inputs, _ = discover(src, ["layout:xla:random"], ["train"])
    staging = dst.child(".tpuprep")
    done = [process_batch(batch, opts, staging) for batch in plan_batches(inputs)]
    parts = sorted((d["parts"] for d in done if d["parts"]), key=lambda p: p["graph_ids"][0])
    merge_task("layout", "layout:xla:random", "train", parts, staging, dst, opts)
    return {rel: dst.read_bytes(rel) for rel in dst.listing()}, parts[0]


def test_build_steps_write_the_same_bytes_locally_and_to_a_store(tiny_layout, tmp_path, monkeypatch):
    local = resolve(tmp_path / "shards")
    remote = resolve(f"memory://k-{uuid.uuid4().hex}/shards")
    with monkeypatch.context() as m:  # locally every file is written in place: nothing goes through $TMPDIR
        m.setattr(tempfile, "tempdir", str(tmp_path / "no-such-tmp"))
        local_files, first = _staged_and_merged(tiny_layout, local)
    assert any("/configs/" in rel for rel in local_files) and any("/graphs/" in rel for rel in local_files)
    assert _staged_and_merged(tiny_layout, remote)[0] == local_files
    assert not [n for _, _, files in os.walk(local.root) for n in files if ".tmp" in n]  # no temporaries
    # locally a configs shard is its staged part, hard-linked (no copy, no re-encoding)
    part = os.stat(local.child(".tpuprep").path(first["configs"]))
    shard = os.stat(local.path(next(r for r in local_files if "/configs/train-00000-of-" in r)))
    assert (part.st_dev, part.st_ino) == (shard.st_dev, shard.st_ino)


def test_overwrite_deletes_the_old_manifest_before_any_shard_locally_too(tiny_layout, tmp_path, monkeypatch):
    """A reader of the folder never sees a manifest above shards being replaced: --overwrite deletes
    manifest.json first, in a folder as in a bucket."""
    from tpuprep.build import build

    dst = tmp_path / "shards"
    build(tiny_layout, dst, collections=["layout:xla:random"], splits=["train"])
    before = {p.relative_to(dst).as_posix(): p.read_bytes() for p in dst.rglob("*") if p.is_file()}
    deleted: list[str] = []
    real = os.unlink

    def unlink(path, *args, **kwargs):
        deleted.append(os.path.relpath(path, dst))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    build(tiny_layout, dst, collections=["layout:xla:random"], splits=["train"], overwrite=True)
    monkeypatch.undo()
    shards = [i for i, rel in enumerate(deleted) if rel.endswith(".parquet")]
    assert shards and deleted.index("manifest.json") < min(shards)
    after = {p.relative_to(dst).as_posix(): p.read_bytes() for p in dst.rglob("*") if p.is_file()}
    assert after == before  # and the rebuilt folder is the same


@pytest.mark.parametrize("exclusive", [True, False])
def test_a_stale_temporary_of_this_pid_does_not_stop_a_local_write(tmp_path, exclusive):
    """A crashed earlier process with this same pid left ``.<name>.tmp-<pid>``: the write removes it
    (a link in its place only unlinked, never followed) instead of reporting the file as existing."""
    store = resolve(tmp_path / "root")
    store.makedirs()
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"secret")
    stale = Path(store.path(f".lock.tmp-{os.getpid()}"))
    stale.write_bytes(b"half written")
    store.write_bytes("lock", b"mine", exclusive=exclusive)
    assert store.read_bytes("lock") == b"mine" and os.listdir(store.root) == ["lock"]
    os.symlink(secret, store.path(f".m.json.tmp-{os.getpid()}"))
    store.write_bytes("m.json", b"{}", exclusive=exclusive)
    assert store.read_bytes("m.json") == b"{}" and secret.read_bytes() == b"secret"
    assert sorted(os.listdir(store.root)) == ["lock", "m.json"]
    with pytest.raises(FileExistsError):  # the file itself still is never replaced
        store.write_bytes("lock", b"again", exclusive=True)


def test_a_local_read_never_follows_a_link_or_waits_on_a_fifo(tmp_path):
    from tpuprep.io.store import NotARegularFile

    store = resolve(tmp_path / "root")
    store.makedirs()
    os.mkfifo(store.path("fifo"))
    os.symlink(tmp_path, store.path("link"))
    os.mkdir(store.path("folder"))
    for rel in ("fifo", "link", "folder"):
        with pytest.raises(NotARegularFile):
            store.read_bytes(rel)
    with pytest.raises(FileNotFoundError):
        store.read_bytes("missing")


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names an fsync'ed descriptor through /proc")
@pytest.mark.parametrize("exclusive", [False, True])
def test_a_durable_write_is_on_disk_before_it_becomes_visible(tmp_path, monkeypatch, exclusive):
    """``durable=True`` fsyncs the finished temporary before it gets its name (a rename, or for
    ``exclusive`` a hard link): after a power loss the name never points at a file whose bytes were not
    yet written. The order of the calls is checked, for both kinds of write (issue #36: the fsync before
    an exclusive durable write, the lock object's and the manifest's, could be dropped unseen)."""
    store = resolve(tmp_path / "root")
    store.makedirs()
    calls: list[tuple[str, str]] = []
    real_fsync, real_link, real_replace = os.fsync, os.link, os.replace

    def fsync(fd):
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "link", lambda a, b, **k: calls.append(("link", str(a))) or real_link(a, b, **k))
    monkeypatch.setattr(os, "replace", lambda a, b: calls.append(("replace", str(a))) or real_replace(a, b))
    store.write_bytes("m.json", b"{}", durable=True, exclusive=exclusive)
    publish = "link" if exclusive else "replace"
    (temporary,) = {path for op, path in calls if op == publish}
    assert Path(temporary).name.startswith(".m.json.tmp-")
    assert [op for op, path in calls if path == temporary] == ["fsync", publish], calls
    assert store.read_bytes("m.json") == b"{}"
    calls.clear()
    store.write_bytes("n.json", b"{}", exclusive=exclusive)  # not durable: no fsync asked for
    assert not [op for op, _ in calls if op == "fsync"]
