"""Orchestrating a build: discover inputs, convert each file, merge shards, write the manifest.

Phase 1 runs one task per input file (convert + write part files + a JSON sidecar), on whichever
runner the options select; a bad file becomes a quarantine record and the batch goes on. Phase 2
merges the parts of each (collection, split) into shards, in graph-id order. Last come
``quarantine.jsonl``, the dataset card and ``manifest.json``. The staging folder ``<dst>/.tpuprep``
holds the finished parts, so ``--resume`` after a crash redoes only unfinished files.

A build carries out a ``request.BuildRequest``: ``--src`` and ``--dst`` resolved once and checked by
``request.make_request`` (for ``tpuprep build``, ``tpuprep run`` and the keyword form of ``build``
alike). Before anything is written, ``--dst`` is locked and inspected (``destination``): a build
deletes only what tpuprep wrote and refuses a folder holding anything else.

``--dst`` may be an object-store URL (``s3://bucket/prefix``, any fsspec protocol), resolved once by
``make_request``: the same steps run with the ``Store`` in place of the folder. Tasks (on any
runner, e.g. Dask workers without a shared filesystem) receive the staging ``Store`` and upload their
parts themselves; the merge tasks copy and upload the shards; this process writes only the quarantine
list, the card and, last, the manifest, so a reader never sees a half build. A missing bucket or a
refused request is one line naming the URL (exit 1), raised before anything is written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from . import limits
from .convert import ConvertedGraph, convert_file
from .errors import BadInput, FatalError, UsageError, one_line
from .faults import checkpoint
from .inputs import (
    InputFile,
    Refused,
    Source,
    Stamp,
    Unplaced,
    current_stamp,
    discover,
    inventory,
    open_source,
)
from .io.files import sha256_stream
from .io.store import NotARegularFile, Store, library_error
from .options import BuildOptions
from .request import BuildRequest, make_request
from .shards import destination
from .shards.destination import Contents, Lock
from .shards.layout import MANIFEST, QUARANTINE, STAGING, part_name, sidecar_relpath
from .shards.manifest import build_manifest, write_manifest
from .shards.schema import SCHEMA_VERSION
from .shards.stamp import part_id
from .shards.writer import PartFiles, merge_parts, write_parts
from .tpugraphs import SPLITS, selected

Progress = Callable[[str, dict], None]


@dataclass
class BuildReport:
    """What a build did: the manifest it wrote and the per-file records (sorted by path).

    ``reused``: the input relpaths whose finished results ``--resume`` took from an interrupted build
    (their batch's sidecar and parts, ``_reusable``) instead of converting them again.
    """

    manifest: dict
    records: list[dict] = field(default_factory=list)
    dry_run: bool = False
    reused: frozenset[str] = frozenset()
    skipped: list[dict] = field(default_factory=list)  # {"path", "reason"}: not read, not refused (inputs.skip_reason)

    @property
    def quarantined(self) -> list[dict]:
        return [r for r in self.records if r["status"] != "ok"]

    @property
    def converted(self) -> list[dict]:
        """Records of the files this build converted (ok, and not reused)."""
        return [r for r in self.records if r["status"] == "ok" and r["path"] not in self.reused]

    @property
    def reused_records(self) -> list[dict]:
        """Records of the converted files taken over from an interrupted build (ok and reused)."""
        return [r for r in self.records if r["status"] == "ok" and r["path"] in self.reused]


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


def _fingerprint(batch: list[InputFile], opts: BuildOptions, stamps: Iterable[Stamp] | None = None) -> dict:
    """What must be unchanged for a finished batch to be reused by --resume: the schema version its
    parts were written in, the options, the input limits' scale (``TPUPREP_INPUT_LIMIT_SCALE``: raising it
    must convert again what it refused) and each file's relpath, size and mtime (or remote version) —
    as they were read (``stamps``) or as they are now (``current_stamp``)."""
    stamps = [current_stamp(i) for i in batch] if stamps is None else stamps
    return {"schema_version": SCHEMA_VERSION, "options": opts.fingerprint(), "input_limit_scale": limits.scale(),
            "files": [[i.relpath, *(s or [None, None])] for i, s in zip(batch, stamps, strict=True)]}


def _read_and_convert(inp: InputFile, opts: BuildOptions, record: dict) -> tuple[ConvertedGraph, Stamp]:
    """Open the file once (no link followed, regular files only; an archive member in place; a remote
    object by one read), hash and size the bytes read, convert from the same open file, and check it
    did not change meanwhile. Fills record's sha256 and bytes."""
    fh, stamp = open_source(inp)
    with fh:
        record["sha256"], record["bytes"] = sha256_stream(fh)
        if record["bytes"] != stamp[0]:
            raise BadInput(inp.path, None, "changed while it was being read (still being written?)")
        g = convert_file(dataclasses.replace(inp, size=record["bytes"]), opts, record["sha256"], fh)
        if fh.stamp() != stamp:  # the file as it is now: changed during the read?
            raise BadInput(inp.path, None, "changed while it was being converted (still being written?)")
    return g, stamp


