"""``tpuprep export``: write the preprocessed graphs back as per-graph TpuGraphs ``.npz`` files.

The many existing npz-based training scripts (the official baselines, Kaggle solutions) can then run on
tpuprep's preprocessing — pruned, re-padded, deduplicated — unchanged. The output tree and key layout are
those of TpuGraphs (TPUGRAPHS.md §1–2)::

    DIR/layout/<xla|nlp>/<default|random>/<split>/<stem>.npz
        edge_index (m', 2) int64, node_feat (n', 140) float32, node_opcode (n',) uint8,
        node_config_feat (c_u, nc, 18) float32      — or, with packed=True, (c_u, nc, 3) int32 base-7 codes
        node_config_ids (nc,) int64, node_splits (1, s) int64, config_runtime (c_u,) int64,
        config_inverse (c,) int32                     — extra key
    DIR/tile/xla/<split>/<stem>.npz
        node_feat, node_opcode, edge_index as above, config_feat (c_u, 24) float32,
        config_runtime (c_u,) int64, config_runtime_normalizers (c_u,) int64, config_inverse (c,) int32

Rows are the *unique* configs (c_u), in config-id order; ``config_runtime`` is each group's minimum runtime
(tile: runtime and normalizer of the row with the smallest ratio). On the test split ``config_runtime`` is
all zeros and tile normalizers all ones, like the original files. ``config_inverse[i]`` is the unique row of
original config i, so a score per unique row becomes a score per original config as
``scores[config_inverse]`` (what a Kaggle submission over the original indices needs); scripts that only
read the usual keys can ignore it.

An export never damages what it does not own: ``dst_npz`` must not be empty, lie in the shard folder, or be
(or lie inside) the build's source tree — recognised by the manifest's inputs: a file at one of their paths
(``<collection path>/<split>/<stem>.npz``, under ``dst_npz`` or a folder above it) with the recorded size and
sha256 is a source file, and the export is refused before anything is written (``UsageError``). A file
already at a target path is left as it is when its bytes equal what the export would write, and is replaced
only with ``overwrite=True`` (``--overwrite``) when they differ; those files are checked first, so a refusal
comes before any file is written or replaced.

Files are byte-for-byte what ``np.savez_compressed`` writes for the same arrays (a zip of DEFLATE-compressed
``.npy`` members, zip64, member timestamps fixed at 1980-01-01), so the same shards give identical files. The
writer is our own only so that ``node_config_feat`` can be decoded and compressed in row chunks: memory stays
bounded whatever its inflated size (≈ 2.6 GB as float32 for the largest real graph).
"""

from __future__ import annotations

import filecmp
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import BadShards, UsageError
from .io.files import sha256_file, temporary_path
from .io.npz_writer import StreamedArray, write_npz
from .io.storage import resolve
from .kernels.base7 import decode_base7
from .shards.reader import Dataset, GraphRecord, open_dataset
from .tpugraphs import LAYOUT_KEYS, SPLITS, TILE_KEYS, selected, split_graph_id

CHUNK_BYTES = 32 << 20
LAYOUT_KEY_ORDER = (*LAYOUT_KEYS, "config_inverse")
TILE_KEY_ORDER = (*TILE_KEYS, "config_inverse")


Member = np.ndarray | StreamedArray


@dataclass
class ExportReport:
    """What an export wrote: relative file paths (sorted), graph count and total bytes; of those files,
    ``unchanged`` were already there with the same bytes (left as they were) and ``replaced`` held
    different bytes and were replaced (``overwrite=True``)."""

    root: Path
    files: list[str] = field(default_factory=list)
    bytes: int = 0
    unchanged: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)

    @property
    def graphs(self) -> int:
        return len(self.files)


# --------------------------------------------------------------------------- graph → keys


