"""A lower bound for the build, per layout file: the floor, the build's kernels and zstd alone, in one run.

``python -m benchmarks.bound SRC... [--processes 2] [--level 3] [--json F]``

Issue #16 asks for a build within 1.3 × (per byte) and 2 × (3 minutes on this machine) of the inflate
floor. This measures, on each layout file (tile files hold 0.05 % of the bytes), the CPU time of the
work every exact build of these shards must do, done as the build does it today, with none of the
build's plumbing (no Parquet pages, Arrow tables, part files, manifests, hashes of files, Python
orchestration). Faster kernels would lower ``kernels`` and ``gather``; ``read`` and ``zstd`` are the
inflater's and the compressor's own work:

- ``floor``: ISA-L inflate + CRC-32 of every member (``floor.inflate_isal``: 1 MiB steps), as the
  floor benchmark and ``benchmarks.scale`` measure it;
- ``read``: the build's own streaming read of ``node_config_feat`` in 1 MiB chunks (``NpzFile.iter_rows``:
  inflate, CRC-32 and the Python of the stream), the other members read whole;
- ``kernels``: ``LayoutCollector.add`` (check, base-7 pack, row hash, tie check, dedup, tie-column store)
  and ``finish`` (the runtime minimum per duplicate group), as the build calls them;
- ``gather``: ``TiedCodes.stored_planes`` of every row group, as the writer cuts them
  (``layout_rows_per_group``): the bytes Parquet is handed;
- ``zstd``: ``zstandard`` at ``--level`` (the build's default: 3) on each row group's codes, one
  compression context reused for every page (Arrow creates one per page: more than this).

Every figure is the thread CPU clock (``time.thread_time``) of those calls alone, summed over the files;
``bound ÷ floor`` = (read + kernels + gather + zstd) ÷ floor. Files are shared among ``--processes``
spawned processes, largest first (each process measures whole files). ``--json`` writes every file's
figures and the totals.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time
from pathlib import Path

from .floor import inflate_isal, shares

PARTS = ("read", "kernels", "gather", "zstd")


def layout_files(sources: list[Path]) -> dict[Path, bool]:
    """The layout npz files of each source (a TpuGraphs tree or part of one, or one file of it, as
    ``tpuprep build --src`` takes it: ``inputs.discover``) → whether their split has runtimes."""
    from tpuprep.inputs import discover

    found: dict[Path, bool] = {}
    for src in sources:
        inputs, _ = discover(src, collections=["layout"])
        found.update({Path(i.path): i.split != "test" for i in inputs})
    return found


def measure_file(path: Path, labelled: bool, level: int) -> dict:
    """CPU seconds of the floor and of each part of the bound on one layout npz (``PARTS``);
    ``labelled``: its runtimes are kept (not the test split), as in the build."""
    import zstandard

    from tpuprep.convert import rows_per_chunk
    from tpuprep.io.npz import NpzFile
    from tpuprep.kernels.base7 import SLOTS
    from tpuprep.kernels.tied import LayoutCollector
    from tpuprep.options import BuildOptions
    from tpuprep.shards.writer import layout_rows_per_group

    t0 = time.thread_time()
    inflated = inflate_isal(path)
    spent = {"floor": time.thread_time() - t0, **dict.fromkeys(PARTS, 0.0)}

    t0 = time.thread_time()
    with NpzFile(path) as f:
        small = {k: f.read(k) for k in f.members if k != "node_config_feat"}
        member = f.members["node_config_feat"]
        c, nc = member.shape[0], member.shape[1]
        runtime = small["config_runtime"] if labelled else None
        rows = rows_per_chunk(nc * SLOTS * member.dtype.itemsize, BuildOptions().chunk_bytes)
        chunks = f.iter_rows("node_config_feat", rows)
        spent["read"] += time.thread_time() - t0
        collector = LayoutCollector(c, nc, with_runtime=labelled)
        while True:
            t0 = time.thread_time()
            item = next(chunks, None)
            spent["read"] += time.thread_time() - t0
            if item is None:
                break
            start, chunk = item
            t0 = time.thread_time()
            collector.add(chunk, runtime[start : start + len(chunk)] if labelled else None)
            spent["kernels"] += time.thread_time() - t0
    t0 = time.thread_time()
    result = collector.finish()
    spent["kernels"] += time.thread_time() - t0

    codes = result.codes
    unique = len(result.group_size)
    step = layout_rows_per_group(codes.num_columns)
    cctx = zstandard.ZstdCompressor(level=level)
    compressed = stored = 0
    for start in range(0, unique, step):
        t0 = time.thread_time()
        planes = codes.stored_planes(start, start + step)
        t1 = time.thread_time()
        compressed += len(cctx.compress(planes.data))
        spent["zstd"] += time.thread_time() - t1
        spent["gather"] += t1 - t0
        stored += planes.nbytes
    return {"file": path.as_posix(), "labelled": labelled, "inflated_bytes": inflated, "configs": c, "unique": unique, "nc": nc,
            "nt": codes.num_columns, "codes_bytes": stored, "zstd_bytes": compressed,
            **{k: round(v, 4) for k, v in spent.items()}}


def measure_files(paths: list[Path], labelled: dict[Path, bool], level: int) -> list[dict]:
    """``measure_file`` of each path, in a process set up as a build worker is (``warm_worker``: thread
    caps, malloc tuning, store buffers kept between graphs, Numba kernels loaded before the first file)."""
    from tpuprep.runners.worker import warm_worker

    warm_worker()
    return [measure_file(p, labelled[p], level) for p in paths]


def totals(rows: list[dict]) -> dict:
    """Sums over the files and the ratios to the floor."""
    out = {k: round(sum(r[k] for r in rows), 3) for k in ("floor", *PARTS)}
    out["bound"] = round(sum(out[k] for k in PARTS), 3)
    for k in (*PARTS, "bound"):
        out[f"{k}_over_floor"] = round(out[k] / out["floor"], 3)
    out["files"] = len(rows)
    out["inflated_gb"] = round(sum(r["inflated_bytes"] for r in rows) / 1e9, 2)
    out["codes_gb"] = round(sum(r["codes_bytes"] for r in rows) / 1e9, 3)
    out["zstd_ratio"] = round(sum(r["zstd_bytes"] for r in rows) / max(1, sum(r["codes_bytes"] for r in rows)), 4)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", type=Path, help="TpuGraphs trees (or parts, or files of one)")
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--level", type=int, default=3, help="zstd level (the build's default: 3)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    labelled = layout_files(args.inputs)
    if not labelled:
        raise SystemExit("no layout npz files found")
    parts = [s for s in shares(list(labelled), max(1, args.processes)) if s]
    with multiprocessing.get_context("spawn").Pool(len(parts)) as pool:
        rows = [r for part in pool.starmap(measure_files, [(s, labelled, args.level) for s in parts])
                for r in part]
    total = totals(rows)
    print(f"{total['files']} layout files, {total['inflated_gb']} GB inflated, {total['codes_gb']} GB of stored "
          f"codes (zstd {total['zstd_ratio']}x), CPU seconds summed over {len(parts)} processes:")
    print("| floor | read | kernels | gather | zstd | bound | bound ÷ floor |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {total['floor']} | {total['read']} | {total['kernels']} | {total['gather']} | {total['zstd']} "
          f"| {total['bound']} | {total['bound_over_floor']} |")
    print("÷ floor: " + ", ".join(f"{k} {total[f'{k}_over_floor']}" for k in PARTS))
    if args.json:
        args.json.write_text(json.dumps({"level": args.level, "totals": total, "files": rows}, indent=1))


if __name__ == "__main__":
    main()
