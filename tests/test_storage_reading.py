"""The shard reader's one interface to a store: ``Store.open_shard_file`` → a ``ShardFile`` pinned to the very
file or object it opened, on a local folder and an object store (a real S3 server on 127.0.0.1) alike —
paths confined, ranges and pyarrow sources read from that version only, a replaced, rewritten or
shortened file refused (``FileReplaced``), never read (issue #36 items 1–2)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from s3server import upload_folder

from tpuprep.io.local_store import LocalStore
from tpuprep.io.storage import resolve
from tpuprep.io.store import FileReplaced, NotConfined

BODY = bytes(range(256)) * 40 + (100).to_bytes(4, "little") + b"PAR1"  # ends as a Parquet file does


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    """A store whose root holds ``a/file.bin`` (BODY) and an empty folder-like prefix ``a/sub/x``."""
    folder = tmp_path / "root"
    (folder / "a" / "sub").mkdir(parents=True)
    (folder / "a" / "file.bin").write_bytes(BODY)
    (folder / "a" / "sub" / "x").write_bytes(b"x")
    if request.param == "local":
        return resolve(folder)
    bucket = request.getfixturevalue("bucket")
    return resolve(upload_folder(folder, f"{bucket}/root"))


def _replace(store, rel: str, data: bytes) -> None:
    """Another file or object under the same name: locally a rename (another inode)."""
    if isinstance(store, LocalStore):
        tmp = Path(store.path(rel + ".new"))
        tmp.write_bytes(data)
        os.replace(tmp, store.path(rel))
    else:
        store.write_bytes(rel, data)


def _rewrite_in_place(path: str, data: bytes) -> None:
    """``cp`` over a local file, then its times put back (``rsync --inplace -t``): the same inode, the
    same size and mtime, other bytes; only the ctime moves."""
    st = os.stat(path)
    with open(path, "r+b") as fh:  # no O_TRUNC, no new inode
        fh.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns)


def test_a_shard_file_is_named_sized_and_confined_alike_on_every_backend(store):
    pinned = store.open_shard_file("a/file.bin")
    assert pinned.size == len(BODY) and str(pinned.name).endswith("a/file.bin")
    with pytest.raises(NotConfined, match="does not exist"):
        store.open_shard_file("a/missing.bin")
    with pytest.raises(NotConfined, match=r"not a (regular )?file"):
        store.open_shard_file("a/sub")


def test_a_local_link_leading_out_of_the_root_is_not_confined(tmp_path):
    outside = tmp_path / "outside.bin"
    outside.write_bytes(BODY)
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "in.bin").symlink_to(outside)
    with pytest.raises(NotConfined, match="leads outside the shard folder"):
        resolve(tmp_path / "root").open_shard_file("in.bin")


def test_ranges_come_from_the_pinned_version_and_another_is_refused(store):
    pinned = store.open_shard_file("a/file.bin")
    assert pinned.read_ranges([(0, 10), (300, 1000)]) == [BODY[0:10], BODY[300:1000]]
    pinned.verify()
    _replace(store, "a/file.bin", b"other" + BODY[5:])  # the same size and tail, other bytes
    with pytest.raises(FileReplaced, match=r"file\.bin (was replaced|.*another)"):
        pinned.read_ranges([(0, 10)])
    if isinstance(store, LocalStore):  # S3 has nothing to check: every read was conditional on the ETag
        with pytest.raises(FileReplaced):
            pinned.verify()
    again = store.open_shard_file("a/file.bin")  # what is there now, opened anew, reads
    assert again.read_ranges([(0, 5)]) == [b"other"]
    _replace(store, "a/file.bin", BODY[:100])  # shorter
    with pytest.raises(FileReplaced, match=r"file\.bin"):
        again.read_ranges([(0, 10)])


def test_a_local_file_rewritten_in_place_with_its_mtime_put_back_is_refused(tmp_path):
    """The issue's ``cp``/``rsync --inplace -t`` case: device, inode, size and mtime are the old ones,
    the ctime (which nobody can set back) is not."""
    store = resolve(tmp_path)
    (tmp_path / "f.bin").write_bytes(BODY)
    pinned = store.open_shard_file("f.bin")
    _rewrite_in_place(str(tmp_path / "f.bin"), b"X" * len(BODY))
    with pytest.raises(FileReplaced, match=re.escape(f"{tmp_path / 'f.bin'} was rewritten after it was opened")):
        pinned.read_ranges([(0, 10)])
    with pytest.raises(FileReplaced, match="rewritten"):
        pinned.verify()
    moved = tmp_path / "moved.bin"
    os.replace(tmp_path / "f.bin", moved)  # gone from its name: refused too
    with pytest.raises(FileReplaced, match="no longer exists"):
        resolve(tmp_path).open_shard_file("moved.bin") and pinned.verify()


def test_pyarrow_sources_read_the_pinned_version(store, tmp_path):
    pq.write_table(pa.table({"x": list(range(1000))}), tmp_path / "t.parquet")
    _replace(store, "a/t.parquet", (tmp_path / "t.parquet").read_bytes())
    pinned = store.open_shard_file("a/t.parquet")
    pf = pq.ParquetFile(pinned.source())
    assert pf.read().column("x").to_pylist() == list(range(1000))
    pinned.verify()
    meta = pf.metadata
    col = meta.row_group(0).column(0)
    ranges = [(col.data_page_offset, col.data_page_offset + col.total_compressed_size)]
    fetched = pinned.prefetched(ranges)
    part = pf if fetched is None else pq.ParquetFile(fetched, metadata=meta)
    assert part.read_row_group(0).column("x").to_pylist() == list(range(1000))
    pinned.verify()
    pq.write_table(pa.table({"x": list(range(1000, 2000))}), tmp_path / "u.parquet")
    _replace(store, "a/t.parquet", (tmp_path / "u.parquet").read_bytes())  # a valid file of the same size
    with pytest.raises(FileReplaced):  # raised by the read itself (S3: a conditional GET) or by verify
        pq.ParquetFile(pinned.source()).read()
        pinned.verify()
    assert store.polars_options({"aws_region": "x"}) == (
        {} if isinstance(store, LocalStore) else {"storage_options": {"aws_region": "x"}})


def test_an_s3_read_of_a_replaced_object_costs_no_extra_request(bucket, tmp_path):
    """On S3 every ranged GET carries the ETag (If-Match): the object replaced is a 412, no HEAD is added."""
    import s3fs

    store = resolve(upload_folder(_folder(tmp_path), f"{bucket}/root"))
    pinned = store.open_shard_file("a/file.bin")
    calls = []
    real = s3fs.S3FileSystem._call_s3

    async def counted(fs, method, *args, **kwargs):
        calls.append((method, kwargs.get("IfMatch")))
        return await real(fs, method, *args, **kwargs)

    s3fs.S3FileSystem._call_s3 = counted
    try:
        assert pinned.read_ranges([(0, 4), (8, 12)]) == [BODY[0:4], BODY[8:12]]
        pinned.verify()
        assert calls == [("get_object", pinned.version)] * 2
        store.write_bytes("a/file.bin", BODY[::-1])
        calls.clear()
        with pytest.raises(FileReplaced, match="another ETag"):
            pinned.read_ranges([(0, 4)])
        assert [m for m, _ in calls] == ["get_object"]
    finally:
        s3fs.S3FileSystem._call_s3 = real


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    (folder / "a").mkdir(parents=True)
    (folder / "a" / "file.bin").write_bytes(BODY)
    return folder


def test_elsewhere_a_read_is_checked_by_one_request(tmp_path):
    """A store without conditional reads (``memory://``) checks the version once per read of ranges."""
    import uuid

    store = resolve(f"memory://k-{uuid.uuid4().hex}/root")
    store.write_bytes("f.bin", BODY)
    pinned = store.open_shard_file("f.bin")
    assert pinned.read_ranges([(0, 3)]) == [BODY[:3]]
    store.write_bytes("f.bin", BODY[::-1])
    with pytest.raises(FileReplaced, match="another version"):
        pinned.read_ranges([(0, 3)])
    with pytest.raises(FileReplaced):
        pinned.verify()
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_elsewhere_an_input_is_read_of_the_version_listed(tmp_path):
    """``open_input`` on a store without conditional reads (``memory://``): the object read must still
    be the version listed (one info request after the GET), also when it was replaced by one of the
    same size; an object that gives no version is read whole."""
    import time
    import uuid

    store = resolve(f"memory://k-{uuid.uuid4().hex}/root")
    store.write_bytes("f.npz", BODY)
    (listed,) = store.walk()
    with store.open_input("f.npz", size=100, version=listed.version, offset=8) as fh:  # a member's range
        assert fh.read() == BODY[8:108] and fh.stamp() == [100, listed.version]
    with store.open_input("f.npz", size=listed.size, version=listed.version) as fh:
        assert fh.read() == BODY and fh.stamp() == [len(BODY), listed.version]
    time.sleep(0.01)  # memory://'s version is its creation time
    store.write_bytes("f.npz", BODY[::-1])
    with pytest.raises(FileReplaced, match=r"^was replaced after it was listed: another version$"):
        store.open_input("f.npz", size=listed.size, version=listed.version)
    with store.open_input("f.npz", size=listed.size) as fh:  # no version: whole, as it is now
        assert fh.read() == BODY[::-1]


def test_a_denied_local_read_blames_the_file_mode_not_credentials(tmp_path):
    denied = PermissionError(13, "Permission denied")
    local = str(resolve(tmp_path).failure(denied, str(tmp_path / "a.parquet")))
    assert local == f"{tmp_path / 'a.parquet'}: cannot be read: Permission denied"
    remote = str(resolve("s3://b/x").failure(denied, "s3://b/a.parquet"))
    assert "the credentials in use may not read it" in remote


def test_a_small_file_is_read_whole_alike_on_every_backend(store):
    from tpuprep.io.store import FileTooLarge, NotARegularFile

    assert store.read_bytes("a/file.bin", limit=len(BODY), follow_links=True) == BODY
    with pytest.raises(FileTooLarge) as big:
        store.read_bytes("a/file.bin", limit=len(BODY) - 1, follow_links=True)
    assert big.value.size == len(BODY)
    with pytest.raises(NotARegularFile):
        store.read_bytes("a/sub", limit=1 << 20, follow_links=True)  # a folder locally, a prefix in a bucket
    with pytest.raises(FileNotFoundError):
        store.read_bytes("a/none.bin", limit=1 << 20, follow_links=True)


def test_a_manifest_that_is_a_folder_or_missing_reads_alike_on_every_backend(store):
    from tpuprep.errors import BadShards
    from tpuprep.shards.manifest import read_manifest

    shown = store.location_of("a/sub/manifest.json")
    store.write_bytes("a/sub/manifest.json/x", b"{}")  # where the manifest should be: a folder or a prefix
    with pytest.raises(BadShards, match=rf"^{re.escape(str(shown))}: is not a regular file$"):
        read_manifest(resolve(store.url("a/sub") if not isinstance(store, LocalStore) else store.path("a/sub")))
    with pytest.raises(BadShards, match=r"manifest.json: missing: .* is not a finished tpuprep build"):
        read_manifest(resolve(store.url("a") if not isinstance(store, LocalStore) else store.path("a")))
