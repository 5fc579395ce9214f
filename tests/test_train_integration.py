"""The trainer against the project's real reader: synth tiny → build → train / evaluate / predict CLI."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tpuprep.cli.train import evaluate_cmd, predict_cmd, train_cmd


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from tpuprep.cli import main

    root = tmp_path_factory.mktemp("integration")
    runner = CliRunner()
    r = runner.invoke(main, ["synth", "--dst", str(root / "synth"), "--profile", "tiny", "--seed", "3"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["build", "--src", str(root / "synth" / "npz"), "--dst", str(root / "shards"),
                             "-q"])
    assert r.exit_code == 0, r.output
    return root


def test_cli_on_real_shards(built):
    import tpuprep

    shards, root = str(built / "shards"), built
    ds = tpuprep.open_dataset(shards)
    runner = CliRunner()
    models = []
    assert {"layout:xla:random", "tile:xla"} <= set(ds.collections)
    for coll in ds.collections:  # a submission needs a model for every collection of the shards
        out = str(root / coll.replace(":", "_"))
        r = runner.invoke(train_cmd, ["--shards", shards, "--collection", coll, "--out", out,
                                      "--epochs", "2", "--hidden", "8", "-q"])
        assert r.exit_code == 0, r.output
        models += ["--model", out]
    r = runner.invoke(evaluate_cmd, ["--shards", shards, *models, "--split", "valid", "--truth",
                                     str(root / "synth" / "truth"), "--out", str(root / "eval"), "-q"])
    assert r.exit_code == 0, r.output
    assert "tau_oracle" in r.output and (root / "eval" / "per_graph.csv").is_file()
    r = runner.invoke(predict_cmd, ["--shards", shards, "--split", "test", "--out",
                                    str(root / "submission.csv"), *models, "--check"])
    assert r.exit_code == 0, r.output
    assert "submission is valid" in r.output
    r = runner.invoke(predict_cmd, ["--shards", shards, "--split", "test", "--out",
                                    str(root / "partial.csv"), *models[:2], "--check"])
    assert r.exit_code == 1 and "no rows for 4 collection(s)" in r.output, r.output
