"""Build from a tar archive vs. from the extracted tree, same run (issue #15: archive ≤ 1.1 × tree).

    PYTHONPATH=$PWD python -m benchmarks.archive --src /tmp/bench/npz --work /tmp/pU-bench --pairs 5

Makes ``<work>/npz_all.tar`` from ``--src`` once (members ``npz/<relpath>``, as the official archive),
then runs ``tpuprep build`` from the tree (B) and from the archive (A) in turn, A B A B …, so machine
drift cancels, and prints per pair the CPU (user + sys of the child) and wall seconds, the medians and
the A/B ratios; finally it checks that both builds wrote byte-identical shards.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path


def make_archive(src: Path, tar: Path) -> Path:
    """``tar`` holding every ``*.npz`` under ``src`` as ``npz/<relative path>`` (made once)."""
    if not tar.exists():
        part = tar.with_suffix(".part")
        with tarfile.open(part, "w") as tf:
            for f in sorted(src.rglob("*.npz")):
                tf.add(f, arcname="npz/" + f.relative_to(src).as_posix(), recursive=False)
        part.rename(tar)
    return tar


def timed_build(src: Path, dst: Path) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one ``tpuprep build --overwrite -q`` subprocess."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", "from tpuprep.cli.group import main; main()", "build",
                    "--src", str(src), "--dst", str(dst), "--overwrite", "-q"], check=True, env=os.environ.copy())
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def shard_hashes(dst: Path) -> dict[str, str]:
    return {p.relative_to(dst).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(dst.rglob("*.parquet"))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, required=True, help="the extracted npz tree (read only)")
    ap.add_argument("--work", type=Path, required=True, help="where the archive and the shards go")
    ap.add_argument("--pairs", type=int, default=5)
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    tar = make_archive(args.src, args.work / "npz_all.tar")
    timed_build(args.src, args.work / "tree")  # warm-up (page cache, Numba cache)
    rows = []
    for i in range(args.pairs):
        a = timed_build(tar, args.work / "archive")
        b = timed_build(args.src, args.work / "tree")
        rows.append((a, b))
        print(f"pair {i + 1}: archive cpu {a[0]:.2f} s wall {a[1]:.2f} s | tree cpu {b[0]:.2f} s "
              f"wall {b[1]:.2f} s | cpu ratio {a[0] / b[0]:.3f} wall ratio {a[1] / b[1]:.3f}", flush=True)
    for k, what in ((0, "cpu"), (1, "wall")):
        ratios = [a[k] / b[k] for a, b in rows]
        print(f"{what}: archive median {statistics.median(a[k] for a, _ in rows):.2f} s, tree median "
              f"{statistics.median(b[k] for _, b in rows):.2f} s, ratio median {statistics.median(ratios):.3f} "
              f"(pairs {min(ratios):.3f}–{max(ratios):.3f})")
    same = shard_hashes(args.work / "archive") == shard_hashes(args.work / "tree")
    print(f"shards byte-identical: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