def _convert_one(inp: InputFile, opts: BuildOptions) -> tuple[dict, ConvertedGraph | None, Stamp]:
    """Convert one file: (its record, the converted graph or None if quarantined, its stamp)."""
    record: dict = {"path": inp.relpath, "graph_id": inp.graph_id, "collection": inp.collection,
                    "kind": inp.kind, "split": inp.split, "bytes": inp.size, **inp.describe()}
    try:
        g, stamp = _read_and_convert(inp, opts, record)
    except BadInput as exc:
        return record | {"status": "quarantined", "key": exc.key, "error": exc.problem}, None, current_stamp(inp)
    except (MemoryError, OSError, ValueError, IndexError, TypeError, KeyError) as exc:
        # not foreseen by validation: still one line about this file, and the batch goes on
        return record | {"status": "quarantined", "key": None, "error": f"{type(exc).__name__}: {exc}",
                         "traceback": traceback.format_exc(limit=8)}, None, current_stamp(inp)
    record |= {
        "status": "ok", "warnings": list(g.warnings), "moments": g.feature_moments(),
        "counts": {"configs": g.num_configs, "unique_configs": g.num_unique_configs,
                   "nodes_before": g.num_nodes_original, "nodes_after": len(g.node_index),
                   "edges_before": g.num_edges_original, "edges_after": len(g.edge_index),
                   "bytes_in": record["bytes"], "anomalies": g.num_repad_anomalies,
                   "dimensions_undecided": g.dimensions_undecided},
    }
    return record, g, stamp


def process_batch(batch: list[InputFile], opts: BuildOptions, staging: Store) -> dict:
    """The per-task work: convert each file, write the batch's parts and, last, its sidecar into the
    ``staging`` store (a local folder or an object-store prefix: the task writes there itself).
    Returns a small dict (no arrays): {"fingerprint", "records": per-file records, "parts": PartFiles
    as a dict or None when no file of the batch converted}.
    """
    records, graphs, stamps = [], [], []
    for inp in batch:
        record, g, stamp = _convert_one(inp, opts)
        records.append(record)
        stamps.append(stamp)
        if g is not None:
            graphs.append(g)
    fingerprint = _fingerprint(batch, opts, stamps)
    parts = None
    if graphs:
        name = part_name(batch[0].relpath)  # bounded, whatever the length of the input's name
        pid = part_id(opts.to_dict(), [(g.inp.relpath, g.inp.size, g.sha256) for g in graphs])
        parts = write_parts(graphs, staging, name, opts.row_group_bytes, opts.compression_level,
                            part_id=pid).__dict__
        checkpoint("part")
    done = {"fingerprint": fingerprint, "records": records, "parts": parts}
    # not fsynced: after a power loss an unreadable sidecar only means the batch is converted again
    text = json.dumps(done, indent=None, sort_keys=False, allow_nan=False) + "\n"
    staging.write_bytes(sidecar_relpath(batch[0].relpath), text.encode())
    return done


