"""Load one graph from tpuprep shards with HuggingFace datasets (no tpuprep needed).

Usage: python read_hf_datasets.py SHARDS GRAPH_ID OUT  -> OUT/<name>.npy, names as in tpuprep's GraphRecord.
"""

import sys
from pathlib import Path

import numpy as np
from datasets import load_dataset

SPLITS = {"train": "train", "valid": "validation", "test": "test"}  # file prefix -> HF split name
GRAPH_ARRAYS = ["node_feat", "node_opcode", "edge_index", "node_index", "node_config_ids", "node_splits",
                "config_inverse", "config_runtime_original", "config_runtime_normalizers_original"]
CONFIG_ARRAYS = {"runtime": "config_runtime", "normalizer": "config_runtime_normalizers",
                 "group_size": "group_size", "first_index": "first_index", "config_feat": "config_feat"}


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


def data_files(folder: Path, table: str) -> dict[str, str]:
    """{HF split: glob} for the splits present (a split with no file is an error in load_dataset)."""
    return {hf: str(folder / table / f"{prefix}-*.parquet")
            for prefix, hf in SPLITS.items() if any((folder / table).glob(f"{prefix}-*.parquet"))}


def restore(value, feature) -> np.ndarray | None:
    """The numpy format returns integer lists (and batched integer columns) as int64, and a null integer
    column as NaN floats / None: cast back to the column's own dtype, None for nulls."""
    while hasattr(feature, "feature"):  # List(...) -> its items
        feature = feature.feature
    dtype = np.dtype(feature.dtype)
    if value is None or (np.asarray(value).dtype.kind == "f" and dtype.kind in "iu"):
        return None
    return np.asarray(value).astype(dtype, copy=False)


def load_graph(shards: str, graph_id: str) -> dict[str, np.ndarray]:
    folder = Path(shards, *graph_id.rsplit(":", 1)[0].split(":"))  # layout/xla/random, tile/xla, ...
    # 1. which split holds the graph: a cheap, cached read of the graph_id column of every split
    ids = load_dataset("parquet", data_files=data_files(folder, "graphs"), columns=["graph_id"])
    split = next((name for name, part in ids.items() if graph_id in part["graph_id"]), None)
    if split is None:
        raise KeyError(f"no graph {graph_id!r} under {folder}")
    # 2. its rows: `filters` is pushed down to the Parquet reader (only matching row groups are read/cached)
    wanted = [("graph_id", "==", graph_id)]
    graph = load_dataset("parquet", data_files=data_files(folder, "graphs"), split=split, filters=wanted)
    configs = load_dataset("parquet", data_files=data_files(folder, "configs"), split=split, filters=wanted)
    row, columns = graph.with_format("numpy")[0], configs.with_format("numpy")[:]  # configs in config_id order
    out = {}
    for values, features, names in ((row, graph.features, {n: n for n in GRAPH_ARRAYS}),
                                    (columns, configs.features, CONFIG_ARRAYS)):
        for column, name in names.items():
            if column in features and (value := restore(values[column], features[column])) is not None:
                out[name] = value
    if "codes" in configs.features:  # layout: nt*3 int32 per config in byte planes, as one binary value
        # the numpy format gives a fixed-width bytes array (dtype S<12*nc>): view its buffer, never join its
        # elements (indexing an S array strips trailing zero bytes, which are data here)
        nt = int(row["num_config_columns"])  # tied nodes share a column
        stored = codes_from_planes(np.ascontiguousarray(columns["codes"]), configs.num_rows, nt)
        out["config_codes"] = stored[:, np.asarray(row["config_node_tie"], np.int64)]
        out["node_config_feat"] = decode_base7(out["config_codes"])
    return out


if __name__ == "__main__":
    shards, graph_id, out = sys.argv[1:4]
    Path(out).mkdir(parents=True, exist_ok=True)
    for name, array in load_graph(shards, graph_id).items():
        np.save(Path(out, f"{name}.npy"), array)
