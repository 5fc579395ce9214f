"""A measured alternative for issue #14, not the shipped layout: a graph's configs stored in a seeded random
permutation with a ``position`` column, so that k consecutive positions are k distinct configs drawn
uniformly (one of the issue's ideas), against today's layout on the same graph.

``python -m benchmarks.block_layout SHARDS [--graph GID] [--k 64] [--repeat 30]``

1. The graph's configs (today's columns, read whole from its shard) are written twice with the shard
   writer's Parquet options (``writer.parquet_options``) and today's rows per row group: in today's order (config_id), and permuted
   (``default_rng(0).permutation(c_u)``) with ``position`` (int32 0..c_u-1, statistics on). Bytes of both.
2. Timed in rounds (``reading._best_of_rounds``; a new draw per call), each returning k configs decoded to
   (k, nc, 18) int8: ``Dataset.sample_configs`` (today: k rows anywhere in the graph), and a block of k
   consecutive positions read by pyarrow (the one or two row groups holding it; the file opened once, as
   ``sample_configs`` keeps its shards open), by polars (``position.is_between``, which polars prunes
   by the row-group statistics) and by DuckDB (``WHERE position BETWEEN``). Each block read is checked
   against ``load_graph``. Also a polars and a DuckDB query that no row group can match (footer and
   planning alone: what each generic query pays before reading a row).

A block is a uniform draw of k distinct configs, but two draws are not independent: a config only ever
shares a batch with its neighbours in the stored permutation.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from .reading import _best_of_rounds, largest_layout_graph


def write_both(ds, graph_id: str, folder: Path) -> tuple[Path, Path, int]:
    """(today's order, permuted) files of the graph's configs in ``folder``, and rows per row group."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tpuprep.options import BuildOptions
    from tpuprep.shards.writer import parquet_options

    groups = ds._index(*ds._where(graph_id)).config_row_groups(graph_id)
    paths = sorted({p for p, _ in groups})
    table = pa.concat_tables(pq.ParquetFile(p).read_row_groups([rg for q, rg in groups if q == p]) for p in paths)
    rows = pq.ParquetFile(groups[0][0]).metadata.row_group(groups[0][1]).num_rows
    opts = parquet_options("layout_configs", BuildOptions().compression_level)
    today, permuted = folder / "today.parquet", folder / "permuted.parquet"
    pq.write_table(table, today, row_group_size=rows, **opts)
    perm = np.random.default_rng(0).permutation(table.num_rows)
    shuffled = table.take(pa.array(perm)).append_column(
        "position", pa.array(np.arange(table.num_rows, dtype=np.int32)))
    opts["column_encoding"] = {**opts["column_encoding"], "position": "DELTA_BINARY_PACKED"}
    opts["write_statistics"] = [*opts["write_statistics"], "position"]
    if isinstance(opts["compression"], dict):  # per-column codecs: the added column is a small one too
        opts["compression"] = {**opts["compression"], "position": "none"}
    pq.write_table(shuffled, permuted, row_group_size=rows, **opts)
    return today, permuted, rows


def measure(shards: Path, graph_id: str | None = None, k: int = 64, repeat: int = 30) -> dict:
    import duckdb
    import polars as pl
    import pyarrow.parquet as pq

    import tpuprep
    from tpuprep import decode_base7
    from tpuprep.kernels import join_planes

    ds = tpuprep.open_dataset(shards)
    graph_id = graph_id or largest_layout_graph(ds)
    structure = ds.load_graph(graph_id, configs=False)
    c_u, tie = structure.num_unique_configs, np.asarray(structure.config_node_tie)
    k = min(k, c_u)
    with tempfile.TemporaryDirectory(prefix="block-") as tmp:
        today, permuted, rows = write_both(ds, graph_id, Path(tmp))
        pf = pq.ParquetFile(permuted, page_checksum_verification=True)
        meta = pf.metadata
        starts = np.cumsum([0] + [meta.row_group(i).num_rows for i in range(meta.num_row_groups)])
        con = duckdb.connect()
        con.execute("SET parquet_metadata_cache = true")
        draws = iter(range(10**6))

        def start() -> int:
            return int(np.random.default_rng(next(draws)).integers(0, c_u - k + 1))

        def decode(ids: np.ndarray, codes: bytes) -> tuple[np.ndarray, np.ndarray]:
            stored = join_planes(np.frombuffer(codes, np.uint8).reshape(len(ids), -1)).reshape(len(ids), -1, 3)
            return ids, decode_base7(stored)[:, tie]

        def block_pyarrow(s: int | None = None):
            s = start() if s is None else s
            first, last = np.searchsorted(starts, [s, s + k - 1], side="right") - 1
            t = pf.read_row_groups(list(range(first, last + 1)), columns=["config_id", "runtime", "codes"],
                                   use_threads=False).slice(s - starts[first], k)
            return decode(t.column("config_id").to_numpy(), b"".join(t.column("codes").to_pylist()))

        def block_polars(s: int | None = None):
            s = start() if s is None else s
            df = (pl.scan_parquet(permuted, parallel="prefiltered")
                  .filter(pl.col("position").is_between(s, s + k - 1))
                  .select("config_id", "runtime", "codes").collect())
            return decode(df["config_id"].to_numpy(), b"".join(df["codes"].to_list()))

        def block_duckdb(s: int | None = None):
            s = start() if s is None else s
            got = con.execute("SELECT config_id, runtime, codes FROM read_parquet(?) WHERE position BETWEEN ? AND ? "
                              "ORDER BY position", [str(permuted), s, s + k - 1]).fetchnumpy()
            return decode(np.asarray(got["config_id"]), b"".join(got["codes"].tolist()))

        def today_sample():
            return ds.sample_configs(graph_id, k, seed=next(draws)).node_config_feat

        paths = {"sample_configs": today_sample, "block_pyarrow": block_pyarrow, "block_polars": block_polars,
                 "block_duckdb": block_duckdb,
                 # what a query costs the generic readers before it reads a row: one no row group can match
                 "no_match_polars": lambda: pl.scan_parquet(permuted).filter(pl.col("position") < 0).collect(),
                 "no_match_duckdb": lambda: con.execute("SELECT config_id, runtime, codes FROM read_parquet(?) "
                                                        "WHERE position < 0", [str(permuted)]).fetchnumpy()}
        full = ds.load_graph(graph_id)
        for name in ("block_pyarrow", "block_polars", "block_duckdb"):
            ids, feats = paths[name](c_u - k)  # the last block: it may span two row groups
            assert len(set(ids.tolist())) == k and np.array_equal(feats, full.node_config_feat(ids)), name
        today_sample()  # warm: footers, index, tie array
        best = _best_of_rounds(paths, repeat)
        out = {"graph_id": graph_id, "k": k, "num_unique_configs": c_u, "rows_per_row_group": rows,
               "bytes_today_order": today.stat().st_size, "bytes_permuted": permuted.stat().st_size}
    out["bytes_ratio"] = out["bytes_permuted"] / out["bytes_today_order"]
    out.update({f"{name}_s": seconds for name, seconds in best.items()})
    for name in ("block_pyarrow", "block_polars", "block_duckdb"):
        out[f"{name}_vs_block_pyarrow"] = out[f"{name}_s"] / out["block_pyarrow_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.block_layout")
    ap.add_argument("shards", type=Path)
    ap.add_argument("--graph", default=None, help="a layout graph id (default: the one with most unique configs)")
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=30, help="rounds")
    args = ap.parse_args()
    print(json.dumps(measure(args.shards, args.graph, args.k, args.repeat), indent=1))


if __name__ == "__main__":
    main()
