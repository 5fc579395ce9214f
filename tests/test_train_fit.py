"""End-to-end training on a fake dataset: the model must learn, be reproducible and round-trip to disk."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from train_fakes import dataset_fixture

from tpuprep.train import Ranker, TrainConfig, evaluate, train
from tpuprep.train.model import ModelConfig

LAYOUT = "layout:xla:random"


ds = dataset_fixture(seed=21, n_train=6, n_valid=4, n_test=2, n_unique=80, n_nodes=30)


def mean_valid(ds, ranker, key="tau"):
    res = evaluate(ds, [ranker], split="valid", baseline=False, log=None)
    return res.summary[ranker.collection][key]


def untrained_like(ds, ranker):
    return Ranker.create(ranker.collection, ds.stats(ranker.collection), ranker.config, ranker.seed)


@pytest.mark.parametrize(("derived", "prior", "epochs", "hidden", "layers", "need"),
                         [(True, 0.0, 6, 24, 2, 0.4), (True, 1000.0, 6, 24, 2, 0.3),
                          (False, 0.0, 14, 48, 1, 0.12)])
def test_layout_fit_beats_zero_and_untrained(ds, derived, prior, epochs, hidden, layers, need):
    """With the hand-made layout features, and with the pure GNN (derived=False) alone. The fake's
    runtimes follow the violation ratio, not the compute-share prior (model.py): without the prior the
    network learns that law on its own; with it (the default) training still learns well past where it
    starts, turning the prior down."""
    cfg = TrainConfig(epochs=epochs, seed=3, batch_configs=64, lr=5e-3, hidden=hidden,
                      head_hidden=hidden, layers=layers, derived=derived, prior=prior, batches_per_graph=3,
                      validate=False)
    ranker = train(ds, LAYOUT, cfg, log=None)
    tau = mean_valid(ds, ranker)
    tau0 = mean_valid(ds, untrained_like(ds, ranker))
    assert tau > need, (tau, tau0)
    assert tau > tau0 + 0.1, (tau, tau0)
    assert ranker.history[-1]["loss"] < ranker.history[0]["loss"]
    if ranker.config.has_prior:
        assert ranker.params["w_prior"][0] < 1.0  # turned down: this law is not the prior's


def test_tile_fit_improves_ranking(ds):
    cfg = TrainConfig(epochs=6, seed=1, lr=5e-3, hidden=16, head_hidden=16, batches_per_graph=2,
                      validate=False, loss="ranknet")
    ranker = train(ds, "tile:xla", cfg, log=None)
    train_ids = ds.graph_ids("tile:xla", "train")
    # on the training graphs the tile ranking must be clearly learnt
    from tpuprep.train.evaluate import evaluate_graph

    taus = [evaluate_graph(ranker, ds.load_graph(g))[0]["tau"] for g in train_ids]
    taus0 = [evaluate_graph(untrained_like(ds, ranker), ds.load_graph(g))[0]["tau"] for g in train_ids]
    assert np.nanmean(taus) > 0.5 and np.nanmean(taus) > np.nanmean(taus0) + 0.2
    assert 0.0 < mean_valid(ds, ranker, "tile_score") <= 1.0


def test_same_seed_same_weights_and_save_load(ds, tmp_path):
    cfg = TrainConfig(epochs=2, seed=5, hidden=8, head_hidden=8, validate=True, batch_configs=16)
    a = train(ds, LAYOUT, cfg, out=tmp_path / "a", log=None)
    b = train(ds, LAYOUT, cfg, log=None)
    c = train(ds, LAYOUT, TrainConfig(**{**cfg.__dict__, "seed": 6}), log=None)
    d = train(ds, LAYOUT, TrainConfig(**{**cfg.__dict__, "cache_graphs": 2}), log=None)  # LRU reloads
    assert a.params.keys() == b.params.keys()
    assert all(np.array_equal(a.params[k], b.params[k]) for k in a.params)
    assert all(np.array_equal(a.params[k], d.params[k]) for k in a.params)
    assert not all(np.array_equal(a.params[k], c.params[k]) for k in a.params)
    assert [h["loss"] for h in a.history] == [h["loss"] for h in b.history]
    # every step scores batch_configs sampled configs (each fake graph has 80 unique ones)
    assert [h["configs"] for h in a.history] == [16 * h["steps"] for h in a.history]
    # saved model: .npz + .json with hyper-parameters, stats and seed; predictions identical after load
    assert (tmp_path / "a.npz").is_file() and (tmp_path / "a.json").is_file()
    loaded = Ranker.load(tmp_path / "a.json")
    assert loaded.seed == 5 and loaded.hyper["epochs"] == 2 and loaded.collection == LAYOUT
    assert loaded.config == a.config
    np.testing.assert_array_equal(loaded.feat_mean, a.feat_mean)
    g = ds.load_graph(ds.graph_ids(LAYOUT, "valid")[0])
    np.testing.assert_array_equal(loaded.predict_original(g), a.predict_original(g))
    assert math.isfinite(a.history[-1]["valid_tau"])
    # a model saved by a format whose inputs were computed differently is refused, with the reason
    meta = json.loads((tmp_path / "a.json").read_text())
    for version, words in ((1, "train it again"), (99, "newer than supported")):
        (tmp_path / "a.json").write_text(json.dumps({**meta, "format_version": version}))
        with pytest.raises(ValueError, match=words):
            Ranker.load(tmp_path / "a.json")


def test_time_budget_and_holdout_fold(ds):
    cfg = TrainConfig(epochs=50, seed=0, hidden=8, head_hidden=8, time_budget=0.0, validate=False)
    r = train(ds, LAYOUT, cfg, log=None)
    assert len(r.history) == 1 and r.history[0]["stopped"] == "time_budget"
    cfg = TrainConfig(epochs=1, seed=0, hidden=8, head_hidden=8, holdout_fold=0, validate=True)
    r = train(ds, LAYOUT, cfg, log=None)
    pool = ds.graph_ids(LAYOUT, "train") + ds.graph_ids(LAYOUT, "valid")
    assert r.hyper["n_train_graphs"] == sum(ds.fold(g) != 0 for g in pool)


def test_bad_arguments(ds):
    with pytest.raises(ValueError):
        train(ds, "layout:nlp:random", TrainConfig(epochs=1), log=None)
    with pytest.raises(ValueError):
        TrainConfig(loss="mse")
    with pytest.raises(ValueError):
        Ranker.create(LAYOUT, ds.stats(LAYOUT), ModelConfig(kind="tile"), 0)
