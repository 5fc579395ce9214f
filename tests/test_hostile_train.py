"""Hostile inputs to the trainer's commands (issue #11 items 12, 13; #12): damaged or diverged models,
models for collections the shards lack, non-finite scores and incomplete submissions are refused with
ONE line (exit 1; exit 2 for a command line that cannot work), never a traceback or a "valid" that
hides missing data. Model files follow the umask like every other output."""

from __future__ import annotations

import csv
import json
import os
import stat
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from train_fakes import LAYOUT, TILE, dataset_fixture, make_fake_dataset, untrained_ranker

import tpuprep
from tpuprep.cli.train import evaluate_cmd, predict_cmd, train_cmd
from tpuprep.errors import FatalError
from tpuprep.train import (
    Ranker,
    TrainConfig,
    evaluate,
    train,
    validate_submission,
    write_submission,
)
from tpuprep.train.model import ModelConfig
from tpuprep.train.predict import KAGGLE_TEST_ROWS, SubmissionError
from tpuprep.train.ranker import BadModel, BadScores
from tpuprep.train.trainer import TrainingDiverged

ds = dataset_fixture(seed=7, n_train=2, n_valid=2, n_test=2, n_unique=30, n_nodes=16)


@pytest.fixture(scope="module")
def models(ds, tmp_path_factory):
    """Saved layout and tile models (untrained: the refusals do not depend on training)."""
    root = tmp_path_factory.mktemp("models")
    untrained_ranker(ds, LAYOUT).save(root / "lay")
    untrained_ranker(ds, TILE).save(root / "tile")
    return root


@pytest.fixture
def cli(ds, tmp_path, monkeypatch):
    """Run a trainer command against ``ds``; returns the click result (stderr kept apart)."""
    monkeypatch.setattr(tpuprep, "open_dataset", lambda path: ds, raising=False)
    shards = tmp_path / "shards"
    shards.mkdir()

    def run(cmd, *args):
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no NumPy warnings around the one line
            return CliRunner().invoke(cmd, [a.replace("SHARDS", str(shards)) for a in args])

    return run


def one_line_refusal(result, code: int = 1, *words: str) -> str:
    """The command failed with ``code`` and said why in exactly one stderr line holding ``words``."""
    assert result.exit_code == code, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.lower().startswith("error")]
    assert len(errors) == 1, lines
    for w in words:
        assert w in errors[0], (w, errors[0])
    return errors[0]


def copy_model(src, dst, *, weights=None, meta=None):
    """Copy saved model ``src`` to ``dst`` with its weights / JSON replaced through callbacks."""
    with np.load(f"{src}.npz") as npz:
        z = dict(npz)
    m = json.loads(Path(f"{src}.json").read_text())
    if weights:
        weights(z)
    if meta:
        meta(m)
    np.savez(f"{dst}.npz", **z)
    with open(f"{dst}.json", "w") as f:
        json.dump(m, f)
    return dst


# ---------------------------------------------------------------------------- (12) predictions


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_weights_are_refused_at_load(models, tmp_path, bad, cli):
    def poison(z):
        z["w_p"] = z["w_p"].copy()
        z["w_p"][1, 2] = bad

    m = copy_model(models / "lay", tmp_path / "nan", weights=poison)
    with pytest.raises(BadModel, match=r"nan\.npz \[w_p\]: 1 of 64 weights are not finite"):
        Ranker.load(m)
    out = tmp_path / "sub.csv"
    r = cli(predict_cmd, "--shards", "SHARDS", "--model", str(m), "--out", str(out), "--check")
    one_line_refusal(r, 1, "nan.npz", "w_p", "not finite")
    assert not out.exists()


def test_non_finite_feature_stats_are_refused(models, tmp_path):
    def poison(m):
        m["feature_stats"]["node_feat_std"][3] = float("nan")

    with pytest.raises(BadModel, match=r"feature_stats.node_feat_std\]: 1 non-finite"):
        Ranker.load(copy_model(models / "lay", tmp_path / "m", meta=poison))


