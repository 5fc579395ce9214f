"""Submission format, evaluation outputs (incl. truth side files) and the click commands."""

from __future__ import annotations

import csv
import json
import math
import struct

import numpy as np
import pytest
from click.testing import CliRunner
from train_fakes import LAYOUT, TILE, dataset_fixture, untrained_ranker

import tpuprep
from tpuprep.cli.train import evaluate_cmd, predict_cmd, train_cmd
from tpuprep.train import (
    TrainConfig,
    evaluate,
    format_table,
    read_submission,
    tile_top_configs,
    train,
    validate_submission,
    write_outputs,
    write_submission,
)
from tpuprep.train.evaluate import truth_path
from tpuprep.train.metrics import expand_to_original

ds = dataset_fixture(seed=5, n_train=3, n_valid=2, n_test=3, n_unique=40, n_nodes=20)


@pytest.fixture(scope="module")
def rankers(ds):
    return [untrained_ranker(ds, LAYOUT), untrained_ranker(ds, TILE)]


def test_submission_rows_are_full_permutations_over_original_indices(ds, rankers, tmp_path):
    out = tmp_path / "sub.csv"
    n = write_submission(ds, rankers, out, split="test")
    lines = out.read_text().splitlines()
    assert lines[0] == "ID,TopConfigs"
    rows = list(csv.reader(lines[1:]))
    ids = [r[0] for r in rows]
    assert len(ids) == len(set(ids)) == n
    assert set(ids) == set(ds.graph_ids(LAYOUT, "test")) | set(ds.graph_ids(TILE, "test"))
    for gid, top in rows:
        g = ds.load_graph(gid)
        idx = np.array([int(t) for t in top.split(";")])
        c = len(g.config_inverse)
        if gid.startswith("layout"):
            assert c > len(g.group_size)  # the fake has duplicates: original ≠ unique count
            assert np.array_equal(np.sort(idx), np.arange(c))
            # fastest first: scores of the listed configs never decrease
            pred = rankers[0].predict_original(g)
            assert np.all(np.diff(pred[idx]) >= 0)
        else:
            assert 1 <= len(idx) == min(5, c) and len(set(idx.tolist())) == len(idx)
            assert idx.min() >= 0 and idx.max() < c
    assert validate_submission(out, ds, "test", [LAYOUT, TILE]) == []
    assert read_submission(out).keys() == set(ids)


def test_tile_top_prefers_distinct_configs_and_handles_small_c():
    pred_u = np.array([0.3, 0.1])
    inv = np.array([0, 1, 0, 0, 1, 1])
    first = np.array([0, 1])
    np.testing.assert_array_equal(tile_top_configs(pred_u, inv, first), [1, 0, 4, 5, 2])
    np.testing.assert_array_equal(tile_top_configs(pred_u, inv[:3], first), [1, 0, 2])
    many = np.array([5.0, 4.0, 3.0, 2.0, 1.0, 0.0, 9.0])
    inv2 = np.array([0, 1, 2, 3, 4, 5, 6, 5, 5])
    np.testing.assert_array_equal(tile_top_configs(many, inv2, np.arange(7)), [5, 4, 3, 2, 1])


def test_validate_submission_reports_problems(ds, rankers, tmp_path):
    good = tmp_path / "good.csv"
    write_submission(ds, rankers, good, split="test")
    rows = read_submission(good)
    lay = ds.graph_ids(LAYOUT, "test")[0]
    tile = ds.graph_ids(TILE, "test")[0]

    def write(name, header, data):
        p = tmp_path / name
        with p.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(header)
            for gid, top in data.items():
                w.writerow([gid, ";".join(map(str, top))])
        return p

    bad = dict(rows)
    bad[lay] = bad[lay][:-1]  # not a permutation
    bad[tile] = [*range(min(6, len(ds.load_graph(tile).config_inverse))), 0]
    probs = validate_submission(write("bad.csv", ["ID", "TopConfigs"], bad), ds, "test", [LAYOUT, TILE])
    assert any(lay in p for p in probs) and any(tile in p for p in probs)
    missing = {k: v for k, v in rows.items() if k != lay}
    assert any("missing" in p for p in validate_submission(
        write("missing.csv", ["ID", "TopConfigs"], missing), ds, "test", [LAYOUT, TILE]))
    assert validate_submission(write("hdr.csv", ["id", "top"], rows), ds, "test")
    dup = tmp_path / "dup.csv"
    dup.write_text("ID,TopConfigs\n" + f"{tile},0\n{tile},0\n")
    assert "duplicate" in validate_submission(dup, ds, "test")[0]


def test_two_models_for_one_collection_is_an_error(ds, rankers, tmp_path):
    with pytest.raises(ValueError):
        write_submission(ds, [rankers[0], rankers[0]], tmp_path / "x.csv")


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_evaluate_with_truth_writes_tables_and_plots(ds, rankers, tmp_path):
    ds.write_truth(tmp_path / "synth" / "truth")
    gid = ds.graph_ids(LAYOUT, "valid")[0]
    assert truth_path(tmp_path / "synth" / "truth", gid, LAYOUT, "valid").is_file()
    res = evaluate(ds, rankers, split="valid", truth=tmp_path / "synth", log=None)
    lay = [r for r in res.rows if r["collection"] == LAYOUT]
    assert len(lay) == 2 and all(r["tau_oracle"] > 0.9 for r in lay)
    assert all(-1 <= r["tau"] <= 1 and -1 <= r["tau_violation"] <= 1 for r in lay)
    assert all(r["slowdown_1"] >= r["slowdown_5"] >= r["slowdown_10"] >= 1 for r in lay)
    tile = [r for r in res.rows if r["collection"] == TILE]
    assert all(r["tile_score"] <= 1 and r["tile_score_oracle"] == pytest.approx(1.0) for r in tile)
    table = format_table(res.summary)
    assert LAYOUT in table and "tau_oracle" in table and "tile_score" in table
    written = write_outputs(res, tmp_path / "ev")
    names = {p.name for p in written}
    assert {"per_graph.csv", "summary.json", "summary.txt", "rank_layout_xla_random.png",
            "hist_layout_xla_random.png", "rank_tile_xla.png", "hist_tile_xla.png"} <= names
    for p in written:
        if p.suffix == ".png":
            w, h = png_size(p)
            assert w > 100 and h > 100
    with (tmp_path / "ev" / "per_graph.csv").open() as f:
        per_graph = list(csv.DictReader(f))
    assert len(per_graph) == len(res.rows) and "tau_oracle" in per_graph[0]
    summary = json.loads((tmp_path / "ev" / "summary.json").read_text())
    assert summary[LAYOUT]["graphs"] == 2


