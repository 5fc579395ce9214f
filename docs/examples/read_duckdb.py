"""Load one graph from tpuprep shards with DuckDB SQL over read_parquet (no tpuprep needed).

Usage: python read_duckdb.py SHARDS GRAPH_ID OUT  -> OUT/<name>.npy, names as in tpuprep's GraphRecord.
"""

import sys
from pathlib import Path

import duckdb
import numpy as np

# DuckDB sees Parquet lists only (fixed-size lists come back as plain lists) and fetchnumpy() returns
# nested lists as object arrays: flatten() every list of lists in SQL, reshape in NumPy.
GRAPH_SQL = """
SELECT node_index, flatten(node_feat) AS node_feat, node_opcode, flatten(edge_index) AS edge_index,
       config_inverse, config_runtime_original, {extra}
FROM read_parquet(?) WHERE graph_id = ?"""
GRAPH_EXTRA = {"layout": "node_config_ids, node_splits, num_config_columns, config_node_tie",
               "tile": "config_runtime_normalizers_original"}
# one row holding the graph's configs as lists, in config_id order
CONFIGS_SQL = """
SELECT count(*) AS num_configs, list(runtime ORDER BY config_id) AS config_runtime,
       list(group_size ORDER BY config_id) AS group_size, list(first_index ORDER BY config_id) AS first_index,
       {extra}
FROM read_parquet(?) WHERE graph_id = ?"""
CONFIGS_EXTRA = {
    "layout": "list(codes ORDER BY config_id) AS config_codes",  # BLOBs of nt*3 int32 in byte planes
    "tile": "list(normalizer ORDER BY config_id) AS config_runtime_normalizers, "
            "flatten(list(config_feat ORDER BY config_id)) AS config_feat",
}
WIDTHS = {"node_feat": 140, "edge_index": 2, "config_feat": 24}


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


def fetch_row(con: duckdb.DuckDBPyConnection, sql: str, files: str, graph_id: str) -> dict:
    """The query's single row as {column: value}; list cells come back as NumPy arrays, a list with
    nulls (runtimes on the test split) as a masked array."""
    row = con.execute(sql, [files, graph_id]).fetchnumpy()
    return {name: values[0] for name, values in row.items() if len(values)}


def load_graph(shards: str, graph_id: str) -> dict[str, np.ndarray]:
    collection = graph_id.rsplit(":", 1)[0]
    kind, folder = collection.split(":")[0], Path(shards, *collection.split(":"))
    con = duckdb.connect()
    graph = fetch_row(con, GRAPH_SQL.format(extra=GRAPH_EXTRA[kind]), str(folder / "graphs" / "*.parquet"), graph_id)
    if not graph:
        raise KeyError(f"no graph {graph_id!r} under {folder}")
    configs = fetch_row(con, CONFIGS_SQL.format(extra=CONFIGS_EXTRA[kind]),
                        str(folder / "configs" / "*.parquet"), graph_id)
    num_configs = int(configs.pop("num_configs"))
    if "config_codes" in configs:  # layout: join the BLOBs, gather each int32 from its byte planes
        nt = int(graph.pop("num_config_columns"))
        stored = codes_from_planes(b"".join(configs["config_codes"]), num_configs, nt)
        configs["config_codes"] = stored[:, graph.pop("config_node_tie")]  # tied nodes share a column
    out = {name: np.asarray(value) for name, value in {**graph, **configs}.items()
           if value is not None and not np.ma.is_masked(value)}
    for name, width in WIDTHS.items():
        if name in out:
            out[name] = out[name].reshape(-1, width)
    if "config_codes" in out:
        out["node_config_feat"] = decode_base7(out["config_codes"])
    return out


if __name__ == "__main__":
    shards, graph_id, out = sys.argv[1:4]
    Path(out).mkdir(parents=True, exist_ok=True)
    for name, array in load_graph(shards, graph_id).items():
        np.save(Path(out, f"{name}.npy"), array)
