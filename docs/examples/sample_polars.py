"""Sample k unique configs of one graph with polars (no tpuprep needed): ``scan_parquet`` with a filter on
``graph_id`` and ``config_id.is_in(rows)``, or, when one shard holds the graph alone, on the row numbers
(``row_index_name``: its rows are config_id 0..c_u-1 in order, so polars need not read ``config_id`` to
filter; the ids read are checked). polars skips the row groups whose ``graph_id`` statistics exclude the
graph, so no other graph is decompressed; it does not check ``is_in`` against the ``config_id``
statistics (polars 2.1: a range filter is pruned, a list is not), so the graph's own row groups are all
read: ``parallel="prefiltered"`` evaluates the filter first and decodes the other columns only where it
holds. Only the shards whose graph range (``first_graph``..``last_graph`` in manifest.json) holds the
graph are scanned (polars parses the footer of every file it scans, on every scan), and a graph's row
(c_u, tie) is read once. The same rows and arrays as ``tpuprep``'s ``Dataset.sample_configs(graph_id, k,
seed)``.

Usage: python sample_polars.py SHARDS GRAPH_ID OUT [K [SEED]]  -> OUT/<name>.npy
"""

import json
import sys
from functools import cache
from pathlib import Path

import numpy as np
import polars as pl

DIGITS = (np.arange(7**6)[:, None] // 7 ** np.arange(6) % 7 - 1).astype(np.int8)  # (7**6, 6): code -> 6 values


def decode_base7(codes: np.ndarray) -> np.ndarray:
    """(..., 3) base-7 codes -> (..., 18) int8 layouts: slot 6t+i = (code_t // 7**i) % 7 - 1, looked up in
    DIGITS (about 3 times faster than dividing every code six times)."""
    return DIGITS[codes].reshape(*codes.shape[:-1], 18)


@cache
def shard_ranges(shards: str) -> list[tuple[str, str, str, Path]]:
    """(table, first_graph, last_graph, path) of every shard in SHARDS/manifest.json (read once)."""
    manifest = json.loads(Path(shards, "manifest.json").read_text())
    return [(s["table"], s["first_graph"], s["last_graph"], Path(shards, s["path"])) for s in manifest["shards"]]


def holding(shards: str, graph_id: str, table: str) -> tuple[list[Path], bool]:
    """The ``*_graphs`` or ``*_configs`` shards whose graph range holds ``graph_id``, and whether they
    hold that graph alone."""
    found = [(p, first == last) for t, first, last, p in shard_ranges(shards)
             if t.endswith(table) and first <= graph_id <= last]
    if not found:
        raise KeyError(f"no graph {graph_id!r} in {shards}")
    return [p for p, _ in found], all(alone for _, alone in found)


@cache
def graph_row(shards: str, graph_id: str) -> tuple[int, int, np.ndarray | None]:
    """(c_u, nt, tie) of a graph from its ``*_graphs`` row, read once (nt and tie: layout only)."""
    graph = (pl.scan_parquet(holding(shards, graph_id, "_graphs")[0]).filter(pl.col("graph_id") == graph_id)
             .select(pl.col("^(num_unique_configs|num_config_columns|config_node_tie)$")).collect())
    if graph.height != 1:
        raise KeyError(f"no graph {graph_id!r} in {shards}")
    if "config_node_tie" not in graph.columns:  # tile
        return graph["num_unique_configs"].item(), 0, None
    return (graph["num_unique_configs"].item(), graph["num_config_columns"].item(),
            graph["config_node_tie"].explode().to_numpy())


def sample_configs(shards: str, graph_id: str, k: int, seed: int = 0) -> dict[str, np.ndarray]:
    unique, nt, tie = graph_row(shards, graph_id)
    rows = np.random.default_rng(seed).choice(unique, min(k, unique), replace=False).astype(np.int64)
    paths, alone = holding(shards, graph_id, "_configs")
    if alone and len(paths) == 1:  # the shard is this graph's rows, config_id 0..c_u-1: filter on row numbers
        configs = (pl.scan_parquet(paths[0], row_index_name="row", parallel="prefiltered")
                   .filter(pl.col("row").is_in(rows.tolist())).drop("row").collect())
    else:
        configs = (pl.scan_parquet(paths, parallel="prefiltered")
                   .filter((pl.col("graph_id") == graph_id) & pl.col("config_id").is_in(rows.tolist())).collect())
    if not np.array_equal(configs["config_id"].to_numpy(), np.sort(rows)):
        raise ValueError(f"{graph_id}: the configs read are not config_id {sorted(rows.tolist())}")
    order = np.searchsorted(configs["config_id"].to_numpy(), rows)  # rows are sorted by config_id
    configs = configs[order.tolist()]  # back to the order drawn
    out = {"rows": rows}
    if configs["runtime"].null_count() == 0:  # null on the test split
        out["config_runtime"] = configs["runtime"].to_numpy()
    if tie is not None:  # layout: nt*3 little-endian int32 per config (tied nodes share one)
        codes = configs["codes"].bin.reinterpret(dtype=pl.Array(pl.Int32, 3 * nt), endianness="little")
        stored = codes.arr.explode().to_numpy().reshape(len(rows), -1, 3)
        out["node_config_feat"] = decode_base7(stored[:, tie])
    else:
        out["config_feat"] = configs["config_feat"].arr.explode().to_numpy().reshape(-1, 24)
        if configs["normalizer"].null_count() == 0:
            out["config_runtime_normalizers"] = configs["normalizer"].to_numpy()
    return out


if __name__ == "__main__":
    shards, graph_id, out = sys.argv[1:4]
    k, seed = (int(a) for a in (sys.argv[4:6] + ["64", "0"][len(sys.argv[4:6]):]))
    Path(out).mkdir(parents=True, exist_ok=True)
    for name, array in sample_configs(shards, graph_id, k, seed).items():
        np.save(Path(out, f"{name}.npy"), array)
