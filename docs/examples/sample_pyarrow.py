"""Sample k unique configs of one graph with pyarrow, reading only the row groups that hold them (no
tpuprep needed; the same rows and arrays as ``tpuprep``'s ``Dataset.sample_configs(graph_id, k, seed)``).

Usage: python sample_pyarrow.py SHARDS GRAPH_ID OUT [K [SEED]]  -> OUT/<name>.npy (rows, config_runtime,
node_config_feat | config_feat, config_runtime_normalizers).
"""

import sys
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

COLUMNS = ["graph_id", "config_id", "runtime", "normalizer", "config_feat", "codes"]


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
def row_groups(path: Path) -> tuple[pq.ParquetFile, list, np.ndarray, np.ndarray]:
    """An open shard (its footer parsed once per process: sampling reads the same files again and again)
    and, per row group, the graph_id (min, max) and config_id min and max from its statistics (None and
    ±inf where a row group has none: it may hold anything)."""
    pf = pq.ParquetFile(path)
    names = pf.schema_arrow.names
    graphs, low, high = [], [], []
    for rg in range(pf.metadata.num_row_groups):
        meta = pf.metadata.row_group(rg)
        stats = meta.column(names.index("graph_id")).statistics
        graphs.append((stats.min, stats.max) if stats is not None and stats.has_min_max else None)
        stats = meta.column(names.index("config_id")).statistics if "config_id" in names else None
        has = stats is not None and stats.has_min_max
        low.append(stats.min if has else -np.inf)
        high.append(stats.max if has else np.inf)
    return pf, graphs, np.array(low, np.float64), np.array(high, np.float64)


def read_matching(files: list[Path], graph_id: str, rows: np.ndarray | None, columns: list[str]) -> pa.Table:
    """The rows of ``graph_id`` (and, if given, config_id in ``rows``) from the row groups whose graph_id
    and config_id statistics admit them: only those row groups are decompressed."""
    pieces = []
    for path in files:
        pf, graphs, low, high = row_groups(path)
        admit = np.array([g is None or g[0] <= graph_id <= g[1] for g in graphs], bool)
        if rows is not None:  # a sampled row inside [min, max]?
            admit &= np.searchsorted(rows, high, "right") > np.searchsorted(rows, low, "left")
        groups = np.flatnonzero(admit).tolist()
        if groups:
            wanted = [c for c in columns if c in pf.schema_arrow.names]
            table = pf.read_row_groups(groups, columns=wanted, use_threads=False)  # a few small row groups
            keep = pc.equal(table["graph_id"], graph_id)
            if rows is not None:
                keep = pc.and_(keep, pc.is_in(table["config_id"], pa.array(rows, pa.int32())))
            pieces.append(table.filter(keep))
    if not pieces and files:  # no row matched (k = 0): no rows, the shards' columns
        schema = row_groups(files[0])[0].schema_arrow
        pieces.append(schema.empty_table().select([c for c in columns if c in schema.names]))
    return pa.concat_tables(pieces) if pieces else None


def sample_configs(shards: str, graph_id: str, k: int, seed: int = 0) -> dict[str, np.ndarray]:
    folder = Path(shards, *graph_id.rsplit(":", 1)[0].split(":"))  # layout/xla/random, tile/xla, ...
    graph = read_matching(sorted((folder / "graphs").glob("*.parquet")), graph_id, None,
                          ["graph_id", "num_unique_configs", "split", "num_config_columns", "config_node_tie"])
    if graph is None or graph.num_rows != 1:
        raise KeyError(f"no graph {graph_id!r} under {folder}")
    unique = graph["num_unique_configs"][0].as_py()
    rows = np.random.default_rng(seed).choice(unique, min(k, unique), replace=False).astype(np.int64)
    configs = read_matching(sorted((folder / "configs").glob("*.parquet")), graph_id, np.sort(rows), COLUMNS)
    order = np.searchsorted(configs["config_id"].to_numpy(), rows)  # back to the order drawn
    configs = configs.sort_by("config_id").take(pa.array(order))
    out = {"rows": rows}
    test = graph["split"][0].as_py() == "test"  # runtimes are null on the test split
    if not test:
        out["config_runtime"] = configs["runtime"].to_numpy()
    if "codes" in configs.column_names:  # layout: nt*3 int32 per config in byte planes (tied nodes share one)
        data = b"".join(v.as_py() for v in configs["codes"])
        stored = codes_from_planes(data, len(rows), graph["num_config_columns"][0].as_py())
        tie = graph["config_node_tie"].combine_chunks().flatten().to_numpy()
        out["node_config_feat"] = decode_base7(stored[:, tie])
    else:
        out["config_feat"] = configs["config_feat"].combine_chunks().flatten().to_numpy().reshape(-1, 24)
        if not test:
            out["config_runtime_normalizers"] = configs["normalizer"].to_numpy()
    return out


if __name__ == "__main__":
    shards, graph_id, out = sys.argv[1:4]
    k, seed = (int(a) for a in (sys.argv[4:6] + ["64", "0"][len(sys.argv[4:6]):]))
    Path(out).mkdir(parents=True, exist_ok=True)
    for name, array in sample_configs(shards, graph_id, k, seed).items():
        np.save(Path(out, f"{name}.npy"), array)
