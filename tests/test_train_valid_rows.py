"""The per-epoch validation draws a graph's rows from the graph itself (its id), not from how many graphs
were scored before it: the same graph is scored on the same configs in any order or company."""

from __future__ import annotations

import numpy as np
import pytest

from tpuprep import open_dataset
from tpuprep.train import Ranker, stream
from tpuprep.train.model import ModelConfig
from tpuprep.train.trainer import quick_validation, validation_rows

LAYOUT = "layout:xla:random"


@pytest.fixture(scope="module")
def ds(synth_shards):
    return open_dataset(synth_shards)


def test_a_graph_scores_the_same_rows_whatever_was_scored_before_it(ds):
    ranker = Ranker.create(LAYOUT, ds.stats(LAYOUT), ModelConfig("layout", 8, 8, 1), 0)
    ids = ds.graph_ids(LAYOUT, "valid") + ds.graph_ids(LAYOUT, "train")
    assert len(ids) >= 3
    cache = stream.StructureCache(ds, ranker)
    alone = {g: quick_validation(ranker, cache, [g], 5, 7) for g in ids}  # 5 of each graph's configs
    assert len(set(alone.values())) > 1  # the rows matter: graphs score differently
    for order in (ids, ids[::-1], ids[1:] + ids[:1]):
        got = quick_validation(ranker, cache, order, 5, 7)
        assert got == pytest.approx(float(np.mean([alone[g] for g in order])), abs=1e-12)


def test_validation_rows_are_seeded_by_the_graph():
    a = validation_rows("layout:xla:random:a", 100, 10, 7)
    assert a.dtype == np.int64 and len(a) == 10 and np.all(np.diff(a) > 0)
    np.testing.assert_array_equal(a, validation_rows("layout:xla:random:a", 100, 10, 7))
    assert not np.array_equal(a, validation_rows("layout:xla:random:b", 100, 10, 7))
    assert not np.array_equal(a, validation_rows("layout:xla:random:a", 100, 10, 8))
    np.testing.assert_array_equal(validation_rows("x", 4, 10, 7), np.arange(4))
