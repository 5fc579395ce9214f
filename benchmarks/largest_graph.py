"""Peak memory of opening a shard folder and loading its largest graphs (issue #30 item 3: ≤ 1 GB).

``python -m benchmarks.largest_graph --work DIR [--nc 1150] [--json F]``
``python -m benchmarks.largest_graph --shards S [--json F]``

With ``--work``: synthesises ONE layout graph at the published maximum size into ``DIR/tree`` — c =
100,040 configs (``MAX_CONFIGS``) and at least ``--nc`` configurable nodes (the ``full`` profile plans
up to ≈ 1,150; a real nlp graph has up to 848) — builds it into ``DIR/shards`` (both reused when
present), then measures. With ``--shards``: measures an existing shard folder.

The measurement is ``benchmarks.scale``'s ``open`` step in its own measured process: ``open_dataset``,
then ``load_graph`` of the largest graph (by unique configs) and two others per collection, decoding 64
rows of each. Printed: peak RSS against the goal, the load time, the bytes each record keeps, and the
bytes a whole (c_u, nc, 3) int32 codes array of the largest graph would take (what a record held
before the codes were kept as stored). Exits 1 when the goal is missed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from .__main__ import machine, tpuprep_cmd
from .measure import measure
from .scale import GOAL_OPEN_RSS_MB

BIG_COLLECTION = "layout:nlp:random"


def make_corpus(work: Path, nc: int) -> Path:
    """``DIR/shards`` holding one layout graph with c = 100,040 configs and ≥ ``nc`` configurable nodes
    (synthesised and built once; reused when ``DIR/shards/manifest.json`` exists)."""
    from tpuprep.synth.driver import synthesize
    from tpuprep.synth.profiles import PROFILES, resolve_profile

    shards = work / "shards"
    if (shards / "manifest.json").exists():
        return shards
    profile = replace(resolve_profile("bench"), name="largest", counts={BIG_COLLECTION: (1, 0, 0)},
                      big=(BIG_COLLECTION, "train", 0, nc), nlp_nodes=(1400, 1500))
    t = time.perf_counter()
    PROFILES[profile.name] = profile  # synthesize takes a profile by name (this process only)
    synthesize(work / "tree", profile.name, collections=[BIG_COLLECTION])
    print(f"synthesised one graph in {time.perf_counter() - t:.0f} s", flush=True)
    m = measure(tpuprep_cmd("build", "--src", str(work / "tree" / "npz"), "--dst", str(shards), "-q"))
    print(f"built in {m.wall_s:.1f} s (peak RSS {m.peak_rss_mb:.0f} MB)", flush=True)
    return shards


def measure_open(shards: Path, out: Path) -> dict:
    """The ``open`` step on ``shards`` in a measured process: its figures and ``open_and_load``'s."""
    m = measure([sys.executable, "-c", "import sys; from benchmarks.scale import open_and_load; "
                 "open_and_load(sys.argv[1], sys.argv[2])", str(shards), str(out)])
    res = {"wall_s": round(m.wall_s, 2), "peak_rss_mb": round(m.peak_rss_mb, 1), "cpu_s": round(m.cpu_s, 2)}
    res.update(json.loads(out.read_text()))
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.largest_graph")
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--work", type=Path, help="scratch folder: one full-size graph is made there")
    where.add_argument("--shards", type=Path, help="measure this shard folder instead")
    ap.add_argument("--nc", type=int, default=1150, help="least configurable nodes of the made graph")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.work is not None:
        args.work.mkdir(parents=True, exist_ok=True)
    shards = args.shards or make_corpus(args.work, args.nc)
    with tempfile.TemporaryDirectory() as tmp:
        res = measure_open(shards, Path(tmp) / "open-step.json")
    largest = max(res["graphs"], key=lambda g: g["unique_configs"])
    import tpuprep

    ds = tpuprep.open_dataset(shards)
    nc = ds.graph_row(largest["graph_id"])["num_config_nodes"] or 0
    whole_bytes = largest["unique_configs"] * nc * 12
    ok = res["peak_rss_mb"] <= GOAL_OPEN_RSS_MB
    print(f"open_dataset + load_graph, largest graph {largest['graph_id']} ({largest['unique_configs']:,} "
          f"unique configs, nc {nc:,}): peak RSS {res['peak_rss_mb']:.0f} MB (goal <= {GOAL_OPEN_RSS_MB:.0f}: "
          f"{'met' if ok else 'MISSED'}), load {largest['load_s']:.2f} s, record keeps "
          f"{largest.get('kept_mb', float('nan')):.1f} MB; a whole (c_u, nc, 3) int32 array: {whole_bytes / 2**20:.0f} MB")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "open": res, "nc": nc,
                                         "whole_codes_bytes": whole_bytes, "goal_mb": GOAL_OPEN_RSS_MB,
                                         "ok": ok}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
