"""The torch and JAX adapters of ``ConfigBatches`` (issue #14), with the real libraries: two DataLoader
workers yield the single-process stream, a resume after N batches the same remaining stream, and JAX's
x64 flag is never touched (int64 runtimes stay exact NumPy arrays)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import tpuprep
from tpuprep.sampling.batches import ConfigBatches

torch = pytest.importorskip("torch")
LAYOUT = "layout:xla:random"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ds(synth_shards):
    return tpuprep.open_dataset(synth_shards)


def _batches(ds, **kwargs):
    args = {"k": 8, "seed": 4, "batches_per_graph": 5, "strategy": "pairs", **kwargs}
    return ConfigBatches(ds, LAYOUT, **args)


def _key(item) -> tuple:
    return (item["graph_id"], tuple(np.asarray(item["rows"]).tolist()))


def _loader(dataset, workers: int):
    from torch.utils.data import DataLoader

    return DataLoader(dataset, batch_size=None, num_workers=workers)


def test_torch_items_are_tensors_of_the_batch(ds):
    from tpuprep.torch import ConfigBatchDataset

    batches = _batches(ds)
    items = list(ConfigBatchDataset(batches))
    assert len(items) == len(batches) == len(ConfigBatchDataset(batches))
    first = next(iter(_batches(ds)))
    item = items[0]
    assert item["graph_id"] == first.graph_id and item["position"] == 1
    assert item["node_feat"].dtype == torch.float32 and item["node_feat"].shape[1] == 140
    assert item["config_runtime"].dtype == torch.int64
    assert np.array_equal(item["config_runtime"].numpy(), first.sample.config_runtime)
    assert np.array_equal(item["node_config_feat"].numpy(), first.sample.node_config_feat)
    assert np.array_equal(item["edge_index"].numpy(), first.structure.edge_index)
    item["node_feat"][0, 0] = 1.0  # owned, writable copies


def test_two_dataloader_workers_yield_the_single_process_stream(ds):
    from tpuprep.torch import ConfigBatchDataset

    single = [_key(x) for x in _loader(ConfigBatchDataset(_batches(ds)), 0)]
    assert len(single) == 5 * len(ds.graph_ids(LAYOUT, "train"))
    two = [_key(x) for x in _loader(ConfigBatchDataset(_batches(ds)), 2)]
    assert Counter(two) == Counter(single)
    assert two == single  # the loader's round-robin even keeps the order


@pytest.mark.parametrize("workers", [0, 2])
def test_torch_resume_after_n_batches_gives_the_remaining_stream(ds, workers):
    from tpuprep.torch import ConfigBatchDataset

    whole = [_key(x) for x in _loader(ConfigBatchDataset(_batches(ds)), 0)]
    dataset = ConfigBatchDataset(_batches(ds))
    seen = []
    for item in _loader(dataset, workers):
        seen.append(item)
        if len(seen) == 3:
            break
    state = dataset.state_dict(None if workers == 0 else seen[-1]["position"])
    state = json.loads(json.dumps(state))
    assert state["position"] == 3
    resumed = ConfigBatchDataset(_batches(ds))
    resumed.load_state_dict(state)
    resumed.set_epoch(0)
    rest = [_key(x) for x in _loader(resumed, workers)]
    assert [_key(x) for x in seen] + rest == whole
    resumed.set_epoch(1)  # a new epoch starts from its beginning
    assert len(list(_loader(resumed, workers))) == len(whole)


def test_config_batches_pickle_without_their_open_files(ds):
    batches = _batches(ds)
    list(batches)
    again = pickle.loads(pickle.dumps(batches))
    assert [(b.graph_id, b.sample.rows.tolist()) for b in again] == \
        [(b.graph_id, b.sample.rows.tolist()) for b in batches]


def test_jax_iterator_keeps_int64_exact_and_sets_no_flag(synth_shards):
    """In a fresh interpreter: importing tpuprep.jax and iterating leaves jax_enable_x64 as it was,
    runtimes stay NumPy int64 equal to the sample, the rest are JAX arrays of the same dtypes."""
    pytest.importorskip("jax")
    code = f"""
import jax, numpy as np
before = bool(jax.config.jax_enable_x64)
import tpuprep
from tpuprep.jax import JaxBatches
from tpuprep.sampling.batches import ConfigBatches
ds = tpuprep.open_dataset({str(synth_shards)!r})
batches = ConfigBatches(ds, {LAYOUT!r}, k=8, batches_per_graph=2)
items = list(JaxBatches(batches))
assert bool(jax.config.jax_enable_x64) == before, "x64 flag changed"
ref = list(batches)
assert len(items) == len(ref) == 4
for item, b in zip(items, ref):
    assert type(item["config_runtime"]) is np.ndarray and item["config_runtime"].dtype == np.int64
    assert np.array_equal(item["config_runtime"], b.sample.config_runtime)
    assert np.array_equal(item["rows"], b.sample.rows)
    assert isinstance(item["node_feat"], jax.Array) and item["node_feat"].dtype == np.float32
    assert isinstance(item["node_config_feat"], jax.Array) and item["node_config_feat"].dtype == np.int8
    real = np.asarray(item["config_node_mask"])  # padded to static shapes by default (issue #28)
    assert np.array_equal(np.asarray(item["node_config_feat"])[:, real], b.sample.node_config_feat)
    assert np.asarray(item["config_mask"]).all() and item["rows"].shape == (8,)
print("OK", before)
"""
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and "OK False" in out.stdout, out.stdout + out.stderr[-2000:]


def test_the_batches_example_of_readers_md_runs(synth_shards):
    """docs/examples/batches_tpuprep.py (shown in docs/readers.md) runs as documented."""
    pytest.importorskip("jax")
    script = ROOT / "docs" / "examples" / "batches_tpuprep.py"
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, str(script), str(synth_shards), LAYOUT], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("numpy 4 batches of (16, ")
    assert lines[1] == "torch 3 + 1 batches after a resume" and lines[2] == "jax int8 int64"
