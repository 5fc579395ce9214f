"""``ConfigBatchDataset`` inside the loops people run (issue #28): real torch DataLoaders with persistent
workers started by fork and spawn follow ``set_epoch`` and ``load_state_dict``; a dataset opened on S3
with credentials given only as ``storage_options`` is read by spawn workers (moto server on 127.0.0.1),
and the credentials never show in ``repr`` or ``state_dict``."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

import tpuprep
from tpuprep.sampling.batches import ConfigBatches

torch = pytest.importorskip("torch")
LAYOUT = "layout:xla:random"


@pytest.fixture(scope="module")
def ds(synth_shards):
    return tpuprep.open_dataset(synth_shards)


def _make(ds, **kwargs) -> ConfigBatches:
    return ConfigBatches(ds, LAYOUT, **{"k": 8, "seed": 4, "batches_per_graph": 5, "strategy": "pairs", **kwargs})


def _key(item) -> tuple:
    return (item["graph_id"], int(item["epoch"]), tuple(np.asarray(item["rows"]).tolist()))


def _loader(dataset, workers: int, context: str | None = None, persistent: bool = False):
    from torch.utils.data import DataLoader

    return DataLoader(dataset, batch_size=None, num_workers=workers, persistent_workers=persistent,
                      multiprocessing_context=context if workers else None)


def _epochs(ds, epochs) -> list[list[tuple]]:
    """Each epoch read in this process (num_workers=0), by a fresh ConfigBatches: the reference."""
    from tpuprep.torch import ConfigBatchDataset

    out = []
    for e in epochs:
        dataset = ConfigBatchDataset(_make(ds))
        dataset.set_epoch(e)
        out.append([_key(x) for x in _loader(dataset, 0)])
    return out


@pytest.mark.parametrize("context", ["fork", "spawn"])
@pytest.mark.parametrize("workers", [1, 2])
def test_persistent_workers_follow_set_epoch(ds, context, workers):
    """Epoch e with persistent workers equals epoch e without workers, after set_epoch(e) on the
    dataset the loader holds (the workers were started once, in epoch 0)."""
    from tpuprep.torch import ConfigBatchDataset

    want = _epochs(ds, [0, 1, 2, 1])
    assert len({tuple(w) for w in want[:3]}) == 3  # the epochs differ, so a stale epoch would show
    dataset = ConfigBatchDataset(_make(ds))
    loader = _loader(dataset, workers, context, persistent=True)
    for e, expected in zip([0, 1, 2, 1], want, strict=True):
        dataset.set_epoch(e)
        assert [_key(x) for x in loader] == expected, (context, workers, e)


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_resume_reaches_persistent_workers(ds, context):
    """load_state_dict on the dataset of a running persistent loader: the next pass is the rest of the
    resumed epoch, the one after a whole epoch; a state without position after workers read is refused."""
    from tpuprep.torch import ConfigBatchDataset

    whole0, whole1 = _epochs(ds, [0, 1])
    dataset = ConfigBatchDataset(_make(ds))
    loader = _loader(dataset, 2, context, persistent=True)
    dataset.set_epoch(1)
    assert [_key(x) for x in loader] == whole1
    dataset.set_epoch(0)
    seen = []
    for item in loader:
        seen.append(item)
        if len(seen) == 3:
            break
    with pytest.raises(ValueError, match="give state_dict\\(position\\)"):
        dataset.state_dict()
    state = json.loads(json.dumps(dataset.state_dict(seen[-1]["position"])))
    assert (state["epoch"], state["position"]) == (0, 3)
    dataset.set_epoch(1)  # an unrelated pass first: the point is loaded afterwards
    assert [_key(x) for x in loader] == whole1
    dataset.load_state_dict(state)
    assert dataset.state_dict() == state  # saved again before any reading: the same point
    assert [_key(x) for x in loader] == whole0[3:]
    assert [_key(x) for x in loader] == whole0  # the point is spent: the next pass is whole
    dataset.set_epoch(1)
    assert [_key(x) for x in loader] == whole1


def test_a_plain_pickle_is_a_detached_copy(ds):
    """Outside a worker start, pickling copies the epoch instead of sharing it."""
    batches = _make(ds)
    batches.set_epoch(3)
    copy = pickle.loads(pickle.dumps(batches))
    assert copy.epoch == 3
    copy.set_epoch(5)
    assert batches.epoch == 3 and copy.epoch == 5


@pytest.fixture
def s3_only_options(bucket, s3_endpoint, synth_shards, monkeypatch):
    """The synthetic shards in the test bucket, and storage_options that alone can read them: no AWS
    credentials or endpoint in the environment (spawn workers inherit it) or in files."""
    import fsspec
    from s3server import upload_folder

    url = upload_folder(synth_shards, f"{bucket}/shards")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN",
                 "AWS_PROFILE", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    missing = str(bucket).replace("s3://", "/nonexistent-")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", missing)
    monkeypatch.setenv("AWS_CONFIG_FILE", missing)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    fsspec.filesystem("s3").clear_instance_cache()
    secret = "sekrit-value-42"
    return url, {"key": "testing", "secret": secret, "endpoint_url": s3_endpoint}, secret


def test_spawn_workers_read_s3_with_the_storage_options_only(s3_only_options, synth_shards):
    from tpuprep.torch import ConfigBatchDataset

    url, options, secret = s3_only_options
    remote = tpuprep.open_dataset(url, storage_options=options)
    local = tpuprep.open_dataset(synth_shards)
    want = [_key(x) for x in _loader(ConfigBatchDataset(_make(local)), 0)]
    dataset = ConfigBatchDataset(_make(remote))
    assert [_key(x) for x in _loader(dataset, 1, "spawn")] == want
    batches = dataset.batches
    shown = [repr(batches), str(batches), repr(dataset), json.dumps(batches.state_dict(len(batches)))]
    assert not any(secret in text for text in shown), shown


def test_an_items_tensors_share_one_buffer_and_are_its_own(ds):
    """to_tensors: one fresh buffer per item (a worker hands over one shared-memory block per item),
    each tensor equal to its array, of its dtype and shape, writable without touching another tensor."""
    from tpuprep.sampling.batches import batch_arrays
    from tpuprep.torch import to_tensors

    batch = next(iter(_make(ds)))
    arrays = batch_arrays(batch)
    items = [to_tensors(arrays), to_tensors(arrays)]
    tensors = {k: v for k, v in items[0].items() if isinstance(v, torch.Tensor)}
    assert set(tensors) == {k for k, v in arrays.items() if isinstance(v, np.ndarray)}
    assert len({t.untyped_storage().data_ptr() for t in tensors.values()}) == 1
    assert items[1]["node_feat"].untyped_storage().data_ptr() != tensors["node_feat"].untyped_storage().data_ptr()
    for key, t in tensors.items():
        assert t.dtype == torch.from_numpy(np.array(arrays[key])).dtype and tuple(t.shape) == arrays[key].shape
        assert np.array_equal(t.numpy(), arrays[key]), key
    before = {k: t.clone() for k, t in tensors.items()}
    tensors["node_feat"].fill_(7.0)
    assert np.array_equal(arrays["node_feat"], batch.structure.node_feat)  # the cache's arrays untouched
    assert all(torch.equal(t, before[k]) for k, t in tensors.items() if k != "node_feat")
    assert items[0]["graph_id"] == batch.graph_id and items[0]["position"] == 1


def test_a_forked_process_reads_through_its_own_dataset(ds):
    """After a warm-up in the parent (kernels and a cache entry inherited by fork), a forked reader opens
    the dataset again instead of sharing the parent's open Parquet files, and yields the same batches."""
    import multiprocessing

    batches = _make(ds)
    batches.warm_up()
    assert len(batches.cache) == 1
    want = [_key({"graph_id": b.graph_id, "epoch": b.epoch, "rows": b.sample.rows}) for b in _make(ds)]
    parent_ds = id(batches.ds)

    def child(queue):
        keys = [_key({"graph_id": b.graph_id, "epoch": b.epoch, "rows": b.sample.rows}) for b in batches]
        queue.put((keys, id(batches.ds) != parent_ds, batches.ds.root == ds.root))

    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=child, args=(queue,))
    proc.start()
    keys, reopened, same_root = queue.get(timeout=120)
    proc.join(30)
    assert keys == want and reopened and same_root


