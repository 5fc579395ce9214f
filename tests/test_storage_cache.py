"""The bucket cache in the loops users run (issue #38 item 3): ``open_dataset("s3://…", cache_dir=DIR,
cache_bytes=N)`` against a real S3 server (moto on 127.0.0.1), requests and bytes counted at s3fs.

- rows are those of the local build (``load_graph``, ``sample_configs``, ``read_configs``,
  ``iter_config_blocks``), cold and warm, whatever the block size;
- a second epoch, and another process reading the same data, move ≤ 2 % of the first epoch's bytes;
  opening again costs one request per object opened (its size and version) and no GET;
- the cache stays within ``cache_bytes``; a cap below one block reads without the cache, never waits;
- three processes and a torch DataLoader with two workers share one folder at once;
- a user's files in the folder survive; a replaced build is never served stale, and an open dataset
  whose objects changed says its folder changed when a read needs the bucket;
- a Dataset pickled to a worker keeps its cache; any fsspec URL is cached the same way (memory://).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from s3server import upload_folder
from test_storage_cache_blocks import held_temporaries

import tpuprep
from tpuprep.errors import BadShards, FatalError
from tpuprep.io import block_cache as bc
from tpuprep.io import cache_store
from tpuprep.io.block_cache import block_cache
from tpuprep.io.storage import resolve
from tpuprep.io.store import FileReplaced
from tpuprep.sampling.batches import ConfigBatches

REPO = Path(__file__).resolve().parents[1]
LAYOUTS = ["layout:nlp:default", "layout:nlp:random", "layout:xla:default", "layout:xla:random"]


# ----------------------------------------------------------------------------------------- helpers


def digest(ds) -> dict[str, str]:
    """A hash per graph of what the reader returns: ``load_graph`` (every array, 5 decoded rows),
    ``sample_configs``, ``read_configs`` and ``iter_config_blocks``."""
    def add(h, obj) -> None:
        for name, value in sorted(vars(obj).items()):
            if isinstance(value, np.ndarray):
                h.update(f"{name}{value.dtype}{value.shape}".encode())
                h.update(np.ascontiguousarray(value).tobytes())

    out = {}
    for gid in ds.graph_ids():
        h = hashlib.sha256()
        g = ds.load_graph(gid)
        add(h, g)
        count = g.num_unique_configs
        if g.kind == "layout":
            h.update(g.node_config_feat(np.arange(min(5, count))).tobytes())
        add(h, ds.sample_configs(gid, 5, seed=3))
        add(h, ds.read_configs(gid, [count - 1, 0]))
        for block in ds.iter_config_blocks(gid, 7):
            add(h, block)
        out[gid] = h.hexdigest()
    return out


@pytest.fixture(scope="module")
def local_digest(synth_shards) -> dict[str, str]:
    return digest(tpuprep.open_dataset(synth_shards))


@pytest.fixture
def url(bucket, synth_shards) -> str:
    return upload_folder(synth_shards, f"{bucket}/shards")


@pytest.fixture(autouse=True)
def _own_caches(monkeypatch):
    """A ``BlockCache`` of its own per test (the folders differ anyway; no descriptor kept across)."""
    monkeypatch.setattr(bc, "_CACHES", {})


class Requests:
    """Every S3 call s3fs makes in this process, by operation, and the bytes the GETs received."""

    def __init__(self, monkeypatch):
        import s3fs

        self.calls: Counter = Counter()
        self.received = 0
        original = s3fs.S3FileSystem._call_s3
        me = self

        async def counted(fs, method, *args, **kwargs):
            me.calls[method] += 1
            out = await original(fs, method, *args, **kwargs)
            if method == "get_object" and isinstance(out, dict):
                me.received += int(out.get("ContentLength") or 0)
            return out

        monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", counted)

    def take(self) -> tuple[Counter, int]:
        out = (Counter(self.calls), self.received)
        self.calls.clear()
        self.received = 0
        return out


@pytest.fixture
def requests(monkeypatch) -> Requests:
    return Requests(monkeypatch)


def opened(url: str, cache_dir, cache_bytes=None, block: int | None = None):
    """``open_dataset`` of ``url`` through the cache, with ``block`` bytes blocks when given."""
    if block is None:
        return tpuprep.open_dataset(url, cache_dir=cache_dir, cache_bytes=cache_bytes)
    store = resolve(url, cache_dir=cache_dir, cache_bytes=cache_bytes)
    return tpuprep.open_dataset(dataclasses.replace(store, block_bytes=block))


def epoch(ds, e: int, batches: list[ConfigBatches] | None = None) -> list[ConfigBatches]:
    """One epoch of ``ConfigBatches`` over every layout collection's train split (k = 8)."""
    batches = batches or [ConfigBatches(ds, c, "train", k=8, seed=1, batches_per_graph=3) for c in LAYOUTS]
    for b in batches:
        b.set_epoch(e)
        for _ in b:
            pass
    return batches


