"""Sample k unique configs of one graph with polars (no tpuprep needed). A graph's rows never span two
shards and are sorted by config_id 0..c_u-1 (docs/schema.md), so config r of a layout graph is row
``first + r`` of its one configs shard: the example collects a 1-row ``slice`` per drawn row, all at once
(``pl.collect_all``) on one kept ``scan_parquet`` of the shard, so polars reads only the row groups holding
a drawn row and parses the shard's footer once. (A filter ``config_id.is_in(rows)`` would read every row
group of the graph: polars 2.1 prunes row groups on a range but not on a list.) Tile graphs are small: a
filter on ``graph_id`` and ``config_id``. The graph ids and config ids read are checked. The shard is the
one whose graph range (``first_graph``..``last_graph`` in manifest.json) holds the graph, and a graph's
row (c_u, tie) and first row are read once. The same rows and arrays as ``tpuprep``'s
``Dataset.sample_configs(graph_id, k, seed)``.

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


def codes_from_planes(data, k: int, nt: int) -> np.ndarray:
    """k layout ``codes`` values, concatenated (12*nt bytes each: the config's 3*nt int32 codes in byte
    planes, byte 0 of every code first) -> (k, nt, 3) int32."""
    planes = np.frombuffer(data, np.uint8).reshape(k, 4, 3 * nt)
    return np.ascontiguousarray(planes.transpose(0, 2, 1)).view("<i4").reshape(k, nt, 3)


@cache
def shard_ranges(shards: str) -> list[tuple[str, str, str, Path]]:
    """(table, first_graph, last_graph, path) of every shard in SHARDS/manifest.json (read once)."""
    manifest = json.loads(Path(shards, "manifest.json").read_text())
    return [(s["table"], s["first_graph"], s["last_graph"], Path(shards, s["path"])) for s in manifest["shards"]]


def holding(shards: str, graph_id: str, table: str) -> list[Path]:
    """The ``*_graphs`` or ``*_configs`` shards whose graph range holds ``graph_id`` (one per split at
    most; the graph is in one of them)."""
    found = [p for t, first, last, p in shard_ranges(shards) if t.endswith(table) and first <= graph_id <= last]
    if not found:
        raise KeyError(f"no graph {graph_id!r} in {shards}")
    return found


@cache
def scan(path: Path) -> pl.LazyFrame:
    """One lazy scan per shard, kept: the queries built on it reuse the footer polars parsed once."""
    return pl.scan_parquet(path)


@cache
def configs_start(shards: str, graph_id: str) -> tuple[Path, int]:
    """The configs shard holding the graph, and the row number there of its config 0 (the rows of the
    graphs before it come first); read once."""
    for path in holding(shards, graph_id, "_configs"):
        first = (scan(path).with_row_index("row").filter(pl.col("graph_id") == graph_id)
                 .select(pl.col("row").min()).collect().item())
        if first is not None:
            return path, first
    raise KeyError(f"no configs of graph {graph_id!r} in {shards}")


@cache
def graph_row(shards: str, graph_id: str) -> tuple[int, str, int, np.ndarray | None]:
    """(c_u, split, nt, tie) of a graph from its ``*_graphs`` row, read once (nt and tie: layout only)."""
    graph = (pl.scan_parquet(holding(shards, graph_id, "_graphs")).filter(pl.col("graph_id") == graph_id)
             .select(pl.col("^(num_unique_configs|split|num_config_columns|config_node_tie)$")).collect())
    if graph.height != 1:
        raise KeyError(f"no graph {graph_id!r} in {shards}")
    if "config_node_tie" not in graph.columns:  # tile
        return graph["num_unique_configs"].item(), graph["split"].item(), 0, None
    return (graph["num_unique_configs"].item(), graph["split"].item(), graph["num_config_columns"].item(),
            graph["config_node_tie"].explode().to_numpy())


def sample_configs(shards: str, graph_id: str, k: int, seed: int = 0) -> dict[str, np.ndarray]:
    unique, split, nt, tie = graph_row(shards, graph_id)
    rows = np.random.default_rng(seed).choice(unique, min(k, unique), replace=False).astype(np.int64)
    (path, first), wanted = configs_start(shards, graph_id), np.sort(rows)
    if tie is not None:  # layout: a 1-row slice per drawn row reads only the row group (≈ 32 KiB) holding it
        configs = pl.concat(pl.collect_all([scan(path).slice(first + r, 1) for r in wanted.tolist()]
                                           or [scan(path).head(0)], engine="streaming"))
    else:  # tile: the graph's rows, pruned by graph_id statistics
        configs = scan(path).filter((pl.col("graph_id") == graph_id)
                                    & pl.col("config_id").is_in(wanted.tolist())).collect()
    if not (configs["graph_id"] == graph_id).all() or not np.array_equal(configs["config_id"].to_numpy(), wanted):
        raise ValueError(f"{graph_id}: the configs read are not config_id {wanted.tolist()} of this graph")
    order = np.searchsorted(configs["config_id"].to_numpy(), rows)  # rows are sorted by config_id
    configs = configs[order.tolist()]  # back to the order drawn
    out = {"rows": rows}
    if split != "test":  # runtimes are null on the test split
        out["config_runtime"] = configs["runtime"].to_numpy()
    if tie is not None:  # layout: nt*3 int32 per config in byte planes (tied nodes share one)
        codes = configs["codes"].bin.reinterpret(dtype=pl.Array(pl.UInt8, 12 * nt))
        stored = codes_from_planes(codes.arr.explode().to_numpy(), len(rows), nt)
        out["node_config_feat"] = decode_base7(stored[:, tie])
    else:
        out["config_feat"] = configs["config_feat"].arr.explode().to_numpy().reshape(-1, 24)
        if split != "test":
            out["config_runtime_normalizers"] = configs["normalizer"].to_numpy()
    return out


if __name__ == "__main__":
    shards, graph_id, out = sys.argv[1:4]
    k, seed = (int(a) for a in (sys.argv[4:6] + ["64", "0"][len(sys.argv[4:6]):]))
    Path(out).mkdir(parents=True, exist_ok=True)
    for name, array in sample_configs(shards, graph_id, k, seed).items():
        np.save(Path(out, f"{name}.npy"), array)
