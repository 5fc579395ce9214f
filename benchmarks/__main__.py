"""``python -m benchmarks --corpus DIR/npz --work DIR [--skip naive] [--json results.json]``."""

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
from .measure import measure
from .reading import run as run_reading


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


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks")
    ap.add_argument("--corpus", type=Path, required=True, help="an npz/ tree, e.g. from tpuprep synth --profile bench")
    ap.add_argument("--work", type=Path, required=True, help="scratch folder for outputs (emptied)")
    ap.add_argument("--skip", default="", help="comma-separated steps to skip: naive, build2, read, dask")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    total, largest, size_in = inflated_bytes(args.corpus)
    res: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                             "platform": platform.platform()},
                 "corpus": {"files": len(list(args.corpus.rglob("*.npz"))), "npz_bytes": size_in,
                            "inflated_bytes": total, "largest_node_config_feat": largest}}
    steps: dict[str, list[str]] = {
        "floor_zlib": [sys.executable, "-m", "benchmarks.floor", str(args.corpus), "--backend", "zlib"],
        "floor_isal": [sys.executable, "-m", "benchmarks.floor", str(args.corpus), "--backend", "isal"],
        "naive": [sys.executable, "-m", "benchmarks.naive", str(args.corpus), str(args.work / "naive")],
        "build1": tpuprep_cmd("build", "--src", str(args.corpus), "--dst", str(args.work / "w1"), "-q"),
        "build2": tpuprep_cmd("build", "--src", str(args.corpus), "--dst", str(args.work / "w2"), "-q", "--workers", "2"),
    }
    for name, cmd in steps.items():
        if name in skip:
            continue
        m = measure(cmd)
        res[name] = {"wall_s": m.wall_s, "peak_rss_mb": m.peak_rss_mb, "inflated_gb_per_s": total / m.wall_s / 1e9}
        print(f"{name:11s} {m.wall_s:8.2f} s  peak RSS {m.peak_rss_mb:8.0f} MB  {total / m.wall_s / 1e9:6.2f} GB/s inflated",
              flush=True)
    if "naive" not in skip:
        res["naive_identical"] = not (problems := compare(args.work / "naive", args.work / "w1"))
        print("naive content identical to tpuprep:", res["naive_identical"], problems[:5])
    if "build2" not in skip:
        same = subprocess.run(["diff", "-r", "-q", str(args.work / "w1"), str(args.work / "w2")], capture_output=True)
        res["build2_identical"] = same.returncode == 0
    manifest = json.loads((args.work / "w1" / "manifest.json").read_text())
    res["sizes"] = {cid: {"npz_bytes": c["totals"]["bytes_in"], "shard_bytes": c["totals"]["bytes_out"],
                          "ratio": c["totals"]["bytes_out"] / c["totals"]["bytes_in"]}
                    for cid, c in manifest["collections"].items()}
    for cid, s in res["sizes"].items():
        print(f"size {cid:20s} {s['npz_bytes'] / 1e6:9.1f} MB npz -> {s['shard_bytes'] / 1e6:9.1f} MB shards ({s['ratio']:.3f})")
    if "read" not in skip:
        res["read"] = run_reading(args.work / "w1", args.corpus)
        print(f"read       {res['read']}")
    f = res.get("floor_zlib", {}).get("wall_s")
    if f:
        ratios = {"build1_over_floor_zlib": res["build1"]["wall_s"] / f,
                  "build1_over_floor_isal": res["build1"]["wall_s"] / res["floor_isal"]["wall_s"]}
        if "build2" in res:
            ratios["speedup_2_workers"] = res["build1"]["wall_s"] / res["build2"]["wall_s"]
        if "naive" in res:
            ratios["speedup_over_naive"] = res["naive"]["wall_s"] / res["build1"]["wall_s"]
        ratios["rss_budget_mb"] = 0.3 * largest / 2**20 + 300
        res["ratios"] = ratios
        print(json.dumps(ratios, indent=1))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
