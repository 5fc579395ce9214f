"""The first minute (issue #37 item 7): ``tpuprep demo`` and a build with an empty Numba cache (cold: the
kernels are compiled) against the same with the cache that run filled (warm), in one run.

``python -m benchmarks.first_minute --work W [--steps demo,build] [--corpus NPZ] [--workers 2]
[--repeat 3] [--json F]``

Each repeat runs every step cold then warm, as separate ``tpuprep`` processes measured from a fresh
helper (``measure.py``: wall time, CPU seconds of all its processes, peak RSS): cold in a new empty
``NUMBA_CACHE_DIR``, warm in the one the cold run just filled. ``build`` converts ``--corpus`` (default:
the ``small`` profile, what the demo synthesises, made once under W) with ``--workers`` local processes,
as ``tpuprep demo`` does. Printed: the median of each figure over the repeats and the cold ÷ warm ratios
(the machine may be shared: CPU seconds move less with another user's load than wall time).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

from .__main__ import machine, tpuprep_cmd
from .measure import Measurement, measure

STEPS = ("demo", "build")


def step_cmd(step: str, corpus: Path, dst: Path, workers: int) -> list[str]:
    if step == "demo":
        return tpuprep_cmd("demo", "--workers", str(workers))
    return tpuprep_cmd("build", "--src", str(corpus), "--dst", str(dst), "--overwrite", "-q",
                       "--workers", str(workers))


def run_once(cmd: list[str], cache: Path) -> Measurement:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "TPUPREP_NUMBA_CACHE")}
    return measure(cmd, env=env | {"NUMBA_CACHE_DIR": str(cache)})


def median(runs: list[Measurement], key: str) -> float:
    return round(statistics.median(getattr(r, key) for r in runs), 3)


def run(work: Path, steps: list[str], corpus: Path | None, workers: int, repeat: int) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    if "build" in steps and corpus is None:
        from tpuprep.synth import synthesize

        synthesize(work / "synth", "small", 0)
        corpus = work / "synth" / "npz"
    runs: dict[str, dict[str, list[Measurement]]] = {s: {"cold": [], "warm": []} for s in steps}
    for i in range(repeat):
        for step in steps:
            cache = work / f"cache-{step}-{i}"
            shutil.rmtree(cache, ignore_errors=True)
            cmd = step_cmd(step, corpus, work / "shards", workers)
            runs[step]["cold"].append(run_once(cmd, cache))
            runs[step]["warm"].append(run_once(cmd, cache))
            shutil.rmtree(cache, ignore_errors=True)
    out: dict = {"machine": machine(), "workers": workers, "repeat": repeat, "corpus": str(corpus)}
    for step, by in runs.items():
        figures = {state: {k: median(rs, k) for k in ("wall_s", "cpu_s", "peak_rss_mb")} for state, rs in by.items()}
        figures["cold / warm"] = {k: round(figures["cold"][k] / figures["warm"][k], 2) for k in ("wall_s", "cpu_s")}
        figures["load_before"] = [r.load_before for rs in by.values() for r in rs]
        out[step] = figures
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.first_minute", description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", required=True, type=Path, help="scratch folder (the small corpus, shards, caches)")
    ap.add_argument("--steps", default=",".join(STEPS), help="comma-separated: demo, build")
    ap.add_argument("--corpus", type=Path, default=None, help="npz tree to build (default: the small profile)")
    ap.add_argument("--workers", type=int, default=2, help="local worker processes (the demo's default: 2)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    steps = [s for s in args.steps.split(",") if s]
    if unknown := sorted(set(steps) - set(STEPS)):
        ap.error(f"unknown steps {unknown}; known: {', '.join(STEPS)}")
    res = run(args.work, steps, args.corpus, args.workers, args.repeat)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    print("\n".join(summary(step, res[step]) for step in steps))


def summary(step: str, f: dict) -> str:
    """One line per step: cold and warm medians, and their ratios."""
    return (f"{step:6s} cold {f['cold']['wall_s']:6.1f} s wall {f['cold']['cpu_s']:6.1f} s CPU | "
            f"warm {f['warm']['wall_s']:6.1f} s wall {f['warm']['cpu_s']:6.1f} s CPU | "
            f"cold/warm {f['cold / warm']['wall_s']:.2f} x wall, {f['cold / warm']['cpu_s']:.2f} x CPU")


if __name__ == "__main__":
    main(sys.argv[1:])
