"""The fixed cost of a row group in the layout configs writer, measured on a build's own shards.

``python -m benchmarks.row_groups SHARDS [--shards 12] [--max-mb 64] [--repeat 5] [--variants] [--json F]``

A layout row group holds ≈ 32 KiB of codes (at least 64 configs: the unit of sampled reads, §7), so a
quarter of ``full`` writes ≈ 69,000 of them, each of seven column chunks with its own pages, encoders,
statistics, page-index entries and compressor calls. This rewrites whole ``layout_configs`` shards of
``SHARDS`` (read back as Arrow tables) with the build's writer options (``writer.parquet_options``) into
memory, three ways, and times each on the thread CPU clock (best of ``--repeat``):

- ``build``: the shard's own rows per row group (as the build cut them);
- ``coarse``: 16 × as many rows per row group (the same bytes in 1/16 of the row groups);
- ``uncompressed``: as ``build``, every column uncompressed (what is left without zstd).

``fixed µs per row group`` = (build − coarse) ÷ (row groups of build − of coarse), summed over the
shards: the part of the writer's CPU that follows the number of row groups, not the bytes.
``projected`` multiplies it by the layout row groups of every shard of ``SHARDS`` (footers only). Up
to ``--shards`` shards are measured, spread evenly over those holding at most ``--max-mb`` MB of
uncompressed codes (row groups are what matters here, not bytes). ``--variants`` measures the fixed
cost again with each of the writer's page index, page checksums, statistics and dictionary encodings
turned off in turn (``VARIANTS``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

COARSE = 16
VARIANTS = {"no page index": {"write_page_index": False}, "no page checksums": {"write_page_checksum": False},
            "no statistics": {"write_statistics": False}, "no dictionaries": {"use_dictionary": False}}
"""Writer features ``--variants`` turns off, one at a time (files written so are not tpuprep's shards)."""


def _write_cpu(table, rows: int, options: dict, repeat: int) -> tuple[float, int]:
    """Best CPU seconds of writing ``table`` in row groups of ``rows``, and the row groups written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    best = float("inf")
    for _ in range(repeat):
        sink = pa.BufferOutputStream()
        t0 = time.thread_time()
        with pq.ParquetWriter(sink, table.schema, **options) as w:
            w.write_table(table, row_group_size=rows)
        best = min(best, time.thread_time() - t0)
    return best, pq.ParquetFile(pa.BufferReader(sink.getvalue())).metadata.num_row_groups


def choose(shards: Path, count: int, max_mb: float) -> tuple[list[Path], int]:
    """Up to ``count`` layout_configs shard files spread over sizes (≤ ``max_mb`` MB of codes each), and
    the layout row groups of the whole folder."""
    import pyarrow.parquet as pq

    from tpuprep.shards.layout import MANIFEST

    manifest = json.loads((shards / MANIFEST).read_text())
    sized, total_groups = [], 0
    for s in manifest["shards"]:
        if s["table"] != "layout_configs":
            continue
        meta = pq.ParquetFile(shards / s["path"]).metadata
        total_groups += meta.num_row_groups
        codes = meta.schema.names.index("codes")
        mb = sum(meta.row_group(i).column(codes).total_uncompressed_size for i in range(meta.num_row_groups)) / 1e6
        if mb <= max_mb and meta.num_row_groups > 1:
            sized.append((mb, shards / s["path"]))
    sized.sort()
    step = max(1, len(sized) // max(1, count))
    return [p for _, p in sized[::step][:count]], total_groups


def _fixed(table, rows: int, options: dict, repeat: int) -> tuple[float, int, float, int]:
    """(CPU s, row groups) of writing ``table`` in row groups of ``rows`` and of ``COARSE`` × ``rows``."""
    build, groups = _write_cpu(table, rows, options, repeat)
    coarse, coarse_groups = _write_cpu(table, rows * COARSE, options, repeat)
    return build, groups, coarse, coarse_groups


def _per_row_group(build: float, groups: int, coarse: float, coarse_groups: int) -> float:
    """µs of writer CPU per row group beyond the coarse write's."""
    return 1e6 * (build - coarse) / max(1, groups - coarse_groups)


def _summed_fixed(tables: list, options: dict, repeat: int) -> float:
    """``_per_row_group`` over every (path, table, rows, row groups) of ``tables`` written with ``options``."""
    build = coarse = 0.0
    groups = coarse_groups = 0
    for _, table, rows, _ in tables:
        b, g, c, cg = _fixed(table, rows, options, repeat)
        build, groups, coarse, coarse_groups = build + b, groups + g, coarse + c, coarse_groups + cg
    return _per_row_group(build, groups, coarse, coarse_groups)


def measure(shards: Path, count: int, max_mb: float, repeat: int, level: int, variants: bool = False) -> dict:
    """The three rewrites of each chosen shard (seconds, row groups), their sums, the fixed cost per row
    group (µs) and its projection on every layout row group of ``shards`` (CPU seconds); with
    ``variants``, the fixed cost again with each writer feature of ``VARIANTS`` turned off."""
    import pyarrow.parquet as pq

    from tpuprep.shards.writer import parquet_options

    build_opts = parquet_options("layout_configs", level)
    flat_opts = {**build_opts, "compression": "none", "compression_level": None}
    paths, total_groups = choose(shards, count, max_mb)
    tables = []
    for path in paths:
        f = pq.ParquetFile(path)
        tables.append((path, f.read(), f.metadata.row_group(0).num_rows, f.metadata.num_row_groups))
    if tables:  # the writer's first use (allocator pools, lazy imports) is not a row group's cost
        _write_cpu(tables[0][1], 64, build_opts, 1)
    rows_out, sums = [], {"build": 0.0, "coarse": 0.0, "uncompressed": 0.0, "groups": 0, "coarse_groups": 0}
    for path, table, rows, stored_groups in tables:
        build, groups, coarse, coarse_groups = _fixed(table, rows, build_opts, repeat)
        flat, _ = _write_cpu(table, rows, flat_opts, repeat)
        if groups != stored_groups:
            raise RuntimeError(f"{path}: rewrote {groups} row groups, the shard has {stored_groups}")
        rows_out.append({"shard": path.name, "configs": table.num_rows, "rows_per_group": rows, "groups": groups,
                         "coarse_groups": coarse_groups, "build_s": round(build, 4), "coarse_s": round(coarse, 4),
                         "uncompressed_s": round(flat, 4)})
        for k, v in (("build", build), ("coarse", coarse), ("uncompressed", flat), ("groups", groups),
                     ("coarse_groups", coarse_groups)):
            sums[k] += v
    fixed = _per_row_group(sums["build"], sums["groups"], sums["coarse"], sums["coarse_groups"])
    out = {"shards": rows_out, "totals": {k: round(v, 4) for k, v in sums.items()},
           "fixed_us_per_row_group": round(fixed, 1), "layout_row_groups_in_folder": total_groups,
           "projected_fixed_cpu_s": round(fixed * total_groups / 1e6, 2)}
    if variants:
        out["variants_fixed_us_per_row_group"] = {
            name: round(_summed_fixed(tables, {**build_opts, **change}, repeat), 1) for name, change in VARIANTS.items()}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shards", type=Path)
    ap.add_argument("--shards", dest="count", type=int, default=12)
    ap.add_argument("--max-mb", type=float, default=64.0)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--level", type=int, default=3)
    ap.add_argument("--variants", action="store_true", help="also with each writer feature of VARIANTS off")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    res = measure(args.shards, args.count, args.max_mb, args.repeat, args.level, args.variants)
    t = res["totals"]
    print(f"{len(res['shards'])} shards, {t['groups']} row groups as built, {t['coarse_groups']} at {COARSE}x the rows:")
    print("| build CPU | coarse CPU | uncompressed CPU | fixed µs per row group | row groups in SHARDS | projected fixed CPU |")
    print("|---:|---:|---:|---:|---:|---:|")
    print(f"| {t['build']} s | {t['coarse']} s | {t['uncompressed']} s | {res['fixed_us_per_row_group']} "
          f"| {res['layout_row_groups_in_folder']} | {res['projected_fixed_cpu_s']} s |")
    for name, us in res.get("variants_fixed_us_per_row_group", {}).items():
        print(f"{name}: {us} µs per row group")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