def test_non_finite_scores_are_refused_at_predict_time(ds, models, tmp_path, cli):
    """Finite but huge weights overflow float32: every score is inf/NaN. No order, no file, exit 1."""
    def huge(z):
        for k in z:
            z[k] = np.full_like(z[k], 3e37)

    m = copy_model(models / "lay", tmp_path / "huge", weights=huge)
    ranker = Ranker.load(m)  # finite weights load
    with np.errstate(all="ignore"):
        assert not np.isfinite(ranker.predict_unique(ds.load_graph(ds.graph_ids(LAYOUT, "test")[0]))).all()
    with pytest.raises(BadScores, match=r"huge gave \d+ non-finite scores"):
        write_submission(ds, [ranker], tmp_path / "direct.csv")
    with pytest.raises(BadScores):
        evaluate(ds, [ranker], split="valid", log=None)
    assert not list(tmp_path.glob("*direct.csv*"))  # neither the CSV nor its temporary file
    out = tmp_path / "sub.csv"
    out.write_text("precious\n")
    r = cli(predict_cmd, "--shards", "SHARDS", "--model", str(m), "--out", str(out))
    one_line_refusal(r, 1, "non-finite scores", ds.graph_ids(LAYOUT, "test")[0])
    assert out.read_text() == "precious\n"  # an earlier submission survives a refused one


def test_model_for_a_collection_the_shards_lack_is_refused(models, tmp_path, monkeypatch):
    only_layout = make_fake_dataset(seed=3, n_train=2, n_valid=1, n_test=1, tile=False, n_unique=20)
    tile = Ranker.load(models / "tile")
    with pytest.raises(SubmissionError, match="tile:xla, which the dataset does not hold"):
        write_submission(only_layout, [tile], tmp_path / "x.csv")
    with pytest.raises(SubmissionError):
        evaluate(only_layout, [tile], split="valid", log=None)
    monkeypatch.setattr(tpuprep, "open_dataset", lambda path: only_layout, raising=False)
    runner = CliRunner()
    for cmd, extra in ((predict_cmd, ["--out", str(tmp_path / "s.csv"), "--check"]),
                       (evaluate_cmd, [])):
        r = runner.invoke(cmd, ["--shards", str(tmp_path), "--model", str(models / "tile"), *extra])
        one_line_refusal(r, 1, "tile:xla", "does not hold")
    assert not (tmp_path / "s.csv").exists()


def test_model_for_a_collection_without_graphs_of_the_split_is_refused(models, tmp_path):
    no_test = make_fake_dataset(seed=4, n_train=2, n_valid=1, n_test=0, n_unique=20)
    with pytest.raises(SubmissionError, match="has no test graphs"):
        write_submission(no_test, [Ranker.load(models / "lay")], tmp_path / "x.csv")


def test_check_requires_every_test_graph_of_the_shards(ds, models, tmp_path, cli):
    """One model for two collections: the CSV is complete for its collection but not a submission."""
    out = tmp_path / "sub.csv"
    r = cli(predict_cmd, "--shards", "SHARDS", "--model", str(models / "lay"), "--out", str(out),
            "--check")
    one_line_refusal(r, 1, "not a valid submission", "no rows for 1 collection(s)", TILE)
    problems = validate_submission(out, ds)
    assert problems == [f"no rows for 1 collection(s) of the dataset: {TILE} "
                        f"({len(ds.graph_ids(TILE, 'test'))} test graphs)"]
    assert validate_submission(out, ds, collections=[LAYOUT]) == []  # an explicit partial check
    r = cli(predict_cmd, "--shards", "SHARDS", "--model", str(models / "lay"), "--model",
            str(models / "tile"), "--out", str(out), "--check")
    assert r.exit_code == 0, r.output
    assert "submission is valid" in r.stderr and "not the full TpuGraphs test set" in r.stderr
    r = cli(predict_cmd, "--shards", "SHARDS", "--out", str(out), "--check-only", "--kaggle")
    one_line_refusal(r, 1, "Kaggle test set has")
    # a missing graph of a covered collection, and a stray ID
    rows = list(csv.reader(out.read_text().splitlines()))
    gone = rows.pop(1)[0]
    rows.append(["tile:xla:not_a_graph", "0"])
    out.write_text("\n".join(",".join(r) for r in rows) + "\n")
    problems = validate_submission(out, ds)
    assert any(gone in p and "missing rows for 1 of" in p for p in problems)
    assert any("tile:xla:not_a_graph" in p for p in problems)


