"""docs/examples/train_torch_gnn.py (issue #28 item 6): the PyTorch GraphSAGE ranker trains through
ConfigBatchDataset + DataLoader on a tiny synthetic build and ends with ``tau=<x>`` over the valid split;
its validation scores every config of every valid graph in the right order; it sees the same inputs as
``tpuprep train`` (derived layout features, config summaries, tile features) and its learning-rate
schedule follows the epoch cap as well as the time budget.

docs/examples/train_pyg.py (issue #38 item 4), the PyTorch Geometric ranker on ``tpuprep.pyg`` batches,
takes the same flags and shares the loop and validation: it ends with ``tau=<x>`` too, its validation scores
like the model on the training batches, and it learns the train split.

How either compares with ``tpuprep train`` (τ on ``synth --profile small``, layout:xla:random) is a benchmark
(benchmarks/RESULTS.md, the table of current figures), not a test: on tiny data they all fit equally well."""

from __future__ import annotations

import importlib.util
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_readers import require

import tpuprep
from tpuprep.train.features import (
    N_DERIVED,
    clean_stats,
    config_summary,
    derived_config_features,
    prepare_graph,
    tile_config_features,
)

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
    inputs = example.GraphInputs(ds, collection)
    model = example.SageRanker(layout=True).eval()
    batches = tpuprep.ConfigBatches(ds, collection, k=8)
    item = next(iter(torch.utils.data.DataLoader(example.ConfigBatchDataset(batches), batch_size=None)))
    gid = item["graph_id"]
    with torch.no_grad():
        direct = model(inputs.graph(gid), inputs.configs(gid, item["node_config_feat"].numpy())).double().numpy()
    block = ds.read_configs(gid, item["rows"].numpy())
    streamed = example.model_scorer(model, inputs, chunk=3)(ds.load_graph(gid, configs=False), block)
    assert np.allclose(direct, streamed, atol=1e-5)


@pytest.mark.parametrize("collection", ["layout:xla:random", "tile:xla"])
def test_the_example_sees_the_numpy_trainers_inputs(synth_shards, collection):
    """GraphInputs (structure + streamed config digest) gives the inputs the NumPy trainer computes from
    the whole record: node features, configurable nodes, the derived layout features and summaries
    (which need each node's modal output layout over ALL the graph's configs), the tile features."""
    example = _example()
    ds = tpuprep.open_dataset(synth_shards)
    inputs = example.GraphInputs(ds, collection)
    kind = collection.split(":")[0]
    for gid in ds.graph_ids(collection, "train"):
        record = ds.load_graph(gid)
        pg = prepare_graph(record, kind, *clean_stats(*ds.normalizer(collection)), layers=1)
        g = inputs.graph(gid)
        assert np.array_equal(g["x"].numpy(), pg.x) and np.array_equal(g["pos"].numpy(), pg.config_pos)
        block = ds.read_configs(gid, np.arange(record.num_unique_configs))
        if kind == "tile":
            got = inputs.configs(gid, block.config_feat)["extra"].numpy()
            assert np.allclose(got, tile_config_features(block.config_feat, extents=pg.tile_extents))
            continue
        derived, violation = derived_config_features(pg, block.node_config_feat)
        got = inputs.configs(gid, block.node_config_feat)
        assert got["cfg"].shape == (len(block.rows), len(pg.config_pos), 18 * 7 + N_DERIVED)
        assert np.array_equal(got["cfg"][:, :, 126:].numpy(), derived)
        assert np.array_equal(got["extra"].numpy(), config_summary(pg, derived, violation))
        assert derived[:, :, 6].any(), "the synthetic configs leave their modal layout somewhere"