def run_child(code: str, timeout: float = 300) -> dict:
    """``code`` in a new Python process (this repository and tests/ importable, the test server's
    variables inherited); the JSON it prints last."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests"),
                                                        os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def cached_files(cache_dir) -> dict[str, int]:
    blocks = Path(cache_dir) / bc.FOLDER / "blocks"
    return {p.name: p.stat().st_size for p in blocks.iterdir()}


# ------------------------------------------------------------------------------------------- rows


@pytest.mark.parametrize("block", [None, 4096])
def test_rows_through_the_cache_are_those_of_the_local_build(url, tmp_path, local_digest, block):
    """Cold (every block fetched) and warm (a new dataset, every block from disk), with the default
    blocks (whole objects here) and with 4 KiB blocks (objects span many, tails stand apart)."""
    cold = opened(url, tmp_path / "c", block=block)
    assert cold.root == url and cold.store.cache_dir == str(tmp_path / "c")
    assert digest(cold) == local_digest
    usage = cold.store.cache.usage()
    assert usage["ready"] > 0 and usage["pending"] == 0
    if block:
        assert max(cached_files(tmp_path / "c").values()) > block  # a tail is not on the grid
    assert digest(opened(url, tmp_path / "c", block=block)) == local_digest


def test_a_second_epoch_and_another_process_move_under_2_percent_of_the_first(url, tmp_path, requests):
    cache = tmp_path / "cache"
    ds = opened(url, cache, 50 << 20)
    batches = epoch(ds, 0)
    _, bytes0 = requests.take()
    epoch(ds, 1, batches)
    calls1, bytes1 = requests.take()
    assert bytes0 > 100_000 and bytes1 <= 0.02 * bytes0 and sum(calls1.values()) == 0
    other = run_child(f"""
import json
from test_storage_cache import Requests, epoch, opened
import pytest
mp = pytest.MonkeyPatch()
r = Requests(mp)
ds = opened({url!r}, {str(cache)!r}, 50 << 20)
epoch(ds, 1)
calls, received = r.take()
print(json.dumps({{"calls": calls, "received": received, "shards": ds.files.opened}}))
""")
    assert other["received"] <= 0.02 * bytes0
    # one request per object opened: the manifest's and each shard's size and version (HEAD), no GET
    assert other["calls"] == {"head_object": 1 + other["shards"]}


def test_opening_again_asks_each_objects_version_once_and_fetches_nothing(url, tmp_path, requests, local_digest):
    digest(opened(url, tmp_path))
    requests.take()
    ds = opened(url, tmp_path)
    assert digest(ds) == local_digest
    calls, received = requests.take()
    assert received == 0 and calls == {"head_object": 1 + len(ds.manifest["shards"])}


# ------------------------------------------------------------------------------------------- size


def test_the_cache_stays_within_cache_bytes_and_a_users_files_survive(url, tmp_path, local_digest):
    cache = tmp_path / "cache"
    mine = {cache / "notes.txt": b"mine", cache / bc.FOLDER / "keep.bin": b"keep",
            cache / bc.FOLDER / "blocks" / ("0" * 64): b"not a block"}
    for path, data in mine.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    cap = 40_000  # about a tenth of the build: eviction all the time
    ds = opened(url, cache, cap, block=4096)
    assert digest(ds) == local_digest
    assert digest(opened(url, cache, cap, block=4096)) == local_digest
    files = cached_files(cache)
    assert sum(size for name, size in files.items() if name != "0" * 64) <= cap
    assert ds.store.cache.usage()["bytes"] <= cap
    assert all(path.read_bytes() == data for path, data in mine.items())


@pytest.mark.parametrize("cap", [0, 100])
def test_a_cap_below_one_block_reads_without_the_cache_and_never_waits(url, tmp_path, local_digest, cap):
    """MosaicML streaming #417 hung here; every block is then read as if there were no cache."""
    started = time.monotonic()
    ds = opened(url, tmp_path, cap)
    assert digest(ds) == local_digest
    assert ds.store.cache.usage()["bytes"] <= cap
    assert time.monotonic() - started < 120


