"""The evaluator and predictor never hold a graph's codes (issue #14): configs are streamed in blocks
(``Dataset.iter_config_blocks``) and the results equal those of the whole-record path bit for bit."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
from train_fakes import local_batches

from tpuprep import open_dataset
from tpuprep.train import Ranker, TrainConfig, evaluate, stream, train, write_submission
from tpuprep.train import features as F
from tpuprep.train.evaluate import evaluate_graph, evaluate_streamed
from tpuprep.train.metrics import kendall_tau, slowdown_at_k
from tpuprep.train.model import ModelConfig
from tpuprep.train.predict import read_submission, top_configs
from tpuprep.train.trainer import quick_validation, usable_for_training

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


def test_layout_blocks_are_bounded_in_bytes(ds, rankers, monkeypatch):
    """A wide graph is streamed in blocks of at most BLOCK_BYTES of decoded values (nc = 3,541 in the
    full profile: 4,096 configs would be 261 MB), with the same digest and scores."""
    monkeypatch.setattr(stream, "SCORE_BATCH", 2)
    ranker = rankers[LAYOUT]
    gid = max(ds.graph_ids(LAYOUT, "valid"), key=ds.num_unique_configs)
    rec = ds.load_graph(gid)
    nc = len(rec.node_config_ids)
    assert rec.num_unique_configs > 3
    assert stream.rows_per_block(None) == stream.ROWS_PER_BLOCK == stream.rows_per_block(455)
    assert stream.rows_per_block(3541) == 526
    monkeypatch.setattr(stream, "BLOCK_BYTES", 3 * nc * 18 + 17)  # room for 3 configs, not 4
    seen: list[int] = []
    real = ds.iter_config_blocks

    def spy(graph_id, rows_per_block, rows=None):
        seen.append(rows_per_block)
        yield from real(graph_id, rows_per_block, rows)

    monkeypatch.setattr(ds, "iter_config_blocks", spy)
    _, pg = stream.prepare_streamed(ranker, ds, gid)
    np.testing.assert_array_equal(pg.cfg_modal, ranker.prepare(rec).cfg_modal)
    np.testing.assert_array_equal(stream.score_streamed(ranker, ds, gid, pg),
                                  ranker.predict_unique(rec, batch_size=2))
    assert seen == [3, 3]  # the digest's stream, then the scores'


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


def test_training_holds_sampled_configs_only_and_is_deterministic(ds):
    """The trainer consumes sampler batches (here the tests' LocalBatches, same contract as
    tpuprep.ConfigBatches) and an LRU of structures: no graph is ever loaded with its configs."""
    guarded = WholeGraphRefused(ds)
    cfg = TrainConfig(epochs=2, seed=4, hidden=8, head_hidden=8, batch_configs=8, validate=True)
    a = train(guarded, LAYOUT, cfg, log=None, batches=local_batches(guarded, cfg))
    b = train(guarded, LAYOUT, cfg, log=None, batches=local_batches(guarded, cfg))
    assert all(np.array_equal(a.params[k], b.params[k]) for k in a.params)
    assert math.isfinite(a.history[-1]["valid_tau"])
    tile_cfg = TrainConfig(epochs=1, seed=4, hidden=8, head_hidden=8, batch_configs=8, cache_graphs=2)
    t = train(guarded, TILE, tile_cfg, log=None, batches=local_batches(guarded, tile_cfg))
    usable = [g for g in ds.graph_ids(TILE, "train")
              if usable_for_training(ds.load_graph(g, configs=False), "tile")]
    assert t.history[0]["steps"] == len(usable) >= 1


def test_quick_validation_equals_the_whole_record_numbers(ds, rankers):
    """The streamed per-epoch validation gives the numbers of the former whole-record computation."""
    for coll, max_configs in ((LAYOUT, 5), (LAYOUT, 10 ** 6), (TILE, 10 ** 6)):
        ranker = rankers[coll]
        ids = ds.graph_ids(coll, "valid")
        got = quick_validation(ranker, stream.StructureCache(ds, ranker), ids, max_configs, 7)
        vals = []
        for gid in ids:
            rec = ds.load_graph(gid)
            rng = np.random.Generator(np.random.PCG64([7, zlib.crc32(gid.encode())]))  # seeded by the graph
            c_u = rec.num_unique_configs
            rows = np.arange(c_u) if c_u <= max_configs else np.sort(rng.choice(c_u, max_configs, replace=False))
            scores = ranker.predict_unique(rec, rows=rows)
            if coll == LAYOUT:
                v = kendall_tau(scores, rec.config_runtime[rows])
            else:
                target = rec.config_runtime[rows] / rec.config_runtime_normalizers[rows]
                v = 2.0 - slowdown_at_k(scores, target, 5)
            if math.isfinite(v):
                vals.append(v)
        assert got == float(np.mean(vals))


def test_structure_cache_is_bounded(ds, rankers):
    ranker = rankers[LAYOUT]
    ids = ds.graph_ids(LAYOUT, "train")
    cache = stream.StructureCache(ds, ranker, max_items=2)
    for gid in ids:
        cache.get(gid)
    assert len(cache) == min(2, len(ids))
    tiny = stream.StructureCache(ds, ranker, max_bytes=1)  # bytes bound: only the newest is kept
    for gid in ids:
        structure, pg = tiny.get(gid)
        assert structure.graph_id == gid and structure.config_codes is None
    assert len(tiny) == 1 and tiny.bytes == stream.nbytes(structure) + stream.nbytes(pg)


@pytest.fixture(scope="module")
def small_groups(synth_root, tmp_path_factory):
    """layout:xla:random built with small row groups (several per graph)."""
    from tpuprep.build import build
    from tpuprep.options import BuildOptions

    dst = tmp_path_factory.mktemp("small-groups")
    build(synth_root / "npz", dst, BuildOptions(row_group_bytes=4096), collections=[LAYOUT])
    return open_dataset(dst)


def test_sparse_rows_come_in_blocks_that_read_a_bounded_part_of_the_graph(small_groups):
    """Rows spread over a graph (a sample) are cut so one block never decompresses more than about
    rows_per_block configs: otherwise scoring 1,000 sampled configs of a 73,067-config graph read it all."""
    ds = small_groups
    gid = max(ds.graph_ids(LAYOUT), key=lambda g: ds.graph_row(g)["num_unique_configs"])
    c_u = ds.graph_row(gid)["num_unique_configs"]
    rec = ds.load_graph(gid)
    rows = np.arange(0, c_u, 7)
    blocks = list(ds.iter_config_blocks(gid, 24, rows))
    assert len(blocks) >= c_u // 24 > 2
    np.testing.assert_array_equal(np.concatenate([b.rows for b in blocks]), rows)
    assert all(b.rows.max() - b.rows.min() < 48 for b in blocks)
    np.testing.assert_array_equal(np.concatenate([b.node_config_feat for b in blocks]),
                                  rec.node_config_feat(rows))