def test_the_learning_rate_warms_up_then_decays_over_the_epoch_cap(synth_shards):
    """lr_factor: linear warm-up to 1 at 5 %, cosine to 0.05 at the end; train() with an epoch cap (and
    no time limit) follows the epochs — a schedule on time alone would stay in warm-up and barely learn."""
    example = _example()
    assert example.lr_factor(0.0) == pytest.approx(0.01) and example.lr_factor(0.025) == pytest.approx(0.5)
    assert example.lr_factor(0.05) == pytest.approx(1.0) and example.lr_factor(1.0) == pytest.approx(0.05)
    ds = tpuprep.open_dataset(synth_shards)
    collection = "layout:xla:random"
    torch.set_num_threads(1)
    model, inputs = example.train(ds, collection, time_budget=1e9, k=32, seed=0, max_epochs=60)
    taus = example.valid_tau(ds, collection, example.model_scorer(model, inputs), split="train")
    assert np.mean(taus) > 0.8, taus


# --------------------------------------------------------------------------- docs/examples/train_pyg.py

PYG_SCRIPT = ROOT / "docs" / "examples" / "train_pyg.py"


def _pyg_example():
    """train_pyg.py imports train_torch_gnn from its own folder, as `python docs/examples/train_pyg.py` does."""
    require("torch_geometric")  # the test extra has it: CI fails rather than skips without it
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        spec = importlib.util.spec_from_file_location("train_pyg", PYG_SCRIPT)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return module


@pytest.mark.parametrize("collection", ["layout:xla:random", "tile:xla"])
def test_the_pyg_example_trains_and_prints_the_valid_tau_last(synth_shards, collection):
    """The flags of train_torch_gnn.py; ``tau=<x>`` on the valid split as the last line (issue #38 item 4)."""
    _pyg_example()
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(PYG_SCRIPT), "--shards", str(synth_shards), "--collection", collection,
                          "--time-budget", "3", "--k", "8", "--seed", "1"], capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    last = re.fullmatch(r"tau=(-?\d+\.\d+)", lines[-1])
    assert last, lines[-3:]
    assert -1 <= float(last.group(1)) <= 1
    trained = re.search(r"trained (\d+) epochs, (\d+) steps, (\d+) configs", out.stdout)
    assert trained and int(trained.group(2)) > 0 and int(trained.group(3)) >= 2 * int(trained.group(2))
    valid = len(tpuprep.open_dataset(synth_shards).graph_ids(collection, "valid"))
    assert f"valid: {valid} graphs" in lines[-2]


@pytest.mark.parametrize("collection", ["layout:xla:random", "tile:xla"])
def test_the_pyg_scorer_scores_a_block_like_the_training_batches(synth_shards, collection):
    """Validation (ConfigGraphs built from streamed blocks, in chunks) gives the model's scores on the
    DataLoader's ConfigGraph of the same configs, and the scores depend on the configs."""
    example = _pyg_example()
    from tpuprep.pyg import to_data

    ds = tpuprep.open_dataset(synth_shards)
    torch.manual_seed(0)
    model = example.PygSageRanker(*ds.normalizer(collection), layout=collection.startswith("layout")).eval()
    batches = tpuprep.ConfigBatches(ds, collection, k=8)
    loader = torch.utils.data.DataLoader(example.ConfigBatchDataset(batches), batch_size=None, collate_fn=to_data)
    data = next(d for d in loader if len(d.rows) > 2)  # a graph with several configs to tell apart
    with torch.no_grad():
        direct = model(data).double().numpy()
    block = ds.read_configs(data.graph_id, data.rows.numpy())
    streamed = example.pyg_scorer(model, chunk=3)(ds.load_graph(data.graph_id, configs=False), block)
    assert np.allclose(direct, streamed, atol=1e-5)
    assert np.ptp(direct) > 0, "every config scored alike: the configs do not reach the score"


def test_the_pyg_example_learns_the_train_split(synth_shards):
    """Trained for a fixed number of epochs (no time limit), the ranker orders the train graphs' configs."""
    example = _pyg_example()
    ds = tpuprep.open_dataset(synth_shards)
    torch.set_num_threads(1)
    model = example.train(ds, "layout:xla:random", time_budget=1e9, k=32, seed=0, max_epochs=60)
    valid_tau = sys.modules["train_torch_gnn"].valid_tau  # the validation train_pyg.py reports with
    taus = valid_tau(ds, "layout:xla:random", example.pyg_scorer(model), split="train")
    assert np.mean(taus) > 0.8, taus