def test_without_room_a_sample_is_fetched_at_once_as_without_a_cache(bucket, tmp_path, requests):
    """``cache_bytes=0``: ``prefetched`` fetches a sample's ranges in one round of concurrent GETs and
    the reads of its window send nothing more (as ``RemoteShardFile.prefetched`` does)."""
    body = bytes(range(256)) * 800
    store = dataclasses.replace(resolve(f"{bucket}/p", cache_dir=tmp_path, cache_bytes=0), block_bytes=4096)
    store.write_bytes("obj", body)
    pinned = store.open_shard_file("obj")
    pinned.read_ranges([(0, 1)])  # the tail is fetched once (kept in memory: no room for it)
    requests.take()
    ranges = [(1000, 1100), (50_000, 60_000), (120_000, 120_500)]
    window = pinned.prefetched(ranges)
    assert requests.take()[0] == {"get_object": 3}
    for start, end in ranges:
        window.seek(start)
        assert window.read(end - start) == body[start:end]
    assert requests.take()[0] == {}
    assert block_cache(tmp_path, 0).usage()["bytes"] == 0


# -------------------------------------------------------------------------------- processes


def test_processes_and_dataloader_workers_share_one_cache_dir(url, tmp_path, synth_shards, local_digest):
    """Three reader processes and a torch DataLoader with two (fork) workers, started together on one
    folder of a quarter of the build's size in 4 KiB blocks: everyone's rows are the local build's;
    afterwards nothing is pending, no temporary is left and the folder is within its cap."""
    torch = pytest.importorskip("torch")
    from tpuprep.torch import ConfigBatchDataset

    cache, cap = tmp_path / "cache", 100_000
    code = f"""
import json
from test_storage_cache import digest, opened
print(json.dumps(digest(opened({url!r}, {str(cache)!r}, {cap}, block=4096))))
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests"),
                                                        os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]

    def items(ds, workers: int) -> list:
        made = ConfigBatchDataset(ConfigBatches(ds, "layout:xla:random", "train", k=8, seed=2, batches_per_graph=4))
        loader = torch.utils.data.DataLoader(made, batch_size=None, num_workers=workers,
                                             multiprocessing_context="fork" if workers else None)
        return [(b["graph_id"], b["rows"].numpy().tolist(), b["node_config_feat"].numpy().tobytes(),
                 b["node_feat"].numpy().tobytes()) for b in loader]

    got = items(opened(url, cache, cap, block=4096), 2)
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    assert got == items(tpuprep.open_dataset(synth_shards), 0)
    assert all(json.loads(out.strip().splitlines()[-1]) == local_digest for out, _ in outs)
    usage = block_cache(cache, cap).usage()
    assert usage["pending"] == 0 and usage["bytes"] <= cap
    assert sum(cached_files(cache).values()) <= cap
    assert not list((cache / bc.FOLDER / "tmp").iterdir())


def test_a_dataset_pickled_to_a_worker_keeps_its_cache(url, tmp_path, requests):
    ds = opened(url, tmp_path, 10 << 20, block=8192)
    batches = epoch(ds, 0)[0]
    requests.take()
    copy = pickle.loads(pickle.dumps(batches))
    assert copy.ds.store == ds.store and copy.ds.store.cache_dir == str(tmp_path)
    assert copy.ds.store.block_bytes == 8192 and copy.ds.store.cache_bytes == 10 << 20
    copy.set_epoch(0)
    assert len(list(copy)) == len(batches)
    calls, received = requests.take()
    assert received == 0 and set(calls) == {"head_object"}  # what the worker read came from the folder


# ----------------------------------------------------------------------------------- staleness


@pytest.fixture(scope="module")
def other_build(tmp_path_factory) -> Path:
    """Another build of the tiny profile (seed 1): the same file names, other bytes."""
    from tpuprep.build import build
    from tpuprep.synth import synthesize

    root = tmp_path_factory.mktemp("synth-seed-1")
    synthesize(root, "tiny", 1)
    build(root / "npz", root / "shards")
    return root / "shards"


def test_a_replaced_build_is_never_served_stale(url, tmp_path, synth_shards, other_build, local_digest):
    """Build A read in part through the cache; build B uploaded over it (the same names). The dataset
    open on A keeps returning A's rows where it has them, and a shard it opens now (its version asked:
    B's) is not the one its manifest names: "the shard folder changed". A new dataset reads B, none of
    A's cached bytes."""
    ds_a = opened(url, tmp_path, block=4096)
    first = ds_a.graph_ids("layout:xla:random", "train")[0]
    g = ds_a.load_graph(first)
    upload_folder(other_build, url)
    assert np.array_equal(ds_a.load_graph(first).node_feat, g.node_feat)  # A's, consistent
    with pytest.raises(BadShards, match=r"the shard folder changed after it was opened \(.* is shard "):
        ds_a.load_graph(ds_a.graph_ids("layout:nlp:default", "train")[0])
    want = digest(tpuprep.open_dataset(other_build))
    assert want != local_digest
    assert digest(opened(url, tmp_path, block=4096)) == want