def lost_batch_result(batch: list[InputFile], opts: BuildOptions, reason: str) -> dict:
    """What ``process_batch`` returns for a batch the infrastructure gave up on (its workers kept dying,
    typically out of memory): every file quarantined with ``reason``, so the build goes on. No sidecar
    is written, so ``--resume`` tries the files again."""
    error = f"the workers converting this file {reason}"
    if len(batch) > 1:
        error += f" (it was converting {len(batch)} files together; all of them are set aside)"
    records = [{"path": i.relpath, "graph_id": i.graph_id, "collection": i.collection, "kind": i.kind,
                "split": i.split, "bytes": i.size, "status": "quarantined", "key": None, "error": error,
                **i.describe()}
               for i in batch]
    return {"fingerprint": _fingerprint(batch, opts, [(i.size, None) for i in batch]), "records": records,
            "parts": None}


def merge_task(kind: str, collection: str, split: str, parts: list[dict], staging: Store, dst: Store,
               opts: BuildOptions) -> list[dict]:
    """Merge one (collection, split) from its parts (dicts of PartFiles, in graph-id order)."""
    infos = merge_parts(kind, collection, split, [PartFiles(**p) for p in parts], staging, dst,
                        shard_bytes=opts.shard_bytes, compression_level=opts.compression_level)
    return [i.__dict__ for i in infos]


def _no_inputs(source: Source, collections: list[str] | None, splits: list[str] | None, refused: list,
               assigned: bool = False) -> None:
    """Nothing was selected: name the filter and what exists, say that files outside a TpuGraphs tree
    need --collection/--split, or say there is nothing at all. Returns only when something was refused
    (a symbolic link, a FIFO ...): the build then records it in the quarantine list and exits 3."""
    if collections or splits:
        everything, _ = discover(source)
        if everything:
            named = " ".join(f"--{flag} {','.join(v)}" for flag, v in (("collections", collections),
                                                                       ("splits", splits)) if v)
            raise UsageError(f"{named} matches none of the {len(everything)} .npz files under {source.display}; "
                             f"it holds {inventory(everything)}")
    unplaced = [r for r in refused if isinstance(r, Unplaced)]
    if unplaced:
        what = "it is not" if source.kind in ("npz", "tar") else f"none of its {len(unplaced)} .npz files is"
        raise UsageError(f"--src {source.display}: {what} in a TpuGraphs tree (.../tile/xla/<split>/ or "
                         ".../layout/<xla|nlp>/<default|random>/<split>/), so its collection and split are "
                         "unknown: say them with --collection and --split (e.g. --collection "
                         "layout:xla:random --split train)")
    if assigned and not refused:
        raise UsageError(f"no .npz files directly in --src {source.display}")
    if not refused:
        raise UsageError(f"no .npz files under {source.display} (expected .../tile/xla/<split>/ or "
                         ".../layout/<xla|nlp>/<default|random>/<split>/)")