def _kaggle_csv(path, drop=()):
    with path.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["ID", "TopConfigs"])
        for coll, n in KAGGLE_TEST_ROWS.items():
            if coll in drop:
                continue
            for i in range(n):
                top = range(5) if coll == TILE else range(1000)
                w.writerow([f"{coll}:{i:032x}", ";".join(map(str, top))])
    return path


def test_standalone_check_requires_the_kaggle_test_set(tmp_path):
    good = _kaggle_csv(tmp_path / "good.csv")
    assert validate_submission(good) == []
    partial = _kaggle_csv(tmp_path / "partial.csv", drop=[c for c in KAGGLE_TEST_ROWS if c != TILE])
    problems = validate_submission(partial)
    assert "layout:xla:random: 0 rows, the Kaggle test set has 8" in problems
    assert "844 rows, the Kaggle test set has 894" in problems
    runner = CliRunner()
    r = runner.invoke(predict_cmd, ["--check-only", "--out", str(good)])
    assert r.exit_code == 0 and "894 rows" in r.stderr, r.output
    line = one_line_refusal(runner.invoke(predict_cmd, ["--check-only", "--out", str(partial)]), 1,
                            "partial.csv is not a valid submission")
    assert line.endswith(f"(+{len(problems) - 3} more)") and len(problems) > 3, (line, problems)
    one_line_refusal(runner.invoke(predict_cmd, ["--check-only", "--out", str(tmp_path / "no.csv")]),
                     1, "no.csv")


def test_usage_errors_exit_2(models, tmp_path):
    runner = CliRunner()
    r = runner.invoke(predict_cmd, ["--shards", str(tmp_path), "--out", str(tmp_path / "s.csv")])
    assert r.exit_code == 2 and "at least one --model" in r.output
    r = runner.invoke(predict_cmd, ["--out", str(tmp_path / "s.csv"), "--model", str(models / "lay")])
    assert r.exit_code == 2 and "predicting needs --shards" in r.output
    assert not (tmp_path / "s.csv").exists()
    r = runner.invoke(predict_cmd, ["--check-only", "--out", str(tmp_path / "s.csv"), "--model",
                                    str(models / "lay")])
    assert r.exit_code == 2 and "takes no --model" in r.output


# ---------------------------------------------------------------------------- (13) damaged models


def _truncate(path, keep):
    data = path.read_bytes()
    path.write_bytes(data[:keep] if keep >= 0 else data[:len(data) + keep])


