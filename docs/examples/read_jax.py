"""Load one graph from tpuprep shards into JAX arrays, fed by pyarrow (no tpuprep needed).

Usage: python read_jax.py SHARDS GRAPH_ID OUT  -> OUT/<name>.npy, names as in tpuprep's GraphRecord.
"""

import sys
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)  # else int64 runtimes (ns) are silently cut to int32

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

GRAPH_ARRAYS = ["node_feat", "node_opcode", "edge_index", "node_index", "node_config_ids", "node_splits",
                "config_inverse", "config_runtime_original", "config_runtime_normalizers_original"]
CONFIG_ARRAYS = {"runtime": "config_runtime", "normalizer": "config_runtime_normalizers",
                 "group_size": "group_size", "first_index": "first_index", "config_feat": "config_feat"}
WIDTHS = {"node_feat": 140, "edge_index": 2, "config_feat": 24}


@jax.jit
def decode_base7(codes: jax.Array) -> jax.Array:
    """(..., 3) base-7 codes -> (..., 18) int8 layouts: slot 6t+i = (code_t // 7**i) % 7 - 1."""
    digits = codes[..., None] // 7 ** jnp.arange(6, dtype=codes.dtype) % 7 - 1
    return digits.reshape(*codes.shape[:-1], 18).astype(jnp.int8)


def read_rows(folder: Path, graph_id: str) -> pa.Table:
    rows = pq.read_table(folder, filters=[("graph_id", "==", graph_id)])
    if rows.num_rows == 0:
        raise KeyError(f"no graph {graph_id!r} under {folder}")
    return rows


def to_jax(column: pa.ChunkedArray) -> jax.Array:
    """Leaf values of a (nested) list column, flat, as a JAX array (copied to the default device)."""
    array = column.combine_chunks()
    while pa.types.is_list(array.type) or pa.types.is_fixed_size_list(array.type):
        array = array.flatten()
    return jnp.asarray(array.to_numpy())


def binary_to_numpy(column: pa.ChunkedArray, dtype: str) -> np.ndarray:
    """A binary column of equal-width rows (the layout ``codes``: 12*nt bytes per config) as one flat
    array: the rows' bytes are contiguous in Arrow's data buffer, so this is a zero-copy view."""
    array = column.combine_chunks()
    offsets = np.frombuffer(array.buffers()[1], np.int32, len(array) + 1, array.offset * 4)
    size = np.dtype(dtype).itemsize
    return np.frombuffer(array.buffers()[2], dtype, int(offsets[-1] - offsets[0]) // size, int(offsets[0]))


def codes_from_planes(data, k: int, nt: int) -> np.ndarray:
    """k layout ``codes`` values, concatenated (12*nt bytes each: the config's 3*nt int32 codes in byte
    planes, byte 0 of every code first) -> (k, nt, 3) int32."""
    planes = np.frombuffer(data, np.uint8).reshape(k, 4, 3 * nt)
    return np.ascontiguousarray(planes.transpose(0, 2, 1)).view("<i4").reshape(k, nt, 3)


def load_graph(shards: str, graph_id: str) -> dict[str, jax.Array]:
    folder = Path(shards, *graph_id.rsplit(":", 1)[0].split(":"))  # layout/xla/random, tile/xla, ...
    graph = read_rows(folder / "graphs", graph_id)
    configs = read_rows(folder / "configs", graph_id).sort_by("config_id")
    out = {}
    for table, names in ((graph, {n: n for n in GRAPH_ARRAYS}), (configs, CONFIG_ARRAYS)):
        for column, name in names.items():
            if column in table.column_names and table[column].null_count == 0:  # runtimes are null on test
                out[name] = to_jax(table[column])
    for name, width in WIDTHS.items():
        if name in out:
            out[name] = out[name].reshape(-1, width)
    if "codes" in configs.column_names:  # layout
        nt = graph["num_config_columns"][0].as_py()
        stored = codes_from_planes(binary_to_numpy(configs["codes"], "u1"), configs.num_rows, nt)  # (c_u, nt, 3)
        tie = graph["config_node_tie"].combine_chunks().flatten().to_numpy()  # tied nodes share a column
        out["config_codes"] = jnp.asarray(stored)[:, tie]
        out["node_config_feat"] = decode_base7(out["config_codes"])
    return out


if __name__ == "__main__":
    shards, graph_id, out = sys.argv[1:4]
    Path(out).mkdir(parents=True, exist_ok=True)
    for name, array in load_graph(shards, graph_id).items():
        np.save(Path(out, f"{name}.npy"), np.asarray(array))
