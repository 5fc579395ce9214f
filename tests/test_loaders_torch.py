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
