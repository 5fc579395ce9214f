"""The storage seam (tpuprep/io/storage.py): local paths stay plain paths, URLs get their fsspec
filesystem, missing packages and unknown schemes are one clear usage error, credentials never shown."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tpuprep.errors import UsageError
from tpuprep.io.storage import resolve, scheme_of, without_credentials


def test_a_local_path_is_a_local_store_without_fsspec(tmp_path):
    store = resolve(tmp_path / "x")
    assert store.is_local and store.fs is None
    assert store.root == str(tmp_path / "x")
    assert store.path("a", "b.txt") == str(tmp_path / "x" / "a" / "b.txt")
    assert resolve("relative/dir").root == str(Path("relative/dir").absolute())


def test_file_urls_are_local_paths(tmp_path):
    store = resolve(f"file://{tmp_path}/d")
    assert store.is_local and store.root == str(tmp_path / "d")


def test_schemes_are_recognised_and_drive_letters_are_not():
    assert scheme_of("s3://b/k") == "s3"
    assert scheme_of("S3://b/k") == "s3"
    assert scheme_of("s3:/b/k") == "s3"  # what pathlib makes of s3://b/k
    assert scheme_of("C:/data") is None
    assert scheme_of("/abs/path") is None
    assert scheme_of("rel/s3:/x") is None


def test_memory_urls_get_an_fsspec_filesystem_and_round_trip():
    store = resolve("memory://tpuprep-test-store/root/")
    assert not store.is_local and store.protocol == "memory"
    assert store.path("a.txt").endswith("tpuprep-test-store/root/a.txt")
    with store.open("a.txt", "wb") as fh:
        fh.write(b"hello")
    with store.open("a.txt") as fh:
        assert fh.read() == b"hello"
    assert store.url("a.txt") == "memory://" + store.path("a.txt")
    assert resolve(store.url("a.txt")).fs.cat(store.path("a.txt")) == b"hello"


def test_unknown_schemes_are_a_usage_error_naming_the_argument():
    with pytest.raises(UsageError, match=r"--dst: unknown storage scheme nosuch://"):
        resolve("nosuch://bucket/x", what="--dst")


def test_a_missing_filesystem_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "gcsfs", None)  # as if gcsfs were not installed
    with pytest.raises(UsageError, match=r"--src: gs:// needs a package .*pip install 'tpuprep\[gcs\]'"):
        resolve("gs://bucket/npz", what="--src")


def test_credentials_never_reach_the_display_name():
    assert without_credentials("s3://KEY:SECRET@bucket/p?token=x") == "s3://bucket/p"
    store = resolve("memory://user:pw@host/p")
    assert "pw" not in store.display and "user" not in store.display


def test_s3_store_on_the_real_test_server(bucket):
    store = resolve(bucket + "/prefix")
    with store.open("x/y.bin", "wb") as fh:
        fh.write(b"\x00" * 10)
    assert store.fs.find(store.root) == [store.path("x/y.bin")]
    import pyarrow.fs as pafs

    info = store.arrow_filesystem().get_file_info(store.path("x/y.bin"))
    assert info.type == pafs.FileType.File and info.size == 10
