"""``verify`` at the speed of the build (issue #30): build a corpus and verify it, in one run, on the
same workers, and print the ratio verify wall ÷ build wall (goal ≤ 1.2).

``python -m benchmarks.verify_speed CORPUS SHARDS [--workers 2] [--repeat 1] [--sample F] [--json F]``

CORPUS is an npz tree (``tpuprep synth --profile full --fraction 0.02`` makes a layout-heavy one);
SHARDS a folder this script creates (it must not exist) and rebuilds for each repeat. Each step is a
separate ``tpuprep`` process measured from a fresh helper (``measure.py``: wall time and peak RSS);
with ``--repeat`` the best wall of each step is taken, as timeit does, and every run's own ratio is
kept too (the machine may be shared: compare runs, not one figure), with each step's CPU seconds
(user + system of all its processes), which another user's load disturbs far less than wall time. A verify that does not end with
exit 0 ("all exact") fails the benchmark. With ``--sample`` a sampled verify is timed after the full one.

With ``--floor`` the floor of any verify is timed after each run, on the same workers: every input
inflated once (its zip directory read, every member inflated with its size and CRC-32 checked: what
verify must do whatever it checks) in worker processes planned as verify plans them, and every shard
read (its bytes hashed, every column decompressed and decoded by pyarrow), with no check at all
(``floor_run``; ``python -m benchmarks.verify_speed --floor-run CORPUS SHARDS`` runs it alone).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from .__main__ import machine, tpuprep_cmd
from .measure import measure

GOAL = 1.2
"""Issue #30: verify wall ≤ 1.2 × build wall on the same corpus and workers."""


def _inflate_inputs(items: list) -> int:
    """Inflate every member of each input of ``items`` (verify's (InputFile, entry) pairs) once, with
    its size and CRC-32 checked; the bytes inflated."""
    import os

    from tpuprep.inputcheck import MemberReader, zip_entries
    from tpuprep.inputs import open_source

    total = 0
    for inp, _ in items:
        fh, _ = open_source(inp)
        with fh:
            _, entries = zip_entries(fh, fh.seek(0, os.SEEK_END))
            for entry in entries:
                if MemberReader(fh, entry).finish() is not None:
                    raise RuntimeError(f"{inp.relpath}: {entry.name} is damaged")
                total += entry.usize
    return total


def floor_run(corpus: Path, shards: Path, workers: int) -> tuple[int, int]:
    """The floor of a verify of ``shards`` against ``corpus``: every input inflated once on ``workers``
    local processes (tasks planned as verify plans them), every shard's bytes hashed and every column
    decoded here meanwhile; no check. (inflated input bytes, decoded shard bytes)."""
    import hashlib

    import pyarrow.parquet as pq

    from tpuprep.inputs import discover
    from tpuprep.runners import make_runner
    from tpuprep.shards.reader import open_dataset
    from tpuprep.verify.run import plan_batches

    ds = open_dataset(shards)
    inputs, _ = discover(corpus)
    listed = {i["path"]: i for i in ds.manifest["inputs"]}
    todo = [(inp, listed[inp.relpath]) for inp in inputs if listed.get(inp.relpath, {}).get("status") == "ok"]
    runner = make_runner(workers, kernels=False)
    try:
        futures = [runner.submit(_inflate_inputs, [todo[k] for k in batch]) for batch in plan_batches(todo)]
        decoded = 0
        for shard in ds.manifest["shards"]:
            path = Path(shards) / shard["path"]
            hashlib.sha256(path.read_bytes()).digest()
            decoded += pq.ParquetFile(path, page_checksum_verification=True).read(use_threads=False).nbytes
        inflated = sum(f.result() for f in runner.as_completed(futures))
    finally:
        runner.close()
    return inflated, decoded


