"""Declarative batch runs: one TOML file per build, run with ``tpuprep run FILE.toml``.

A run file names the source tree, the destination, the collections and splits, the build options
and where the work runs (this process, local worker processes, a local Dask cluster or an existing
Dask cluster). Relative paths are relative to the run file's folder, so a run file and its data can
move together; ``~`` and ``$VARS`` are expanded (an unset variable is an error; ``$$`` is a literal
``$``, see ``interpolate``). See
``pipelines/README.md`` for the format and the cluster recipes.

Example::

    name = "demo-local"
    src = "../data/demo/npz"
    dst = "../data/demo-shards"
    collections = ["tile:xla", "layout:xla"]   # optional: all collections
    splits = ["train", "valid", "test"]        # optional: all splits
    # collection = "layout:xla:random"         # instead: a src outside a TpuGraphs tree (one .npz
    # split = "train"                          #   file or a flat folder) holds this collection and split
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

``src`` and ``dst`` may be object-store URLs (``dst = "s3://bucket/shards"``); the optional tables
``[src_storage_options]`` / ``[dst_storage_options]`` are the fsspec options of their filesystems
(endpoint, profile, credentials — better taken from the environment, e.g. ``secret = "$AWS_SECRET"``).
Their values are passed to the filesystem and nowhere else: never printed, logged or recorded.
"""

from __future__ import annotations

import dataclasses
import os
import re
import string
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import UsageError
from .io.storage import location, shown
from .options import BuildOptions
from .request import ClusterSpec


class PipelineError(UsageError):
    """A run file is malformed; ``str()`` names the file and the key."""


LIST_KEYS = ("collections", "splits", "synth.collections")  # a list, or one comma-separated string
JSON_TYPES = {"integer": "int", "number": "int/float", "string": "str", "boolean": "bool", "object": "dict",
              "array": "list", "null": "null"}


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
    src: Path | str
    dst: Path | str
    collections: tuple[str, ...] | None
    splits: tuple[str, ...] | None
    options: BuildOptions
    cluster: ClusterSpec
    resume: bool = False
    overwrite: bool = False
    synth: SynthSpec | None = None
    collection: str | None = None
    split: str | None = None
    src_storage_options: dict = dataclasses.field(default_factory=dict, repr=False)
    dst_storage_options: dict = dataclasses.field(default_factory=dict, repr=False)
    """fsspec options of ``src`` / ``dst`` (URLs only); may hold credentials: never shown."""

    def describe(self) -> str:
        """A few lines saying what this run will do."""
        changed = {k: v for k, v in dataclasses.asdict(self.options).items()
                   if v != getattr(BuildOptions(), k)}
        if self.collection:
            selection = [f"collection   {self.collection} (every file of src)",
                         f"split        {self.split} (every file of src)"]
        else:
            selection = [f"collections  {', '.join(self.collections) if self.collections else 'all'}",
                         f"splits       {', '.join(self.splits) if self.splits else 'all'}"]
        lines = [f"pipeline     {self.name} ({self.path})",
                 f"src          {_shown(self.src, self.src_storage_options)}",
                 f"dst          {_shown(self.dst, self.dst_storage_options)}", *selection,
                 f"options      {changed or 'defaults'}",
                 f"cluster      {self.cluster.describe()}",
                 f"mode         {'resume' if self.resume else 'overwrite' if self.overwrite else 'new destination'}"]
        if self.synth:
            lines.append(f"synth        profile {self.synth.profile}, seed {self.synth.seed} (only if src is missing)")
        return "\n".join(lines)


def _shown(where: Path | str, storage_options: dict) -> str:
    """A location for people: a URL without credentials, and the names (never the values) of its
    storage options."""
    text = shown(where)
    return text + (f" (storage options: {', '.join(sorted(storage_options))})" if storage_options else "")


# --------------------------------------------------------------------------------------- parsing


def _fail(path: Path, key: str, problem: str) -> PipelineError:
    return PipelineError(f"{path}: [{key}] {problem}")


def _comma_lists(doc: dict) -> dict:
    """A copy of the document with the comma-separated strings of ``LIST_KEYS`` split into lists."""
    doc = dict(doc)
    for dotted in LIST_KEYS:
        *parents, key = dotted.split(".")
        table = doc
        for parent in parents:
            if not isinstance(table.get(parent), dict):
                break
            table[parent] = table = dict(table[parent])
        else:
            if isinstance(table.get(key), str):
                table[key] = [v.strip() for v in table[key].split(",") if v.strip()]
    return doc