def test_a_pinned_object_replaced_before_its_blocks_are_cached_is_refused(bucket, tmp_path):
    """Every fetch is conditional on the version opened: a block the cache lacks, of an object replaced
    since it was opened, is ``FileReplaced`` (the reader's "the shard folder changed"), never the new
    object's bytes; what was cached of the old version is still that version's."""
    old, new = bytes(range(256)) * 800, bytes(reversed(range(256))) * 800  # 204,800 bytes each
    store = dataclasses.replace(resolve(f"{bucket}/p", cache_dir=tmp_path), block_bytes=4096)
    store.write_bytes("obj", old)
    pinned = store.open_shard_file("obj")
    assert pinned.read_ranges([(0, 10), (5000, 5100)]) == [old[:10], old[5000:5100]]
    store.write_bytes("obj", new)
    with pytest.raises(FileReplaced, match=r"obj was replaced after it was opened"):
        pinned.read_ranges([(100_000, 100_010)])
    assert pinned.read_ranges([(5000, 5100)]) == [old[5000:5100]]
    assert store.open_shard_file("obj").read_ranges([(0, 10), (100_000, 100_010)]) == [new[:10],
                                                                                        new[100_000:100_010]]
    assert block_cache(tmp_path, None).usage()["pending"] == 0  # the refused fetch kept nothing


class Interrupted(Exception):
    """What stops a read while it writes a block (Ctrl-C in a notebook, a bug in a callback)."""


@pytest.mark.parametrize("where", ["tail", "first block of a batch"])
def test_a_read_stopped_while_writing_a_block_leaves_none_pending(bucket, tmp_path, monkeypatch, where):
    """A read stopped while it commits its object's tail, or the first of ten blocks fetched in one
    round: every block it reserved is given up, none stays pending under this live process's locks
    (every other process would wait 120 s on each read of it); the next read is whole."""
    body = bytes(range(256)) * 800  # 204,800 bytes: a tail of 64 KiB and 34 blocks of 4 KiB below it
    store = dataclasses.replace(resolve(f"{bucket}/p", cache_dir=tmp_path), block_bytes=4096)
    store.write_bytes("obj", body)
    pinned = store.open_shard_file("obj")
    if where != "tail":
        assert pinned.read_ranges([(200_000, 200_010)]) == [body[200_000:200_010]]  # the tail cached
    original = bc.BlockCache.commit

    def stopped(cache, res, data):
        raise Interrupted(res.key)

    monkeypatch.setattr(bc.BlockCache, "commit", stopped)
    with pytest.raises(Interrupted):
        pinned.read_ranges([(0, 40_000)])
    monkeypatch.setattr(bc.BlockCache, "commit", original)
    cache = block_cache(tmp_path, None)
    assert cache.usage()["pending"] == 0 and not list(cache.tmp.iterdir()) and not held_temporaries(cache)
    assert pinned.read_ranges([(0, 40_000)]) == [body[:40_000]]
    assert cache.usage()["pending"] == 0