def run(corpus: Path, shards: Path, workers: int, repeat: int, sample: float | None, floor: bool = False) -> dict:
    """Build then verify ``repeat`` times (with ``floor``, then the floor of a verify); the figures as a
    dict (see the module)."""
    runs = []
    for _ in range(repeat):
        if shards.exists():
            shutil.rmtree(shards)
        build = measure(tpuprep_cmd("build", "--src", str(corpus), "--dst", str(shards),
                                    "--workers", str(workers), "-q"))
        if build.returncode != 0:
            raise RuntimeError(f"build exited with {build.returncode}")
        check = measure(tpuprep_cmd("verify", "--src", str(corpus), "--dst", str(shards),
                                    "--workers", str(workers), "-q"))
        if check.returncode != 0:
            raise RuntimeError(f"verify exited with {check.returncode}: the shards are not proven exact")
        runs.append({"build_s": build.wall_s, "verify_s": check.wall_s, "ratio": check.wall_s / build.wall_s,
                     "build_cpu_s": build.cpu_s, "verify_cpu_s": check.cpu_s,
                     "build_rss_mb": build.peak_rss_mb, "verify_rss_mb": check.peak_rss_mb,
                     "load_before": build.load_before})
        if floor:
            low = measure([sys.executable, "-m", "benchmarks.verify_speed", "--floor-run", str(corpus), str(shards),
                           "--workers", str(workers)])
            runs[-1].update(floor_s=low.wall_s, floor_cpu_s=low.cpu_s, floor_ratio=low.wall_s / build.wall_s)
    best_build, best_verify = min(r["build_s"] for r in runs), min(r["verify_s"] for r in runs)
    out = {"corpus": str(corpus), "workers": workers, "repeat": repeat, "runs": runs,
           "input_bytes": sum(p.stat().st_size for p in corpus.rglob("*.npz")),
           "files": sum(1 for _ in corpus.rglob("*.npz")),
           "build_s": best_build, "verify_s": best_verify, "ratio": best_verify / best_build,
           "cpu_ratio": min(r["verify_cpu_s"] for r in runs) / max(min(r["build_cpu_s"] for r in runs), 1e-9),
           "goal": GOAL, "ok": best_verify / best_build <= GOAL, "machine": machine()}
    if sample is not None:
        sampled = measure(tpuprep_cmd("verify", "--src", str(corpus), "--dst", str(shards), "--workers",
                                      str(workers), "--sample", str(sample), "-q"))
        if sampled.returncode != 0:
            raise RuntimeError(f"verify --sample exited with {sampled.returncode}")
        out["sample"] = {"fraction": sample, "verify_s": sampled.wall_s, "ratio": sampled.wall_s / best_build}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.verify_speed", description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("shards", type=Path, help="a new folder (created, rebuilt per repeat)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--sample", type=float, default=None, help="also time verify --sample F")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here too")
    ap.add_argument("--floor", action="store_true", help="also time the floor of a verify after each run")
    ap.add_argument("--floor-run", action="store_true", help="run the floor of a verify of SHARDS (must exist) alone")
    args = ap.parse_args(argv)
    if args.floor_run:
        inflated, decoded = floor_run(args.corpus, args.shards, args.workers)
        print(f"floor: {inflated / 2**20:.1f} MB of inputs inflated, {decoded / 2**20:.1f} MB of shard columns decoded")
        return 0
    if not args.corpus.is_dir():
        ap.error(f"{args.corpus}: not a folder")
    if args.shards.exists():
        ap.error(f"{args.shards} exists: give a new folder (it is deleted and rebuilt per repeat)")
    res = run(args.corpus, args.shards, args.workers, max(1, args.repeat), args.sample, args.floor)
    for i, r in enumerate(res["runs"], 1):
        print(f"run {i}: build {r['build_s']:.1f} s, verify {r['verify_s']:.1f} s, ratio {r['ratio']:.2f}; "
              f"CPU build {r['build_cpu_s']:.1f} s, verify {r['verify_cpu_s']:.1f} s (load {r['load_before']:.1f} before)"
              + (f"; floor {r['floor_s']:.1f} s = {r['floor_ratio']:.2f} x the build, CPU {r['floor_cpu_s']:.1f} s"
                 if "floor_s" in r else ""))
    print(f"{res['files']} files, {res['input_bytes'] / 2**20:.1f} MB, --workers {res['workers']}: "
          f"build {res['build_s']:.1f} s, verify {res['verify_s']:.1f} s (best of {res['repeat']}): "
          f"verify/build = {res['ratio']:.2f} (goal <= {GOAL}: {'met' if res['ok'] else 'NOT met'}); "
          f"CPU seconds verify/build = {res['cpu_ratio']:.2f} (less sensitive to a shared machine's load)")
    if "sample" in res:
        s = res["sample"]
        print(f"verify --sample {s['fraction']:g}: {s['verify_s']:.1f} s, {s['ratio']:.2f} x the build")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
