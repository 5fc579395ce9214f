"""``shards/sampled.py``: a sample's rows come by position from the row groups read, so the reader
checks which config each position holds — on the direct page path (``tests/test_pages.py``) and on
the pyarrow fallback here (issue #36: the fallback's check of the config ids was caught by nothing
beside it). A shard whose rows are configs other than those asked for is ``BadShards`` naming the
shard, the row group, the config found and the config asked for; never those rows.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_hostile_read import GRAPH, first_graph, shard_of
from test_verify_stored import edit_graph_configs

import tpuprep
from tpuprep.errors import BadShards
from tpuprep.shards import pages


@pytest.fixture
def swapped(shards):
    """The tiny build with configs 2 and 3 of a train graph trading config_ids (statistics unchanged,
    the count right; rewritten with pyarrow's default encodings, so samples go through pyarrow)."""
    gid = first_graph(shards, GRAPH, "train")

    def swap(rows):
        rows["config_id"][2], rows["config_id"][3] = rows["config_id"][3], rows["config_id"][2]

    edit_graph_configs(shards, gid, swap)
    return shards, gid, shard_of(shards, gid, "configs")[1]


@pytest.mark.parametrize("rows", [[2], [3, 0], [0, 1, 2]])
def test_the_fallback_checks_which_configs_a_row_group_holds_not_how_many(swapped, rows):
    shards, gid, shard = swapped
    ds = tpuprep.open_dataset(shards)
    asked = next(r for r in rows if r in (2, 3))
    with pytest.raises(BadShards, match=rf"^{re.escape(str(shard))}: row group \d+ holds config_id "
                                        rf"{5 - asked} where config {asked} of '{gid}' belongs$"):
        ds.read_configs(gid, rows)  # every column: the pyarrow path


def test_a_sample_through_the_derived_columns_checks_them_too(swapped, monkeypatch):
    """sample_configs reads only config_id and codes; with the direct reader declining, pyarrow reads
    them and the same check refuses the swapped rows."""
    shards, gid, _ = swapped
    monkeypatch.setattr(pages, "sample_codes", lambda *a, **k: None)
    ds = tpuprep.open_dataset(shards)
    c_u = ds.num_unique_configs(gid)
    with pytest.raises(BadShards, match=r"holds config_id [23] where config [23] of"):
        ds.sample_configs(gid, c_u, seed=0)
    ok = ds.read_configs(gid, [0, 1, 4][: min(3, c_u)])
    assert list(ok.rows) == [0, 1, 4][: min(3, c_u)]


def test_an_intact_shard_samples_the_same_on_both_paths(shards, monkeypatch):
    gid = first_graph(shards, GRAPH, "train")
    ds = tpuprep.open_dataset(shards)
    c_u = ds.num_unique_configs(gid)
    rows = np.random.default_rng(0).permutation(c_u)[: min(c_u, 20)]
    direct = ds.read_configs(gid, rows, ds._derived_columns(gid))
    monkeypatch.setattr(pages, "sample_codes", lambda *a, **k: None)
    fallback = tpuprep.open_dataset(shards).read_configs(gid, rows)
    assert np.array_equal(direct.node_config_feat, fallback.node_config_feat)
    for name in ("rows", "config_runtime", "group_size", "first_index", "config_runtime_spread"):
        assert np.array_equal(getattr(direct, name), getattr(fallback, name)), name
