"""Declarative batch runs: one TOML file per build, run with ``tpuprep run FILE.toml``.

A run file names the source tree, the destination, the collections and splits, the build options
and where the work runs (this process, local worker processes, a local Dask cluster or an existing
Dask cluster). Relative paths are relative to the run file's folder, so a run file and its data can
move together; ``~`` and ``$VARS`` are expanded (an unset variable is an error). See
``pipelines/README.md`` for the format and the cluster recipes.

Example::

    name = "demo-local"
    src = "../data/demo/npz"
    dst = "../data/demo-shards"
    collections = ["tile:xla", "layout:xla"]   # optional: all collections
    splits = ["train", "valid", "test"]        # optional: all splits
    overwrite = true                           # or resume = true

    [options]                                  # optional: the defaults of `tpuprep build`
    hops = 1
    compression_level = 3

    [cluster]
    type = "local"                             # "serial" | "local" | "dask"
    workers = 2

    [synth]                                    # optional: synthesise src first when it is missing
    profile = "small"
    seed = 0
"""

from __future__ import annotations

import dataclasses
import os
import string
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import UsageError
from .io.files import looks_like_url
from .options import BuildOptions
from .tpugraphs import SPLITS


class PipelineError(UsageError):
    """A run file is malformed; ``str()`` names the file and the key."""


TOP_KEYS = {"name", "description", "src", "dst", "collections", "splits", "resume", "overwrite",
            "options", "cluster", "synth"}
OPTION_RANGES: dict[str, tuple[int, int]] = {
    "hops": (0, 64), "folds": (1, 1000), "compression_level": (1, 22),
    "chunk_bytes": (1 << 10, 1 << 40), "row_group_bytes": (1 << 10, 1 << 40), "shard_bytes": (1 << 10, 1 << 50),
}
CLUSTER_TYPES = ("serial", "local", "dask")
CLUSTER_KEYS = {"type", "workers", "engine", "scheduler", "scheduler_file", "min_workers", "timeout", "retries"}
SYNTH_KEYS = {"profile", "seed", "collections"}


@dataclass(frozen=True)
class ClusterSpec:
    """Where a run's tasks execute.

    ``serial``: in this process. ``local``: ``workers`` local processes (``engine = "processes"``, a
    process pool) or a local Dask cluster of single-threaded workers (``engine = "dask"``). ``dask``:
    an existing Dask cluster at ``scheduler`` or described by ``scheduler_file`` (neither:
    ``DASK_SCHEDULER_ADDRESS``), waiting up to ``timeout`` s for the scheduler, again for
    ``min_workers`` workers, and again whenever a build has lost every worker (then it stops with
    one line; ``--resume`` finishes it); ``retries`` reruns tasks that raised.
    """

    type: str = "local"
    workers: int = 1
    engine: str = "processes"
    scheduler: str | None = None
    scheduler_file: Path | None = None
    min_workers: int = 1
    timeout: float = 60.0
    retries: int = 2

    def describe(self) -> str:
        if self.type == "serial":
            return "serial (this process)"
        if self.type == "local":
            return f"local, {self.workers} worker(s), engine {self.engine}"
        where = self.scheduler or (f"scheduler file {self.scheduler_file}" if self.scheduler_file
                                   else "DASK_SCHEDULER_ADDRESS")
        return f"dask at {where} (wait for {self.min_workers} worker(s), {self.retries} retries)"


@dataclass(frozen=True)
class SynthSpec:
    """Synthesise ``src`` (which must be a folder named ``npz``) when it does not exist yet."""

    profile: str = "tiny"
    seed: int = 0
    collections: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Pipeline:
    """A parsed and validated run file."""

    path: Path
    name: str
    description: str
    src: Path
    dst: Path
    collections: tuple[str, ...] | None
    splits: tuple[str, ...] | None
    options: BuildOptions
    cluster: ClusterSpec
    resume: bool = False
    overwrite: bool = False
    synth: SynthSpec | None = None

    def describe(self) -> str:
        """A few lines saying what this run will do."""
        changed = {k: v for k, v in self.options.to_dict().items()
                   if v != getattr(BuildOptions(), k)}
        lines = [f"pipeline     {self.name} ({self.path})",
                 f"src          {self.src}", f"dst          {self.dst}",
                 f"collections  {', '.join(self.collections) if self.collections else 'all'}",
                 f"splits       {', '.join(self.splits) if self.splits else 'all'}",
                 f"options      {changed or 'defaults'}",
                 f"cluster      {self.cluster.describe()}",
                 f"mode         {'resume' if self.resume else 'overwrite' if self.overwrite else 'new destination'}"]
        if self.synth:
            lines.append(f"synth        profile {self.synth.profile}, seed {self.synth.seed} (only if src is missing)")
        return "\n".join(lines)


