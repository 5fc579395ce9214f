"""``verify``'s orchestration: the shard-side checks, then every converted input checked against its
graph (in this process or on local worker processes), then the manifest's totals and statistics."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path

import numpy as np

from ..errors import BadInput
from ..inputcheck import listing_problems
from ..inputs import InputFile, discover, open_source, resolve_source
from ..io.files import sha256_stream
from ..shards.manifest import validate_schema
from ..shards.reader import Dataset, open_dataset
from ..tpugraphs import selected
from .graph import check_graph_row, verify_graph
from .reference import feature_moments
from .report import VerifyReport
from .shards import check_quarantine, check_shards, check_stats, check_totals

Progress = Callable[[str, dict], None]
"""``progress(event, info)``, the build's progress events (see ``verify``)."""


_OPEN: dict[str, Dataset] = {}
"""Datasets a verify worker process has opened, by folder or URL (one per process, reused across graphs)."""


def verify_input(ds: Dataset | str, inp: InputFile, entry: dict,
                 storage_options: dict | None = None) -> tuple[list[str], tuple | None, bool]:
    """Check one converted input against its graph in ``ds`` (a ``Dataset``, or a shard folder or URL
    a worker process opens once, with ``storage_options``): (problems, the graph's feature moments if
    it is a train graph, whether it was checked — False when the input changed since the build)."""
    if not isinstance(ds, Dataset):
        ds = _OPEN.get(ds) or _OPEN.setdefault(ds, open_dataset(ds, storage_options))
    problems: list[str] = []
    try:
        fh, _ = open_source(inp)
    except BadInput as exc:
        return [f"{inp.graph_id}: cannot be checked: {exc}"], None, False
    with fh:
        sha = sha256_stream(fh)[0]
        if sha != entry["sha256"]:
            return [f"{inp.relpath}: input changed since the build (sha256 differs)"], None, False
        moments = None
        try:
            # a layout graph's configs are streamed by verify_graph, never loaded whole
            g = ds.load_graph(inp.graph_id, configs=inp.kind != "layout")
            if inp.split == "train":
                moments = feature_moments(g.node_feat)
            # the zip itself, not through the build's reader (named as inputcheck.member_problems does)
            where = inp.path if inp.origin is not None and inp.origin.member else inp.relpath
            facts = verify_graph(ds, inp.path, inp.graph_id, ds.manifest["options"], problems, g, fh, str(where))
            check_graph_row(ds, inp, entry, sha, facts, problems)
        except (BadInput, OSError, KeyError, ValueError) as exc:
            problems.append(f"{inp.graph_id}: cannot be checked: {exc}")
    return problems, moments, True


BATCH_FILES, BATCH_BYTES = 64, 32 << 20
"""Small (tile) inputs go to a worker in runs of up to this many files and input bytes, as the build
batches them: one task per file would cost more in scheduling than in checking."""


def verify_batch(ds: Dataset | str, items: list[tuple[InputFile, dict]],
                 storage_options: dict | None = None) -> list[tuple[list[str], tuple | None, bool]]:
    """``verify_input`` of each (input, manifest entry) of ``items``, in order (one worker task)."""
    return [verify_input(ds, inp, entry, storage_options) for inp, entry in items]


def _shard_order(todo: list[tuple[InputFile, dict]], k: int) -> tuple:
    """Sort key of ``todo[k]``: layout inputs first, as listed; then tile inputs by collection, split, graph id."""
    inp = todo[k][0]
    return (inp.kind == "tile", inp.collection, inp.split, inp.graph_id, k) if inp.kind == "tile" else (False, k)


