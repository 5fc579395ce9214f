"""Issue #30 (memory at scale): what the trainer keeps between steps and what a streamed validation holds.

* a graph's config digest (the modal output blocks: a stream of up to 4,096 configs) is computed once
  per run, however small the LRU of prepared structures: an evicted graph is prepared again from its
  structure alone;
* scoring a graph block by block holds one block's inputs and one batch, not the blocks of a batch;
* the trainer's LRUs and kept activations have the documented bounds.
"""

from __future__ import annotations

import gc
import weakref
from collections import Counter

import numpy as np
import pytest
from train_fakes import dataset_fixture

from tpuprep.train import Ranker, TrainConfig, stream, train, trainer
from tpuprep.train.model import ModelConfig

LAYOUT, TILE = "layout:xla:random", "tile:xla"


ds = dataset_fixture(seed=8, n_train=4, n_valid=2, n_test=1, n_unique=50, n_nodes=24)


def counting_digests(monkeypatch) -> Counter:
    seen: Counter = Counter()
    real = stream.config_digest

    def spy(ds, structure, kind):
        seen[structure.graph_id] += 1
        return real(ds, structure, kind)

    monkeypatch.setattr(stream, "config_digest", spy)
    return seen


def test_evicted_graphs_are_prepared_again_without_reading_configs(ds, monkeypatch):
    seen = counting_digests(monkeypatch)
    ranker = Ranker.create(LAYOUT, ds.stats(LAYOUT), ModelConfig(kind="layout", hidden=8, head_hidden=8), 0)
    cache = stream.StructureCache(ds, ranker, max_items=1)
    a, b = ds.graph_ids(LAYOUT, "train")[:2]
    first = cache.get(a)[1]
    cache.get(b)
    again = cache.get(a)[1]  # a was evicted: prepared again, from its kept digest
    assert again is not first and len(cache) == 1
    assert seen == {a: 1, b: 1}
    np.testing.assert_array_equal(again.cfg_modal, first.cfg_modal)
    np.testing.assert_array_equal(again.x, first.x)


def test_training_reads_each_digest_once_with_a_one_graph_lru(ds, monkeypatch):
    seen = counting_digests(monkeypatch)
    cfg = TrainConfig(epochs=3, seed=0, hidden=8, head_hidden=8, batch_configs=8, cache_graphs=1)
    a = train(ds, LAYOUT, cfg, log=None)
    assert set(seen) == set(ds.graph_ids(LAYOUT, "train")) | set(ds.graph_ids(LAYOUT, "valid"))
    assert set(seen.values()) == {1}, seen
    b = train(ds, LAYOUT, TrainConfig(**{**cfg.__dict__, "cache_graphs": None}), log=None)
    assert all(np.array_equal(a.params[k], b.params[k]) for k in a.params)  # same weights either way


@pytest.mark.parametrize("coll", [LAYOUT, TILE])
def test_streamed_scoring_holds_one_block_of_inputs(ds, coll, monkeypatch):
    """Blocks of 3 configs, batches of 8: a batch is assembled from 3–4 blocks, yet when a block is
    read, the inputs of the blocks before it are gone (copied into the one batch buffer)."""
    monkeypatch.setattr(stream, "SCORE_BATCH", 8)
    monkeypatch.setattr(stream, "ROWS_PER_BLOCK", 3)
    ranker = Ranker.create(coll, ds.stats(coll), ModelConfig(kind=coll.split(":")[0], hidden=8,
                                                             head_hidden=8), 0)
    gid = ds.graph_ids(coll, "valid")[0]
    _, pg = stream.prepare_streamed(ranker, ds, gid)
    inputs: list[weakref.ref] = []
    alive: list[int] = []
    real_inputs, real_blocks = ranker.sample_inputs, ds.iter_config_blocks

    def sample_inputs(pg, sample):
        x = np.array(real_inputs(pg, sample))  # a fresh array per block, as the reader's decode gives
        inputs.append(weakref.ref(x))
        return x

    def blocks(graph_id, rows_per_block, rows=None):
        for block in real_blocks(graph_id, rows_per_block, rows):
            gc.collect()
            alive.append(sum(r() is not None for r in inputs))
            yield block

    monkeypatch.setattr(ranker, "sample_inputs", sample_inputs)
    monkeypatch.setattr(ds, "iter_config_blocks", blocks)
    scores = stream.score_streamed(ranker, ds, gid, pg)
    monkeypatch.undo()
    rec = ds.load_graph(gid)
    np.testing.assert_array_equal(scores, ranker.predict_unique(rec, batch_size=8))
    assert len(alive) > 4 and max(alive) == 0, alive


def test_trainer_bounds(ds, monkeypatch):
    """The sampler's LRU gets TRAIN_SAMPLER_BYTES (split among the samplers of a holdout fold), the
    structure LRU TRAIN_STRUCTURE_BYTES, and a step keeps TRAIN_KEEP_BYTES of activations."""
    from tpuprep import ConfigBatches

    made, kept = [], []
    real_init, real_forward = ConfigBatches.__init__, trainer.forward

    def init(self, *a, **k):
        made.append(k["cache_bytes"])
        real_init(self, *a, **k)

    def forward(*a, **k):
        kept.append(k.get("keep_bytes"))
        return real_forward(*a, **k)

    monkeypatch.setattr(ConfigBatches, "__init__", init)
    monkeypatch.setattr(trainer, "forward", forward)
    train(ds, LAYOUT, TrainConfig(epochs=1, hidden=8, head_hidden=8, validate=False), log=None)
    assert made == [trainer.TRAIN_SAMPLER_BYTES]
    train(ds, LAYOUT, TrainConfig(epochs=1, hidden=8, head_hidden=8, validate=False, holdout_fold=0), log=None)
    assert made[1:] == [trainer.TRAIN_SAMPLER_BYTES // 2] * 2
    assert set(kept) == {trainer.TRAIN_KEEP_BYTES}
    total = trainer.TRAIN_SAMPLER_BYTES + trainer.TRAIN_STRUCTURE_BYTES + trainer.TRAIN_KEEP_BYTES
    assert total <= 320 * 2 ** 20  # what the trainer may hold besides one step's and one block's work
