"""The trainer's defaults (issue #30 item 4): ``tpuprep train`` and ``TrainConfig`` agree on every
default, and the validation cadence ``valid_every`` validates after the first epoch, every N-th and the last."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from train_fakes import make_fake_dataset

from tpuprep.cli.train import train_cmd
from tpuprep.train import TrainConfig, train
from tpuprep.train.trainer import DEFAULT_EPOCHS

LAYOUT = "layout:xla:random"


def test_cli_defaults_are_the_train_config_defaults():
    fields = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    checked = 0
    for p in train_cmd.params:
        if p.name in fields and p.name not in ("threads", "time_budget", "holdout_fold", "cache_graphs"):
            assert p.default == fields[p.name], p.name
            checked += 1
    assert checked >= 10
    assert fields["head_hidden"] == fields["hidden"]  # the CLI passes --hidden for both


def test_valid_every_validates_every_nth_epoch_and_the_last():
    ds = make_fake_dataset(seed=3, n_train=3, n_valid=2, n_test=0, n_unique=20, n_nodes=12)
    cfg = TrainConfig(epochs=5, seed=0, hidden=8, head_hidden=8, batch_configs=8, valid_every=2)
    r = train(ds, LAYOUT, cfg, log=None)
    assert [h["epoch"] for h in r.history if "valid_tau" in h] == [1, 2, 4, 5]
    assert all(math.isfinite(h["valid_tau"]) for h in r.history if "valid_tau" in h)
    r1 = train(ds, LAYOUT, dataclasses.replace(cfg, valid_every=1), log=None)
    assert all("valid_tau" in h for h in r1.history)
    # validating does not change what is learnt
    assert all((r.params[k] == r1.params[k]).all() for k in r.params)
    with pytest.raises(ValueError, match="valid_every"):
        TrainConfig(valid_every=0)


def test_default_epochs_follow_the_kind_and_are_recorded():
    ds = make_fake_dataset(seed=4, n_train=2, n_valid=1, n_test=0, n_unique=12, n_nodes=8)
    for coll, epochs in ((LAYOUT, DEFAULT_EPOCHS["layout"]), ("tile:xla", DEFAULT_EPOCHS["tile"])):
        r = train(ds, coll, TrainConfig(hidden=4, head_hidden=4, batch_configs=4), log=None)
        assert r.hyper["epochs"] == epochs and len(r.history) == epochs
        # validated after the first epoch, every 10th and the last
        assert [h["epoch"] for h in r.history if "valid_tau" in h or "valid_tile_score" in h] == \
            sorted({1, *range(10, epochs + 1, 10), epochs})
    assert DEFAULT_EPOCHS == {"layout": 32, "tile": 20}


def test_default_loss_weighs_near_ties_down_at_lr_4e3():
    """Issue #30 item 4, round 2: lr 4e-3 and the 'floor' pair weights are the defaults (CLI and
    TrainConfig alike), and the default run is the run that asks for them."""
    cfg = TrainConfig()
    assert (cfg.lr, cfg.pair_weight, cfg.loss) == (4e-3, "floor", "hinge")
    opts = {p.name: p.default for p in train_cmd.params}
    assert (opts["lr"], opts["pair_weight"]) == (4e-3, "floor")
    ds = make_fake_dataset(seed=6, n_train=2, n_valid=1, n_test=0, n_unique=16, n_nodes=8, tile=False)
    for gid, g in ds._graphs.items():  # near-ties: the runtimes differ by < 1e-3 relative
        if g.config_runtime is not None:
            ds._graphs[gid] = dataclasses.replace(g, config_runtime=g.config_runtime + 10 ** 12,
                                                  config_runtime_original=g.config_runtime_original + 10 ** 12)
    small = dict(epochs=2, hidden=4, head_hidden=4, batch_configs=8, validate=False)
    default = train(ds, LAYOUT, TrainConfig(**small), log=None)
    asked = train(ds, LAYOUT, TrainConfig(**small, lr=4e-3, pair_weight="floor"), log=None)
    unweighted = train(ds, LAYOUT, TrainConfig(**small, lr=4e-3, pair_weight="none"), log=None)
    assert all(np.array_equal(default.params[k], asked.params[k]) for k in default.params)
    assert any(not np.array_equal(default.params[k], unweighted.params[k]) for k in default.params)
    with pytest.raises(ValueError, match="pair_weight"):
        TrainConfig(pair_weight="square")
