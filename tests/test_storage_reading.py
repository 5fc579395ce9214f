"""Issue #29 part 1 (reading): the shard reader asks one ``Store`` for everything, a local folder and an
object store (a real S3 server on 127.0.0.1) through the same "reading" methods, with the local
differences (links confined, ``pread`` of the pinned file, inode identity) behind their names."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from s3server import upload_folder

from tpuprep.io.local_store import LocalStore
from tpuprep.io.storage import resolve
from tpuprep.io.store import FileReplaced, NotConfined

FOOTER = 100
BODY = bytes(range(256)) * 40 + FOOTER.to_bytes(4, "little") + b"PAR1"  # ends as a Parquet file does


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
    if isinstance(store, LocalStore):
        tmp = Path(store.path(rel + ".new"))
        tmp.write_bytes(data)
        os.replace(tmp, store.path(rel))  # another inode under the same name
    else:
        store.write_bytes(rel, data)


def test_a_confined_file_is_named_and_sized_alike_on_every_backend(store):
    name, size = store.confined_file("a/file.bin")
    assert size == len(BODY)
    assert str(name).endswith("a/file.bin")
    with pytest.raises(NotConfined, match="does not exist"):
        store.confined_file("a/missing.bin")
    with pytest.raises(NotConfined, match=r"not a (regular )?file"):
        store.confined_file("a/sub")


def test_a_local_link_leading_out_of_the_root_is_not_confined(tmp_path):
    outside = tmp_path / "outside.bin"
    outside.write_bytes(BODY)
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "in.bin").symlink_to(outside)
    with pytest.raises(NotConfined, match="leads outside the shard folder"):
        resolve(tmp_path / "root").confined_file("in.bin")


def test_ranges_read_from_the_pinned_file_and_a_replaced_one_is_refused(store):
    name, size = store.confined_file("a/file.bin")
    pin = store.identity(name)
    assert (pin is not None) == isinstance(store, LocalStore)
    got = store.read_ranges(name, [(0, 10), (300, 1000)], size=size, footer_length=FOOTER, identity=pin)
    assert got == [BODY[0:10], BODY[300:1000]]
    with pytest.raises(FileReplaced, match="no longer the object" if not isinstance(store, LocalStore) else "replaced"):
        store.read_ranges(name, [(0, 10)], size=size, footer_length=FOOTER + 1,
                          identity=None if not isinstance(store, LocalStore) else (0, 0, 0, 0))
    _replace(store, "a/file.bin", b"other" + BODY[5:])  # the same size and footer, other bytes
    if isinstance(store, LocalStore):  # another inode: refused (an object store cannot tell, its check is size + footer)
        with pytest.raises(FileReplaced, match=re.escape("file.bin was replaced after its footer was read")):
            store.read_ranges(name, [(0, 10)], size=size, footer_length=FOOTER, identity=pin)
    _replace(store, "a/file.bin", BODY[:100])  # shorter: refused on every backend
    with pytest.raises(FileReplaced, match=r"file\.bin"):
        store.read_ranges(name, [(0, 10)], size=size, footer_length=FOOTER, identity=pin)


def test_random_access_and_fetched_sources_read_the_files_bytes(store, tmp_path):
    pq.write_table(__import__("pyarrow").table({"x": list(range(1000))}), tmp_path / "t.parquet")
    _replace(store, "a/t.parquet", (tmp_path / "t.parquet").read_bytes())
    name, size = store.confined_file("a/t.parquet")
    pf = pq.ParquetFile(store.open_random_access(name, size))
    assert pf.read().column("x").to_pylist() == list(range(1000))
    meta = pf.metadata
    col = meta.row_group(0).column(0)
    fetched = store.fetched_source(name, [(col.data_page_offset, col.data_page_offset + col.total_compressed_size)],
                                   size)
    assert (fetched is None) == (not store.reads_are_requests)
    if fetched is not None:
        again = pq.ParquetFile(fetched, metadata=meta)
        assert again.read_row_group(0).column("x").to_pylist() == list(range(1000))
    with pytest.raises(FileNotFoundError):
        pq.ParquetFile(store.open_random_access(store.url("a/none.parquet"), None)).read()
    assert store.polars_options({"aws_region": "x"}) == ({} if isinstance(store, LocalStore) else {"storage_options": {"aws_region": "x"}})
    assert store.holds_open_files == isinstance(store, LocalStore)


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
