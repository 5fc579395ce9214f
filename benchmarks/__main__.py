"""``python -m benchmarks --corpus DIR/npz --work DIR [--skip naive,dask,...] [--repeat 3] [--json F]``.

Everything side by side in one run, on one corpus: the inflate-only floors, the naive NumPy baseline,
``tpuprep build`` on 1 and 2 local workers and on a real 1- and 2-worker Dask cluster, shard sizes, and
sampled reads; then every target of the performance and Dask issues as a checked ratio, and the
projection to the whole real dataset.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

from .compare import compare
from .dask_cluster import LocalDaskCluster
from .measure import measure
from .reading import run as run_reading

REAL_INFLATED_BYTES = 400e9
"""≈ inflated node_config_feat of TpuGraphs train+valid (TPUGRAPHS.md §1); the other members are small."""
CLUSTER_WORKERS = 16


def inflated_bytes(corpus: Path) -> tuple[int, int, int]:
    """(total inflated bytes of every member, largest inflated node_config_feat, input bytes)."""
    import zipfile

    total = largest = size = 0
    for p in sorted(corpus.rglob("*.npz")):
        size += p.stat().st_size
        with zipfile.ZipFile(p) as zf:
            for info in zf.infolist():
                total += info.file_size
                if info.filename == "node_config_feat.npy":
                    largest = max(largest, info.file_size)
    return total, largest, size


def tpuprep_cmd(*args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from tpuprep.cli import main; sys.exit(main())", *args]


def machine() -> dict:
    mem = next((int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal:")), 0)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    return {"cpus": os.cpu_count(), "cpu": cpu, "memory_gb": round(mem / 2**30, 1),
            "python": platform.python_version(), "platform": platform.platform()}


def targets(res: dict, largest: int) -> dict[str, dict]:
    """Every target of the issues as {name: {value, target, ok}} (only for the steps that ran)."""
    out: dict[str, dict] = {}

    def check(name: str, value: float, op: str, bound: float, why: str = "") -> None:
        ok = value <= bound if op == "<=" else value >= bound
        out[name] = {"value": round(value, 3), "target": f"{op} {bound:g}{why}", "ok": bool(ok)}

    def same(name: str, flag: bool | None) -> None:
        out[name] = {"value": float(bool(flag)), "target": "1", "ok": bool(flag)}

    wall = {k: v["wall_s"] for k, v in res.items() if isinstance(v, dict) and "wall_s" in v}
    if "build1" in wall and "floor_isal" in wall:
        check("build1 / inflate floor (isal)", wall["build1"] / wall["floor_isal"], "<=", 1.3)
    if "build1" in wall and "build2" in wall:
        check("speed-up 2 workers / 1 worker", wall["build1"] / wall["build2"], ">=", 1.8)
    if "build1" in wall and "naive" in wall:
        check("speed-up over naive NumPy", wall["naive"] / wall["build1"], ">=", 20)
        same("naive content identical", res.get("naive_identical"))
    budget = 0.3 * largest / 2**20 + 300
    for step in ("build1", "build2", "dask1", "dask2"):
        rss = res.get(step, {}).get("peak_worker_rss_mb")
        if rss:
            check(f"peak worker RSS {step} (MB)", rss, "<=", round(budget), " (0.3 x largest member + 300 MB)")
    for cid, s in res.get("sizes", {}).items():
        if cid.startswith("layout"):
            check(f"shard / npz bytes {cid}", s["ratio"], "<=", 0.5)
    if "read" in res:
        check("sampled read speed-up over npz", res["read"]["speedup"], ">=", 50)
    for n in (1, 2):
        if f"build{n}" in wall and f"dask{n}" in wall:
            check(f"Dask overhead, {n} worker(s)", wall[f"dask{n}"] / wall[f"build{n}"] - 1, "<=", 0.10)
    for step in ("build2", "dask1", "dask2"):
        if step in res:
            same(f"{step} shards byte-identical to build1", res.get(f"{step}_identical"))
    return out


def information(res: dict) -> dict[str, float]:
    """Ratios worth printing that are not targets."""
    if "build1" in res and "floor_zlib" in res:
        return {"build1 / inflate floor (stdlib zlib, what any npz reader pays)":
                round(res["build1"]["wall_s"] / res["floor_zlib"]["wall_s"], 3)}
    return {}


def projection(res: dict) -> dict:
    """Wall time for the whole real dataset from the measured inflated bytes per second."""
    out = {"real_inflated_bytes": REAL_INFLATED_BYTES}
    for step in ("build1", "build2"):
        if step in res:
            out[f"this_machine_{step}_min"] = REAL_INFLATED_BYTES / (res[step]["inflated_gb_per_s"] * 1e9) / 60
    if "dask1" in res:
        per_worker = res["dask1"]["inflated_gb_per_s"] * 1e9
        efficiency = (res["dask1"]["wall_s"] / res["dask2"]["wall_s"] / 2) if "dask2" in res else 1.0
        out["dask_parallel_efficiency_2"] = efficiency
        out[f"cluster_{CLUSTER_WORKERS}_workers_min"] = (
            REAL_INFLATED_BYTES / (per_worker * CLUSTER_WORKERS * min(efficiency, 1.0)) / 60)
    return out


def run_step(name: str, cmd: list[str], total: int, res: dict, repeat: int = 1) -> None:
    """Best wall time of ``repeat`` runs (as timeit reports), largest peak RSS of any run."""
    runs = [measure(cmd) for _ in range(repeat)]
    wall = min(m.wall_s for m in runs)
    res[name] = {"wall_s": wall, "peak_rss_mb": max(m.peak_rss_mb for m in runs),
                 "inflated_gb_per_s": total / wall / 1e9, "runs_s": [round(m.wall_s, 2) for m in runs]}


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks")
    ap.add_argument("--corpus", type=Path, required=True, help="an npz/ tree, e.g. from tpuprep synth --profile bench")
    ap.add_argument("--work", type=Path, required=True, help="scratch folder for outputs (emptied)")
    ap.add_argument("--skip", default="", help="comma-separated steps to skip: naive, build2, dask, read")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each step but naive (best wall time is kept)")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    total, largest, size_in = inflated_bytes(args.corpus)
    res: dict = {"machine": machine(),
                 "corpus": {"files": len(list(args.corpus.rglob("*.npz"))), "npz_bytes": size_in,
                            "inflated_bytes": total, "largest_node_config_feat": largest}}
    print(json.dumps(res, indent=1), flush=True)
    steps: dict[str, list[str]] = {
        "floor_zlib": [sys.executable, "-m", "benchmarks.floor", str(args.corpus), "--backend", "zlib"],
        "floor_isal": [sys.executable, "-m", "benchmarks.floor", str(args.corpus), "--backend", "isal"],
        "naive": [sys.executable, "-m", "benchmarks.naive", str(args.corpus), str(args.work / "naive")],
        "build1": tpuprep_cmd("build", "--src", str(args.corpus), "--dst", str(args.work / "w1"), "-q", "--overwrite"),
        "build2": tpuprep_cmd("build", "--src", str(args.corpus), "--dst", str(args.work / "w2"), "-q", "--overwrite", "--workers", "2"),
    }
    for name, cmd in steps.items():
        if name in skip:
            continue
        run_step(name, cmd, total, res, 1 if name == "naive" else args.repeat)
        if name.startswith("build"):  # every process of the build is a worker or its parent
            res[name]["peak_worker_rss_mb"] = res[name]["peak_rss_mb"]
        print(f"{name:11s} {json.dumps(res[name])}", flush=True)
    if "dask" not in skip:
        for n in (1, 2):
            with LocalDaskCluster(n, args.work / f"dask{n}-cluster") as cluster:
                run_step(f"dask{n}", tpuprep_cmd("build", "--src", str(args.corpus), "--dst",
                                                 str(args.work / f"d{n}"), "-q", "--overwrite", "--scheduler-file",
                                                 str(cluster.scheduler_file)), total, res, args.repeat)
                res[f"dask{n}"]["peak_worker_rss_mb"] = cluster.peak_worker_rss_mb()
            print(f"dask{n}       {json.dumps(res[f'dask{n}'])}", flush=True)
    if "naive" not in skip:
        problems = compare(args.work / "naive", args.work / "w1")
        res["naive_identical"] = not problems
        print("naive content identical to tpuprep:", res["naive_identical"], problems[:5])
    for name, folder in (("build2", "w2"), ("dask1", "d1"), ("dask2", "d2")):
        if name in res:
            same = subprocess.run(["diff", "-r", "-q", str(args.work / "w1"), str(args.work / folder)],
                                  capture_output=True)
            res[f"{name}_identical"] = same.returncode == 0
    manifest = json.loads((args.work / "w1" / "manifest.json").read_text())
    res["sizes"] = {cid: {"npz_bytes": c["totals"]["bytes_in"], "shard_bytes": c["totals"]["bytes_out"],
                          "ratio": c["totals"]["bytes_out"] / c["totals"]["bytes_in"]}
                    for cid, c in manifest["collections"].items()}
    for cid, s in res["sizes"].items():
        print(f"size {cid:20s} {s['npz_bytes'] / 1e6:9.1f} MB npz -> {s['shard_bytes'] / 1e6:9.1f} MB shards ({s['ratio']:.3f})")
    if "read" not in skip:
        res["read"] = run_reading(args.work / "w1", args.corpus)
        print(f"read       {res['read']}")
    res["targets"] = targets(res, largest)
    res["information"] = information(res)
    res["projection"] = projection(res)
    print()
    for name, t in res["targets"].items():
        print(f"{'ok  ' if t['ok'] else 'MISS'} {name:45s} {t['value']:>10} (target {t['target']})")
    for name, value in res["information"].items():
        print(f"info {name}: {value}")
    print(json.dumps(res["projection"], indent=1))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
