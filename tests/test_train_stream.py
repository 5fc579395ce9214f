"""The evaluator and predictor never hold a graph's codes (issue #14): configs are streamed in blocks
(``Dataset.iter_config_blocks``) and the results equal those of the whole-record path bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tpuprep import open_dataset
from tpuprep.train import Ranker, evaluate, write_submission
from tpuprep.train import features as F
from tpuprep.train import stream
from tpuprep.train.evaluate import evaluate_graph, evaluate_streamed
from tpuprep.train.model import ModelConfig
from tpuprep.train.predict import read_submission, top_configs

LAYOUT, TILE = "layout:xla:random", "tile:xla"


@pytest.fixture(scope="module")
def ds(synth_shards):
    return open_dataset(synth_shards)


@pytest.fixture(scope="module")
def rankers(ds):
    return {c: Ranker.create(c, ds.stats(c), ModelConfig(c.split(":")[0], 8, 8, 1), 0)
            for c in (LAYOUT, TILE)}


class WholeGraphRefused:
    """A Dataset whose ``load_graph`` refuses to read a graph with its configs."""

    def __init__(self, ds):
        self._ds = ds

    def load_graph(self, graph_id, configs=True):
        if configs:
            raise AssertionError(f"{graph_id} was loaded whole")
        return self._ds.load_graph(graph_id, configs=False)

    def __getattr__(self, name):
        return getattr(self._ds, name)


def _same_row(a: dict, b: dict) -> bool:
    return list(a) == list(b) and all(
        a[k] == b[k] or (isinstance(a[k], float) and math.isnan(a[k]) and math.isnan(b[k])) for k in a)


def test_iter_config_blocks_cover_the_graph_in_order(ds):
    for gid in (ds.graph_ids(LAYOUT, "train")[0], ds.graph_ids(TILE, "train")[0]):
        rec = ds.load_graph(gid)
        blocks = list(ds.iter_config_blocks(gid, 3))
        assert all(len(b.rows) <= 3 for b in blocks)
        np.testing.assert_array_equal(np.concatenate([b.rows for b in blocks]),
                                      np.arange(rec.num_unique_configs))
        np.testing.assert_array_equal(np.concatenate([b.group_size for b in blocks]), rec.group_size)
        np.testing.assert_array_equal(np.concatenate([b.config_runtime for b in blocks]), rec.config_runtime)
        if rec.config_codes is not None:
            np.testing.assert_array_equal(np.concatenate([b.node_config_feat for b in blocks]),
                                          rec.node_config_feat())
        else:
            np.testing.assert_array_equal(np.concatenate([b.config_feat for b in blocks]), rec.config_feat)
        rows = np.array([r for r in (4, 0, 2) if r < rec.num_unique_configs], np.int64)
        got = np.concatenate([b.rows for b in ds.iter_config_blocks(gid, 2, rows)])
        np.testing.assert_array_equal(got, rows)


def test_iter_config_blocks_refusals(ds):
    gid = ds.graph_ids(LAYOUT, "train")[0]
    with pytest.raises(ValueError, match="rows_per_block"):
        next(ds.iter_config_blocks(gid, 0))
    with pytest.raises(ValueError, match="must lie in"):
        next(ds.iter_config_blocks(gid, 8, [10 ** 6]))
    with pytest.raises(KeyError):
        next(ds.iter_config_blocks("layout:xla:random:nope"))


@pytest.mark.parametrize("coll", [LAYOUT, TILE])
def test_config_digest_equals_the_whole_record(ds, rankers, coll, monkeypatch):
    monkeypatch.setattr(F, "MODAL_SAMPLE", 5)  # a sample smaller than the graph: the same rows are read
    monkeypatch.setattr(stream, "ROWS_PER_BLOCK", 2)
    ranker = rankers[coll]
    for gid in ds.graph_ids(coll, "train")[:3]:
        whole = ranker.prepare(ds.load_graph(gid))
        _, pg = stream.prepare_streamed(ranker, ds, gid)
        if coll == LAYOUT:
            np.testing.assert_array_equal(pg.cfg_modal, whole.cfg_modal)
        else:
            np.testing.assert_array_equal(pg.tile_extents, whole.tile_extents)
        np.testing.assert_array_equal(pg.x, whole.x)


@pytest.mark.parametrize("coll", [LAYOUT, TILE])
def test_streamed_scores_equal_predict_unique_across_blocks(ds, rankers, coll, monkeypatch):
    monkeypatch.setattr(stream, "SCORE_BATCH", 2)
    monkeypatch.setattr(stream, "ROWS_PER_BLOCK", 4)
    ranker = rankers[coll]
    for gid in ds.graph_ids(coll, "valid")[:3]:
        rec = ds.load_graph(gid)
        _, pg = stream.prepare_streamed(ranker, ds, gid)
        np.testing.assert_array_equal(stream.score_streamed(ranker, ds, gid, pg),
                                      ranker.predict_unique(rec, batch_size=2))


@pytest.mark.parametrize("coll", [LAYOUT, TILE])
@pytest.mark.parametrize("max_configs", [None, 3])
def test_evaluate_streamed_equals_the_whole_record_path(ds, rankers, coll, max_configs):
    ranker = rankers[coll]
    for gid in ds.graph_ids(coll, "valid"):
        a_row, a_pred, a_target = evaluate_graph(ranker, ds.load_graph(gid), None, True, max_configs)
        b_row, b_pred, b_target = evaluate_streamed(ranker, ds, gid, None, True, max_configs)
        assert _same_row(a_row, b_row), (a_row, b_row)
        np.testing.assert_array_equal(a_pred, b_pred)
        np.testing.assert_array_equal(a_target, b_target)


def test_evaluate_and_predict_never_load_a_graph_whole(ds, rankers, tmp_path):
    guarded = WholeGraphRefused(ds)
    result = evaluate(guarded, list(rankers.values()), "valid", log=None)
    reference = [evaluate_graph(rankers[r["collection"]], ds.load_graph(r["graph_id"]))[0]
                 for r in result.rows]
    assert len(result.rows) == len(ds.graph_ids(LAYOUT, "valid")) + len(ds.graph_ids(TILE, "valid"))
    for got, want in zip(result.rows, reference, strict=True):
        got = {k: v for k, v in got.items() if k != "seconds"}
        assert _same_row(got, want)
    out = tmp_path / "sub.csv"
    write_submission(guarded, [rankers[LAYOUT], rankers[TILE]], out, "test")
    sub = read_submission(out)
    for coll, ranker in rankers.items():
        for gid in ds.graph_ids(coll, "test"):
            assert sub[gid] == top_configs(ranker, ds.load_graph(gid)).tolist()
