"""A build request: ``--src`` and ``--dst`` resolved once, with the options, the selection, the flags
and where the tasks run — made by ``make_request`` alone, for ``tpuprep build``, ``tpuprep run`` and
the library's ``build(src, dst, ...)`` alike.

``make_request`` turns raw values (strings or paths as typed or read from a run file, the options)
into a frozen ``BuildRequest`` and makes every check that needs no listing and no store request:
``--src`` classified once (``inputs.resolve_source``: a URL, or a local folder, ``.npz`` file or tar
archive that exists), ``--dst`` resolved once to a ``Store``, neither empty, a local ``--dst`` outside
a local ``--src`` and not a file, the selection and the ``--collection``/``--split`` assignment valid,
``--resume`` without ``--overwrite``. Every refusal is one ``UsageError`` line (exit 2), worded the same
whichever command made the request. ``build.build(request, runner=...)`` then discovers the inputs,
inspects and locks ``--dst`` (re-checking it there: it may change meanwhile) and converts.

``ClusterSpec`` is where the tasks run (a run file's ``[cluster]`` table, or ``tpuprep build``'s
``--workers``/``--scheduler``/``--scheduler-file`` through ``cluster_of_flags``); ``open_runner``
makes the runner it names through ``runners.make_runner``, the one runner factory.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from .errors import UsageError
from .inputs import Source, check_assignment, check_selection, resolve_source
from .io.storage import resolve
from .io.store import Store
from .options import BuildOptions


@dataclass(frozen=True)
class ClusterSpec:
    """Where a build's tasks execute.

    ``serial``: in this process (``scheduler_from_env``: unless ``DASK_SCHEDULER_ADDRESS`` is set, which
    then selects its cluster — ``tpuprep build``'s one worker, as Dask users expect of a command).
    ``local``: ``workers`` local processes (``engine = "processes"``, a process pool) or a local Dask
    cluster of single-threaded workers (``engine = "dask"``). ``dask``: an existing Dask cluster at
    ``scheduler`` or described by ``scheduler_file`` (neither: ``DASK_SCHEDULER_ADDRESS``), waiting up
    to ``timeout`` s (None: ``TPUPREP_DASK_TIMEOUT``, else Dask's own) for the scheduler, again for
    ``min_workers`` workers, and again whenever a build has lost every worker (then it stops with
    one line; ``--resume`` finishes it); ``retries`` reruns tasks that raised.
    """

    type: str = "local"
    workers: int = 1
    engine: str = "processes"
    scheduler: str | None = None
    scheduler_file: Path | None = None
    min_workers: int = 1
    timeout: float | None = 60.0
    retries: int = 2
    scheduler_from_env: bool = False

    def describe(self) -> str:
        if self.type == "serial":
            return "serial (this process" + (", or DASK_SCHEDULER_ADDRESS's cluster when set)"
                                             if self.scheduler_from_env else ")")
        if self.type == "local":
            return f"local, {self.workers} worker(s), engine {self.engine}"
        where = self.scheduler or (f"scheduler file {self.scheduler_file}" if self.scheduler_file
                                   else "DASK_SCHEDULER_ADDRESS")
        return f"dask at {where} (wait for {self.min_workers} worker(s), {self.retries} retries)"

    def canonical(self) -> ClusterSpec:
        """The same runner with the settings it does not use at their defaults, so that two specs
        naming the same runner compare equal (one local process is the serial runner; a process pool
        has no timeout or retries)."""
        if self.type == "serial" or (self.type == "local" and self.engine == "processes" and self.workers <= 1):
            return ClusterSpec("serial", scheduler_from_env=self.scheduler_from_env and self.type == "serial")
        if self.type == "local" and self.engine == "processes":
            return ClusterSpec("local", workers=self.workers)
        if self.type == "local":
            return ClusterSpec("local", workers=self.workers, engine=self.engine, timeout=self.timeout,
                               retries=self.retries)
        return dataclasses.replace(self, workers=1, engine="processes", scheduler_from_env=False)


def cluster_of_flags(workers: int = 1, scheduler: str | None = None,
                     scheduler_file: str | os.PathLike | None = None) -> ClusterSpec:
    """``tpuprep build``'s ``--workers``/``--scheduler``/``--scheduler-file`` as a ``ClusterSpec``: a
    scheduler (address or file) is an existing Dask cluster, more than one worker a local process pool,
    else this process — or ``DASK_SCHEDULER_ADDRESS``'s cluster when it is set. Dask waits default to
    ``TPUPREP_DASK_TIMEOUT`` (a run file's to 60 s)."""
    if scheduler or scheduler_file:
        return ClusterSpec("dask", scheduler=scheduler or None,
                           scheduler_file=Path(scheduler_file) if scheduler_file else None, timeout=None)
    if workers > 1:
        return ClusterSpec("local", workers=workers, timeout=None)
    return ClusterSpec("serial", scheduler_from_env=True)


def open_runner(spec: ClusterSpec, *, quiet: bool = False, converter: bool = False):
    """The runner ``spec`` names, from ``runners.make_runner`` (the caller closes it). ``quiet``
    silences Dask's own logging (``dask_cluster.quiet_dask_logs``); ``converter`` sets this process up
    to convert files when it runs them itself (a command's process; a library caller's is left
    alone). A ``dask`` spec without ``scheduler`` or ``scheduler_file`` is the cluster
    ``DASK_SCHEDULER_ADDRESS`` names (``ClusterError`` when unset)."""
    from .runners import make_runner

    if spec.type == "serial":
        return make_runner(1, use_env=spec.scheduler_from_env, quiet=quiet, converter=converter)
    if spec.type == "local":
        return make_runner(spec.workers, dask_local=spec.engine != "processes", retries=spec.retries,
                           timeout=spec.timeout, quiet=quiet, converter=converter)
    return make_runner(scheduler=spec.scheduler, scheduler_file=spec.scheduler_file, cluster=True,
                       retries=spec.retries, min_workers=spec.min_workers, timeout=spec.timeout, quiet=quiet)


@dataclass(frozen=True)
class BuildRequest:
    """One build, resolved and checked (``make_request``); compared field by field.

    ``source``: ``--src`` (``inputs.Source``: its store, kind and storage options); ``destination``:
    ``--dst`` as a ``Store`` (a local one rooted at the path with links resolved); ``options``: the
    conversion options; ``collections``/``splits``: the filters of a TpuGraphs tree (None: all), or
    ``collection``/``split``: what every file of a plain file or flat folder is; ``resume``,
    ``overwrite``, ``dry_run``: the flags; ``cluster``: where the tasks run (canonical, see
    ``ClusterSpec.canonical``)."""

    source: Source
    destination: Store
    options: BuildOptions
    collections: tuple[str, ...] | None = None
    splits: tuple[str, ...] | None = None
    collection: str | None = None
    split: str | None = None
    resume: bool = False
    overwrite: bool = False
    dry_run: bool = False
    cluster: ClusterSpec = ClusterSpec("serial")


def _destination(dst: Store | None, source: Source) -> Store:
    """``--dst``'s store (None: it was empty) checked against ``source`` and with the links of a local
    root resolved: not empty, not overlapping ``source`` (a build never writes into, or deletes from,
    its own input; the stores know what the same place means for each) and not a file."""
    if dst is None:
        raise UsageError("--dst must not be empty")
    store = dst.resolved()
    if source.store.overlaps(store):
        raise UsageError(f"--dst {store.display} and --src {source.display} overlap (one lies inside the other); "
                         "a build must not write into its own input: choose a --dst outside --src")
    if store.root_not_a_folder:
        raise UsageError(f"--dst {store.display} exists and is not a folder")
    return store


def make_request(
    src: str | os.PathLike | Source,
    dst: str | os.PathLike,
    opts: BuildOptions | None = None,
    *,
    collections: list[str] | tuple[str, ...] | None = None,
    splits: list[str] | tuple[str, ...] | None = None,
    collection: str | None = None,
    split: str | None = None,
    resume: bool = False,
    overwrite: bool = False,
    dry_run: bool = False,
    cluster: ClusterSpec | None = None,
    storage_options: dict | None = None,
    src_storage_options: dict | None = None,
) -> BuildRequest:
    """The ``BuildRequest`` for these raw values; every check that needs neither a listing nor a store
    request is made here, and only here (UsageError, one line, exit 2), in this order: ``dst`` as a
    location (``io.storage.resolve``: a known scheme whose package is installed, a file URL with an
    absolute path and no host); ``src`` (``inputs.resolve_source``: not empty, and locally existing as
    a folder, ``.npz`` file or tar archive — ``MissingSource`` when it does not exist); ``dst`` not
    empty, not overlapping ``src`` (``Store.overlaps``) and not a file; the selection (``check_selection``) and the assignment
    (``check_assignment``); ``resume`` with ``overwrite``.

    ``src``/``dst``: local paths (relative to the current folder) or URLs (``s3://bucket/prefix``);
    ``storage_options`` / ``src_storage_options``: the fsspec options of ``dst``'s / ``src``'s store
    (never shown or recorded). ``cluster``: where the tasks run (default: this process).
    """
    store = resolve(dst, storage_options, what="--dst") if str(dst) else None  # its scheme before --src
    source = resolve_source(src, src_storage_options)
    store = _destination(store, source)
    check_selection(collections, splits)
    check_assignment(collection, split, collections, splits)
    if resume and overwrite:
        raise UsageError("--resume and --overwrite exclude each other")
    return BuildRequest(source, store, opts or BuildOptions(), tuple(collections) if collections else None,
                        tuple(splits) if splits else None, collection, split, resume, overwrite, dry_run,
                        (cluster or ClusterSpec("serial")).canonical())