def test_the_loaders_benchmark_runs(synth_shards, tmp_path):
    """benchmarks.loaders on tiny data: 0, 1 and 2 persistent workers, 2 epochs each, the same batches
    and configs per epoch for every worker count, speed-ups and peak RSS reported; then the steady state
    for each prefetch factor, 0 and 2 workers alternated in blocks of epochs, with CPU per batch; then the
    ceiling, 2 independent in-process loops against one."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    out = tmp_path / "loaders.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.loaders", str(synth_shards), "--batches-per-graph",
                           "3", "--k", "8", "--steady-epochs", "3", "--block-epochs", "2",
                           "--prefetch-factors", "2,3", "--ceiling", "0.3", "--json", str(out)], cwd=repo,
                          capture_output=True, text=True, timeout=600,
                          env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert [r["workers"] for r in res["runs"]] == [0, 1, 2]
    for run in res["runs"]:
        assert [e["epoch"] for e in run["epochs"]] == [0, 1]
        assert all(e["batches"] == 6 and e["configs"] == 48 and e["configs_per_s"] > 0 for e in run["epochs"])
        assert run["peak_rss_mb"]["main"] > 0 and len(run["peak_rss_mb"]["workers"]) == run["workers"]
        assert run["setup_s"] > 0
    assert set(res["speedup"]) == {f"n={n} epoch {e}" for n in (1, 2) for e in (0, 1)}
    assert "speed-up n=2 epoch 0" in proc.stdout
    assert [s["prefetch_factor"] for s in res["steady"]] == [2, 3]
    for steady in res["steady"]:  # 0 and 2 workers, epochs 1–2 then 3, alternated in one process
        assert (steady["workers"], steady["epochs"], steady["block_epochs"], steady["batches"]) == (2, 3, 2, 6)
        assert len(steady["speedup_per_block"]) == 2 and steady["speedup"] > 0 and steady["cpu_bound_speedup"] > 0
        cpu = steady["cpu_ms_per_batch"]  # the workers' CPU from schedstat (ns): never 0 for a block that ran
        assert cpu["0"]["workers"] == 0 and cpu["0"]["main"] > 0 and cpu["2"]["main"] > 0 and cpu["2"]["workers"] > 0
    assert "steady state, prefetch_factor 3, epochs 1-3 in blocks of 2" in proc.stdout
    ceiling = res["ceiling"]  # 2 independent in-process loops against one alone
    assert ceiling["processes"] == 2 and len(ceiling["each_configs_per_s"]) == 2
    assert ceiling["alone_configs_per_s"] > 0 and all(x > 0 for x in ceiling["each_configs_per_s"])
    assert abs(ceiling["aggregate_speedup"] - sum(ceiling["each_configs_per_s"]) / ceiling["alone_configs_per_s"]) < 2e-3
    assert "ceiling: 2 independent in-process loops" in proc.stdout
