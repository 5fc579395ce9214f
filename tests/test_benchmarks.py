"""The benchmark harnesses run end to end on a tiny corpus, so they cannot rot between measurements.

Their figures on a tiny corpus mean nothing; what is checked is that every step runs (including a real
Dask cluster), that the cross-checks hold (naive content identical, every build byte-identical), and
that every target of the issues is evaluated. The figures themselves live in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from realdata import REAL

REPO = Path(__file__).resolve().parent.parent


def run_module(module: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.pop("DASK_SCHEDULER_ADDRESS", None)
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)


def test_build_benchmark_runs_every_step_and_checks_every_target(synth_root, tmp_path):
    out = tmp_path / "r.json"
    proc = run_module("benchmarks", "--corpus", str(synth_root / "npz"), "--work", str(tmp_path / "w"),
                      "--json", str(out), "--repeat", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    for step in ("floor_zlib", "floor_isal", "naive", "build1", "build2", "dask1", "dask2"):
        assert res[step]["wall_s"] > 0 and res[step]["peak_rss_mb"] > 0, step
    assert res["naive_identical"] and res["build2_identical"]
    assert res["dask1_identical"] and res["dask2_identical"]
    assert res["dask2"]["peak_worker_rss_mb"] > 50  # read from the worker processes themselves
    names = set(res["targets"])
    for expected in ("build1 / inflate floor (isal)", "speed-up 2 workers / 1 worker", "speed-up over naive NumPy",
                     "peak worker RSS build1 (MB)", "shard / npz bytes layout:xla:random",
                     "sampled read speed-up over npz", "Dask overhead, 2 worker(s)"):
        assert expected in names, expected
    assert "build1 / inflate floor (isal)" in names and not any("zlib" in n for n in names)
    assert list(res["information"]) == ["build1 / inflate floor (stdlib zlib, what any npz reader pays)"]
    assert res["read"]["graphs"] > 0
    assert res["projection"]["this_machine_build1_min"] > 0
    assert res["projection"]["cluster_16_workers_min"] > 0


def test_training_benchmark_runs_on_tiny_and_on_the_real_alexnet(tmp_path):
    out = tmp_path / "t.json"
    args = ["--work", str(tmp_path / "w"), "--profile", "tiny", "--seconds", "1", "--json", str(out)]
    alexnet = REAL / "reconstructed" / "alexnet_train_batch_32.npz"  # the real file, when ../shared is there
    if alexnet.is_file():
        args += ["--alexnet", str(alexnet)]
    proc = run_module("benchmarks.training", *args)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: a check missed after 1 s of training
    res = json.loads(out.read_text())
    assert set(res["collections"]) == {"layout:nlp:default", "layout:nlp:random", "layout:xla:default",
                                       "layout:xla:random", "tile:xla"}
    for coll, row in res["collections"].items():
        assert row["steps"] > 0 and row["configs_per_s"] > 0
        assert ("tau_oracle" in row) == ("tau_modal_work" in row) == coll.startswith("layout")
        assert -1 <= row["tau"] <= 1
        assert row["checks"] and all(isinstance(v, bool) for v in row["checks"].values())
    assert ("acceptance: all checks pass" in proc.stdout) == (proc.returncode == 0)
    # one collection with a TrainConfig override
    proc = run_module("benchmarks.training", "--work", str(tmp_path / "w"), "--profile", "tiny", "--seconds", "1",
                      "--collections", "tile:xla", "--set", "loss=ranknet", "--set", "lr=1e-3",
                      "--set", "batch_configs=16", "--json",
                      str(tmp_path / "one.json"))
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    one = json.loads((tmp_path / "one.json").read_text())
    assert list(one["collections"]) == ["tile:xla"]
    assert one["settings"] == {"loss": "ranknet", "lr": 1e-3, "batch_configs": 16}
    if alexnet.is_file():
        a = res["alexnet"]
        assert a["scored_configs"] >= a["scored_unique_configs"] and -1 <= a["tau"] <= 1
        # 20 % of the 29,905 unique configs held out, with all their duplicates
        assert a["scored_unique_configs"] == round(0.2 * 29_905)
        assert a["configs"] == a["steps"] * 64  # training configs: 64 per step on this big graph