def _validator():
    """A Draft 2020-12 validator of ``schemas/run.schema.json`` whose integers are strict (TOML's 2.0
    is a float, and a bool is never a number)."""
    import jsonschema

    from .shards.schema import run_schema

    base = jsonschema.Draft202012Validator
    strict = base.TYPE_CHECKER.redefine(
        "integer", lambda _checker, v: isinstance(v, int) and not isinstance(v, bool))
    return jsonschema.validators.extend(base, type_checker=strict)(run_schema())


def _schema_error(path: Path, error) -> PipelineError:
    """One jsonschema error as one line: ``FILE: [dotted.key] problem``."""
    keys = [str(k) for k in error.absolute_path if not isinstance(k, int)]  # a list item names its list
    if "propertyNames" in error.absolute_schema_path:
        keys.append(str(error.instance))  # the offending key itself
    key, value, schema = ".".join(keys), error.instance, error.schema
    custom = schema.get("x-error") if isinstance(schema, dict) else None
    if custom:
        return _fail(path, custom.get("key", key), custom["message"].format(value=value))
    if error.validator == "required":
        missing = [k for k in error.validator_value if k not in error.instance]
        return _fail(path, ".".join([*keys, missing[0]]), "is required")
    if error.validator == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))
        return _fail(path, ".".join([*keys, unknown[0]]), f"unknown key (allowed: {', '.join(allowed)})")
    if error.validator == "type":
        kinds = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        names = "/".join(JSON_TYPES[k] for k in kinds)
        return _fail(path, key, f"must be {names}, not {type(value).__name__} {value!r}")
    if error.validator in ("minimum", "maximum") and "minimum" in schema and "maximum" in schema:
        return _fail(path, key, f"must lie in {schema['minimum']}..{schema['maximum']}, not {value}")
    if error.validator == "minimum":
        return _fail(path, key, f"must be at least {schema['minimum']}, not {value}")
    if error.validator == "exclusiveMinimum":
        return _fail(path, key, f"must be > {schema['exclusiveMinimum']}, not {value}")
    if error.validator == "minLength":
        return _fail(path, key, "must not be empty")
    if error.validator == "enum":
        return _fail(path, key, f"must be one of {', '.join(map(str, schema['enum']))}, not {value!r}")
    return _fail(path, key, " ".join(error.message.split()))


def _validate(path: Path, doc: dict) -> None:
    """``PipelineError`` naming the first problem (by place in the file's key order) the schema finds."""
    errors = list(_validator().iter_errors(doc))
    if errors:
        first = min(errors, key=lambda e: (e.validator not in ("additionalProperties", "required"),
                                           len(e.absolute_path), [str(k) for k in e.absolute_path]))
        raise _schema_error(path, first)


def interpolate(value: str, environ: dict[str, str] | None = None) -> str:
    """``$VAR`` and ``${VAR}`` replaced by the environment's values; ``$$`` is one literal ``$``; any other
    ``$`` (alone, before a digit or a space, an unclosed ``${``) is kept as written, so that an
    arbitrary string (a secret) never fails to parse. ``KeyError(name)`` for an unset variable."""
    env = os.environ if environ is None else environ

    def replace(match: re.Match) -> str:
        if match.group("escaped") is not None:
            return "$"
        name = match.group("named") or match.group("braced")
        if name is None:  # the "invalid" alternative: a $ that starts no placeholder
            return match.group()
        if name not in env:
            raise KeyError(name)
        return env[name]

    return string.Template.pattern.sub(replace, value)


def _expand(path: Path, key: str, value: str) -> str:
    try:
        value = interpolate(value)
    except KeyError as exc:
        raise _fail(path, key, f"environment variable {exc.args[0]} is not set") from None
    return os.path.expanduser(value)


