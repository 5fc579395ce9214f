"""Stored and uncompressed bytes of every column of a shard folder's tables, from the Parquet footers.

``python -m benchmarks.column_bytes SHARDS [--json F]``

For each table (``layout_configs``, ``layout_graphs``, ``tile_configs``, ``tile_graphs``) and each column:
the bytes its column chunks take in the files (``total_compressed_size``: after encoding and the
column's codec, page headers included), the bytes before the codec (``total_uncompressed_size``), their
ratio, the codecs found and the number of column chunks (row groups). This is what chose which columns
of ``layout_configs`` are stored uncompressed (schema 3.1, benchmarks/RESULTS.md §21): a ratio above 1
means the codec made the column larger. Nothing is decompressed; only footers are read.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def measure(shards: Path) -> dict:
    """{table: {column: {stored, uncompressed, ratio, codecs, chunks}}} over every shard of the folder."""
    import pyarrow.parquet as pq

    from tpuprep.shards.layout import MANIFEST

    manifest = json.loads((shards / MANIFEST).read_text())
    sums: dict = defaultdict(lambda: defaultdict(lambda: {"stored": 0, "uncompressed": 0, "codecs": set(), "chunks": 0}))
    for shard in manifest["shards"]:
        meta = pq.ParquetFile(shards / shard["path"]).metadata
        for rg in range(meta.num_row_groups):
            group = meta.row_group(rg)
            for c in range(group.num_columns):
                col = group.column(c)
                entry = sums[shard["table"]][col.path_in_schema.split(".")[0]]
                entry["stored"] += col.total_compressed_size
                entry["uncompressed"] += col.total_uncompressed_size
                entry["codecs"].add(col.compression)
                entry["chunks"] += 1
    return {table: {name: {**e, "codecs": sorted(e["codecs"]),
                           "ratio": round(e["stored"] / e["uncompressed"], 3) if e["uncompressed"] else None}
                    for name, e in columns.items()}
            for table, columns in sorted(sums.items())}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shards", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    result = measure(args.shards)
    print("| table | column | stored bytes | uncompressed bytes | stored ÷ uncompressed | codecs | chunks |")
    print("|---|---|---:|---:|---:|---|---:|")
    for table, columns in result.items():
        for name, e in columns.items():
            print(f"| {table} | {name} | {e['stored']:,} | {e['uncompressed']:,} | {e['ratio']} | "
                  f"{', '.join(e['codecs'])} | {e['chunks']:,} |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
