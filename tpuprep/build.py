"""Orchestrating a build: discover inputs, convert each file, merge shards, write the manifest.

Phase 1 runs one task per input file (convert + write part files + a JSON sidecar), on whichever
runner the options select; a bad file becomes a quarantine record and the batch goes on. Phase 2
merges the parts of each (collection, split) into shards, in graph-id order. Last come
``quarantine.jsonl``, the dataset card and ``manifest.json``. The staging folder ``<dst>/.tpuprep``
holds the finished parts, so ``--resume`` after a crash redoes only unfinished files.
"""

from __future__ import annotations

import json
import shutil
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .convert import ConvertedGraph, convert_file
from .errors import BadInput, UsageError
from .faults import checkpoint
from .inputs import InputFile, discover
from .io.files import TEMPORARY, sha256_file, write_json_atomic, write_text_atomic
from .options import BuildOptions
from .shards.layout import CARD, MANIFEST, QUARANTINE, STAGING, is_output_entry, sidecar_relpath
from .shards.manifest import build_manifest, write_manifest
from .shards.writer import PartFiles, merge_parts, write_parts

Progress = Callable[[str, dict], None]


@dataclass
class BuildReport:
    """What a build did: the manifest it wrote and the per-file records."""

    manifest: dict
    records: list[dict] = field(default_factory=list)
    dry_run: bool = False

    @property
    def quarantined(self) -> list[dict]:
        return [r for r in self.records if r["status"] != "ok"]


TILE_BATCH_FILES = 64
TILE_BATCH_BYTES = 32 << 20


def plan_batches(inputs: list[InputFile]) -> list[list[InputFile]]:
    """Group sorted inputs into tasks: one per layout file; tile files of one (collection, split) in runs
    of up to 64 files (≤ 32 MB). Inputs come sorted by graph id, which interleaves the splits, so one run
    stays open per (collection, split); each run is a contiguous slice of its split's sorted files, which
    keeps graph-id order across runs. Deterministic; a batch never spans two (collection, split) groups."""
    batches: list[list[InputFile]] = []
    open_runs: dict[tuple[str, str], tuple[list[InputFile], int]] = {}  # (collection, split) -> (run, bytes)
    for inp in inputs:
        if inp.kind != "tile":
            batches.append([inp])
            continue
        key = (inp.collection, inp.split)
        run, size = open_runs.get(key, (None, 0))
        if run is None or len(run) >= TILE_BATCH_FILES or size + inp.size > TILE_BATCH_BYTES:
            run, size = [], 0
            batches.append(run)
        run.append(inp)
        open_runs[key] = (run, size + inp.size)
    return batches


def _sidecar(staging: Path, batch: list[InputFile]) -> Path:
    return staging / sidecar_relpath(batch[0].relpath)


def _fingerprint(batch: list[InputFile], opts: BuildOptions) -> dict:
    """What must be unchanged for a finished batch to be reused by --resume."""
    return {"options": opts.fingerprint(),
            "files": [[i.relpath, i.size, i.path.stat().st_mtime_ns] for i in batch]}


def _convert_one(inp: InputFile, opts: BuildOptions) -> tuple[dict, ConvertedGraph | None]:
    record: dict = {"path": inp.relpath, "graph_id": inp.graph_id, "collection": inp.collection,
                    "kind": inp.kind, "split": inp.split, "bytes": inp.size}
    try:
        record["sha256"] = sha256_file(inp.path)
        g = convert_file(inp, opts, record["sha256"])
    except BadInput as exc:
        return record | {"status": "quarantined", "key": exc.key, "error": exc.problem}, None
    except (MemoryError, OSError, ValueError, IndexError, TypeError, KeyError) as exc:
        # not foreseen by validation: still one line about this file, and the batch goes on
        return record | {"status": "quarantined", "key": None, "error": f"{type(exc).__name__}: {exc}",
                         "traceback": traceback.format_exc(limit=8)}, None
    record |= {
        "status": "ok", "warnings": list(g.warnings), "moments": g.feature_moments(),
        "counts": {"configs": g.num_configs, "unique_configs": g.num_unique_configs,
                   "nodes_before": g.num_nodes_original, "nodes_after": len(g.node_index),
                   "edges_before": g.num_edges_original, "edges_after": len(g.edge_index),
                   "bytes_in": inp.size, "anomalies": g.num_repad_anomalies},
    }
    return record, g


def process_batch(batch: list[InputFile], opts: BuildOptions, staging: str) -> dict:
    """The per-task work: convert each file, write the batch's parts and sidecar.

    Returns a small dict (no arrays): {"fingerprint", "records": per-file records, "parts": PartFiles
    as a dict or None when no file of the batch converted}.
    """
    staging_path = Path(staging)
    fingerprint = _fingerprint(batch, opts)
    records, graphs = [], []
    for inp in batch:
        record, g = _convert_one(inp, opts)
        records.append(record)
        if g is not None:
            graphs.append(g)
    parts = None
    if graphs:
        name = batch[0].relpath.rsplit("/", 1)[1][: -len(".npz")]
        parts = write_parts(graphs, staging_path, name, opts.row_group_bytes, opts.compression_level).__dict__
        checkpoint("part")
    done = {"fingerprint": fingerprint, "records": records, "parts": parts}
    sidecar = _sidecar(staging_path, batch)
    sidecar.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(sidecar, done, durable=False, indent=None)
    return done


def merge_task(kind: str, collection: str, split: str, parts: list[dict], staging: str,
               dst: str, opts: BuildOptions) -> list[dict]:
    """Merge one (collection, split) from its parts (dicts of PartFiles, in graph-id order)."""
    infos = merge_parts(kind, collection, split, [PartFiles(**p) for p in parts],
                        Path(staging), Path(dst), shard_bytes=opts.shard_bytes,
                        compression_level=opts.compression_level)
    return [i.__dict__ for i in infos]