DAMAGE = {
    # name: (how to damage a copy at stem `m`, file the message names, words of the message)
    "npz truncated": (lambda m: _truncate(m.with_suffix(".npz"), 300), ".npz", "truncated or damaged"),
    "npz tail cut": (lambda m: _truncate(m.with_suffix(".npz"), -40), ".npz", "truncated or damaged"),
    "npz empty": (lambda m: m.with_suffix(".npz").write_bytes(b""), ".npz", "truncated or damaged"),
    "npz missing": (lambda m: m.with_suffix(".npz").unlink(), ".npz", "no such file"),
    "json truncated": (lambda m: _truncate(m.with_suffix(".json"), 200), ".json", "not valid JSON"),
    "json empty": (lambda m: m.with_suffix(".json").write_text(""), ".json", "not valid JSON"),
    "json missing": (lambda m: m.with_suffix(".json").unlink(), ".json", "no such file"),
    "json a list": (lambda m: m.with_suffix(".json").write_text("[1]"), ".json", "expected a JSON object"),
    "json binary": (lambda m: m.with_suffix(".json").write_bytes(b"\xff\xfe\x00"), ".json", "not UTF-8"),
}
META = {
    "unknown top-level key": (lambda m: m.update(dropout=0.5), "[dropout]: unknown key"),
    "unknown model key": (lambda m: m["model"].update(heads=4), "[model.heads]: unknown architecture"),
    "missing key": (lambda m: m.pop("params"), "[params]: required key is missing"),
    "bad model value": (lambda m: m["model"].update(hidden=0), "[model]: hidden"),
    "wrong kind": (lambda m: m.update(collection=TILE), "[collection]: tile:xla is a tile collection"),
    "bad collection": (lambda m: m.update(collection="graph:x"), "[collection]: unknown collection"),
    "listed shapes": (lambda m: m["params"].update(w_p=[3, 3]), "[params]: the listed weights"),
    "short stats": (lambda m: m["feature_stats"].update(node_feat_mean=[0.0]), "node_feat_mean]: (1,)"),
    "version string": (lambda m: m.update(format_version="2"), "[format_version]: '2' is not"),
}
WEIGHTS = {
    "wrong shape": (lambda z: z.update(w_p=np.zeros((3, 3), np.float32)), "[w_p]: float32 (3, 3)"),
    "integer weights": (lambda z: z.update(b_o=np.zeros(1, np.int64)), "[b_o]: int64 (1,)"),
    "extra weights": (lambda z: z.update(w_extra=np.zeros(2, np.float32)), "unknown weights ['w_extra']"),
    "missing weights": (lambda z: z.pop("w_o"), "weights ['w_o'] are missing"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_damaged_model_files_are_one_line_errors(models, tmp_path, case, cli):
    damage, suffix, words = DAMAGE[case]
    m = copy_model(models / "lay", tmp_path / "m")
    damage(m)
    with pytest.raises(BadModel) as info:
        Ranker.load(m)
    msg = str(info.value)
    assert msg.startswith(str(m.with_suffix(suffix))) and words in msg and "\n" not in msg
    assert isinstance(info.value, FatalError)
    for cmd, extra in ((predict_cmd, ["--out", str(tmp_path / "s.csv")]), (evaluate_cmd, [])):
        r = cli(cmd, "--shards", "SHARDS", "--model", str(m), *extra)
        one_line_refusal(r, 1, str(m.with_suffix(suffix)), words)


@pytest.mark.parametrize("case", sorted(META))
def test_malformed_model_json_is_one_line_error(models, tmp_path, case):
    change, words = META[case]
    m = copy_model(models / "lay", tmp_path / "m", meta=change)
    with pytest.raises(BadModel, match=None) as info:
        Ranker.load(m)
    assert str(info.value).startswith(f"{m}.json") and words in str(info.value), str(info.value)


@pytest.mark.parametrize("case", sorted(WEIGHTS))
def test_weights_that_do_not_fit_the_architecture_are_refused(models, tmp_path, case):
    change, words = WEIGHTS[case]
    m = copy_model(models / "lay", tmp_path / "m", weights=change)
    with pytest.raises(BadModel) as info:
        Ranker.load(m)
    assert str(info.value).startswith(f"{m}.npz") and words in str(info.value), str(info.value)


def test_a_damaged_member_inside_the_npz_is_refused(models, tmp_path):
    """A flipped byte inside a compressed weight array: the zip opens, the CRC check fails."""
    m = tmp_path / "m"
    ranker = Ranker.load(models / "lay")
    with zipfile.ZipFile(f"{m}.npz", "w", zipfile.ZIP_DEFLATED) as zf:
        for k, v in ranker.params.items():
            with zf.open(f"{k}.npy", "w") as f:
                np.lib.format.write_array(f, v)
    (tmp_path / "m.json").write_text((models / "lay.json").read_text())
    data = bytearray((tmp_path / "m.npz").read_bytes())
    data[len(data) // 3] ^= 0xFF
    (tmp_path / "m.npz").write_bytes(bytes(data))
    with pytest.raises(BadModel, match=r"m\.npz"):
        Ranker.load(m)


def test_training_that_diverges_is_refused_and_saves_nothing(ds, tmp_path, cli):
    with pytest.raises(TrainingDiverged, match="diverged in epoch 1"):
        train(ds, LAYOUT, TrainConfig(epochs=2, hidden=8, head_hidden=8, lr=1e30, validate=False),
              out=tmp_path / "m", log=None)
    assert not list(tmp_path.glob("m*"))
    r = cli(train_cmd, "--shards", "SHARDS", "--collection", LAYOUT, "--out", str(tmp_path / "c"),
            "--epochs", "1", "--hidden", "8", "--lr", "1e30", "-q", "--no-validate")
    one_line_refusal(r, 1, "diverged", "--lr")
    assert not list(tmp_path.glob("c*"))


@pytest.mark.parametrize("bad", ["nan", "inf", "-1"])
def test_a_prior_that_is_not_a_finite_number_at_least_0_is_refused(ds, tmp_path, cli, bad):
    r = cli(train_cmd, "--shards", "SHARDS", "--collection", LAYOUT, "--out", str(tmp_path / "p"),
            "--epochs", "1", "--prior", bad, "-q")
    assert r.exit_code == 2 and "--prior" in r.stderr, r.stderr
    assert not list(tmp_path.glob("p*"))
    with pytest.raises(ValueError, match="prior"):
        TrainConfig(prior=float(bad))
    trained = train(ds, LAYOUT, TrainConfig(epochs=1, hidden=8, head_hidden=8, prior=0.0, validate=False),
                    out=tmp_path / "p0", log=None)
    assert "w_prior" not in trained.params and Ranker.load(tmp_path / "p0").config.prior == 0.0

@pytest.mark.parametrize(("option", "bad"), [("--lr", "nan"), ("--time-budget", "inf"), ("--prior", "nan")])
def test_every_float_option_of_train_refuses_nan_and_infinity(tmp_path, cli, option, bad):
    r = cli(train_cmd, "--shards", "SHARDS", "--collection", LAYOUT, "--out", str(tmp_path / "f"),
            "--epochs", "1", option, bad, "-q")
    assert r.exit_code == 2 and option in r.stderr and "not a finite number" in r.stderr, r.stderr
    assert not list(tmp_path.glob("f*"))

# ---------------------------------------------------------------------------- (#12) file modes


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_model_files_follow_the_umask(ds, tmp_path, mask, mode):
    ranker = Ranker.create(TILE, ds.stats(TILE), ModelConfig("tile", 4, 4, 1), 0)
    old = os.umask(mask)
    try:
        npz, js = ranker.save(tmp_path / "m")
    finally:
        os.umask(old)
    assert stat.S_IMODE(npz.stat().st_mode) == mode
    assert stat.S_IMODE(js.stat().st_mode) == mode
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


def test_kaggle_implies_the_check(ds, models, tmp_path, cli):
    """``--kaggle`` without ``--check`` still checks: these shards are not the Kaggle test set."""
    r = cli(predict_cmd, "--shards", "SHARDS", "--model", str(models / "lay"), "--model", str(models / "tile"),
            "--out", str(tmp_path / "sub.csv"), "--kaggle")
    one_line_refusal(r, 1, "not a valid submission", "the Kaggle test set has")


def test_a_trainer_refusal_is_one_line_not_a_traceback(cli, tmp_path):
    r = cli(train_cmd, "--shards", "SHARDS", "--collection", "layout:nlp:nowhere", "--out", str(tmp_path / "m"))
    one_line_refusal(r, 1, "collection 'layout:nlp:nowhere' not in the dataset")