def _listing(items: Iterable, limit: int = 5) -> str:
    items = sorted(items)
    return ", ".join(str(i) for i in items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


def inspect_destination(dst: Store, resume: bool, overwrite: bool, collections: list[str] | None = None,
                        splits: list[str] | None = None, *, locked: bool = False) -> Contents:
    """Check, without changing anything, that a build may write ``dst``; return what it holds.

    Refused (UsageError): a ``dst`` that is not a folder (checked again here, under the lock: it may have
    changed since ``make_request``, which also refuses --resume with --overwrite); a folder another
    build holds; any entry tpuprep did not write (it is never deleted, so --overwrite and --resume
    cannot proceed either); a non-empty folder without --resume or --overwrite; a --resume whose
    selection would drop collections or splits the folder holds (shards, staged parts or manifest).
    ``locked``: this process holds the folder's lock (so another build's is not looked for).
    """
    if dst.root_not_a_folder:
        raise UsageError(f"--dst {dst.display} exists and is not a folder")
    try:
        dst.check_reachable()
    except OSError:
        raise  # a missing bucket, a denied request: store_errors names them
    except Exception as exc:  # the store library's own: no credentials, an invalid endpoint or option
        if not library_error(exc):
            raise  # a bug (tpuprep's TypeError) keeps its traceback
        raise FatalError(f"--dst {dst.display}: cannot be reached with its storage options "
                         f"({type(exc).__name__}: {one_line(exc)})") from None
    if not locked:
        destination.probe(dst)
    contents = destination.contents(dst)
    # the manifest is read only when it is one of tpuprep's files (never a link or a FIFO)
    manifest_held = destination.selection(dst) if resume and MANIFEST in contents.files else set()
    return _check_contents(dst.display, contents, manifest_held, resume, overwrite, collections, splits)


def _check_contents(dst: Path | str, contents: Contents, manifest_held: set[tuple[str, str]], resume: bool,
                    overwrite: bool, collections: list[str] | None, splits: list[str] | None) -> Contents:
    """The checks of ``inspect_destination`` on what ``dst`` holds (``manifest_held``: the pairs its
    manifest lists)."""
    if contents.foreign:
        what = (f"--dst {dst} holds files tpuprep did not write ({_listing(contents.foreign)})")
        if overwrite or resume:
            raise UsageError(f"{what}; refusing to {'overwrite' if overwrite else 'resume'}: tpuprep "
                             "deletes only what it wrote")
        raise UsageError(f"{what}; choose a new or empty folder")
    if not contents.empty and not (resume or overwrite):
        raise UsageError(f"--dst {dst} is not empty; pass --resume to finish an interrupted build "
                         "or --overwrite to replace it")
    if resume:
        held = contents.held | manifest_held
        wanted = set(splits or SPLITS)
        dropped = {f"{c} {s}" for c, s in held if not (selected(c, collections) and s in wanted)}
        if dropped:
            raise UsageError(f"--resume would drop what --dst {dst} holds for {_listing(dropped)}: resume "
                             "with the interrupted build's --collections/--splits, or use --overwrite")
    return contents


def _prepare_destination(dst: Store, contents: Contents, resume: bool, overwrite: bool) -> None:
    """Delete what a build replaces: with --overwrite everything tpuprep wrote, with --resume the
    manifest, card and quarantine list (shards go just before the merge, staged parts are reused)."""
    # the manifest first: a reader never sees it above changing shards
    destination.clear(dst, [f for f in contents.files if f == MANIFEST])
    destination.clear(dst, [f for f in contents.files if f != MANIFEST and ("/" not in f or overwrite)],
                      contents.dirs if overwrite else [])


def _remove_own(dst: Store, under: tuple[str, ...]) -> None:
    """Delete what tpuprep wrote under these top-level folders of ``dst`` (nothing else)."""
    contents = destination.contents(dst)
    destination.clear(dst, [f for f in contents.files if f.split("/", 1)[0] in under],
                      [d for d in contents.dirs if d.split("/", 1)[0] in under])


def _reusable(batch: list[InputFile], opts: BuildOptions, staging: Store) -> dict | None:
    """The finished result of this exact batch from an interrupted build, if its parts are intact."""
    try:
        done = json.loads(staging.read_bytes(sidecar_relpath(batch[0].relpath)))
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError):
        return None
    except NotARegularFile:
        return None  # e.g. a link where the sidecar should be: not a finished batch
    # another OSError (a refused request) is an error, not an unfinished batch
    if not isinstance(done, dict) or done.get("fingerprint") != _fingerprint(batch, opts):
        return None
    parts = done.get("parts")
    if parts and not all(staging.exists(parts[k]) for k in ("graphs", "configs")):
        return None
    return done