def _prepare_destination(dst: Path, resume: bool, overwrite: bool) -> None:
    if resume and overwrite:
        raise UsageError("--resume and --overwrite exclude each other")
    if dst.exists() and not dst.is_dir():
        raise UsageError(f"--dst {dst} exists and is not a folder")
    entries = list(dst.iterdir()) if dst.exists() else []
    if entries and not (resume or overwrite):
        raise UsageError(f"--dst {dst} is not empty; pass --resume to finish an interrupted build "
                         "or --overwrite to replace it")
    if overwrite:
        foreign = [e.name for e in entries if not is_output_entry(e.name)]
        if foreign:
            raise UsageError(f"--dst {dst} holds files tpuprep did not write ({', '.join(sorted(foreign)[:5])}); "
                             "refusing to overwrite")
        for e in entries:
            shutil.rmtree(e) if e.is_dir() and not e.is_symlink() else e.unlink()
    elif resume:
        for e in entries:
            if e.name in (MANIFEST, QUARANTINE, CARD) or TEMPORARY.fullmatch(e.name):
                e.unlink()
    dst.mkdir(parents=True, exist_ok=True)


def _reusable(batch: list[InputFile], opts: BuildOptions, staging: Path) -> dict | None:
    """The finished result of this exact batch from an interrupted build, if its parts are intact."""
    try:
        done = json.loads(_sidecar(staging, batch).read_text())
    except (OSError, ValueError):
        return None
    if done.get("fingerprint") != _fingerprint(batch, opts):
        return None
    parts = done.get("parts")
    if parts and not all((staging / parts[k]).exists() for k in ("graphs", "configs")):
        return None
    return done


def _refused_record(exc: BadInput, src: Path) -> dict:
    path = Path(exc.path) if exc.path else src
    try:
        rel = path.relative_to(src).as_posix()
    except ValueError:
        rel = str(path)
    size = path.lstat().st_size if path.exists() or path.is_symlink() else 0
    return {"path": rel, "graph_id": None, "collection": None, "kind": None, "split": None,
            "bytes": size, "status": "quarantined", "key": exc.key, "error": exc.problem}


def build(
    src: str | Path,
    dst: str | Path,
    opts: BuildOptions | None = None,
    *,
    collections: list[str] | None = None,
    splits: list[str] | None = None,
    runner=None,
    resume: bool = False,
    overwrite: bool = False,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> BuildReport:
    """Convert every TpuGraphs file under ``src`` into shards under ``dst`` (SPEC §3, §5)."""
    from .runners.local import SerialRunner
    from .shards.card import write_card

    opts = opts or BuildOptions()
    src, dst = Path(src).resolve(), Path(dst).resolve()
    notify = progress or (lambda event, info: None)
    inputs, refused = discover(src, collections, splits)
    refused_records = [_refused_record(e, src) for e in refused]
    if dry_run:
        notify("discovered", {"inputs": [], "refused": refused_records})
        return BuildReport({"inputs": [i.relpath for i in inputs]}, refused_records, dry_run=True)
    if not inputs and not refused:
        raise UsageError(f"no .npz files under {src} (expected .../tile/xla/<split>/ or "
                         ".../layout/<xla|nlp>/<default|random>/<split>/)")
    if dst == src or src in dst.parents:
        raise UsageError(f"--dst {dst} must not lie inside --src {src}")
    _prepare_destination(dst, resume, overwrite)
    notify("discovered", {"inputs": inputs, "refused": refused_records})
    staging = dst / STAGING
    staging.mkdir(exist_ok=True)
    runner = runner or SerialRunner()

    results: list[dict] = []
    pending = []
    for batch in plan_batches(inputs):
        done = _reusable(batch, opts, staging) if resume else None
        if done is None:
            pending.append(batch)
            continue
        results.append(done)
        for record in done["records"]:
            notify("file", record)
    # Largest first (LPT): the few huge layout files start at once instead of ending the build on one
    # busy worker while the others idle. Results are sorted below, so the order never shows in the output.
    pending.sort(key=lambda batch: (-sum(i.size for i in batch), batch[0].relpath))
    futures = [runner.submit(process_batch, batch, opts, str(staging)) for batch in pending]
    for fut in runner.as_completed(futures):
        done = fut.result()
        results.append(done)
        for record in done["records"]:
            notify("file", record)

    groups: dict[tuple[str, str, str], list[dict]] = {}
    for done in sorted((d for d in results if d["parts"]), key=lambda d: d["parts"]["graph_ids"][0]):
        first = next(r for r in done["records"] if r["status"] == "ok")
        groups.setdefault((first["kind"], first["collection"], first["split"]), []).append(done["parts"])
    for kind in ("layout", "tile"):  # outputs of a previous build that this one does not produce
        if (dst / kind).exists():
            shutil.rmtree(dst / kind)
    merges = [runner.submit(merge_task, kind, coll, split, parts, str(staging), str(dst), opts)
              for (kind, coll, split), parts in sorted(groups.items())]
    shards: list[dict] = []
    for fut in runner.as_completed(merges):
        shards.extend(fut.result())
        notify("merged", {})
    shards.sort(key=lambda s: s["path"])

    records = [r for d in results for r in d["records"]]
    all_records = sorted([*records, *refused_records], key=lambda r: r["path"])
    manifest = build_manifest(opts, all_records, shards)
    write_text_atomic(dst / QUARANTINE, "".join(json.dumps(q, sort_keys=True) + "\n" for q in manifest["quarantine"]))
    write_card(dst, manifest)
    write_manifest(dst, manifest)
    shutil.rmtree(staging, ignore_errors=True)
    return BuildReport(manifest, all_records)
