"""Issue #36 items 1–2: a shard changed under an open ``Dataset`` is never read. Locally a file overwritten
in place (``cp`` over it: the same inode; or ``rsync --inplace -t``: the mtime put back too) and on S3 an
object replaced by another valid shard of the same size are refused on every reading path —
``sample_configs`` (the direct page reader), ``read_configs`` with the structure's columns (pages) and
without (the pyarrow fallback), ``iter_config_blocks``, ``load_graph`` (structure and codes),
``graph_row``, ``config_runtimes``, a tile sample, ``counts`` and ``collection_sizes`` — with the one line
a rename already gets: "the shard folder changed after it was opened". The table reads (``counts``,
``collection_sizes``) also refuse a folder rebuilt between their schema check and their read, and
DataLoader workers (fork, spawn), which open the folder again, refuse a folder rebuilt after the dataset
was opened."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from unittest import mock

import pytest
from npzfactory import layout_arrays, tile_arrays, write
from s3server import upload_folder

import tpuprep
from tpuprep.build import build
from tpuprep.errors import BadShards
from tpuprep.sampling.padding import collection_sizes
from tpuprep.shards import pages

LAYOUT, TILE = "layout:xla:random:g", "tile:xla:t"
SEEDS = {"a": 2, "b": 9}
"""Two layout graphs whose configs shards have the same size (found by trying seeds: the hard case, where
a size or a footer-length check passes)."""


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, Path]:
    """Two builds of one layout and one tile graph with the same names and other values."""
    root = tmp_path_factory.mktemp("changed")
    out = {}
    for tag, seed in SEEDS.items():
        src = root / f"src-{tag}"
        write(src, "layout/xla/random/train/g.npz", layout_arrays(seed=seed, n=40, c=300))
        write(src, "tile/xla/train/t.npz", tile_arrays(seed=seed, n=8, c=20))
        build(src, root / tag)
        out[tag] = root / tag
    (a,), (b,) = ((d / "layout/xla/random/configs").glob("*.parquet") for d in out.values())
    assert a.stat().st_size == b.stat().st_size and a.read_bytes() != b.read_bytes()  # the hard case
    return out


def _sample(ds):
    ds.sample_configs(LAYOUT, 1, seed=0)  # the structure's derived columns kept: the next sample reads pages only
    return lambda: ds.sample_configs(LAYOUT, 16, seed=1)


def _pages(ds):
    ds.read_configs(LAYOUT, [1])  # the derived columns kept: the next read fetches codes pages only
    return lambda: ds.read_configs(LAYOUT, [0, 3, 5])


def _pyarrow(ds):
    """As ``_pages``, with the direct page reader declining (``pages.sample_codes`` gives None, as for a
    chunk it does not decode): pyarrow reads the row groups through the pinned file."""
    read = _pages(ds)

    def through_pyarrow():
        with mock.patch.object(pages, "sample_codes", return_value=None) as declined:
            out = read()
        assert declined.called
        return out
    return through_pyarrow


def _with_ties(ds, read):
    ds.load_graph(LAYOUT, configs=False)  # the tie array kept: what follows reads configs row groups only
    return read


READS = {
    "sample_configs": _sample,
    "read_configs_pages": _pages,
    "read_configs_pyarrow": _pyarrow,
    "iter_config_blocks": lambda ds: _with_ties(ds, lambda: list(ds.iter_config_blocks(LAYOUT, rows_per_block=50))),
    "load_graph": lambda ds: ds.graph_row(LAYOUT) and (lambda: ds.load_graph(LAYOUT).node_config_feat([0, 1])),
    "graph_row": lambda ds: lambda: ds.graph_row(LAYOUT),
    "config_runtimes": lambda ds: lambda: ds.config_runtimes(LAYOUT),
    "tile_sample": lambda ds: lambda: ds.sample_configs(TILE, 4, seed=0),
    "counts": lambda ds: lambda: ds.counts("layout:xla:random"),
    "collection_sizes": lambda ds: lambda: collection_sizes(ds, "tile:xla"),
}
"""Each reading path: called on an open dataset before the change, it reads what that path needs besides
the bytes under test, and returns the read to make after the change."""


def _opened(root: Path | str, read: str):
    """A dataset whose shard index (every footer of the split) is read, and ``read``'s read to make."""
    ds = tpuprep.open_dataset(root)
    ds.num_unique_configs(LAYOUT), ds.num_unique_configs(TILE)
    return READS[read](ds)


