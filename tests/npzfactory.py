"""Tiny, valid TpuGraphs files built by hand, for tests that need to break one thing at a time."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def layout_arrays(seed: int = 0, n: int = 12, c: int = 9) -> dict[str, np.ndarray]:
    """A valid layout graph: a chain plus skips, 3 configurable nodes (conv, dot, reshape)."""
    rng = np.random.default_rng(seed)
    feat = np.zeros((n, 140), np.float32)
    feat[:, 13] = 1.0  # f32
    feat[:, 21] = 4.0
    feat[:, 22] = 8.0
    feat[:, 27] = 12.0
    feat[:, 28] = 32.0
    feat[:, 134] = 1.0  # rank-2 default layout (1, 0)
    opcode = np.full(n, 2, np.uint8)
    ids = np.array([3, 7, 10], np.int64)
    opcode[ids] = [26, 34, 75]
    edges = sorted({(u, u - 1) for u in range(1, n)} | {(u, u - 3) for u in range(3, n, 2)})
    cfg = np.full((c, 3, 18), -1, np.float32)
    cfg[:, :, 0] = rng.integers(0, 2, (c, 3))
    cfg[:, :, 1] = 1 - cfg[:, :, 0]
    cfg[c // 2 :] = cfg[: c - c // 2]  # duplicates
    return {
        "edge_index": np.array(edges, np.int64),
        "node_feat": feat,
        "node_opcode": opcode,
        "node_config_feat": cfg,
        "node_config_ids": ids,
        "node_splits": np.array([[0, 5, n]], np.int64),
        "config_runtime": rng.integers(10**8, 2 * 10**8, c).astype(np.int64),
    }


def tile_arrays(seed: int = 0, n: int = 5, c: int = 6) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feat = np.zeros((n, 140), np.float32)
    feat[:, 13] = 1.0
    feat[:, 28] = 1.0
    cfg = np.zeros((c, 24), np.float32)
    cfg[:, 8:10] = rng.integers(1, 8, (c, 2))
    cfg[:, 14] = cfg[:, 8] + cfg[:, 9]
    cfg[:, 15] = cfg[:, 8] * cfg[:, 9]
    return {
        "node_feat": feat,
        "node_opcode": np.full(n, 41, np.uint8),
        "edge_index": np.array([[u, u - 1] for u in range(1, n)], np.int64),
        "config_feat": cfg,
        "config_runtime": rng.integers(1000, 5000, c).astype(np.int64),
        "config_runtime_normalizers": np.full(c, 2000, np.int64),
    }


def write(root: Path, relpath: str, arrays: dict[str, np.ndarray]) -> Path:
    """np.savez_compressed ``arrays`` to ``root/relpath`` (folders created)."""
    path = root / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        np.savez_compressed(fh, **arrays)
    return path


class Tripwire:
    """An object whose unpickling creates the file ``path``: an npz member holding one (dtype object)
    proves, by that file's absence, that nothing unpickled the member."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))