def _refused_record(exc: BadInput, source: Source) -> dict:
    """The quarantine record of an entry refused by discovery: ``path`` relative to --src
    (``Source.relative``), its bytes as listed (a ``Refused``'s size: a file's, an archive's or an
    archive member's; 0 when not known: a damaged archive's refusal)."""
    size = exc.size if isinstance(exc, Refused) else 0
    return {"path": source.relative(exc.path), "graph_id": None, "collection": None, "kind": None, "split": None,
            "bytes": size, "status": "quarantined", "key": exc.key, "error": exc.problem}


def build(request: BuildRequest | str | Path, dst: str | Path | None = None, opts: BuildOptions | None = None,
          *, runner=None, progress: Progress | None = None, **fields) -> BuildReport:
    """Carry out a ``BuildRequest`` (``request.make_request``): convert every TpuGraphs file of its
    source into shards in its destination (docs/spec.md §3, §5). ``runner``: where the tasks run
    (opened by the caller from ``request.cluster`` with ``request.open_runner``, and closed by it;
    None: this process); ``progress(event, info)``: see ``cli.common.Progress``.

    Keyword form: ``build(src, dst, opts, collections=..., splits=..., collection=..., split=...,
    resume=..., overwrite=..., dry_run=..., storage_options=..., src_storage_options=...)`` makes the
    request with ``make_request`` (its checks, its UsageErrors) and runs the same path.

    ``src`` is a TpuGraphs tree (or a collection or split folder of one, or one file in it), a tar
    archive of one or a folder of tars, locally or as a URL, where each file's path says its collection
    and split, optionally filtered by ``collections``/``splits``; or a plain ``.npz`` file or flat
    folder of them, all of which are ``collection``/``split`` (both given, never with the filters; see
    ``inputs.discover``). ``dst`` is a local folder or an object-store URL (``s3://bucket/prefix``).

    Raises UsageError, before touching anything, for a selection that matches no file, files outside a
    tree without ``collection``/``split`` (or a tree with them), or a ``dst`` it may not write (see
    ``inspect_destination``); a dry run makes the same checks. ``dst`` is locked for the whole build.
    A missing bucket or a refused request to the store is a FatalError naming the URL.
    """
    if not isinstance(request, BuildRequest):
        request = make_request(request, dst, opts, **fields)
    elif dst is not None or opts is not None or fields:
        raise TypeError("build(request) takes the request alone (with runner and progress); "
                        "make_request makes a request from paths and options")
    source, store, opts = request.source, request.destination, request.options
    resume, overwrite, dry_run = request.resume, request.overwrite, request.dry_run
    collections = list(request.collections) if request.collections else None
    splits = list(request.splits) if request.splits else None
    collection, split = request.collection, request.split
    notify = progress or (lambda event, info: None)
    passed_over: list = []
    inputs, refused = discover(source, collections, splits, collection=collection, split=split,
                               skipped=passed_over)
    skipped = [{"path": source.relative(e.path), "reason": e.reason} for e in passed_over]
    notify("skipped", {"skipped": skipped})
    if not inputs:
        _no_inputs(source, collections, splits, refused, assigned=collection is not None)
    if collection is not None and split is not None:
        collections, splits = [collection], [split]  # what the build holds, for --resume's checks
    refused_records = [_refused_record(e, source) for e in refused]
    with store_errors(store):
        inspect_destination(store, resume, overwrite, collections, splits)
        if dry_run:
            return dataclasses.replace(_dry_run(inputs, refused_records, notify), skipped=skipped)
        with destination.lock(store) as lock:
            contents = inspect_destination(store, resume, overwrite, collections, splits, locked=True)
            _prepare_destination(store, contents, resume, overwrite)
            report = _build_locked(store, opts, inputs, refused_records, runner, resume, notify, lock)
    return dataclasses.replace(report, skipped=skipped)


def store_errors(store: Store) -> contextlib.AbstractContextManager[None]:
    """A failed request to the ``--dst`` store (missing bucket, permission refused, network) as one
    FatalError line naming the URL (``Store.request_errors``; locally an ``OSError`` keeps its own
    line: the CLI's guard names the file and the errno). Only storage's errors (``library_error``):
    another component's (pyarrow's ``ArrowInvalid``, a lost Dask connection) or a bug keeps its type
    and traceback."""
    return store.request_errors(f"--dst {store.display}", "written")


