"""The benchmark harnesses run end to end on a tiny corpus, so they cannot rot between measurements.

Their figures on a tiny corpus mean nothing; what is checked is that every step runs (including a real
Dask cluster), that the cross-checks hold (naive content identical, every build byte-identical), and
that every target of the issues is evaluated. The figures themselves live in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import json
import math
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
    # through the CLI in a measured process: wall time against the budget, start-up and peak RSS
    proc = run_module("benchmarks.training", "--work", str(tmp_path / "w"), "--profile", "tiny", "--seconds", "2",
                      "--collections", "layout:xla:random", "--cli", "--set", "hidden=8", "--json",
                      str(tmp_path / "cli.json"))
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    row = json.loads((tmp_path / "cli.json").read_text())["collections"]["layout:xla:random"]
    assert row["peak_rss_mb"] > 50 and row["wall_s"] > 0 and row["startup_s"] > 0
    assert abs(row["wall_over_budget"] - row["wall_s"] / 2) < 0.05
    assert row["checks"]["wall <= budget x 1.1 + start-up"] is row["budget_kept"]
    if alexnet.is_file():
        a = res["alexnet"]
        assert a["scored_configs"] >= a["scored_unique_configs"] and -1 <= a["tau"] <= 1
        # 20 % of the 29,905 unique configs held out, with all their duplicates
        assert a["scored_unique_configs"] == round(0.2 * 29_905)
        assert a["configs"] == a["steps"] * 64  # training configs: 64 per step on this big graph


def test_scale_rehearsal_runs_every_step_on_a_fraction_of_tiny(tmp_path):
    """The full-scale rehearsal harness end to end on half of ``tiny``, with a real 2-worker Dask
    cluster (resuming the corpus is tested in test_synth)."""
    out = tmp_path / "s.json"
    work = tmp_path / "w"
    proc = run_module("benchmarks.scale", "--work", str(work), "--profile", "tiny", "--fraction", "0.5",
                      "--train-budget", "1", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["generate"]["files_written"] == res["corpus"]["files"] == 16  # ceil(count / 2) per split
    for step in ("generate", "floor", "build", "dask", "verify", "open", "train"):
        assert res[step]["wall_s"] > 0 and res[step]["peak_rss_mb"] > 0 and res[step]["processes"], step
    workers = [p for p in res["build"]["processes"] if p["role"] == "worker"]
    assert len(workers) == 2 and all(p["peak_rss_mb"] > 50 for p in workers)
    assert res["build"]["files_per_s"] > 0 and res["build"]["cpu_s"] > 0
    again = run_module("benchmarks.scale", "--work", str(work), "--profile", "tiny", "--fraction", "0.5",
                       "--skip", "generate,floor,dask,verify,open,train", "--json", str(tmp_path / "again.json"))
    assert again.returncode == 0, again.stderr[-3000:]
    again_res = json.loads((tmp_path / "again.json").read_text())  # the corpus used as found: nothing generated, build re-run
    assert "generate" not in again_res and again_res["corpus"]["files"] == 16
    assert again_res["build"]["wall_s"] > 0
    assert res["dask"]["identical_to_build"] and res["dask"]["peak_worker_rss_mb"] > 50
    assert res["dask"]["cpu_s"] > res["dask"]["client_cpu_s"]  # the workers' CPU time is counted
    assert not (work / "shards-dask").exists()
    assert len(res["open"]["graphs"]) >= 5 and res["open"]["open_s"] > 0
    coll = res["corpus"]["collections"]
    assert set(coll) == {"tile:xla", "layout:xla:default", "layout:xla:random", "layout:nlp:default",
                         "layout:nlp:random"}
    assert all(r["npz_bytes"] > 0 and r["shard_bytes"] > 0 and r["inflated_bytes"] > r["npz_bytes"]
               for r in coll.values())
    plan = res["corpus"]["plan"]  # the plan's node_config_feat bytes are exactly the corpus's
    assert plan["config_feat_bytes"] == sum(r["config_feat_bytes"] for r in coll.values())
    assert plan["byte_factor"] > 1
    assert res["corpus"]["disk_bytes"] > res["corpus"]["npz_disk_bytes"] > 0
    whole = res["whole_dataset"]
    assert whole["count_factor"] == 2.0
    assert whole["build"]["whole_profile_min"] == round(res["build"]["wall_s"] * 2 / 60, 2)
    assert {"build: peak worker RSS (MB)", "dask: whole profile (min, x 1/fraction)",
            "build: real-size dataset (min, by bytes)", "open: peak RSS (MB)"} <= set(res["goals"])
    assert res["goals"]["open: peak RSS (MB)"]["value"] == res["open"]["peak_rss_mb"] > 0
    assert all(g["kept_bytes"] > 0 and g["kept_mb"] == round(g["kept_bytes"] / 2**20, 1)
               for g in res["open"]["graphs"])  # tiny graphs: 0.0 MB when rounded
    real = res["goals"]["build: real-size dataset (min, by bytes)"]
    assert real["value"] == whole["build"]["real_size_min_by_bytes"] > 0
    assert (work / "model.npz").is_file()


def test_sampling_benchmark_runs_and_both_paths_agree(synth_shards, tmp_path):
    """benchmarks.sampling: one epoch through ConfigBatches, through load_graph and through the schema-1
    path (configs rewritten as before issue #14), the same configs and runtimes (``identical``)."""
    out = tmp_path / "s.json"
    proc = run_module("benchmarks.sampling", str(synth_shards), "--repeat", "1", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["identical"] is True and res["graphs"] == 4 * 4  # 4 layout collections × 4 tiny graphs
    assert res["old_load_graph_s"] > 0 and res["config_batches_s"] > 0 and res["speedup"] > 0
    assert res["speedup_cpu"] > 0 and res["first_epoch_speedup_wall"] > 0
    assert res["schema1_s"] > 0 and res["speedup_vs_schema1"] > 0 and res["speedup_vs_schema1_cpu"] > 0
    assert (len(res["epochs_schema1_wall_cpu_s"]) == len(res["epochs_old_wall_cpu_s"])
            == len(res["epochs_config_batches_wall_cpu_s"]) == 2)


def test_tile_epochs_benchmark_runs(synth_shards):
    """benchmarks.tile_epochs: one line per epoch, every epoch the same number of batches and configs."""
    proc = run_module("benchmarks.tile_epochs", str(synth_shards), "--epochs", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["epoch 0", "epoch 1"]
    assert len({line.split(", CPU")[0].split(": ", 1)[1] for line in lines}) == 1


def test_sampled_read_benchmark_keeps_the_schema1_path_and_every_reader_agrees(synth_shards):
    """benchmarks.reading: the read path before issue #14 (the graph's configs as schema 1 stored them,
    read whole) is rebuilt from the shards and gives the sampled configs; every docs reader agrees
    (the benchmark asserts each against sample_configs)."""
    proc = run_module("benchmarks.reading", str(synth_shards))
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout)
    assert res["schema1_configs_bytes"] > 0 and res["num_unique_configs"] > 1
    for key in ("schema1_load_decode_s", "old_load_graph_decode_s", "sample_configs_s", "pyarrow_s", "polars_s",
                "duckdb_s", "speedup_vs_schema1", "sample_configs_pyarrow_s", "direct_pages_vs_pyarrow"):
        assert res[key] > 0, key


def test_bound_benchmark_measures_the_builds_own_work_on_every_layout_file(synth_root, synth_shards, tmp_path):
    """benchmarks.bound: the floor and the four parts of the bound on every layout file (none of the tile
    files), shared among two processes; what it measured is what the build made of each file (unique
    configs, stored columns, the bytes of the stored codes), and the totals are the files' sums."""
    import tpuprep

    out = tmp_path / "b.json"
    proc = run_module("benchmarks.bound", str(synth_root / "npz"), "--processes", "2", "--level", "1",
                      "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    layout = sorted((synth_root / "npz" / "layout").rglob("*.npz"))
    assert sorted(r["file"] for r in res["files"]) == sorted(p.as_posix() for p in layout)
    ds = tpuprep.open_dataset(synth_shards)
    for r in res["files"]:
        p = Path(r["file"])
        row = ds.graph_row(f"layout:{p.parts[-4]}:{p.parts[-3]}:{p.stem}")
        assert (r["unique"], r["nt"]) == (row["num_unique_configs"], row["num_config_columns"])
        assert r["codes_bytes"] == 12 * r["unique"] * r["nt"] and r["zstd_bytes"] > 0
        assert r["floor"] > 0 and r["read"] > 0 and r["kernels"] > 0
    total = res["totals"]
    assert res["level"] == 1 and total["files"] == len(layout)
    parts = ("read", "kernels", "gather", "zstd")
    assert total["bound"] == round(sum(total[k] for k in parts), 3)
    for k in ("floor", *parts):  # every file of both processes is in the totals
        assert total[k] == round(sum(r[k] for r in res["files"]), 3), k
    splits = {r["file"]: Path(r["file"]).parent.name for r in res["files"]}
    assert {"test", "train"} <= set(splits.values())
    assert all(r["labelled"] == (splits[r["file"]] != "test") for r in res["files"])  # as the build
    assert total["codes_gb"] == round(sum(r["codes_bytes"] for r in res["files"]) / 1e9, 3)
    assert "bound ÷ floor" in proc.stdout


def test_row_groups_benchmark_rewrites_shards_as_the_build_cut_them(synth_root, tmp_path):
    """benchmarks.row_groups: layout configs shards rewritten with the build's options, in their own row
    groups (checked inside the run) and in 16 × larger ones; the fixed cost is projected on every layout
    row group of the folder. (tiny's graphs fit one row group each, so they are built here with small
    row groups.)"""
    import pyarrow.parquet as pq

    sys.path.insert(0, str(REPO))
    from benchmarks.row_groups import VARIANTS
    from tpuprep.build import build
    from tpuprep.options import BuildOptions

    synth_shards = tmp_path / "shards"
    build(synth_root / "npz", synth_shards, BuildOptions(row_group_bytes=2048), collections=["layout"])
    out = tmp_path / "g.json"
    proc = run_module("benchmarks.row_groups", str(synth_shards), "--shards", "3", "--repeat", "1",
                      "--variants", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    shards = json.loads((synth_shards / "manifest.json").read_text())["shards"]
    groups = sum(pq.ParquetFile(synth_shards / s["path"]).metadata.num_row_groups
                 for s in shards if s["table"] == "layout_configs")
    assert res["layout_row_groups_in_folder"] == groups
    assert 1 <= len(res["shards"]) <= 3
    for r in res["shards"]:
        assert r["groups"] > r["coarse_groups"] >= 1 and r["build_s"] > 0 and r["coarse_s"] > 0
    assert res["totals"]["groups"] == sum(r["groups"] for r in res["shards"])
    assert abs(res["projected_fixed_cpu_s"] - res["fixed_us_per_row_group"] * groups / 1e6) < 0.01
    assert sorted(res["variants_fixed_us_per_row_group"]) == sorted(VARIANTS)


def test_largest_graph_benchmark_measures_the_open_step_against_its_goal(synth_shards, tmp_path):
    out = tmp_path / "lg.json"
    proc = run_module("benchmarks.largest_graph", "--shards", str(synth_shards), "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["ok"] and 0 < res["open"]["peak_rss_mb"] <= res["goal_mb"] == 1024
    assert res["nc"] > 0 and res["whole_codes_bytes"] > 0
    assert all(g["kept_bytes"] > 0 and g["load_s"] > 0 for g in res["open"]["graphs"])
    assert "peak RSS" in proc.stdout and "met" in proc.stdout


def test_quality_benchmark_trains_with_defaults_per_seed_and_checks_the_limit(tmp_path):
    """benchmarks.quality on tiny (one epoch, so it is quick): one row per seed and collection with the
    τ/oracle, wall and CPU; a second run against the first's JSON checks the 1.5 × limit."""
    work, first = tmp_path / "w", tmp_path / "q1.json"
    args = ["--work", str(work), "--profile", "tiny", "--seeds", "1,2", "--collections",
            "layout:xla:random,tile:xla", "--set", "epochs=1", "--set", "hidden=8"]
    proc = run_module("benchmarks.quality", *args, "--json", str(first))
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: a goal missed after one epoch
    res = json.loads(first.read_text())
    assert [(r["seed"], r["collection"]) for r in res["rows"]] == [
        (1, "layout:xla:random"), (1, "tile:xla"), (2, "layout:xla:random"), (2, "tile:xla")]
    for r in res["rows"]:
        assert r["epochs"] == 1 and r["wall_s"] > 0 and r["cpu_s"] > 0 and r["peak_rss_mb"] > 0
        assert math.isfinite(r["ratio"]) and ("goal_ok" in r) == r["collection"].startswith("layout")
        assert "limit_ok" not in r  # no baseline given
    layout = res["rows"][0]
    assert layout["ratio"] == layout["tau"] / layout["tau_oracle"]
    assert res["settings"] == {"epochs": "1", "hidden": "8"}
    proc = run_module("benchmarks.quality", *args, "--baseline", str(first), "--json", str(tmp_path / "q2.json"))
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    again = json.loads((tmp_path / "q2.json").read_text())
    for a, b in zip(res["rows"], again["rows"], strict=True):
        assert b["baseline_cpu_s"] == a["cpu_s"] and b["limit_ok"] == (b["cpu_s"] <= 1.5 * a["cpu_s"])
        assert b["ratio"] == a["ratio"]  # same seed, same settings: the same model
    assert "limit" in proc.stdout and ("MISSED" in proc.stdout) == (proc.returncode == 1)


def test_quality_benchmark_trains_the_baseline_with_its_own_code(tmp_path):
    """The baseline package is trained and scored with its own code, not the working tree's: a copy of
    the package whose default is 2 layout epochs and whose models are format 99 (the working tree's loader
    refuses them), against a candidate told 1 epoch (no git history needed)."""
    import re
    import shutil

    base = tmp_path / "base"
    shutil.copytree(REPO / "tpuprep", base / "tpuprep", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "schemas", base / "schemas")  # tpuprep/schemas links to ../schemas
    trainer = base / "tpuprep" / "train" / "trainer.py"
    text, n = re.subn(r'DEFAULT_EPOCHS = \{"layout": \d+,', 'DEFAULT_EPOCHS = {"layout": 2,', trainer.read_text())
    assert n == 1
    trainer.write_text(text)
    ranker = base / "tpuprep" / "train" / "ranker.py"
    text, n = re.subn(r"^FORMAT_VERSION = \d+", "FORMAT_VERSION = 99", ranker.read_text(), flags=re.M)
    assert n == 1
    ranker.write_text(text)
    out = tmp_path / "q.json"
    proc = run_module("benchmarks.quality", "--work", str(tmp_path / "w"), "--profile", "tiny", "--seeds", "3",
                      "--collections", "layout:xla:random", "--set", "epochs=1", "--baseline-src", str(base),
                      "--json", str(out))
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    res = json.loads(out.read_text())
    (row,) = res["rows"]
    assert res["baseline"]["3/layout:xla:random"]["epochs"] == 2 and row["epochs"] == 1
    assert row["baseline_cpu_s"] == res["baseline"]["3/layout:xla:random"]["cpu_s"]
    assert row["limit_ok"] == (row["cpu_s"] <= 1.5 * row["baseline_cpu_s"])
    assert json.loads((tmp_path / "w" / "models" / "rev-s3" / "layout_xla_random.json").read_text())[
        "format_version"] == 99 and math.isfinite(res["baseline"]["3/layout:xla:random"]["ratio"])


def test_quality_benchmark_exports_a_revisions_package_and_schemas(tmp_path):
    """--baseline-rev REV: the package and the schemas it links to, as committed at REV (not as now)."""
    from benchmarks.quality import export_revision

    repo = tmp_path / "repo"
    (repo / "tpuprep").mkdir(parents=True)
    (repo / "schemas").mkdir()
    (repo / "tpuprep" / "__init__.py").write_text("VERSION = 'then'\n")
    (repo / "schemas" / "x.json").write_text("{}")
    (repo / "tpuprep" / "schemas").symlink_to("../schemas")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}

    def git(*args):
        subprocess.run(["git", "-C", str(repo), *args], check=True, env=env, capture_output=True)

    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "then")
    (repo / "tpuprep" / "__init__.py").write_text("VERSION = 'now'\n")
    root = export_revision(tmp_path / "w", "HEAD", repo)
    assert (root / "tpuprep" / "__init__.py").read_text() == "VERSION = 'then'\n"
    assert (root / "tpuprep" / "schemas" / "x.json").read_text() == "{}"


def test_first_minute_benchmark_times_a_cold_and_a_warm_build(synth_root, tmp_path):
    """``benchmarks.first_minute``: a build with an empty Numba cache, then with the one it filled."""
    out = tmp_path / "f.json"
    proc = run_module("benchmarks.first_minute", "--work", str(tmp_path / "w"), "--steps", "build",
                      "--corpus", str(synth_root / "npz"), "--workers", "1", "--repeat", "1", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    build = json.loads(out.read_text())["build"]
    assert build["cold"]["cpu_s"] > build["warm"]["cpu_s"] > 0  # the cold run compiled the kernels
    assert build["cold / warm"]["cpu_s"] > 1 and "cold/warm" in proc.stdout
