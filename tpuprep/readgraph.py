"""Reading one input graph's small members, validated (docs/spec.md §7): ``read_graph`` checks the declared
shapes against the input limits (``limits.py``) before anything is read, then reads and checks every
member but the streamed ``node_config_feat``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from .errors import BadInput
from .io.npz import Member, NpzFile
from .limits import check_input_limits
from .tpugraphs import LAYOUT_KEYS, LAYOUT_SLOTS, NODE_FEATURES, TILE_CONFIG_FEATURES, TILE_KEYS

__all__ = ["GraphArrays", "read_graph"]


class InputKind(Protocol):
    """What ``read_graph`` needs of an ``inputs.InputFile``: its kind (``layout``/``tile``) and split."""

    kind: str
    split: str


@dataclass
class GraphArrays:
    """The small members of one input graph, validated, in canonical dtypes.

    node_feat (n, 140) float32; node_opcode (n,) uint8; edge_index (m, 2) int64;
    node_config_ids (nc,) int64 and node_splits (s,) int64 (layout, else None);
    config_runtime (c,) int64 ns; config_feat (c, 24) float32 and config_runtime_normalizers (c,) int64
    (tile, else None); num_configs c; warnings: non-fatal remarks (e.g. unknown extra keys).
    """

    node_feat: np.ndarray
    node_opcode: np.ndarray
    edge_index: np.ndarray
    config_runtime: np.ndarray
    num_configs: int
    node_config_ids: np.ndarray | None = None
    node_splits: np.ndarray | None = None
    config_feat: np.ndarray | None = None
    config_runtime_normalizers: np.ndarray | None = None
    warnings: list[str] = field(default_factory=list)


def _member(f: NpzFile, key: str) -> Member:
    return f.member(key)  # Unreadable (a BadInput) when its header cannot be used


def _check_kind(f: NpzFile, key: str, kinds: str, what: str) -> Member:
    m = _member(f, key)
    if m.dtype.kind not in kinds:
        raise BadInput(f.path, key, f"dtype {m.dtype} is not {what}")
    return m


def _read_small(f: NpzFile, key: str) -> np.ndarray:
    return f.read(key)  # its size was bounded by check_input_limits


def _as_int(f: NpzFile, key: str, arr: np.ndarray, lo: int, hi: int, dtype) -> np.ndarray:
    if arr.size and (arr.min() < lo or arr.max() > hi):
        bad = arr[(arr < lo) | (arr > hi)].reshape(-1)[0]
        raise BadInput(f.path, key, f"value {bad} out of range {lo}..{hi}")
    return arr.astype(dtype, copy=False)


def _count(f: NpzFile, key: str, count: int, empty: str) -> int:
    """``count`` (rows of ``key``) if it is not 0 (``empty``: the problem); the limits were checked."""
    if count == 0:
        raise BadInput(f.path, key, empty)
    return count


def _finite(f: NpzFile, key: str, arr: np.ndarray) -> np.ndarray:
    if not np.isfinite(arr).all():
        idx = np.argwhere(~np.isfinite(arr))[0]
        raise BadInput(f.path, key, f"non-finite value {arr[tuple(idx)]} at index {tuple(int(i) for i in idx)}")
    return arr


def read_graph(f: NpzFile, inp: InputKind) -> GraphArrays:
    """Read and validate everything but the big config member of a layout or tile file."""
    layout = inp.kind == "layout"
    required = LAYOUT_KEYS if layout else TILE_KEYS
    for key in f.keys:
        if key in required:
            _member(f, key)  # the first required member whose header cannot be used, in the file's order
    missing = [k for k in required if k not in f.keys]
    if missing:
        raise BadInput(f.path, missing[0], "required key is missing"
                       + (f" (also missing: {', '.join(missing[1:])})" if len(missing) > 1 else ""))
    warnings = [f"unknown key {k!r} ignored" + (f", never read ({f.unreadable[k]})" if k in f.unreadable else "")
                for k in f.keys if k not in required]
    check_input_limits(f, inp.kind)

    nf = _check_kind(f, "node_feat", "f", "floating point")
    if len(nf.shape) != 2 or nf.shape[1] != NODE_FEATURES:
        raise BadInput(f.path, "node_feat", f"shape {nf.shape}, expected (n, {NODE_FEATURES})")
    n = _count(f, "node_feat", nf.shape[0], "the graph has no nodes")
    op = _check_kind(f, "node_opcode", "iu", "an integer type")
    if op.shape != (n,):
        raise BadInput(f.path, "node_opcode", f"shape {op.shape}, expected ({n},) to match node_feat")
    ei = _check_kind(f, "edge_index", "iu", "an integer type")
    if not (len(ei.shape) == 2 and ei.shape[1] == 2) and ei.shape != (0,):
        raise BadInput(f.path, "edge_index", f"shape {ei.shape}, expected (m, 2)")
    rt = _check_kind(f, "config_runtime", "iu", "an integer type (runtimes are int64 ns)")
    if len(rt.shape) != 1:
        raise BadInput(f.path, "config_runtime", f"shape {rt.shape}, expected (c,)")
    c = _count(f, "config_runtime", rt.shape[0], "the file has no configurations")

    node_feat = _finite(f, "node_feat", _read_small(f, "node_feat").astype(np.float32, copy=False))
    node_opcode = _as_int(f, "node_opcode", _read_small(f, "node_opcode"), 0, 255, np.uint8)
    edge_index = _as_int(f, "edge_index", _read_small(f, "edge_index").reshape(-1, 2), 0, n - 1, np.int64)
    runtime = _as_int(f, "config_runtime", _read_small(f, "config_runtime"), 0, np.iinfo(np.int64).max, np.int64)
    g = GraphArrays(node_feat, node_opcode, edge_index, runtime, c, warnings=warnings)

    if layout:
        ncf = _check_kind(f, "node_config_feat", "fiu", "numeric")
        ids = _check_kind(f, "node_config_ids", "iu", "an integer type")
        if len(ids.shape) != 1 or ids.shape[0] == 0:
            raise BadInput(f.path, "node_config_ids", f"shape {ids.shape}, expected (nc,) with nc >= 1")
        nc = ids.shape[0]
        if ncf.shape != (c, nc, LAYOUT_SLOTS):
            raise BadInput(f.path, "node_config_feat",
                           f"shape {ncf.shape}, expected (c, nc, 18) = ({c}, {nc}, 18) from config_runtime and node_config_ids")
        sp = _check_kind(f, "node_splits", "iu", "an integer type")
        if len(sp.shape) not in (1, 2) or (len(sp.shape) == 2 and sp.shape[0] != 1):
            raise BadInput(f.path, "node_splits", f"shape {sp.shape}, expected (1, s) or (s,)")
        g.node_config_ids = _as_int(f, "node_config_ids", _read_small(f, "node_config_ids"), 0, n - 1, np.int64)
        if nc > 1 and not (np.diff(g.node_config_ids) > 0).all():
            i = int(np.argmin(np.diff(g.node_config_ids) > 0))
            raise BadInput(f.path, "node_config_ids",
                           f"not strictly increasing at position {i + 1} ({g.node_config_ids[i]} then {g.node_config_ids[i + 1]})")
        if ncf.passes() > 1:
            g.warnings.append(f"node_config_feat is in Fortran order: streamed in {ncf.passes()} passes over "
                              "the member (saved in C order, np.ascontiguousarray, it takes one)")
        g.node_splits = _as_int(f, "node_splits", _read_small(f, "node_splits").reshape(-1), 0, n, np.int64)
        if (np.diff(g.node_splits) < 0).any():
            raise BadInput(f.path, "node_splits", "boundaries are not in ascending order")
    else:
        cf = _check_kind(f, "config_feat", "fiu", "numeric")
        if cf.shape != (c, TILE_CONFIG_FEATURES):
            raise BadInput(f.path, "config_feat", f"shape {cf.shape}, expected (c, 24) = ({c}, 24)")
        nz = _check_kind(f, "config_runtime_normalizers", "iu", "an integer type")
        if nz.shape != (c,):
            raise BadInput(f.path, "config_runtime_normalizers", f"shape {nz.shape}, expected ({c},)")
        g.config_feat = _finite(f, "config_feat", _read_small(f, "config_feat").astype(np.float32, copy=False))
        lowest = 0 if inp.split == "test" else 1
        g.config_runtime_normalizers = _as_int(
            f, "config_runtime_normalizers", _read_small(f, "config_runtime_normalizers"),
            lowest, np.iinfo(np.int64).max, np.int64)
    return g