def _path(path: Path, key: str, value: str, *, url: bool = False) -> Path | str:
    """A path of the run file, relative to its folder; with ``url`` an object-store URL is kept as
    the string it is (``src``, ``dst``)."""
    text = _expand(path, key, value)
    if not text:
        raise _fail(path, key, "must not be empty")
    if "\0" in text:
        raise _fail(path, key, f"contains a NUL byte, which no path can hold: {text!r}")
    try:
        where = _location(text, path.parent, key)
    except UsageError as exc:  # a file: URL naming a host or a relative path
        raise _fail(path, key, str(exc).removeprefix(f"{key} {text}: ")) from None
    if isinstance(where, str) and not url:
        raise _fail(path, key, f"{text} looks like a URL: give a local path")
    return where


def _location(text: str | os.PathLike, base: Path, what: str = "path") -> Path | str:
    """A run's ``src`` or ``dst`` (from the run file or the command line), the one place the run layer
    asks ``io.storage.location`` whether it is a URL or a path: an object-store URL stays a string
    (``s3:/b``, as click's Path type squeezes ``s3://b``, gets its ``//`` back); a path, or the
    absolute path a ``file:`` URL names, is a ``Path``, a relative one resolved against ``base`` (the
    run file's folder, or the current folder for an override). ``make_request`` then resolves either
    once. ``UsageError`` for a ``file:`` URL naming a host or a relative path."""
    where = location(text, what)
    return where if isinstance(where, str) or where.is_absolute() else (base / where).resolve()


def _storage_options(path: Path, key: str, value: Any) -> Any:
    """A ``[*_storage_options]`` table with ``$VARS`` expanded in its strings (at any depth; ``interpolate``:
    ``$$`` is a literal ``$``, a ``$`` that starts no variable name is kept)."""
    if isinstance(value, str):
        try:
            return interpolate(value) if "$" in value else value
        except KeyError as exc:  # names the key and the variable, never the value (it may be a secret)
            raise _fail(path, key, f"environment variable {exc.args[0]} is not set (write $$ for a literal $)") from None
    if isinstance(value, dict):
        return {k: _storage_options(path, f"{key}.{k}", v) for k, v in value.items()}
    if isinstance(value, list):
        return [_storage_options(path, key, v) for v in value]
    return value


def _names(value: list[str] | None) -> tuple[str, ...] | None:
    return tuple(value) if value else None


def _cluster(path: Path, table: dict) -> ClusterSpec:
    """The cluster spec of a schema-valid ``[cluster]`` table whose ``type`` is filled in."""
    kind = table["type"]
    spec: dict[str, Any] = {"type": kind}
    if kind == "local":
        spec |= {"workers": table.get("workers", 1), "engine": table.get("engine", "processes")}
    if kind == "dask":
        if "scheduler" in table:
            spec["scheduler"] = _scheduler(path, table["scheduler"])
        if "scheduler_file" in table:
            spec["scheduler_file"] = _path(path, "cluster.scheduler_file", table["scheduler_file"])
        spec["min_workers"] = table.get("min_workers", 1)
    if kind != "serial":
        from .runners.timeouts import timeout_problem

        spec["timeout"] = float(table.get("timeout", 60.0))
        spec["retries"] = table.get("retries", 2)
        problem = timeout_problem(spec["timeout"])  # nan and inf pass the schema's exclusiveMinimum
        if problem:
            raise _fail(path, "cluster.timeout", problem)
    return ClusterSpec(**spec)


def _scheduler(path: Path, value: str) -> str:
    """``[cluster] scheduler``, expanded and checked to be a Dask address (nothing is contacted)."""
    from .runners.dask_cluster import address_problem

    address = _expand(path, "cluster.scheduler", value)
    problem = address_problem(address)
    if problem:
        raise _fail(path, "cluster.scheduler", f"{address!r} is not a Dask scheduler address "
                    f"(expected tcp://HOST:PORT): {problem}")
    return address


def _synth(path: Path, table: dict, src: Path | str) -> SynthSpec:
    if isinstance(src, str) or src.name != "npz":
        raise _fail(path, "synth", f"src must be a folder named npz to be synthesised, not {src}")
    return SynthSpec(table.get("profile", "tiny"), table.get("seed", 0), _names(table.get("collections")))


