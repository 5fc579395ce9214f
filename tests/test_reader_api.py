"""The reader API's promises to its users (issue #12): read-only records, a safe normaliser, lazy scans."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import tpuprep
from tpuprep.train.features import clean_stats

LAYOUT = "layout:xla:random"


@pytest.fixture(scope="module")
def ds(synth_shards):
    return tpuprep.open_dataset(synth_shards)


def _arrays(record: tpuprep.GraphRecord) -> dict[str, np.ndarray]:
    """Every array field (``config_codes`` too, which a layout record builds on first use)."""
    values = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    return {k: v for k, v in values.items() if isinstance(v, np.ndarray)}


def test_every_array_of_a_graph_record_is_read_only(ds):
    seen: set[str] = set()
    for collection in ds.collections:
        for split in ds.splits(collection):
            g = ds.load_graph(ds.graph_ids(collection, split)[0])
            arrays = _arrays(g)
            writable = sorted(k for k, v in arrays.items() if v.flags.writeable)
            assert not writable, f"{collection} {split}: writable {writable}"
            seen |= set(arrays)
    # layout and tile fields were all looked at, config_codes among them
    assert {"node_feat", "config_codes", "config_feat", "config_runtime_normalizers_original"} <= seen
    g = ds.load_graph(ds.graph_ids(LAYOUT, "train")[0])
    with pytest.raises(ValueError, match="read-only"):
        g.config_codes[0, 0, 0] = 1
    codes = g.config_codes.copy()  # the documented way to a writable array
    codes[0, 0, 0] = 1
    assert codes.flags.writeable


def test_stats_offer_a_safe_std_and_the_constant_columns(ds):
    s = ds.stats(LAYOUT)
    std, safe = s["node_feat_std"], s["node_feat_std_safe"]
    constant = np.flatnonzero(std == 0)
    assert constant.size > 0  # the tiny profile has constant columns, as the real data does
    np.testing.assert_array_equal(s["constant_columns"], constant)
    np.testing.assert_array_equal(safe[constant], 1.0)
    keep = np.setdiff1d(np.arange(134), constant)
    np.testing.assert_array_equal(safe[keep], std[keep])
    mean, std_safe = ds.normalizer(LAYOUT)
    np.testing.assert_array_equal(mean, s["node_feat_mean"])
    np.testing.assert_array_equal(std_safe, safe)
    x = (ds.load_graph(ds.graph_ids(LAYOUT, "train")[0]).node_feat[:, :134] - mean) / std_safe
    assert np.isfinite(x).all()


def test_trainer_normalises_with_the_datasets_rule(ds):
    s = ds.stats(LAYOUT)
    mean, std = clean_stats(s["node_feat_mean"], s["node_feat_std"])
    want_mean, want_std = ds.normalizer(LAYOUT)
    np.testing.assert_array_equal(mean, want_mean)
    np.testing.assert_array_equal(std, want_std)
    bad = np.full(134, np.nan)
    m, sd = tpuprep.safe_normalizer(bad, -np.ones(134))
    assert (m == 0).all() and (sd == 1).all()
    assert np.isnan(bad).all()  # inputs are not modified


def test_scan_configs_filters_and_selects_like_load_graph(ds):
    import polars as pl

    gid = ds.graph_ids(LAYOUT, "train")[1]
    g = ds.load_graph(gid)
    lf = ds.scan("configs", LAYOUT, split="train")
    assert isinstance(lf, pl.LazyFrame)
    got = (lf.filter(pl.col("graph_id") == gid).select("config_id", "runtime", "group_size")
           .sort("config_id").collect())
    assert got.columns == ["config_id", "runtime", "group_size"]
    np.testing.assert_array_equal(got["runtime"].to_numpy(), g.config_runtime)
    np.testing.assert_array_equal(got["group_size"].to_numpy(), g.group_size)
    every = ds.scan("configs", LAYOUT).group_by("split").agg(pl.len()).collect()
    want = {s: sum(ds.load_graph(i).num_unique_configs for i in ds.graph_ids(LAYOUT, s))
            for s in ds.splits(LAYOUT)}
    assert dict(zip(every["split"], every["len"], strict=True)) == want
    graphs = ds.scan("graphs", "tile:xla", "valid").select("graph_id").collect()
    assert sorted(graphs["graph_id"]) == ds.graph_ids("tile:xla", "valid")


def test_scan_is_lazy_with_predicate_and_projection_pushdown(ds):
    import polars as pl

    plan = (ds.scan("graphs", LAYOUT, "train").filter(pl.col("graph_id") == "x")
            .select("graph_id", "num_nodes").explain())
    width = len(ds.scan("graphs", LAYOUT, "train").collect_schema())
    assert f"PROJECT 2/{width} COLUMNS" in plan  # node_feat & co. are never read
    assert 'SELECTION: (col("graph_id")) == ("x")' in plan or 'SELECTION: col("graph_id") == "x"' in plan


def test_scan_refuses_unknown_names(ds):
    with pytest.raises(ValueError, match="'graphs' or 'configs'"):
        ds.scan("nodes", LAYOUT)
    with pytest.raises(KeyError, match="no collection"):
        ds.scan("graphs", "layout:xla:rand")
    with pytest.raises(KeyError, match="no 'training' split"):
        ds.scan("graphs", LAYOUT, "training")