def test_evaluate_without_truth_and_on_test_split(ds, rankers):
    res = evaluate(ds, rankers[:1], split="valid", log=None)
    assert all(math.isnan(r.get("tau_oracle", math.nan)) for r in res.rows)
    with pytest.raises(ValueError):
        evaluate(ds, rankers[:1], split="test", log=None)


def test_scores_expand_duplicates_to_equal_predictions(ds, rankers):
    g = ds.load_graph(ds.graph_ids(LAYOUT, "valid")[0])
    pu = rankers[0].predict_unique(g)
    po = rankers[0].predict_original(g)
    np.testing.assert_array_equal(po, expand_to_original(pu, g.config_inverse))
    np.testing.assert_array_equal(po[g.first_index], pu)


def test_cli_train_evaluate_predict(ds, tmp_path, monkeypatch):
    monkeypatch.setattr(tpuprep, "open_dataset", lambda path: ds, raising=False)
    runner = CliRunner()
    shards = tmp_path / "shards"
    shards.mkdir()
    for coll, name in ((LAYOUT, "lay"), (TILE, "tile")):
        r = runner.invoke(train_cmd, ["--shards", str(shards), "--collection", coll, "--out",
                                      str(tmp_path / name), "--epochs", "2", "--hidden", "8",
                                      "--batch-configs", "16", "--seed", "1", "--loss", "ranknet"])
        assert r.exit_code == 0, r.output
        assert (tmp_path / f"{name}.npz").is_file() and (tmp_path / f"{name}.json").is_file()
    meta = json.loads((tmp_path / "lay.json").read_text())
    assert meta["hyper"]["loss"] == "ranknet" and meta["seed"] == 1 and meta["collection"] == LAYOUT
    assert len(meta["feature_stats"]["node_feat_mean"]) == 134
    ds.write_truth(tmp_path / "truth")
    r = runner.invoke(evaluate_cmd, ["--shards", str(shards), "--model", str(tmp_path / "lay"),
                                     "--model", str(tmp_path / "tile.npz"), "--split", "valid",
                                     "--truth", str(tmp_path / "truth"), "--out", str(tmp_path / "ev"),
                                     "-q"])
    assert r.exit_code == 0, r.output
    assert "tau_oracle" in r.output and (tmp_path / "ev" / "per_graph.csv").is_file()
    r = runner.invoke(predict_cmd, ["--shards", str(shards), "--split", "test", "--out",
                                    str(tmp_path / "submission.csv"), "--model", str(tmp_path / "lay"),
                                    "--model", str(tmp_path / "tile"), "--check"])
    assert r.exit_code == 0, r.output
    assert validate_submission(tmp_path / "submission.csv", ds, "test", [LAYOUT, TILE]) == []
    r = runner.invoke(predict_cmd, ["--shards", str(shards), "--out", str(tmp_path / "s2.csv"),
                                    "--model", str(tmp_path / "lay"), "--model", str(tmp_path / "lay")])
    assert r.exit_code != 0 and "more than one model" in r.output
    r = runner.invoke(evaluate_cmd, ["--shards", str(shards), "--model", str(tmp_path / "nope")])
    assert r.exit_code != 0


def test_train_then_predict_valid_split_scores_match_evaluate(ds, tmp_path):
    """The submission's permutation gives the τ that evaluate reports as tau_submission."""
    from tpuprep.train.metrics import kendall_tau

    r = train(ds, LAYOUT, TrainConfig(epochs=2, hidden=8, head_hidden=8, validate=False), log=None)
    write_submission(ds, [r], tmp_path / "valid.csv", split="valid")
    sub = read_submission(tmp_path / "valid.csv")
    res = evaluate(ds, [r], split="valid", baseline=False, log=None)
    for row in res.rows:
        g = ds.load_graph(row["graph_id"])
        order = np.array(sub[row["graph_id"]])
        pos = np.empty(len(order))
        pos[order] = np.arange(len(order))
        assert kendall_tau(pos, g.config_runtime_original) == row["tau_submission"]


def test_evaluate_on_a_sample_of_configs(ds, rankers):
    full = evaluate(ds, rankers[:1], split="valid", baseline=True, log=None)
    part = evaluate(ds, rankers[:1], split="valid", baseline=True, log=None, max_configs=10)
    for f, p in zip(full.rows, part.rows, strict=True):
        assert p.get("sampled") is True and "sampled" not in f
        assert -1 <= p["tau"] <= 1 and -1 <= p["tau_violation"] <= 1
    again = evaluate(ds, rankers[:1], split="valid", log=None, max_configs=10)
    assert [r["tau"] for r in again.rows] == [r["tau"] for r in part.rows]  # seeded sample
    big = evaluate(ds, rankers[:1], split="valid", log=None, max_configs=10_000)
    assert [r["tau"] for r in big.rows] == [r["tau"] for r in full.rows]