# --------------------------------------------------------------------------------------- parsing


def _fail(path: Path, key: str, problem: str) -> PipelineError:
    return PipelineError(f"{path}: [{key}] {problem}")


def _check_keys(path: Path, table: dict, allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise _fail(path, where + unknown[0], f"unknown key (allowed: {', '.join(sorted(allowed))})")


def _typed(path: Path, key: str, value: Any, kind: type | tuple[type, ...]) -> Any:
    bad_bool = isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,))
    if bad_bool or not isinstance(value, kind):
        names = "/".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise _fail(path, key, f"must be {names}, not {type(value).__name__} {value!r}")
    return value


def _expand(path: Path, key: str, value: str) -> str:
    try:
        value = string.Template(value).substitute(os.environ)
    except KeyError as exc:
        raise _fail(path, key, f"environment variable {exc.args[0]} is not set") from None
    except ValueError as exc:
        raise _fail(path, key, f"bad $-substitution: {exc}") from None
    return os.path.expanduser(value)


def _path(path: Path, key: str, value: Any) -> Path:
    text = _expand(path, key, _typed(path, key, value, str))
    if not text:
        raise _fail(path, key, "must not be empty")
    if "\0" in text:
        raise _fail(path, key, f"contains a NUL byte, which no path can hold: {text!r}")
    if looks_like_url(text):
        raise _fail(path, key, f"{text} looks like a URL: object stores are not supported yet; give a local folder")
    p = Path(text)
    return p if p.is_absolute() else (path.parent / p).resolve()


