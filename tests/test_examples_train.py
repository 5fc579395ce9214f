"""docs/examples/train_torch_gnn.py (issue #28 item 6): the PyTorch GraphSAGE ranker trains through
ConfigBatchDataset + DataLoader on a tiny synthetic build and ends with ``tau=<x>`` over the valid split;
its validation scores every config of every valid graph in the right order."""

from __future__ import annotations

import importlib.util
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tpuprep

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "docs" / "examples" / "train_torch_gnn.py"


def _example():
    spec = importlib.util.spec_from_file_location("train_torch_gnn", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("collection", ["layout:xla:random", "tile:xla"])
def test_the_torch_gnn_example_trains_and_prints_the_valid_tau_last(synth_shards, collection):
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(SCRIPT), "--shards", str(synth_shards), "--collection", collection,
                          "--time-budget", "3", "--k", "8"], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    last = re.fullmatch(r"tau=(-?\d+\.\d+)", lines[-1])
    assert last, lines[-3:]
    tau = float(last.group(1))
    assert math.isfinite(tau) and -1 <= tau <= 1
    trained = re.search(r"trained (\d+) epochs, (\d+) steps, (\d+) configs", out.stdout)
    assert trained and int(trained.group(2)) > 0 and int(trained.group(3)) >= 2 * int(trained.group(2))
    valid = len(tpuprep.open_dataset(synth_shards).graph_ids(collection, "valid"))
    assert f"valid: {valid} graphs" in lines[-2]


def test_the_examples_validation_streams_every_config_in_order(synth_shards):
    """An oracle scorer (the unique config's runtime) gets τ near 1 on every valid graph, its negation
    near −1: blocks, rows and config_inverse line up (a misaligned row would pull τ towards 0)."""
    example = _example()
    ds = tpuprep.open_dataset(synth_shards)

    def oracle(g, block):
        target = block.config_runtime.astype(np.float64)
        if block.config_runtime_normalizers is not None:
            target = target / block.config_runtime_normalizers
        return target

    for collection in ("layout:xla:random", "tile:xla"):
        taus = [t for t in example.valid_tau(ds, collection, oracle) if not np.isnan(t)]
        assert taus and min(taus) > 0.9, (collection, taus)
        negated = example.valid_tau(ds, collection, lambda g, b: -oracle(g, b))
        assert max(t for t in negated if not np.isnan(t)) < -0.9


def test_the_model_scores_a_block_like_the_training_batches(synth_shards):
    """The scorer used for validation gives the same scores as the model on a DataLoader batch."""
    example = _example()
    ds = tpuprep.open_dataset(synth_shards)
    collection = "layout:xla:random"
    model = example.SageRanker(*ds.normalizer(collection), layout=True).eval()
    batches = tpuprep.ConfigBatches(ds, collection, k=8)
    item = next(iter(torch.utils.data.DataLoader(example.ConfigBatchDataset(batches), batch_size=None)))
    with torch.no_grad():
        direct = model(item).double().numpy()
    gid = item["graph_id"]
    block = ds.read_configs(gid, item["rows"].numpy())
    streamed = example.model_scorer(model, chunk=3)(ds.load_graph(gid, configs=False), block)
    assert np.allclose(direct, streamed, atol=1e-5)