def parse_pipeline(text: str, path: str | Path) -> Pipeline:
    """Parse run-file ``text``; ``path`` names it in errors and anchors its relative paths.

    The document is checked against ``schemas/run.schema.json`` (keys, types, ranges, choices, keys that
    exclude each other); what a schema cannot say (``$VAR`` expansion, URLs, Dask addresses, a
    synthesised ``src`` named ``npz``) is checked here. Every problem is one ``PipelineError`` line
    naming the file and the key."""
    path = Path(path).absolute()
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PipelineError(f"{path}: not valid TOML: {exc}") from None
    doc = _comma_lists(doc)
    cluster = doc.get("cluster", {})
    if isinstance(cluster, dict) and "type" not in cluster:
        has_scheduler = "scheduler" in cluster or "scheduler_file" in cluster
        doc["cluster"] = {**cluster, "type": "dask" if has_scheduler else "local"}
    _validate(path, doc)
    src, dst = _path(path, "src", doc["src"], url=True), _path(path, "dst", doc["dst"], url=True)
    options = {}
    for side, where in (("src", src), ("dst", dst)):
        key = f"{side}_storage_options"
        if key in doc and not isinstance(where, str):
            raise _fail(path, key, f"applies only when {side} is an object-store URL, not the folder {where}")
        options[key] = _storage_options(path, key, doc.get(key, {}))
    return Pipeline(
        path=path,
        name=doc.get("name", path.stem),
        description=doc.get("description", ""),
        src=src, dst=dst,
        collections=_names(doc.get("collections")),
        splits=_names(doc.get("splits")),
        collection=doc.get("collection"), split=doc.get("split"),
        options=BuildOptions(**doc.get("options", {})),
        cluster=_cluster(path, doc["cluster"]),
        resume=doc.get("resume", False), overwrite=doc.get("overwrite", False),
        synth=_synth(path, doc["synth"], src) if "synth" in doc else None,
        **options,
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
    for key, value in (("src", src), ("dst", dst)):
        if value is None:
            continue
        changes[key] = _location(value, Path.cwd(), f"--{key}")
        if isinstance(changes[key], Path):  # the run file's storage options belong to its URL
            changes[f"{key}_storage_options"] = {}
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


def pipeline_request(p: Pipeline, *, dry_run: bool = False):
    """The ``BuildRequest`` of a run (``request.make_request``, as ``tpuprep build`` makes its own,
    with the same checks and messages). ``MissingSource`` when a local src does not exist."""
    from .request import make_request

    return make_request(p.src, p.dst, p.options, collections=p.collections, splits=p.splits,
                        collection=p.collection, split=p.split, resume=p.resume, overwrite=p.overwrite,
                        dry_run=dry_run, cluster=p.cluster, storage_options=p.dst_storage_options or None,
                        src_storage_options=p.src_storage_options or None)


def run_pipeline(path: str | Path | Pipeline, *, dry_run: bool = False, progress=None,
                 quiet_dask: bool = False, converter: bool = False, **overrides: Any):
    """Run a run file (or a parsed ``Pipeline``) and return the build's ``BuildReport``.

    ``overrides``: ``src``, ``dst``, ``workers``, ``scheduler``, ``scheduler_file``, ``resume`` (see
    ``override``). A local src that does not exist is synthesised first when the run file has a
    ``[synth]`` table (else a PipelineError naming the run file). With ``dry_run`` nothing is
    synthesised, connected or written: the report lists the files that would be converted.
    ``quiet_dask``, ``converter``: see ``request.open_runner``.
    """
    from .build import BuildReport, build
    from .inputs import MissingSource
    from .request import open_runner

    p = path if isinstance(path, Pipeline) else load_pipeline(path)
    p = override(p, **overrides)
    try:
        request = pipeline_request(p, dry_run=dry_run)
    except MissingSource:
        if p.synth is None:
            raise PipelineError(f"{p.path}: src {p.src} does not exist") from None
        if dry_run:
            return BuildReport({"inputs": []}, [], dry_run=True)  # it would be synthesised first
        from .synth import synthesize

        synthesize(p.src.parent, p.synth.profile, p.synth.seed,
                   collections=list(p.synth.collections) if p.synth.collections else None)
        request = pipeline_request(p)
    runner = None if dry_run else open_runner(request.cluster, quiet=quiet_dask, converter=converter)
    try:
        return build(request, runner=runner, progress=progress)
    finally:
        if runner is not None:
            runner.close()


# ------------------------------------------------------------------------------------ the command


__all__ = ["ClusterSpec", "Pipeline", "PipelineError", "SynthSpec", "interpolate", "load_pipeline",
           "override", "parse_pipeline", "pipeline_request", "run_pipeline"]