def test_an_object_rewritten_with_the_same_size_is_fetched_again(bucket, tmp_path):
    """A shard object and a manifest-like object rewritten in place (same key, same size): the next
    open asks the version, misses, and reads the new bytes."""
    table = pa.table({"x": np.arange(5000, dtype=np.int64)})
    plain = {"compression": "none", "use_dictionary": False}
    pq.write_table(table, tmp_path / "a.parquet", **plain)
    body = (tmp_path / "a.parquet").read_bytes()
    store = resolve(f"{bucket}/p", cache_dir=tmp_path / "cache")
    store.write_bytes("a.parquet", body)
    store.write_bytes("m.json", b'{"v": 1}')
    pinned = store.open_shard_file("a.parquet")
    assert pq.ParquetFile(pinned.source()).read().equals(table)
    assert store.read_bytes("m.json", limit=100) == b'{"v": 1}'
    other = pa.table({"x": np.arange(5000, dtype=np.int64) + 7})
    pq.write_table(other, tmp_path / "b.parquet", **plain)
    new = (tmp_path / "b.parquet").read_bytes()
    assert len(new) == len(body) and new != body
    import fsspec

    writer = fsspec.filesystem("s3", skip_instance_cache=True)  # another client: the store's fs sees nothing
    for rel, data in (("m.json", b'{"v": 2}'), ("a.parquet", new)):
        store.fs.ls(store.root, detail=True)  # the store's fsspec holds a listing with the old ETag
        writer.pipe_file(store.path(rel), data)
        if rel == "m.json":
            assert store.read_bytes(rel, limit=100) == data
        else:
            assert pq.ParquetFile(store.open_shard_file(rel).source()).read().equals(other)
    assert pinned.read_ranges([(0, len(body))]) == [body]  # the file opened first: its own version


def test_whole_objects_read_through_the_cache_keep_the_stores_contract(bucket, tmp_path, requests):
    """``read_bytes`` (the manifest's read) through the cache: a missing object, a prefix and an object
    over ``limit`` are what ``Store.read_bytes`` says, before anything is fetched; a second read of
    the same version asks its version only."""
    from tpuprep.io.store import FileTooLarge, NotARegularFile

    store = resolve(f"{bucket}/p", cache_dir=tmp_path)
    store.write_bytes("dir/x", b"x")
    store.write_bytes("big", b"b" * 1000)
    with pytest.raises(FileNotFoundError):
        store.read_bytes("missing", limit=10)
    with pytest.raises(NotARegularFile, match="a prefix"):
        store.read_bytes("dir", limit=10)
    requests.take()
    with pytest.raises(FileTooLarge, match="1000 bytes"):
        store.read_bytes("big", limit=999)
    assert requests.take()[0] == {"head_object": 1}
    assert store.read_bytes("big") == store.read_bytes("big", limit=1000) == b"b" * 1000
    calls, received = requests.take()
    assert calls == {"head_object": 2, "get_object": 1} and received == 1000


def test_any_fsspec_url_is_cached_the_same_way(synth_shards, tmp_path, local_digest):
    """memory:// has no ETag and no conditional GET (like gs://, whose version is the generation):
    versions come from its info, reads are checked after the fetch."""
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.put(f"{synth_shards}/", "/cached-shards/", recursive=True)
    try:
        ds = opened("memory://cached-shards", tmp_path, block=4096)
        assert type(ds.store).__name__ == "CachedStore"
        assert digest(ds) == local_digest
        assert digest(opened("memory://cached-shards", tmp_path, block=4096)) == local_digest
        assert ds.store.cache.usage()["ready"] > 0
    finally:
        fs.rm("/cached-shards", recursive=True)


