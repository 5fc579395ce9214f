"""The storage factory (tpuprep/io/storage.py): local paths stay plain paths (a ``LocalStore``), URLs get
their fsspec filesystem (a ``RemoteStore``), ``local_path`` classifies a location once (file URLs with a
host or a relative path refused), missing packages and unknown schemes are one clear usage error,
credentials never shown."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tpuprep.errors import UsageError
from tpuprep.io.local_store import LocalStore
from tpuprep.io.remote_store import RemoteStore
from tpuprep.io.storage import local_path, resolve, shown
from tpuprep.io.store import without_credentials


def test_a_local_path_is_a_local_store_without_fsspec(tmp_path):
    store = resolve(tmp_path / "x")
    assert isinstance(store, LocalStore) and not hasattr(store, "fs")
    assert store.root == str(tmp_path / "x")
    assert store.path("a", "b.txt") == str(tmp_path / "x" / "a" / "b.txt")
    assert resolve("relative/dir").root == str(Path("relative/dir").absolute())


def test_file_urls_are_local_paths(tmp_path):
    store = resolve(f"file://{tmp_path}/d")
    assert isinstance(store, LocalStore) and store.root == str(tmp_path / "d")
    assert resolve(f"file:{tmp_path}/d").root == store.root  # file:/x is /x too


def test_schemes_are_recognised_and_drive_letters_are_not():
    assert local_path("s3://b/k") is None
    assert local_path("S3://b/k") is None
    assert local_path("s3:/b/k") is None  # what pathlib makes of s3://b/k
    assert local_path("C:/data") == Path("C:/data")
    assert local_path("/abs/path") == Path("/abs/path")
    assert local_path("rel/s3:/x") == Path("rel/s3:/x")
    assert local_path("a:b") == Path("a:b") and local_path("./file:x") == Path("file:x")
    assert local_path("file:///abs/x") == local_path("file:/abs/x") == local_path("FILE://localhost/abs/x") \
        == Path("/abs/x")
    assert shown("s3://KEY:SECRET@b/p?token=x") == "s3://b/p" and shown("/a/b?c") == "/a/b?c"


@pytest.mark.parametrize("text", ["file:rel_dst", "file:./rel", "File:rel/x", "file:"])
def test_a_relative_file_url_is_a_usage_error(text):
    """``file:rel_dst`` is no name of a folder: a file URL names an absolute path (issue #36 item 4)."""
    with pytest.raises(UsageError, match=rf"--dst {text}: a file URL names an absolute path"):
        local_path(text, "--dst")
    with pytest.raises(UsageError, match="a file URL names an absolute path"):
        resolve(text, what="--dst")


def test_a_file_url_naming_a_host_is_a_usage_error():
    with pytest.raises(UsageError, match=r"--src file://tmp/x: a file URL names no host"):
        local_path("file://tmp/x", "--src")


def test_memory_urls_get_an_fsspec_filesystem_and_round_trip():
    store = resolve("memory://tpuprep-test-store/root/")
    assert isinstance(store, RemoteStore) and store.protocol == "memory"
    assert store.path("a.txt").endswith("tpuprep-test-store/root/a.txt")
    with store.open("a.txt", "wb") as fh:
        fh.write(b"hello")
    with store.open("a.txt") as fh:
        assert fh.read() == b"hello"
    assert store.url("a.txt") == "memory://" + store.path("a.txt")
    assert resolve(store.url("a.txt")).fs.cat(store.path("a.txt")) == b"hello"


def test_unknown_schemes_are_a_usage_error_naming_the_argument():
    with pytest.raises(UsageError, match=r"--dst nosuch://bucket/x: unknown storage scheme nosuch://"):
        resolve("nosuch://bucket/x", what="--dst")


def test_a_missing_filesystem_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "gcsfs", None)  # as if gcsfs were not installed
    with pytest.raises(UsageError, match=r"--src gs://bucket/npz: gs:// needs a package .*pip install 'tpuprep\[gcs\]'"):
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


BACKEND_NAMES = {"LocalStore", "RemoteStore", "is_local", "looks_like_url", "scheme_of", "local_root",
                 "local_file", "reads_are_requests", "holds_open_files", "os_errors_name_files", "fsspec"}
"""Names that would ask which backend a store is, or classify a location again."""