def _decoded_chunks(codes: np.ndarray, chunk_bytes: int) -> Iterator[np.ndarray]:
    """node_config_feat (k, nc, 18) float32 decoded from base-7 codes (c_u, nc, 3), ≈ chunk_bytes at a time."""
    rows = max(1, chunk_bytes // max(1, codes.shape[1] * 18 * 4))
    for start in range(0, codes.shape[0], rows):
        yield decode_base7(codes[start : start + rows]).astype(np.float32)


def graph_members(g: GraphRecord, *, packed: bool = False, chunk_bytes: int = CHUNK_BYTES) -> dict[str, Member]:
    """The .npz members of one graph, in the TpuGraphs key order (``config_inverse`` last)."""
    c_u = g.num_unique_configs
    runtime = np.zeros(c_u, np.int64) if g.config_runtime is None else np.asarray(g.config_runtime, np.int64)
    out: dict[str, Member] = {
        "node_feat": np.asarray(g.node_feat, np.float32),
        "node_opcode": np.asarray(g.node_opcode, np.uint8),
        "edge_index": np.asarray(g.edge_index, np.int64).reshape(-1, 2),
        "config_runtime": runtime,
        "config_inverse": np.asarray(g.config_inverse, np.int32),
    }
    if g.kind == "layout":
        codes = np.asarray(g.config_codes, np.int32)
        out["node_config_feat"] = codes if packed else StreamedArray(
            (codes.shape[0], codes.shape[1], 18), np.dtype(np.float32), _decoded_chunks(codes, chunk_bytes))
        out["node_config_ids"] = np.asarray(g.node_config_ids, np.int64)
        out["node_splits"] = np.asarray(g.node_splits, np.int64).reshape(1, -1)
        order = LAYOUT_KEY_ORDER
    else:
        out["config_feat"] = np.asarray(g.config_feat, np.float32).reshape(-1, 24)
        normalizers = g.config_runtime_normalizers
        out["config_runtime_normalizers"] = (np.ones(c_u, np.int64) if normalizers is None
                                             else np.asarray(normalizers, np.int64))
        order = TILE_KEY_ORDER
    return {k: out[k] for k in order}


def npz_relpath(graph_id: str, collection: str, split: str) -> str:
    """``layout/xla/random/train/<stem>.npz`` for a graph (the TpuGraphs tree).

    The graph id comes from a shard folder, so it is checked before it becomes a path
    (``tpugraphs.split_graph_id``: a known collection and a safe file stem); ``BadShards`` otherwise.
    """
    try:
        own, stem = split_graph_id(graph_id)
    except ValueError as exc:
        raise BadShards(f"refusing to export: {exc}") from None
    if own != collection or split not in SPLITS:
        raise BadShards(f"refusing to export graph {graph_id!r}: collection {collection!r} / split {split!r} "
                        "do not match it")
    return "/".join([*collection.split(":"), split, f"{stem}.npz"])


def _inside(dst: Path, rel: str) -> Path:
    """``dst / rel``, refusing (``BadShards``) any result that is not strictly inside ``dst``."""
    target = Path(os.path.normpath(dst / rel))
    if target == dst or not target.is_relative_to(dst):
        raise BadShards(f"refusing to export to {target}: outside --dst-npz {dst}")
    return target


def _is_source_file(path: Path, entry: dict) -> bool:
    """``path`` is a regular file with the size and sha256 that the manifest records for input ``entry``."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return False
    if not os.path.isfile(path) or st.st_size != entry.get("bytes"):
        return False
    try:
        return sha256_file(path) == entry.get("sha256")
    except OSError:
        return False


def refuse_source_overlap(dst: Path, manifest: dict) -> None:
    """``UsageError`` when ``dst`` is the build's source tree or lies inside it: ``dst`` or a folder above
    it holds one of the manifest's inputs at its recorded path with its recorded size and sha256 (an
    export there would replace the original files with the pruned, deduplicated ones)."""
    inputs = [i for i in manifest.get("inputs", ()) if i.get("status") == "ok" and i.get("sha256")]
    tops = {i["path"].split("/", 1)[0] for i in inputs}
    for root in (dst, *dst.parents):
        if not any(os.path.isdir(root / top) for top in tops):
            continue  # no layout/ or tile/ folder here: nothing of the source can be at this level
        for entry in inputs:
            source = root / entry["path"]
            if _is_source_file(source, entry):
                raise UsageError(f"--dst-npz {dst} overlaps the source of these shards: {source} is the build's "
                                 f"input {entry['path']} (same size and sha256 as in the manifest); an export "
                                 "must not replace its own source: choose a --dst-npz outside the source tree")


def _write(target: Path, members: dict[str, Member], overwrite: bool, report: ExportReport, rel: str) -> int:
    """Write one file to ``target``. An existing file is left as it is when the new bytes are the same,
    replaced when they differ and ``overwrite``, else ``UsageError`` (and nothing changes)."""
    if not os.path.lexists(target):
        return write_npz(target, members)
    if not os.path.isfile(target) or os.path.islink(target):
        raise UsageError(f"--dst-npz: {target} exists and is not a regular file; refusing to replace it")
    candidate = temporary_path(target, "export")
    try:
        size = write_npz(candidate, members)
        if filecmp.cmp(candidate, target, shallow=False):
            report.unchanged.append(rel)
            return size
        if not overwrite:
            raise UsageError(f"--dst-npz: {target} exists with different bytes; refusing to replace it "
                             "(--overwrite replaces it)")
        os.replace(candidate, target)
        report.replaced.append(rel)
        return size
    finally:
        candidate.unlink(missing_ok=True)


# --------------------------------------------------------------------------- export


def selected_graphs(ds: Dataset, collections: Sequence[str] | None,
                     splits: Sequence[str] | None) -> list[tuple[str, str, str]]:
    """(graph id, collection, split) of every selected graph, sorted by graph id."""
    if splits:
        unknown = sorted(set(splits) - set(SPLITS))
        if unknown:
            raise UsageError(f"unknown split(s) {', '.join(unknown)}; known: {', '.join(SPLITS)}")
    ids = []
    for coll in ds.collections:
        if not selected(coll, collections):
            continue
        for split in ds.splits(coll):
            if not splits or split in splits:
                ids += [(gid, coll, split) for gid in ds.graph_ids(coll, split)]
    return sorted(ids)


def export(
    shards: str | Path | Dataset,
    dst_npz: str | Path,
    *,
    packed: bool = False,
    collections: Sequence[str] | None = None,
    splits: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
    storage_options: dict | None = None,
    overwrite: bool = False,
) -> ExportReport:
    """Write every selected graph of the shard folder ``shards`` as ``dst_npz/<tree>/<split>/<stem>.npz``.

    ``shards`` may be a local folder, a URL (``s3://bucket/shards``, opened with ``storage_options``)
    or an open ``Dataset``; ``dst_npz`` is a local folder, not empty, outside the shard folder and
    outside the build's source tree (``refuse_source_overlap``).

    ``collections`` are collection ids or prefixes (``layout:xla``, ``tile``), ``splits`` split names;
    ``packed`` writes ``node_config_feat`` as (c_u, nc, 3) int32 base-7 codes instead of decoded float32.
    An existing file of the same name is kept when its bytes are the same and replaced only with
    ``overwrite`` (else ``UsageError`` before anything is written); nothing else in ``dst_npz`` is
    touched, and nothing outside it: a graph id that is not a safe file name raises ``BadShards``
    before anything is written.
    """
    if not os.fspath(dst_npz):
        raise UsageError("--dst-npz must not be empty (it would mean the current folder): name the output folder")
    dst = Path(dst_npz).resolve()
    store = shards.store if isinstance(shards, Dataset) else resolve(shards, storage_options, what="--shards")
    if store.contains(resolve(dst)):
        raise UsageError(f"--dst-npz {dst} must not lie inside the shard folder {store.resolved().display}")
    ds = shards if isinstance(shards, Dataset) else open_dataset(store)
    ids = selected_graphs(ds, collections, splits)
    if not ids:
        raise UsageError(f"no graph in {ds.root} matches collections={collections or 'all'} splits={splits or 'all'}")
    refuse_source_overlap(dst, ds.manifest)
    report = ExportReport(dst)
    plan = [(gid, npz_relpath(gid, coll, split)) for gid, coll, split in ids]  # every id checked first
    targets = {rel: _inside(dst, rel) for _, rel in plan}
    for target in targets.values():  # what is refused whatever its bytes: before any file is written or replaced
        if os.path.lexists(target) and (os.path.islink(target) or not os.path.isfile(target)):
            raise UsageError(f"--dst-npz: {target} exists and is not a regular file; refusing to replace it")
    plan.sort(key=lambda item: not os.path.lexists(targets[item[1]]))  # existing files first (a refusal: before any write)
    for gid, rel in plan:
        g = ds.load_graph(gid)
        report.bytes += _write(targets[rel], graph_members(g, packed=packed), overwrite, report, rel)
        report.files.append(rel)
        if progress:
            progress(rel)
    report.files.sort()
    report.unchanged.sort()
    report.replaced.sort()
    return report


__all__ = ["ExportReport", "export", "graph_members", "npz_relpath", "refuse_source_overlap", "selected_graphs"]