def _rewrite_in_place(old: Path, new: Path, keep_times: bool) -> None:
    """``cp new old`` (opens ``old`` with O_TRUNC: the same inode) and, with ``keep_times``, its atime and
    mtime put back as ``rsync --inplace -t`` does."""
    st = os.stat(old)
    shutil.copyfile(new, old)
    if keep_times:
        os.utime(old, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(old).st_ino == st.st_ino


@pytest.mark.parametrize("read", sorted(READS))
@pytest.mark.parametrize("how", ["cp", "rsync-inplace-t"])
def test_a_local_shard_rewritten_in_place_is_refused(builds, tmp_path, read, how):
    dst = tmp_path / "shards"
    shutil.copytree(builds["a"], dst)
    assert _opened(dst, read)() is not None  # A as it is reads
    then = _opened(dst, read)
    for new in sorted(builds["b"].rglob("*.parquet")):
        _rewrite_in_place(dst / new.relative_to(builds["b"]), new, keep_times=how == "rsync-inplace-t")
    with pytest.raises(BadShards, match=rf"^{dst}: the shard folder changed after it was opened \(.* was "
                                        r"rewritten after it was opened\): open it again$"):
        then()
    shutil.copyfile(builds["b"] / "manifest.json", dst / "manifest.json")  # B whole now: opened again, it reads
    assert _opened(dst, read)() is not None


@pytest.mark.parametrize("read", sorted(READS))
def test_an_object_replaced_by_a_valid_shard_of_the_same_size_is_refused(builds, bucket, read):
    import fsspec

    url = upload_folder(builds["a"], f"{bucket}/{read}")
    then = _opened(url, read)
    fs, root = fsspec.core.url_to_fs(url)
    for new in sorted(builds["b"].rglob("*.parquet")):
        fs.pipe_file(f"{root}/{new.relative_to(builds['b']).as_posix()}", new.read_bytes())
    fs.invalidate_cache()
    with pytest.raises(BadShards, match=rf"^{url}: the shard folder changed after it was opened \(.*(another "
                                        r"ETag|another version)\): open it again$"):
        then()
    fs.pipe_file(f"{root}/manifest.json", (builds["b"] / "manifest.json").read_bytes())
    assert _opened(url, read)() is not None


def test_a_sample_of_an_unchanged_folder_takes_no_extra_request(builds, bucket):
    """The check is in the reads (If-Match), not beside them: a warm sample's requests are all GETs of
    the pages it needs, as before the check."""
    import s3fs

    url = upload_folder(builds["a"], f"{bucket}/requests")
    ds = tpuprep.open_dataset(url)
    ds.sample_configs(LAYOUT, 16, seed=1)  # the structure and footers: read once
    calls = []
    real = s3fs.S3FileSystem._call_s3

    async def counted(fs, method, *args, **kwargs):
        calls.append((method, "IfMatch" in kwargs))
        return await real(fs, method, *args, **kwargs)

    s3fs.S3FileSystem._call_s3 = counted
    try:
        ds.sample_configs(LAYOUT, 16, seed=2)
    finally:
        s3fs.S3FileSystem._call_s3 = real
    assert calls and all(c == ("get_object", True) for c in calls), calls


TABLE_READS = {
    "counts": lambda ds: ds.counts("layout:xla:random"),
    "collection_sizes": lambda ds: collection_sizes(ds, "tile:xla"),
}
"""The reads that aggregate whole tables (``shards.scans``): their files are checked, then read."""


@pytest.mark.parametrize("read", sorted(TABLE_READS))
@pytest.mark.parametrize("how", ["cp", "rename"])
def test_a_table_read_refuses_a_shard_changed_between_its_check_and_its_read(builds, tmp_path, read, how):
    """The folder rebuilt (B's files put in place of A's) just after the table read checked a shard's
    schema and before it reads the rows — the window where a polars scan by path would read B's rows."""
    from tpuprep.shards import scans

    dst = tmp_path / "shards"
    shutil.copytree(builds["a"], dst)
    ds = tpuprep.open_dataset(dst)
    real, done = scans.check_shard_schema, []

    def then_rebuilt(*args, **kwargs):
        real(*args, **kwargs)
        if not done:
            for new in sorted(builds["b"].rglob("*.parquet")):
                old = dst / new.relative_to(builds["b"])
                if how == "cp":
                    _rewrite_in_place(old, new, keep_times=True)
                else:
                    shutil.copyfile(new, old.with_suffix(".tmp"))
                    os.replace(old.with_suffix(".tmp"), old)
            done.append(True)

    with mock.patch.object(scans, "check_shard_schema", then_rebuilt), \
            pytest.raises(BadShards, match=rf"^{dst}: the shard folder changed after it was opened \(.* was "
                                           r"(rewritten|replaced) after it was opened\): open it again$"):
        TABLE_READS[read](ds)
    assert done


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers_refuse_a_folder_rebuilt_after_it_was_opened(builds, tmp_path, context):
    """DataLoader workers open the folder again (a forked one also inherits the parent's structures
    cache, warmed up from build A): after ``build --overwrite`` turned it into build B, their first read
    is the folder-changed line, handed to the main process, never B's rows under A's plan."""
    pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from tpuprep.sampling.batches import ConfigBatches
    from tpuprep.torch import ConfigBatchDataset

    dst = tmp_path / "shards"
    build(builds["a"].parent / "src-a", dst)
    ds = tpuprep.open_dataset(dst)
    dataset = ConfigBatchDataset(ConfigBatches(ds, "layout:xla:random", k=8, batches_per_graph=4))  # warmed up
    loader = DataLoader(dataset, batch_size=None, num_workers=2, multiprocessing_context=context)
    assert len(list(loader)) == 4  # build A, read by both workers
    build(builds["b"].parent / "src-b", dst, overwrite=True)
    batches = iter(loader)
    try:
        with pytest.raises(BadShards, match=rf"{dst}: the shard folder changed after it was opened "
                                            r"\(.*manifest\.json is not the manifest it was opened with\): open it again"):
            list(batches)
    finally:  # the other worker may still be starting: stop it now, not when a later test's SIGCHLD arrives
        batches._shutdown_workers()