def _dry_run(inputs: list[InputFile], refused_records: list[dict], notify: Progress) -> BuildReport:
    """What a dry run reports: the inputs it would convert and the refused entries."""
    notify("discovered", {"inputs": [], "refused": refused_records})
    return BuildReport({"inputs": [i.relpath for i in inputs]}, refused_records, dry_run=True)


def _build_locked(dst: Store, opts: BuildOptions, inputs: list[InputFile],
                  refused_records: list[dict], runner, resume: bool, notify: Progress,
                  lock: Lock | None = None) -> BuildReport:
    """The build proper, with ``dst`` locked (``lock``, checked before publishing) and prepared."""
    from .runners.local import SerialRunner

    notify("discovered", {"inputs": inputs, "refused": refused_records})
    staging = dst.child(STAGING)
    staging.makedirs()  # locally: a folder the workers must see
    runner = runner or SerialRunner()

    results: list[dict] = []
    pending = []
    reused: set[str] = set()
    for batch in plan_batches(inputs):
        done = _reusable(batch, opts, staging) if resume else None
        if done is None:
            pending.append(batch)
            continue
        results.append(done)
        for record in done["records"]:
            reused.add(record["path"])
            notify("file", record | {"reused": True})
    # Largest first (LPT): the few huge layout files start at once instead of ending the build on one
    # busy worker while the others idle. Results are sorted below, so the order never shows in the output.
    pending.sort(key=lambda batch: (-sum(i.size for i in batch), batch[0].relpath))
    def submit(batch: list[InputFile]):
        paths = (*batch[0].worker_paths, *staging.worker_paths())  # workers must see these
        return runner.submit(process_batch, batch, opts, staging, paths=paths,
                             on_lost=functools.partial(lost_batch_result, batch, opts))

    # Submitted as as_completed() takes them: a runner that runs a task when it is submitted (serial)
    # then reports file by file, a pool or cluster takes them all at once and reports as they finish.
    for fut in runner.as_completed(submit(batch) for batch in pending):
        done = fut.result()
        results.append(done)
        for record in done["records"]:
            notify("file", record)

    groups: dict[tuple[str, str, str], list[dict]] = {}
    for done in sorted((d for d in results if d["parts"]), key=lambda d: d["parts"]["graph_ids"][0]):
        first = next(r for r in done["records"] if r["status"] == "ok")
        groups.setdefault((first["kind"], first["collection"], first["split"]), []).append(done["parts"])
    _remove_own(dst, ("layout", "tile"))  # shards of an interrupted build: this one writes them anew
    records = [r for d in results for r in d["records"]]
    all_records = sorted([*records, *refused_records], key=lambda r: r["path"])
    merges = [runner.submit(merge_task, kind, coll, split, parts, staging, dst, opts)
              for (kind, coll, split), parts in sorted(groups.items())]
    shards: list[dict] = []
    for fut in runner.as_completed(merges):
        shards.extend(fut.result())
        notify("merged", {})
    shards.sort(key=lambda s: s["path"])
    manifest = build_manifest(opts, all_records, shards)
    _publish(dst, manifest, lock)
    _remove_own(dst, (STAGING,))
    return BuildReport(manifest, all_records, reused=frozenset(reused))


def _publish(dst: Store, manifest: dict, lock: Lock | None) -> None:
    """Write the quarantine list, the card and, last, the manifest (``lock`` checked just before it
    goes out: an object store's lock may have been taken over)."""
    from .shards.card import write_card

    quarantine = "".join(json.dumps(q, sort_keys=True) + "\n" for q in manifest["quarantine"])
    dst.write_bytes(QUARANTINE, quarantine.encode())
    write_card(dst, manifest)
    if lock is not None:
        lock.check()
    write_manifest(dst, manifest)