def plan_batches(todo: list[tuple[InputFile, dict]]) -> list[list[int]]:
    """Indices of ``todo`` in tasks: each layout input alone; tile inputs in runs of at most
    ``BATCH_FILES`` files and ``BATCH_BYTES`` bytes, in the shards' order (collection, split, graph id:
    a run reads one or two row groups, where discovery's order, by file name across splits, made a
    worker read its row groups again for nearly every graph); largest task first (the few big files
    start at once instead of ending the run on one busy worker)."""
    batches: list[list[int]] = []
    run: list[int] = []
    size = 0
    for k in sorted(range(len(todo)), key=lambda k: _shard_order(todo, k)):
        inp = todo[k][0]
        if inp.kind != "tile":
            batches.append([k])
            continue
        if run and (len(run) >= BATCH_FILES or size + inp.size > BATCH_BYTES):
            batches.append(run)
            run, size = [], 0
        run.append(k)
        size += inp.size
    if run:
        batches.append(run)
    return sorted(batches, key=lambda b: (-sum(todo[k][0].size for k in b), b[0]))


class _Pending:
    """The worker tasks of ``_submit``: the runner, its futures and the ``todo`` indices of each."""

    def __init__(self, runner, futures: list, batches: list[list[int]]):
        self.runner, self.futures, self.batches = runner, futures, batches


def _submit(ds: Dataset, todo: list[tuple[InputFile, dict]], workers: int) -> _Pending | None:
    """Start checking ``todo`` on ``workers`` local processes (``plan_batches``); None when they are
    checked in this process instead (one worker, or one input). The caller closes ``runner``."""
    if workers <= 1 or len(todo) <= 1:
        return None
    from ..runners import make_runner

    runner = make_runner(workers, kernels=False)  # verify's checks are plain NumPy: no kernel to load
    try:
        local = ds.store.worker_paths()  # a remote dataset: none, every worker reads the store
        batches = plan_batches(todo)
        futures = []
        for batch in batches:
            files = dict.fromkeys(f for k in batch for f in todo[k][0].worker_paths)
            futures.append(runner.submit(verify_batch, str(ds.root), [todo[k] for k in batch], ds.storage_options,
                                         paths=(*files, *local)))
    except BaseException:
        runner.close()
        raise
    return _Pending(runner, futures, batches)


def _collect(ds: Dataset, todo: list[tuple[InputFile, dict]], pending: _Pending | None,
             progress: Progress | None) -> Iterator[tuple[InputFile, tuple[list[str], tuple | None, bool]]]:
    """``verify_input`` of each (input, manifest entry) of ``todo``: run here (``pending`` None) or
    taken from the workers; yields (input, result) in the order of ``todo`` whatever order the
    workers finish in, so the report is the same as a serial run's."""
    notify = progress or (lambda event, info: None)
    results: dict[int, tuple] = {}
    if pending is None:  # in the order the workers would take them (the shards' order for tile inputs)
        for k in sorted(range(len(todo)), key=lambda k: _shard_order(todo, k)):
            inp, entry = todo[k]
            results[k] = verify_input(ds, inp, entry)
            notify("file", {"path": inp.relpath, "bytes": inp.size, "status": "ok"})
    else:
        index = {id(f): b for b, f in enumerate(pending.futures)}
        for fut in pending.runner.as_completed(pending.futures):
            batch = pending.batches[index[id(fut)]]
            for k, result in zip(batch, fut.result(), strict=True):
                results[k] = result
                notify("file", {"path": todo[k][0].relpath, "bytes": todo[k][0].size, "status": "ok"})
    for k, (inp, _) in enumerate(todo):
        yield inp, results[k]