def _str_list(path: Path, key: str, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    _typed(path, key, value, list)
    items = tuple(_typed(path, key, v, str) for v in value)
    return items or None


def _options(path: Path, table: dict) -> BuildOptions:
    fields = {f.name: f for f in dataclasses.fields(BuildOptions)}
    _check_keys(path, table, set(fields), "options.")
    values = {}
    for key, value in table.items():
        default = getattr(BuildOptions(), key)
        _typed(path, f"options.{key}", value, type(default))
        if key in OPTION_RANGES:
            lo, hi = OPTION_RANGES[key]
            if not lo <= value <= hi:
                raise _fail(path, f"options.{key}", f"must lie in {lo}..{hi}, not {value}")
        values[key] = value
    return BuildOptions(**values)


def _cluster(path: Path, table: dict) -> ClusterSpec:
    _check_keys(path, table, CLUSTER_KEYS, "cluster.")
    kind = table.get("type")
    if kind is None:
        kind = "dask" if ("scheduler" in table or "scheduler_file" in table) else "local"
    if kind not in CLUSTER_TYPES:
        raise _fail(path, "cluster.type", f"must be one of {', '.join(CLUSTER_TYPES)}, not {kind!r}")
    spec: dict[str, Any] = {"type": kind}
    if kind == "local":
        workers = _typed(path, "cluster.workers", table.get("workers", 1), int)
        if not 1 <= workers <= 1024:
            raise _fail(path, "cluster.workers", f"must lie in 1..1024, not {workers}")
        engine = _typed(path, "cluster.engine", table.get("engine", "processes"), str)
        if engine not in ("processes", "dask"):
            raise _fail(path, "cluster.engine", f"must be 'processes' or 'dask', not {engine!r}")
        spec |= {"workers": workers, "engine": engine}
    misplaced = {"local": ("scheduler", "scheduler_file", "min_workers"), "serial": tuple(CLUSTER_KEYS - {"type"}),
                 "dask": ("workers", "engine")}[kind]
    for key in misplaced:
        if key in table:
            raise _fail(path, f"cluster.{key}", f"does not apply to cluster type {kind!r}")
    if kind == "dask":
        if "scheduler" in table and "scheduler_file" in table:
            raise _fail(path, "cluster.scheduler", "give scheduler or scheduler_file, not both")
        if "scheduler" in table:
            spec["scheduler"] = _scheduler(path, table["scheduler"])
        if "scheduler_file" in table:
            spec["scheduler_file"] = _path(path, "cluster.scheduler_file", table["scheduler_file"])
        spec["min_workers"] = _typed(path, "cluster.min_workers", table.get("min_workers", 1), int)
        if spec["min_workers"] < 1:
            raise _fail(path, "cluster.min_workers", "must be at least 1")
    if kind != "serial":
        spec["timeout"] = float(_typed(path, "cluster.timeout", table.get("timeout", 60.0), (int, float)))
        spec["retries"] = _typed(path, "cluster.retries", table.get("retries", 2), int)
        if not spec["timeout"] > 0 or spec["retries"] < 0:  # (not > 0: also refuses nan)
            raise _fail(path, "cluster.timeout", "timeout must be > 0 and retries >= 0")
    return ClusterSpec(**spec)


def _scheduler(path: Path, value: Any) -> str:
    """``[cluster] scheduler``, expanded and checked to be a Dask address (nothing is contacted)."""
    from .runners.dask_cluster import address_problem

    address = _expand(path, "cluster.scheduler", _typed(path, "cluster.scheduler", value, str))
    problem = address_problem(address)
    if problem:
        raise _fail(path, "cluster.scheduler", f"{address!r} is not a Dask scheduler address "
                    f"(expected tcp://HOST:PORT): {problem}")
    return address


def _synth(path: Path, table: dict, src: Path) -> SynthSpec:
    from .synth import PROFILES

    _check_keys(path, table, SYNTH_KEYS, "synth.")
    profile = _typed(path, "synth.profile", table.get("profile", "tiny"), str)
    if profile not in PROFILES:
        raise _fail(path, "synth.profile", f"must be one of {', '.join(PROFILES)}, not {profile!r}")
    if src.name != "npz":
        raise _fail(path, "synth", f"src must be a folder named npz to be synthesised, not {src}")
    return SynthSpec(profile, _typed(path, "synth.seed", table.get("seed", 0), int),
                     _str_list(path, "synth.collections", table.get("collections")))


def parse_pipeline(text: str, path: str | Path) -> Pipeline:
    """Parse run-file ``text``; ``path`` names it in errors and anchors its relative paths."""
    path = Path(path).absolute()
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PipelineError(f"{path}: not valid TOML: {exc}") from None
    _check_keys(path, doc, TOP_KEYS, "")
    for key in ("src", "dst"):
        if key not in doc:
            raise _fail(path, key, "is required")
    src, dst = _path(path, "src", doc["src"]), _path(path, "dst", doc["dst"])
    splits = _str_list(path, "splits", doc.get("splits"))
    for s in splits or ():
        if s not in SPLITS:
            raise _fail(path, "splits", f"{s!r} is not a split ({', '.join(SPLITS)})")
    resume = _typed(path, "resume", doc.get("resume", False), bool)
    overwrite = _typed(path, "overwrite", doc.get("overwrite", False), bool)
    if resume and overwrite:
        raise _fail(path, "resume", "resume and overwrite exclude each other")
    for key in ("options", "cluster", "synth"):
        if key in doc:
            _typed(path, key, doc[key], dict)
    return Pipeline(
        path=path,
        name=_typed(path, "name", doc.get("name", path.stem), str),
        description=_typed(path, "description", doc.get("description", ""), str),
        src=src, dst=dst,
        collections=_str_list(path, "collections", doc.get("collections")),
        splits=splits,
        options=_options(path, doc.get("options", {})),
        cluster=_cluster(path, doc.get("cluster", {})),
        resume=resume, overwrite=overwrite,
        synth=_synth(path, doc["synth"], src) if "synth" in doc else None,
    )


def load_pipeline(path: str | Path) -> Pipeline:
    """Read and validate a run file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise PipelineError(f"cannot read run file {path}: {exc.strerror or exc}") from None
    return parse_pipeline(text, path)


# --------------------------------------------------------------------------------------- running


def override(p: Pipeline, *, src: str | Path | None = None, dst: str | Path | None = None,
             workers: int | None = None, scheduler: str | None = None,
             scheduler_file: str | Path | None = None, resume: bool = False) -> Pipeline:
    """The run with command-line overrides applied (paths relative to the current folder)."""
    changes: dict[str, Any] = {}
    for flag, value in (("--src", src), ("--dst", dst)):
        if value is not None and looks_like_url(value):
            raise PipelineError(f"{flag} {value} looks like a URL: object stores are not supported yet; "
                                "give a local folder")
    if src is not None:
        changes["src"] = Path(src).resolve()
    if dst is not None:
        changes["dst"] = Path(dst).resolve()
    if resume:
        changes |= {"resume": True, "overwrite": False}
    cluster = p.cluster
    if scheduler or scheduler_file:
        cluster = ClusterSpec("dask", scheduler=scheduler,
                              scheduler_file=Path(scheduler_file).resolve() if scheduler_file else None,
                              min_workers=cluster.min_workers, timeout=cluster.timeout, retries=cluster.retries)
    elif workers is not None:
        engine = cluster.engine if cluster.type == "local" else "processes"
        cluster = ClusterSpec("local", workers=workers, engine=engine, timeout=cluster.timeout,
                              retries=cluster.retries)
    if cluster is not p.cluster:
        changes["cluster"] = cluster
    return dataclasses.replace(p, **changes) if changes else p


def make_pipeline_runner(spec: ClusterSpec, quiet: bool = False):
    """The runner for a run's cluster settings (see ``ClusterSpec``); ``quiet`` silences Dask's own
    logging (``dask_cluster.quiet_dask_logs``), as ``tpuprep run`` does."""
    from .runners import make_runner

    if spec.type == "serial":
        return make_runner(1)
    if spec.type == "local":
        return make_runner(spec.workers, dask_local=spec.engine != "processes", retries=spec.retries,
                           timeout=spec.timeout, quiet=quiet)
    return make_runner(scheduler=spec.scheduler, scheduler_file=spec.scheduler_file, retries=spec.retries,
                       min_workers=spec.min_workers, timeout=spec.timeout, quiet=quiet)


def run_pipeline(path: str | Path | Pipeline, *, dry_run: bool = False, progress=None,
                 quiet_dask: bool = False, **overrides: Any):
    """Run a run file (or a parsed ``Pipeline``) and return the build's ``BuildReport``.

    ``overrides``: ``src``, ``dst``, ``workers``, ``scheduler``, ``scheduler_file``, ``resume`` (see
    ``override``). With ``dry_run`` nothing is synthesised, connected or written: the report lists
    the files that would be converted. ``quiet_dask``: see ``make_pipeline_runner``.
    """
    from .build import build

    p = path if isinstance(path, Pipeline) else load_pipeline(path)
    p = override(p, **overrides)
    if not p.src.exists():
        if p.synth is None:
            raise PipelineError(f"{p.path}: src {p.src} does not exist")
        if not dry_run:
            from .synth import synthesize

            synthesize(p.src.parent, p.synth.profile, p.synth.seed,
                       collections=list(p.synth.collections) if p.synth.collections else None)
    if dry_run and not p.src.exists():
        from .build import BuildReport

        return BuildReport({"inputs": []}, [], dry_run=True)  # it would be synthesised first
    runner = None if dry_run else make_pipeline_runner(p.cluster, quiet=quiet_dask)
    try:
        return build(p.src, p.dst, p.options, collections=list(p.collections) if p.collections else None,
                     splits=list(p.splits) if p.splits else None, runner=runner, resume=p.resume,
                     overwrite=p.overwrite, dry_run=dry_run, progress=progress)
    finally:
        if runner is not None:
            runner.close()


# ------------------------------------------------------------------------------------ the command


__all__ = ["ClusterSpec", "Pipeline", "PipelineError", "SynthSpec", "load_pipeline", "make_pipeline_runner",
           "override", "parse_pipeline", "run_pipeline"]
