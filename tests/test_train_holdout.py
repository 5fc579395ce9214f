"""Config-level holdout views (``tpuprep.train.holdout``): the two sides of every graph partition its
unique configs, rebuild every original config and runtime exactly, and train/evaluate run on them."""

from __future__ import annotations

import numpy as np
import pytest

import tpuprep
from tpuprep.train import ConfigHoldout, TrainConfig, evaluate, restrict_configs, train

LAYOUT, TILE = "layout:xla:random", "tile:xla"


@pytest.fixture(scope="module")
def ds(synth_shards):
    return tpuprep.open_dataset(synth_shards)


@pytest.mark.parametrize("collection", [LAYOUT, TILE])
def test_two_sides_partition_the_unique_configs_and_rebuild_every_original(ds, collection):
    view = ConfigHoldout(ds, collection, fraction=0.25, seed=3)
    ids = ds.graph_ids(collection, split="train")
    assert view.graph_ids(collection, "train") and view.graph_ids(collection, "valid")
    for gid in ids:
        g = ds.load_graph(gid)
        if f"{gid}@train" not in view.graph_ids():
            assert g.num_unique_configs < 4
            continue
        a, b = view.load_graph(f"{gid}@train"), view.load_graph(f"{gid}@holdout")
        assert (a.split, b.split) == ("train", "valid")
        assert b.num_unique_configs == min(max(round(0.25 * g.num_unique_configs), 1), g.num_unique_configs - 2)
        assert a.num_unique_configs + b.num_unique_configs == g.num_unique_configs
        assert a.num_configs + b.num_configs == g.num_configs
        # every original config appears on exactly one side, with its own runtime and content
        seen = []
        for side in (a, b):
            assert side.group_size.sum() == side.num_configs
            assert np.array_equal(np.bincount(side.config_inverse, minlength=side.num_unique_configs),
                                  side.group_size)
            assert np.array_equal(side.config_inverse[side.first_index], np.arange(side.num_unique_configs))
            # minimum runtime of each unique config over its group, as the build defines it
            for u in range(side.num_unique_configs):
                members = side.config_runtime_original[side.config_inverse == u]
                assert side.config_runtime[u] == members.min()
            if collection == LAYOUT:
                feats = side.node_config_feat()[side.config_inverse]
                assert np.array_equal(side.node_config_feat(), feats[side.first_index])
                seen += [(tuple(f.ravel()), int(r)) for f, r in zip(feats, side.config_runtime_original, strict=True)]
            else:
                feats = side.config_feat[side.config_inverse]
                seen += [(tuple(f), int(r)) for f, r in zip(feats, side.config_runtime_original, strict=True)]
        if collection == LAYOUT:
            full = g.node_config_feat()[g.config_inverse].reshape(g.num_configs, -1)
        else:
            full = g.config_feat[g.config_inverse]
        expected = [(tuple(f.ravel()), int(r)) for f, r in zip(full, g.config_runtime_original, strict=True)]
        assert sorted(seen) == sorted(expected)
        # no configuration is on both sides
        keys_a = {tuple(x.ravel()) for x in (a.config_codes if collection == LAYOUT else a.config_feat)}
        keys_b = {tuple(x.ravel()) for x in (b.config_codes if collection == LAYOUT else b.config_feat)}
        assert not keys_a & keys_b


def test_restrict_to_every_config_is_the_identity(ds):
    g = ds.load_graph(ds.graph_ids(LAYOUT, split="train")[0])
    same = restrict_configs(g, np.arange(g.num_unique_configs), g.graph_id, g.split)
    for name in ("config_inverse", "first_index", "group_size", "config_runtime", "config_runtime_original",
                 "config_codes"):
        assert np.array_equal(getattr(same, name), getattr(g, name)), name


def test_holdout_is_seeded_and_rejects_bad_fractions(ds):
    a = ConfigHoldout(ds, LAYOUT, 0.2, seed=0)
    b = ConfigHoldout(ds, LAYOUT, 0.2, seed=0)
    c = ConfigHoldout(ds, LAYOUT, 0.2, seed=1)
    gid = a.graph_ids(LAYOUT, "valid")[0]
    assert np.array_equal(a.load_graph(gid).config_codes, b.load_graph(gid).config_codes)
    assert not np.array_equal(a.load_graph(gid).first_index, c.load_graph(gid).first_index)
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError):
            ConfigHoldout(ds, LAYOUT, bad)


def test_train_and_evaluate_run_on_a_holdout_view(ds):
    view = ConfigHoldout(ds, LAYOUT, 0.2)
    ranker = train(view, LAYOUT, TrainConfig(epochs=2, hidden=8, head_hidden=8, batch_configs=16), log=None)
    res = evaluate(view, [ranker], split="valid", log=None)
    assert len(res.rows) == len(view.graph_ids(LAYOUT, "valid"))
    assert all(-1 <= r["tau"] <= 1 for r in res.rows)
    assert sum(r["configs"] for r in res.rows) == sum(view.load_graph(v).num_configs
                                                     for v in view.graph_ids(LAYOUT, "valid"))


def test_view_blocks_read_the_graph_structure_once(ds, monkeypatch):
    """Renumbering a view's blocks and samples needs the graph's kept original indices: read once per
    view (issue #30), not a whole-graph structure read per block or training batch."""
    view = ConfigHoldout(ds, LAYOUT, 0.25, seed=3)
    vid = max(view.graph_ids(LAYOUT, "train"), key=view.num_unique_configs)
    whole = view.load_graph(vid)
    reads = []
    real = ds.load_graph

    def spy(graph_id, configs=True):
        reads.append(graph_id)
        return real(graph_id, configs)

    monkeypatch.setattr(ds, "load_graph", spy)
    blocks = list(view.iter_config_blocks(vid, rows_per_block=3))
    for seed in range(4):
        view.sample_configs(vid, 5, seed)
    assert len(blocks) > 2 and len(reads) == 1
    np.testing.assert_array_equal(np.concatenate([b.rows for b in blocks]), np.arange(whole.num_unique_configs))
    np.testing.assert_array_equal(np.concatenate([b.first_index for b in blocks]), whole.first_index)