def sample_size(fraction: float, n: int) -> int:
    """⌈fraction × n⌉ for 0 < fraction ≤ 1, computed exactly on the decimal the fraction prints as
    (``0.05 × 540`` is 27, not the 28 the binary float's excess would give), so at least one of
    ``n ≥ 1`` items however small the fraction (``1e-300``)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"sample must be a fraction in (0, 1], got {fraction!r}")
    return min(n, math.ceil(Fraction(repr(float(fraction))) * n))


def sample_inputs(todo: list, fraction: float, seed: int) -> list:
    """``sample_size(fraction, len(todo))`` items of ``todo`` (at least one when it has any) drawn
    without replacement by NumPy's PCG64 from ``seed`` (an integer ≥ 0; the same list and seed give the
    same subset), in their order in ``todo``."""
    k = sample_size(fraction, len(todo))
    keep = np.random.default_rng(seed).choice(len(todo), size=k, replace=False) if k < len(todo) else range(k)
    return [todo[i] for i in sorted(keep)]


def verify(src: str | Path, dst: str | Path, *, collections=None, splits=None,
           collection: str | None = None, split: str | None = None,
           progress: Progress | None = None, workers: int = 1,
           storage_options: dict | None = None, sample: float | None = None, seed: int = 0) -> VerifyReport:
    """Verify the manifest, every shard and every graph of ``dst`` against the inputs under ``src``.

    ``collection``/``split``: ``src`` is a plain file or flat folder built with them (``build``'s
    arguments of the same names); only what the build holds for them is expected under ``src``.
    ``dst`` may be a URL (``s3://bucket/shards``, opened with ``storage_options``): the shard-side
    checks are the same, each shard read through the store; the inputs under ``src`` stay local.

    ``progress(event, info)``: ``"discovered"`` ``{"inputs": [InputFile ...], "refused": []}`` once,
    then ``"file"`` ``{"path", "bytes", "status": "ok"}`` per input checked (the build's events).
    ``workers`` > 1: graphs are checked in that many local processes; the report is identical.
    ``sample`` (0 < fraction ≤ 1): only that fraction of the converted inputs is checked against its
    graph (``sample_inputs``, drawn with ``seed``); every shard-side check still covers every shard.
    Raises ``BadShards`` when ``dst`` cannot be opened at all (no or malformed manifest); everything
    else found wrong is a line of ``report.problems``.
    """
    if sample is not None and not 0 < sample <= 1:
        raise ValueError(f"sample must be a fraction in (0, 1], got {sample!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an integer ≥ 0, got {seed!r}")
    report = VerifyReport(sample=sample, seed=seed)
    ds = open_dataset(dst, storage_options)
    problem = validate_schema(ds.manifest, ds.manifest_path)
    source, passed_over = resolve_source(src), []
    inputs, refused = discover(source, collections, splits, collection=collection, split=split, skipped=passed_over)
    report.skipped = [{"path": source.relative(e.path), "reason": e.reason} for e in passed_over]
    if collection is not None and split is not None:
        collections, splits = [collection], [split]
    listed = {i["path"]: i for i in ds.manifest["inputs"]}
    present = {inp.relpath for inp in inputs}
    moments: dict[str, tuple] = {}
    todo, unlisted = [], []
    for inp in inputs:
        entry = listed.get(inp.relpath)
        if entry is None:
            unlisted.append(f"{inp.relpath}: input is not in the manifest")
        elif entry["status"] == "ok":
            todo.append((inp, entry))
    report.graphs_total = len(todo)
    if sample is not None:
        todo = sample_inputs(todo, sample, seed)
    if progress:
        progress("discovered", {"inputs": [inp for inp, _ in todo], "refused": []})
    pending = _submit(ds, todo, workers)  # the workers start on the graphs while the shards are checked here
    try:
        if problem:
            report.problems.append(problem)
        check_shards(ds, report)
        report.problems += listing_problems(refused) + unlisted
        for inp, (problems, graph_moments, checked) in _collect(ds, todo, pending, progress):
            report.problems.extend(problems)
            if graph_moments is not None:
                moments[inp.graph_id] = graph_moments
            report.graphs_checked += checked
    finally:
        if pending is not None:
            pending.runner.close()
    for path, entry in listed.items():
        if entry["status"] != "ok" or path in present:
            continue
        collection, split = entry["graph_id"].rsplit(":", 1)[0], path.split("/")[-2]
        if selected(collection, collections) and (not splits or split in splits):
            report.problems.append(f"{path}: in the manifest but not under --src")
    check_totals(ds.manifest, report.problems)
    check_quarantine(ds.manifest, report.problems)
    if not splits or "train" in splits:
        check_stats(ds, moments, collections, report.problems)
    return report

