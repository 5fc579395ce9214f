"""What the byte planes of schema 3 buy: zstd on a layout graph's codes, plain int32 against byte planes.

``python -m benchmarks.codes_layout SHARDS [--graphs 3] [--levels 3,1] [--repeat 3] [--json F]``

On the ``--graphs`` layout graphs with the most stored codes bytes (c_u × nt, from the graphs shards),
each graph's codes are read back (``load_graph``), cut into the pages the writer makes (one per row group:
``writer.layout_rows_per_group(nt)`` configs), and compressed page by page with zstandard at each level,
one reused context per layout, best of ``--repeat`` on the process CPU clock, in two layouts of the same
bytes:

- ``plain``: each config's 3·nt int32 codes little-endian, interleaved (schema 2);
- ``planes``: the same codes in byte planes (``kernels.planes.split_planes``: what the shards store).

Per graph and level: MB/s of codes bytes compressed (the same codes bytes in both layouts), the ratio of
compressed to codes bytes, and ``planes`` ÷ ``plain`` for both. The planes are checked to hold the codes
read (joined back). This is zstd alone: the whole build's change is measured by ``benchmarks.scale``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def largest_layout_graphs(ds, n: int) -> list[str]:
    """The n layout graphs with the most stored codes (c_u × nt), largest first."""
    layout = [g for c in ds.collections if c.startswith("layout") for g in ds.graph_ids(c)]

    def codes(g: str) -> int:
        row = ds.graph_row(g)
        return int(row["num_unique_configs"]) * int(row["num_config_columns"])

    return sorted(layout, key=codes, reverse=True)[:n]


def _compress_all(pages: list[bytes], level: int, repeat: int) -> tuple[float, int]:
    """(best CPU seconds, compressed bytes) of compressing every page with one context."""
    import zstandard

    ctx = zstandard.ZstdCompressor(level=level)
    best, size = float("inf"), 0
    for _ in range(repeat):
        t0 = time.process_time()
        size = sum(len(ctx.compress(p)) for p in pages)
        best = min(best, time.process_time() - t0)
    return best, size


def measure(shards: Path, graphs: int = 3, levels: tuple[int, ...] = (3, 1), repeat: int = 3) -> dict:
    import tpuprep
    from tpuprep.kernels import join_planes, split_planes
    from tpuprep.shards.writer import layout_rows_per_group

    ds = tpuprep.open_dataset(shards)
    out: dict = {"graphs": []}
    for graph_id in largest_layout_graphs(ds, graphs):
        g = ds.load_graph(graph_id)
        tie = np.asarray(g.config_node_tie)
        stored = np.ascontiguousarray(g.config_codes[:, np.unique(tie, return_index=True)[1]])  # (c_u, nt, 3)
        c_u, nt = stored.shape[:2]
        rows = layout_rows_per_group(nt)
        flat = stored.reshape(c_u, -1)
        layouts = {"plain": flat.astype("<i4").view(np.uint8), "planes": split_planes(flat)}
        assert np.array_equal(join_planes(layouts["planes"]), flat)
        entry: dict = {"graph_id": graph_id, "c_u": c_u, "nt": nt, "rows_per_page": rows,
                       "codes_mb": round(flat.nbytes / 1e6, 1), "levels": {}}
        for level in levels:
            figures = {}
            for name, data in layouts.items():
                pages = [data[s:s + rows].tobytes() for s in range(0, c_u, rows)]
                seconds, size = _compress_all(pages, level, repeat)
                figures[name] = {"cpu_s": seconds, "mb_per_s": round(flat.nbytes / seconds / 1e6, 1),
                                 "ratio": round(size / flat.nbytes, 4)}
            figures["planes_over_plain"] = {
                "cpu": round(figures["planes"]["cpu_s"] / figures["plain"]["cpu_s"], 3),
                "bytes": round(figures["planes"]["ratio"] / figures["plain"]["ratio"], 3)}
            entry["levels"][str(level)] = figures
        out["graphs"].append(entry)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.codes_layout")
    ap.add_argument("shards", type=Path)
    ap.add_argument("--graphs", type=int, default=3)
    ap.add_argument("--levels", default="3,1", help="zstd levels, comma-separated")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    res = measure(args.shards, args.graphs, tuple(int(x) for x in args.levels.split(",")), args.repeat)
    text = json.dumps(res, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text)


if __name__ == "__main__":
    main()