# ------------------------------------------------------------------------------------ arguments


def test_cache_arguments_are_refused_in_one_line(url, tmp_path, synth_shards):
    with pytest.raises(TypeError, match=r"^cache_bytes must be an integer ≥ 0 or None, got bool True$"):
        tpuprep.open_dataset(url, cache_dir=tmp_path, cache_bytes=True)
    with pytest.raises(TypeError, match=r"^cache_bytes must be an integer ≥ 0 or None, got float 1.5$"):
        tpuprep.open_dataset(url, cache_dir=tmp_path, cache_bytes=1.5)
    with pytest.raises(ValueError, match=r"^cache_bytes must be ≥ 0, got -1$"):
        tpuprep.open_dataset(url, cache_dir=tmp_path, cache_bytes=-1)
    with pytest.raises(ValueError, match=r"^cache_bytes is the size of a cache_dir: give cache_dir too$"):
        tpuprep.open_dataset(url, cache_bytes=10)
    with pytest.raises(ValueError, match=r"^cache_dir must be a local folder, got 's3://x/y'$"):
        tpuprep.open_dataset(url, cache_dir="s3://x/y")
    with pytest.raises(TypeError, match=r"^cache_dir must be a local folder \(str or path\), got int 5$"):
        tpuprep.open_dataset(url, cache_dir=5)
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(FatalError, match=r"^cache_dir .*a-file: cannot be used as a cache: "):
        tpuprep.open_dataset(url, cache_dir=tmp_path / "a-file")
    local = tpuprep.open_dataset(synth_shards, cache_dir=tmp_path / "unused", cache_bytes=1)
    assert local.root == synth_shards and not (tmp_path / "unused").exists()  # read in place


def test_a_footer_longer_than_the_first_tail_read_is_fetched_whole(url, tmp_path, local_digest, monkeypatch):
    monkeypatch.setattr(cache_store, "TAIL_BYTES", 64)
    ds = opened(url, tmp_path, block=4096)
    assert digest(ds) == local_digest
    assert digest(opened(url, tmp_path, block=4096)) == local_digest


def test_the_remote_reading_benchmark_measures_the_cache(synth_shards, s3_endpoint):
    """``python -m benchmarks.remote_reading S --epochs`` (benchmarks/RESULTS.md): through the cache the
    next epoch sends no request and another process receives no byte."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-m", "benchmarks.remote_reading", str(synth_shards), "--epochs",
                          "--blocks", "whole"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {r["cache"]: r for r in json.loads(out.stdout)["epochs"]}
    assert set(rows) == {"local folder", "none", "whole objects"}
    assert rows["local folder"]["epoch1_other_process"]["requests"] == 0
    cached = rows["whole objects"]
    assert cached["epoch0"]["requests"] > 0 and cached["epoch0"]["received_bytes"] > 0  # counted when sent
    assert cached["epoch1"]["requests"] == 0 and cached["epoch1_other_process"]["received_bytes"] == 0
    assert rows["none"]["epoch1_other_process"]["received_bytes"] > 0


def test_exact_range_bytes_counts_what_no_earlier_range_covered():
    """benchmarks.remote_reading's "a cache of the exact byte ranges read" figure: the bytes of the later
    GETs outside every earlier range of the same object (overlapping and adjacent ranges merged)."""
    from benchmarks.remote_reading import exact_range_bytes

    first = [("a", 0, 10), ("a", 5, 20), ("b", 100, 110)]
    assert exact_range_bytes(first, [("a", 15, 30)]) == 10  # [20, 30) is new
    assert exact_range_bytes(first, [("a", 0, 20)]) == 0  # covered by two overlapping ranges
    assert exact_range_bytes(first, [("a", 25, 40), ("b", 95, 105), ("c", 0, 7)]) == 15 + 5 + 7
    assert exact_range_bytes([], [("a", 3, 9)]) == 6
