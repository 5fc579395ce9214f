"""What else a sampled read of today's layout could do, measured (RESULTS.md §17, §18): where pyarrow's
time goes, which polars filters prune row groups, and what a DuckDB query costs.

``python -m benchmarks.read_alternatives SHARDS [--graph GID] [--k 64] [--repeat 20]``

On the layout graph with the most unique configs (or ``--graph``), k rows drawn as ``sample_configs``
draws them, every path timed in rounds (``reading._best_of_rounds``, the same rows each time):

- pyarrow ``read_row_groups`` of the row groups holding the rows (``config_id`` and ``codes``, what
  ``sample_configs`` reads) from the shard file, and from the same file's bytes already in memory;
- polars over the graph's configs shard: a filter no row group can match (the footer alone), the
  ``config_id`` column of every row, a range filter (one row group), the sampled read's
  ``config_id.is_in(rows)``, the same rows as ``OR``-ed equalities, as ``row_index`` values (in-memory
  and streaming engine) and as one 1-row ``slice`` per row collected at once on one kept LazyFrame (what
  the docs' polars example does; both only when the graph fills its shard), and ``gather``. Each returns
  the rows it should (checked). The ``row_index`` filter is also timed selecting the row numbers
  alone, and against the same row numbers scanned unfiltered and filtered in memory afterwards;
- DuckDB on the same shard (one connection, footers cached): a filter no row group matches, one row
  (``config_id = r``: one row group scanned), the docs' example query ``graph_id = ? AND config_id IN
  (...)`` and, when the graph fills its shard, without the ``graph_id`` test (what the example then runs).

Every path is checked to return exactly the sampled config ids (pyarrow: among its whole row groups).
"""

from __future__ import annotations

import argparse
import functools
import json
import operator
from pathlib import Path

import numpy as np

from .reading import _best_of_rounds, largest_layout_graph


def measure(shards: Path, graph_id: str | None = None, k: int = 64, repeat: int = 20) -> dict:
    import duckdb
    import polars as pl
    import pyarrow as pa
    import pyarrow.parquet as pq

    import tpuprep
    from tpuprep.shards.reader import sample_rows

    ds = tpuprep.open_dataset(shards)
    graph_id = graph_id or largest_layout_graph(ds)
    groups, starts = ds._index(*ds._where(graph_id)).config_plan(graph_id)
    path = groups[0][0]
    fills = bool({p for p, _ in groups} == {path} and pq.ParquetFile(path).metadata.num_rows == starts[-1])
    rows = np.sort(sample_rows(int(starts[-1]), k, 0))
    rgs = [groups[i][1] for i in np.unique(np.searchsorted(starts, rows, side="right") - 1)]
    on_file = pq.ParquetFile(path, page_checksum_verification=True)
    in_memory = pq.ParquetFile(pa.BufferReader(pa.py_buffer(Path(path).read_bytes())),
                               page_checksum_verification=True)
    config_id, wanted = pl.col("config_id"), rows.tolist()

    def scan(predicate=None, select=None, **options):
        frame = pl.scan_parquet(path, **options)
        frame = frame if predicate is None else frame.filter(predicate)
        return (frame if select is None else frame.select(select)).collect()

    paths = {
        "pyarrow_file": lambda: on_file.read_row_groups(rgs, columns=["config_id", "codes"], use_threads=False),
        "pyarrow_in_memory": lambda: in_memory.read_row_groups(rgs, columns=["config_id", "codes"],
                                                               use_threads=False),
        "polars_no_match": lambda: scan(config_id == -1),
        "polars_config_id_column": lambda: scan(select="config_id"),
        "polars_one_range": lambda: scan(config_id.is_between(int(rows[0]), int(rows[0]) + k - 1)),
        "polars_is_in": lambda: scan(config_id.is_in(wanted)),
        "polars_or_equal": lambda: scan(functools.reduce(operator.or_, [config_id == r for r in wanted])),
        "polars_gather": lambda: scan(select=pl.all().gather(wanted)),
    }
    if fills:  # the shard's row numbers are the graph's config ids
        kept = pl.scan_parquet(path)  # one LazyFrame, as docs/examples/sample_polars.py keeps per shard
        row = pl.col("r")
        paths["polars_row_index"] = lambda: scan(row.is_in(wanted), row_index_name="r")
        paths["polars_row_index_streaming"] = lambda: (pl.scan_parquet(path, row_index_name="r")
                                                       .filter(row.is_in(wanted)).collect(engine="streaming"))
        paths["polars_row_index_only"] = lambda: scan(row.is_in(wanted), select="r", row_index_name="r")
        paths["polars_row_index_filtered_after"] = lambda: scan(select="r", row_index_name="r").filter(
            row.is_in(wanted))
        paths["polars_slices"] = lambda: pl.concat(pl.collect_all([kept.slice(r, 1) for r in wanted],
                                                                  engine="streaming"))
    duck = duckdb.connect()
    duck.execute("SET parquet_metadata_cache = true")
    in_list = ", ".join(map(str, wanted))

    def sql(where: str, *params):
        return duck.execute(f"SELECT config_id, runtime, codes FROM read_parquet(?) WHERE {where}",
                            [str(path), *params]).fetchnumpy()

    paths["duckdb_no_match"] = lambda: sql("config_id = -1")
    paths["duckdb_one_row"] = lambda: sql(f"config_id = {wanted[0]}")
    paths["duckdb_graph_id_and_in"] = lambda: sql(f"graph_id = ? AND config_id IN ({in_list})", graph_id)
    if fills:  # the docs' DuckDB example drops the graph_id test when the shard holds the graph alone
        paths["duckdb_in"] = lambda: sql(f"config_id IN ({in_list})")
    expect = {"polars_no_match": [], "duckdb_no_match": [], "duckdb_one_row": rows[:1],
              "polars_config_id_column": np.arange(int(starts[-1])),
              "polars_one_range": np.arange(int(rows[0]), min(int(rows[0]) + k, int(starts[-1])))}
    for name in paths:
        got = paths[name]()
        if name.startswith("pyarrow"):  # whole row groups: the rows are among them
            ids = got.column("config_id").to_numpy()
            ids = ids[np.isin(ids, rows)]
        else:
            ids = np.asarray(got["config_id" if "config_id" in got else "r"])
        assert np.array_equal(np.sort(ids), expect.get(name, rows)), name
    best = _best_of_rounds(paths, repeat)
    return {"graph_id": graph_id, "k": len(rows), "row_groups_read": len(rgs), "graph_row_groups": len(groups),
            "graph_fills_its_shard": fills,
            **{f"{name}_s": seconds for name, seconds in best.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.read_alternatives")
    ap.add_argument("shards", type=Path)
    ap.add_argument("--graph", default=None)
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=20, help="rounds")
    args = ap.parse_args()
    print(json.dumps(measure(args.shards, args.graph, args.k, args.repeat), indent=1))


if __name__ == "__main__":
    main()
