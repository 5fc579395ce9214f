"""``tpuprep verify``: prove that the shards reconstruct the inputs exactly.

Deliberately independent of the Numba kernels: every check is plain NumPy written from SPEC §2, so
a kernel bug cannot hide behind itself. Checked per graph: shard bytes against the manifest's
sha256; the kept node set and edge set against a NumPy breadth-first search; kept rows of node_feat
(only zero padding may have become −1), opcodes, remapped edges, node_config_ids and node_splits; every
original config row (streamed) against the decoded codes of its unique config via config_inverse;
every original runtime; the minimum-runtime / group_size / first_index bookkeeping; and that the
unique configs are pairwise distinct.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np

from .errors import BadInput
from .inputs import discover
from .io.files import sha256_file
from .io.npz import NpzFile
from .kernels.base7 import decode_base7
from .shards.reader import Dataset, GraphRecord, open_dataset
from .tpugraphs import REPADDED_COLUMNS, selected


@dataclass
class VerifyReport:
    graphs_checked: int = 0
    shards_checked: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def hop_distances(edge_index: np.ndarray, n: int, sources: np.ndarray, max_hops: int) -> np.ndarray:
    """Undirected hop distance from ``sources`` (−1 beyond ``max_hops``) by frontier expansion."""
    dist = np.full(n, -1, np.int64)
    dist[sources] = 0
    u, v = edge_index[:, 0], edge_index[:, 1]
    for d in range(1, max_hops + 1):
        frontier = dist == d - 1
        reached = np.zeros(n, bool)
        reached[v[frontier[u]]] = True
        reached[u[frontier[v]]] = True
        new = reached & (dist < 0)
        if not new.any():
            break
        dist[new] = d
    return dist


def _expected_structure(edge_index, n, config_ids, options) -> tuple[np.ndarray, np.ndarray]:
    if not options["prune"] or config_ids is None:
        return np.arange(n), np.ones(len(edge_index), bool)
    k = options["hops"]
    dist = hop_distances(edge_index, n, config_ids, k)
    keep_node = dist >= 0
    du, dv = dist[edge_index[:, 0]], dist[edge_index[:, 1]]
    near = max(k - 1, 0)
    keep_edge = keep_node[edge_index[:, 0]] & keep_node[edge_index[:, 1]] & (
        ((du >= 0) & (du <= near)) | ((dv >= 0) & (dv <= near)))
    return np.flatnonzero(keep_node), keep_edge


def _check(cond: bool, problems: list[str], gid: str, what: str) -> bool:
    if not cond:
        problems.append(f"{gid}: {what}")
    return cond


def _check_groups(g: GraphRecord, runtime: np.ndarray | None, normalizer: np.ndarray | None,
                  problems: list[str]) -> None:
    gid, inv, u = g.graph_id, g.config_inverse.astype(np.int64), g.num_unique_configs
    if not _check(inv.min(initial=0) >= 0 and inv.max(initial=-1) < u, problems, gid, "config_inverse out of range"):
        return
    first = np.full(u, len(inv), np.int64)
    np.minimum.at(first, inv, np.arange(len(inv)))
    _check(np.array_equal(first, g.first_index), problems, gid, "first_index is not the first occurrence")
    _check(bool((np.diff(first) > 0).all()), problems, gid, "unique configs are not numbered in first-occurrence order")
    _check(np.array_equal(np.bincount(inv, minlength=u), g.group_size), problems, gid, "group_size mismatch")
    if runtime is None:
        _check(g.config_runtime is None, problems, gid, "test graph has runtimes")
        return
    if normalizer is None:
        best = np.full(u, np.iinfo(np.int64).max, np.int64)
        np.minimum.at(best, inv, runtime)
        _check(np.array_equal(best, g.config_runtime), problems, gid, "config_runtime is not the group minimum")
        return
    best_ratio: dict[int, Fraction] = {}
    for i, grp in enumerate(inv.tolist()):
        ratio = Fraction(int(runtime[i]), int(normalizer[i]))
        if grp not in best_ratio or ratio < best_ratio[grp]:
            best_ratio[grp] = ratio
    chosen = [Fraction(int(r), int(n)) for r, n in zip(g.config_runtime, g.config_runtime_normalizers, strict=True)]
    _check(chosen == [best_ratio[i] for i in range(u)], problems, gid, "tile runtime/normalizer is not the group minimum")


def verify_graph(ds: Dataset, path: Path, graph_id: str, options: dict, problems: list[str]) -> None:
    """Check one graph of ``ds`` against its input file ``path`` (appends to ``problems``)."""
    g = ds.load_graph(graph_id)
    gid = graph_id
    with NpzFile(path) as f:
        feat = f.read("node_feat").astype(np.float32)
        n = len(feat)
        opcode = f.read("node_opcode")
        edges = f.read("edge_index").reshape(-1, 2).astype(np.int64)
        layout = g.config_codes is not None
        ids = f.read("node_config_ids").astype(np.int64) if layout else None
        nodes, edge_mask = _expected_structure(edges, n, ids, options)
        if not _check(np.array_equal(g.node_index, nodes), problems, gid, "kept node set differs from the pruning rule"):
            return
        kept = feat[g.node_index]
        stored = g.node_feat.copy()
        pads = np.zeros(140, bool)
        pads[REPADDED_COLUMNS] = True
        repadded = (stored == -1) & (kept == 0) & pads
        stored[repadded] = 0
        _check(np.array_equal(stored, kept), problems, gid, "node_feat differs from the input beyond -1 re-padding")
        _check(np.array_equal(g.node_opcode, opcode[g.node_index]), problems, gid, "node_opcode differs")
        _check(np.array_equal(g.node_index[g.edge_index].reshape(-1, 2), edges[edge_mask]),
               problems, gid, "edges differ from the input's kept edges (or their order)")
        labelled = g.split != "test"
        runtime = f.read("config_runtime").astype(np.int64)
        if labelled:
            _check(g.config_runtime_original is not None and np.array_equal(g.config_runtime_original, runtime),
                   problems, gid, "original runtimes differ")
        else:
            _check(g.config_runtime_original is None, problems, gid, "test graph stores runtimes")
        if layout:
            _check(np.array_equal(g.node_index[g.node_config_ids], ids), problems, gid, "node_config_ids differ")
            splits = f.read("node_splits").reshape(-1)
            _check(np.array_equal(g.node_splits, np.searchsorted(g.node_index, splits)), problems, gid, "node_splits differ")
            c = f.members["node_config_feat"].shape[0]
            if not _check(len(g.config_inverse) == c, problems, gid, f"config_inverse has {len(g.config_inverse)} entries, input has {c} configs"):
                return
            decoded = decode_base7(g.config_codes)
            for start, chunk in f.iter_rows("node_config_feat", max(1, (16 << 20) // max(chunk_row_bytes(f), 1))):
                rows = decoded[g.config_inverse[start : start + len(chunk)]]
                if not np.array_equal(rows, chunk):
                    bad = int(np.flatnonzero((rows != chunk).reshape(len(chunk), -1).any(1))[0])
                    problems.append(f"{gid}: original config row {start + bad} is not reconstructed")
                    break
            flat = g.config_codes.reshape(len(g.config_codes), -1)
            distinct = len(np.unique(flat, axis=0)) if len(flat) else 0
            if options["dedup"]:
                _check(distinct == len(flat), problems, gid, "unique configs are not pairwise distinct")
            _check_groups(g, runtime if labelled else None, None, problems)
        else:
            cfeat = f.read("config_feat").astype(np.float32)
            _check(np.array_equal(g.config_feat[g.config_inverse], cfeat), problems, gid, "tile config_feat rows are not reconstructed")
            norm = f.read("config_runtime_normalizers").astype(np.int64)
            if labelled:
                _check(g.config_runtime_normalizers_original is not None
                       and np.array_equal(g.config_runtime_normalizers_original, norm), problems, gid, "original normalizers differ")
            _check_groups(g, runtime if labelled else None, norm if labelled else None, problems)


def chunk_row_bytes(f: NpzFile) -> int:
    m = f.members["node_config_feat"]
    return int(np.prod(m.shape[1:])) * m.dtype.itemsize


def verify(src: str | Path, dst: str | Path, *, collections=None, splits=None,
           progress: Callable[[str], None] | None = None) -> VerifyReport:
    """Verify every shard's bytes and every graph of ``dst`` against the inputs under ``src``."""
    report = VerifyReport()
    ds = open_dataset(dst)
    root = Path(dst)
    for shard in ds.manifest["shards"]:
        path = root / shard["path"]
        report.shards_checked += 1
        if not path.exists():
            report.problems.append(f"{shard['path']}: shard is missing")
        elif path.stat().st_size != shard["bytes"] or sha256_file(path) != shard["sha256"]:
            report.problems.append(f"{shard['path']}: shard bytes changed (sha256 differs from the manifest)")
    inputs, _ = discover(src, collections, splits)
    listed = {i["path"]: i for i in ds.manifest["inputs"]}
    present = set()
    for inp in inputs:
        present.add(inp.relpath)
        entry = listed.get(inp.relpath)
        if entry is None:
            report.problems.append(f"{inp.relpath}: input is not in the manifest")
            continue
        if entry["status"] != "ok":
            continue
        if sha256_file(inp.path) != entry["sha256"]:
            report.problems.append(f"{inp.relpath}: input changed since the build (sha256 differs)")
            continue
        try:
            verify_graph(ds, inp.path, inp.graph_id, ds.manifest["options"], report.problems)
        except (BadInput, OSError, KeyError, ValueError) as exc:
            report.problems.append(f"{inp.graph_id}: cannot be checked: {exc}")
        report.graphs_checked += 1
        if progress:
            progress(inp.relpath)
    for path, entry in listed.items():
        if entry["status"] != "ok" or path in present:
            continue
        collection, split = entry["graph_id"].rsplit(":", 1)[0], path.split("/")[-2]
        if selected(collection, collections) and (not splits or split in splits):
            report.problems.append(f"{path}: in the manifest but not under --src")
    return report