def test_nothing_outside_io_asks_which_backend_it_holds():
    """Issue #37 item 1: a ``Store`` is a seam, not a switch. No module outside ``tpuprep/io/`` names a
    backend, imports fsspec or classifies a location itself: every decision is a method of the store
    (found by ``ast``, so a docstring's example URL does not count)."""
    import ast

    package = Path(__file__).resolve().parents[1] / "tpuprep"
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.parent.name == "io" and path.parent.parent == package:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Name):
                names = {node.id}
            elif isinstance(node, ast.Attribute):
                names = {node.attr}
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = {a.name.split(".")[0] for a in node.names} | {getattr(node, "module", None) or ""}
            else:
                continue
            found += [f"{path.relative_to(package)}:{node.lineno}: {n}" for n in names & BACKEND_NAMES]
    assert not found, found


def test_the_backend_check_sees_a_planted_backend_test(tmp_path, monkeypatch):
    """The check above fails on the slip it guards against (a caller testing ``isinstance(store,
    LocalStore)``), planted in a copy of the package."""
    import shutil

    import test_storage

    copy = tmp_path / "repo"
    shutil.copytree(Path(__file__).resolve().parents[1] / "tpuprep", copy / "tpuprep")
    (copy / "tests").mkdir()
    target = copy / "tpuprep" / "build.py"
    target.write_text(target.read_text() + "\n\ndef _slip(store):\n    return isinstance(store, LocalStore)\n")
    monkeypatch.setattr(test_storage, "__file__", str(copy / "tests" / "test_storage.py"))
    with pytest.raises(AssertionError, match=r"build.py:\d+: LocalStore"):
        test_storage.test_nothing_outside_io_asks_which_backend_it_holds()


def _raised(fn) -> BaseException:
    """What ``fn()`` raises (with its traceback)."""
    try:
        fn()
    except BaseException as exc:  # the test inspects whatever it is
        return exc
    raise AssertionError(f"{fn} raised nothing")


def test_library_error_is_storage_s_and_nothing_else_s(tmp_path, monkeypatch):
    """``library_error`` decides what becomes ``--dst …: cannot be written: …`` (``store_errors``) or a
    refused input: only what storage raises. A bug or another package's error (even an ``OSError``,
    as Dask's comm errors are) keeps its type and traceback (issue #37 review: any third-party
    exception was worded as a failed request)."""
    import pyarrow as pa
    from botocore.exceptions import NoCredentialsError
    from distributed.comm.core import CommClosedError

    from tpuprep.errors import FatalError
    from tpuprep.io.store import NotARegularFile, library_error

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    bad_endpoint = resolve("s3://tpuprep-no-bucket/x", {"endpoint_url": "$1"})  # botocore refuses it, offline
    local = resolve(tmp_path)
    storage = {
        "a local file missing": _raised(lambda: local.read_bytes("missing")),
        "a local link": _raised(lambda: (tmp_path / "l").symlink_to("x") or local.read_bytes("l")),
        "a missing object": _raised(lambda: resolve("memory://tpuprep-le/x").read_bytes("missing")),
        "botocore's own": NoCredentialsError(),
        "a ValueError raised in botocore": _raised(bad_endpoint.check_reachable),
        "a refused request a stand-in raised": PermissionError("Forbidden"),
    }
    assert isinstance(storage["a local link"], NotARegularFile)
    assert isinstance(storage["a ValueError raised in botocore"], ValueError)

    def comm_closed():
        raise CommClosedError("in <TCP (closed)>: Stream is closed")

    others = {
        "pyarrow's ArrowInvalid": _raised(lambda: pa.array([1, "a"])),
        "Dask's comm error, an OSError": _raised(comm_closed),
        "a TypeError raised in tpuprep": _raised(lambda: local.path(1)),  # a bug: a path of an int
        "a FatalError (already one line)": FatalError("x: cannot be read"),
    }
    assert isinstance(others["a TypeError raised in tpuprep"], TypeError)
    assert {k: library_error(e) for k, e in storage.items()} == dict.fromkeys(storage, True)
    assert {k: library_error(e) for k, e in others.items()} == dict.fromkeys(others, False)


@pytest.mark.parametrize(("args", "named"), [(["info"], "DST"), (["verify", "--src", ".", "--dst"], "--dst"),
                                             (["export", "--dst-npz", "out", "--shards"], "--shards")])
def test_a_shard_folder_refused_as_a_file_url_is_named_as_its_command_spells_it(args, named, tmp_path,
                                                                                 monkeypatch):
    """``verify --dst`` and ``export --shards`` take a shard folder like ``info DST``; a file URL naming
    a host was refused as "Invalid value for '--shards': DST file://h/x …" (issue #37 review)."""
    from click.testing import CliRunner

    from tpuprep.cli import main

    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, [*args, "file://h/x"])
    assert result.exit_code == 2, result.output
    assert f"{named} file://h/x: a file URL names no host" in result.output, result.output
    assert named == "DST" or "DST" not in result.output.split("Error:")[-1], result.output
