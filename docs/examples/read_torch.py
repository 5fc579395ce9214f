"""A PyTorch Dataset/DataLoader over tpuprep shards that samples configs per graph (no tpuprep needed).

Usage: python read_torch.py SHARDS GRAPH_ID OUT  -> OUT/<name>.npy (names as in tpuprep's GraphRecord) and
OUT/sample_<name>.npy: the configs one DataLoader step drew for the graph (ids, decoded layouts, runtimes).
"""

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import torch
from torch.utils.data import DataLoader, Dataset

GRAPH_ARRAYS = ["node_feat", "node_opcode", "edge_index", "node_index", "node_config_ids", "node_splits",
                "config_inverse", "config_runtime_original", "config_runtime_normalizers_original"]
CONFIG_ARRAYS = {"runtime": "config_runtime", "normalizer": "config_runtime_normalizers",
                 "group_size": "group_size", "first_index": "first_index", "config_feat": "config_feat"}
WIDTHS = {"node_feat": 140, "edge_index": 2, "config_feat": 24}
POWERS = 7 ** torch.arange(6, dtype=torch.int32)


def decode_base7(codes: torch.Tensor) -> torch.Tensor:
    """(..., 3) base-7 codes -> (..., 18) int8 layouts: slot 6t+i = (code_t // 7**i) % 7 - 1."""
    digits = torch.div(codes.unsqueeze(-1), POWERS, rounding_mode="floor") % 7 - 1
    return digits.reshape(*codes.shape[:-1], 18).to(torch.int8)


def read_rows(folder: Path, graph_id: str) -> pa.Table:
    rows = ds.dataset(folder, format="parquet").to_table(filter=ds.field("graph_id") == graph_id)
    if rows.num_rows == 0:
        raise KeyError(f"no graph {graph_id!r} under {folder}")
    return rows


def to_tensor(column: pa.ChunkedArray) -> torch.Tensor:
    """Leaf values of a (nested) list column, flat. torch.tensor copies: Arrow's buffers are read-only,
    and torch.from_numpy on them warns that writing to the tensor would be undefined behaviour."""
    array = column.combine_chunks()
    while pa.types.is_list(array.type) or pa.types.is_fixed_size_list(array.type):
        array = array.flatten()
    return torch.tensor(array.to_numpy())


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


def load_graph(shards: str, graph_id: str) -> dict[str, torch.Tensor]:
    folder = Path(shards, *graph_id.rsplit(":", 1)[0].split(":"))  # layout/xla/random, tile/xla, ...
    graph = read_rows(folder / "graphs", graph_id)
    configs = read_rows(folder / "configs", graph_id).sort_by("config_id")
    out = {}
    for table, names in ((graph, {n: n for n in GRAPH_ARRAYS}), (configs, CONFIG_ARRAYS)):
        for column, name in names.items():
            if column in table.column_names and table[column].null_count == 0:  # runtimes are null on test
                out[name] = to_tensor(table[column])
    for name, width in WIDTHS.items():
        if name in out:
            out[name] = out[name].reshape(-1, width)
    if "codes" in configs.column_names:  # layout
        nt = graph["num_config_columns"][0].as_py()
        stored = codes_from_planes(binary_to_numpy(configs["codes"], "u1"), configs.num_rows, nt)  # (c_u, nt, 3)
        tie = graph["config_node_tie"].combine_chunks().flatten().to_numpy()  # tied nodes share a column
        out["config_codes"] = torch.tensor(stored[:, tie])
    return out


class SampledConfigs(Dataset):
    """One item per graph: the graph's tensors plus ``num_samples`` of its unique configs, drawn without
    replacement (new draws each epoch via ``set_epoch``); layouts are decoded after sampling."""

    def __init__(self, shards: str, graph_ids: list[str], num_samples: int = 8, seed: int = 0):
        self.shards, self.graph_ids, self.num_samples, self.seed, self.epoch = shards, graph_ids, num_samples, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.graph_ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        graph = load_graph(self.shards, self.graph_ids[index])
        generator = torch.Generator().manual_seed(hash((self.seed, self.epoch, index)) & 0x7FFFFFFF)
        picked = torch.randperm(graph["group_size"].shape[0], generator=generator)[: self.num_samples]
        sample = {"config_ids": picked.to(torch.int32)}
        if "config_codes" in graph:
            sample["node_config_feat"] = decode_base7(graph["config_codes"][picked])
        else:
            sample["config_feat"] = graph["config_feat"][picked]
        if "config_runtime" in graph:  # absent on the test split
            sample["config_runtime"] = graph["config_runtime"][picked]
        return graph | {f"sample_{name}": value for name, value in sample.items()}


if __name__ == "__main__":
    shards, graph_id, out = sys.argv[1:4]
    Path(out).mkdir(parents=True, exist_ok=True)
    dataset = SampledConfigs(shards, [graph_id])
    # batch_size=None: graphs differ in size, so each step yields one graph (the default collate would
    # try to stack them); num_workers > 0 works too, each worker reads its own row groups
    loader = DataLoader(dataset, batch_size=None, shuffle=True, num_workers=0)
    for epoch in range(1):
        dataset.set_epoch(epoch)
        for item in loader:
            for name, tensor in item.items():
                np.save(Path(out, f"{name}.npy"), tensor.numpy())
