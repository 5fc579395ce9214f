"""The build manifest (``<dst>/manifest.json``): what went in, what came out, with which options.

Written last and atomically. It is deterministic: no timestamps, inputs and shards in sorted order,
statistics merged in graph-id order, so identical builds give identical bytes.
"""

from __future__ import annotations

import bisect
import json
import platform
import re
from collections.abc import Iterable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from ..errors import BadShards, display_name, raw_name_hex
from ..faults import checkpoint
from ..io.storage import resolve
from ..io.store import FileTooLarge, NotARegularFile, Store
from ..options import BuildOptions
from ..tpugraphs import COLLECTIONS, FEATURE_STATS_COLUMNS, SPLITS, collection_path, split_graph_id
from .layout import MANIFEST, SHARD_NAME
from .schema import SCHEMA_VERSION, TABLES, manifest_schema

COUNT_FIELDS = ("graphs", "configs", "unique_configs", "nodes_before", "nodes_after",
                "edges_before", "edges_after", "bytes_in", "bytes_out", "anomalies", "dimensions_undecided")
ADDED_IN = {"dimensions_undecided": (3, 3), "repad_rule": (3, 3)}
"""Manifest keys (counts, options) newer than schema 3.0, with the version that added them: a manifest
of an older 3.x version is read without them."""
VERSION = tuple(int(part) for part in SCHEMA_VERSION.split("."))
"""``SCHEMA_VERSION`` as (major, minor)."""


def keys_of(keys: Sequence[str], version: tuple[int, int]) -> tuple[str, ...]:
    """The ``keys`` a manifest of schema ``version`` (major, minor) holds (``ADDED_IN``)."""
    return tuple(k for k in keys if ADDED_IN.get(k, (0, 0)) <= version)


def manifest_version(manifest: dict) -> tuple[int, int]:
    """(major, minor) of a checked manifest's ``schema_version``."""
    major, minor = manifest["schema_version"].split(".")
    return int(major), int(minor)


def library_versions() -> dict[str, str]:
    import numba
    import numpy as np
    import pyarrow

    from .. import __version__

    return {"tpuprep": __version__, "python": platform.python_version(), "numpy": np.__version__,
            "numba": numba.__version__, "pyarrow": pyarrow.__version__}


def manifest_bytes(manifest: dict) -> bytes:
    """``manifest.json``'s bytes: JSON, keys in insertion order, indent 1, no NaN, a trailing newline."""
    return (json.dumps(manifest, indent=1, sort_keys=False, allow_nan=False) + "\n").encode()


def write_manifest(dst: Store, manifest: dict) -> None:
    """Write ``manifest.json`` under ``dst``, the last file of a build: whole (a temporary renamed over
    it locally, one object remotely) and durable (fsynced locally); ``checkpoint("manifest")`` runs
    just before it becomes visible."""
    dst.write_bytes(MANIFEST, manifest_bytes(manifest), durable=True, before_commit=lambda: checkpoint("manifest"))


def named(key: str, name: str) -> dict[str, str]:
    """How the manifest (and ``quarantine.jsonl``, the card, ``--json``) records an input's name:
    ``{key: display_name(name)}`` — one line of valid UTF-8, undecodable bytes as ``\\xNN`` and control
    characters escaped (``errors.display_name``) — and, only when that differs from the name itself,
    ``{key + "_hex": the name's bytes in hex}``, so the file can still be found."""
    entry = {key: display_name(name)}
    raw = raw_name_hex(name)
    if raw is not None:
        entry[f"{key}_hex"] = raw
    return entry


def _shown(text: str | None) -> str | None:
    return None if text is None else display_name(text)


def _empty_counts() -> dict[str, int]:
    return dict.fromkeys(COUNT_FIELDS, 0)


def build_manifest(
    opts: BuildOptions,
    records: Sequence[dict],
    shards: Sequence[dict],
) -> dict:
    """Assemble the manifest from per-input records (sorted by path) and shard records (``ShardInfo``
    dicts; a ``shard_id`` of None — a shard written without one — is left out of its entry)."""
    from ..moments import merge_moments  # NumPy: not needed to read a manifest (tpuprep info)

    collections: dict[str, dict] = {}
    for r in records:
        if r["status"] != "ok":
            continue
        coll = collections.setdefault(r["collection"], {"kind": r["kind"], "path": r["collection"].replace(":", "/"),
                                                        "splits": {}, "totals": _empty_counts()})
        split = coll["splits"].setdefault(r["split"], _empty_counts())
        c = r["counts"]
        for target in (split, coll["totals"]):
            target["graphs"] += 1
            for k in COUNT_FIELDS[1:]:
                if k != "bytes_out":
                    target[k] += c[k]
    for s in shards:
        coll = collections[s["collection"]]
        coll["splits"][s["split"]]["bytes_out"] += s["bytes"]
        coll["totals"]["bytes_out"] += s["bytes"]
    for cid, coll in collections.items():
        train = sorted((r["graph_id"], r["moments"]) for r in records
                       if r["status"] == "ok" and r["collection"] == cid and r["split"] == "train")
        train = [moments for _, moments in train]
        coll["node_feat_stats"] = merge_moments(train)
        coll["splits"] = dict(sorted(coll["splits"].items()))
    origin = ("archive", "member")  # an input read in place from a tar archive (inputs.InputFile.describe)
    quarantine = [named("file", r["path"]) | {"key": _shown(r.get("key")), "error": display_name(r["error"])}
                  | {k: v for o in origin if r.get(o) for k, v in named(o, r[o]).items()}
                  for r in records if r["status"] != "ok"]
    inputs = []
    for r in records:
        entry = named("path", r["path"]) | {"bytes": r["bytes"], "sha256": r.get("sha256"), "status": r["status"]}
        if r["status"] == "ok":
            entry |= {"graph_id": r["graph_id"], "counts": {k: r["counts"][k] for k in COUNT_FIELDS if k not in ("graphs", "bytes_out")}}
            if r.get("warnings"):
                entry["warnings"] = [display_name(w) for w in r["warnings"]]
        entry |= {k: v for o in origin if r.get(o) for k, v in named(o, r[o]).items()}
        inputs.append(entry)
    shards = [{k: v for k, v in s.items() if not (k == "shard_id" and v is None)} for s in shards]
    return {
        "format": "tpuprep-shards",
        "schema_version": SCHEMA_VERSION,
        "versions": library_versions(),
        "options": opts.to_dict(),
        "collections": dict(sorted(collections.items())),
        "inputs": inputs,
        "shards": shards,
        "quarantine": quarantine,
    }


# --------------------------------------------------------------------------- reading and checking

FORMAT = "tpuprep-shards"
MAX_MANIFEST_BYTES = 1 << 30  # the full TpuGraphs dataset gives a manifest of a few MB
INPUT_COUNT_FIELDS = tuple(k for k in COUNT_FIELDS if k not in ("graphs", "bytes_out"))
_VERSION = re.compile(r"(\d+)\.(\d+)")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_SHARD_ID = re.compile(r"[0-9a-f]{32}")


class _Where:
    """Builds the one-line ``BadShards`` of a manifest check: ``<manifest path>: <address>: <problem>``."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, address: str, problem: str) -> BadShards:
        return BadShards(f"{self.path}: {address}: {problem}" if address else f"{self.path}: {problem}")

    def mapping(self, value: Any, address: str, keys: Sequence[str] = ()) -> dict:
        if type(value) is not dict:
            raise self.fail(address, f"is {_kind(value)}, expected an object")
        if not value.keys() >= set(keys):
            raise self.fail(address, f"has no {next(k for k in keys if k not in value)!r}")
        return value

    def array(self, value: Any, address: str) -> list:
        if type(value) is not list:
            raise self.fail(address, f"is {_kind(value)}, expected an array")
        return value

    def integers(self, obj: dict, keys: Iterable[str], address: str, lo: int = 0) -> None:
        """``obj[k]`` is an int >= ``lo`` (not a bool) for every k of ``keys`` (present: checked before)."""
        for k in keys:
            v = obj[k]
            if type(v) is not int or v < lo:
                raise self.fail(f"{address}.{k}", f"is {_kind(v)}, expected an integer >= {lo}")

    def sha256(self, value: Any, address: str) -> None:
        if type(value) is not str or _SHA256.fullmatch(value) is None:
            raise self.fail(address, f"{value!r} is not a sha256 (64 hex digits)")


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", bool: "a boolean", type(None): "null"}
    if type(value) in names:
        return names[type(value)]
    return f"the string {value!r}" if isinstance(value, str) else f"{value!r}"


def check_version(m: Any, where: _Where) -> tuple[int, int]:
    """(major, minor) of a manifest object of a format and major schema version this tpuprep reads,
    else BadShards."""
    where.mapping(m, "")
    if "format" not in m:
        raise where.fail("", f"has no 'format' key: not a tpuprep shard manifest (expected {FORMAT!r})")
    if m["format"] != FORMAT:
        raise where.fail("format", f"unknown format {m['format']!r} (expected {FORMAT!r}): "
                         "not a tpuprep shard manifest")
    version = m.get("schema_version")
    match = _VERSION.fullmatch(version) if isinstance(version, str) else None
    major = SCHEMA_VERSION.split(".")[0]
    if match is None or match.group(1) != major:
        why = ("an older tpuprep wrote these shards: rebuild them with this one"
               if match is not None and int(match.group(1)) < int(major)
               else "a newer tpuprep wrote these shards, or the manifest is damaged")
        raise where.fail("schema_version", f"unknown schema version {version!r}: this tpuprep reads "
                         f"schema {major}.x ({why})")
    return int(match.group(1)), int(match.group(2))


def check_options(options: Any, where: _Where, version: tuple[int, int] = VERSION) -> BuildOptions:
    """The recorded build options as a ``BuildOptions``, or BadShards: exactly its fields (plus
    ``repad_rule`` from schema 3.3 on: an integer ≥ 1 with re-padding, null without), each of the right
    type and in the range the CLI accepts."""
    names = [f.name for f in fields(BuildOptions)]
    where.mapping(options, "options", [*names, *keys_of(("repad_rule",), version)])
    extra = sorted(set(options) - {*names, "repad_rule"})
    if extra:
        raise where.fail("options", f"unknown option {extra[0]!r}")
    for name in ("prune", "repad", "dedup"):
        if type(options[name]) is not bool:
            raise where.fail(f"options.{name}", f"is {_kind(options[name])}, expected a boolean")
    where.integers(options, ("hops",), "options", 0)
    where.integers(options, ("folds", "compression_level", "chunk_bytes", "row_group_bytes", "shard_bytes"),
                   "options", 1)
    if options["compression_level"] > 22:
        raise where.fail("options.compression_level", f"{options['compression_level']} is above zstd's 22")
    rule = options.get("repad_rule", 1)
    if not ((type(rule) is int and rule >= 1) or (rule is None and not options["repad"])):
        raise where.fail("options.repad_rule", f"is {_kind(rule)}, expected the re-padding rule: an integer >= 1 "
                         "(or null with repad false)")
    return BuildOptions(**{k: options[k] for k in names})


def repad_rule(options: dict) -> int | None:
    """The re-padding rule (``options.REPAD_RULE``) a checked manifest's ``options`` say the build
    applied: None without re-padding; recorded since schema 3.3, rule 1 before."""
    return options.get("repad_rule", 1) if options["repad"] else None


def _check_collections(collections: Any, where: _Where, version: tuple[int, int]) -> None:
    where.mapping(collections, "collections")
    for cid, coll in collections.items():
        at = f"collections[{cid!r}]"
        if cid not in COLLECTIONS:
            raise where.fail(at, f"unknown collection (known: {', '.join(COLLECTIONS)})")
        where.mapping(coll, at, ("kind", "path", "splits", "totals", "node_feat_stats"))
        if coll["kind"] != cid.split(":")[0]:
            raise where.fail(f"{at}.kind", f"{coll['kind']!r} does not match the collection")
        if coll["path"] != cid.replace(":", "/"):
            raise where.fail(f"{at}.path", f"{coll['path']!r} is not {cid.replace(':', '/')!r}")
        for split, counts in [*where.mapping(coll["splits"], f"{at}.splits").items(), ("", coll["totals"])]:
            address = f"{at}.splits.{split}" if split else f"{at}.totals"
            if split and split not in SPLITS:
                raise where.fail(f"{at}.splits", f"unknown split {split!r}")
            required = keys_of(COUNT_FIELDS, version)
            where.integers(where.mapping(counts, address, required), required, address)
        stats = coll["node_feat_stats"]
        if stats is not None:
            where.mapping(stats, f"{at}.node_feat_stats", ("count", "mean", "std"))
            where.integers(stats, ("count",), f"{at}.node_feat_stats", 1)
            for key in ("mean", "std"):
                values = where.array(stats[key], f"{at}.node_feat_stats.{key}")
                if len(values) != FEATURE_STATS_COLUMNS or not all(type(v) in (int, float) for v in values):
                    raise where.fail(f"{at}.node_feat_stats.{key}", f"is not {FEATURE_STATS_COLUMNS} numbers")


_INPUT_KEYS = ("path", "bytes", "sha256", "status")
_SHARD_KEYS = ("path", "table", "collection", "split", "rows", "row_groups", "bytes", "sha256",
               "first_graph", "last_graph")


def _check_input(i: int, entry: Any, where: _Where, version: tuple[int, int]) -> tuple[str, str] | None:
    """(graph id, split) of a converted input entry, None for a quarantined one (BadShards if unsound)."""
    at = f"inputs[{i}]"
    where.mapping(entry, at, _INPUT_KEYS)
    where.integers(entry, ("bytes",), at)
    status, path = entry["status"], entry["path"]
    if status != "ok":
        if status != "quarantined":
            raise where.fail(f"{at}.status", f"{status!r} is not 'ok' or 'quarantined'")
        return None
    where.mapping(entry, at, ("graph_id", "counts"))
    where.sha256(entry["sha256"], f"{at}.sha256")
    try:
        collection, stem = split_graph_id(entry["graph_id"])
    except ValueError as exc:
        raise where.fail(f"{at}.graph_id", str(exc)) from None
    # the canonical place of the graph's input file (inputs.classify): <collection path>/<split>/<stem>.npz
    split = path.rsplit("/", 2)[-2] if type(path) is str and path.count("/") >= 2 else ""
    if split not in SPLITS or path != f"{collection.replace(':', '/')}/{split}/{stem}.npz":
        raise where.fail(f"{at}.path", f"{path!r} is not <collection>/<split>/<stem>.npz of graph "
                         f"{entry['graph_id']!r}")
    required = keys_of(INPUT_COUNT_FIELDS, version)
    where.integers(where.mapping(entry["counts"], f"{at}.counts", required), required, f"{at}.counts")
    return entry["graph_id"], split


def _check_shard(i: int, entry: Any, collections: dict, where: _Where) -> tuple[str, str, str]:
    """(collection, split, "graphs" | "configs") of a shard entry whose fields are sound."""
    at = f"shards[{i}]"
    where.mapping(entry, at, _SHARD_KEYS)
    table, cid, split, path = entry["table"], entry["collection"], entry["split"], entry["path"]
    if table not in TABLES:
        raise where.fail(f"{at}.table", f"unknown table {table!r}")
    if cid not in collections or split not in collections[cid]["splits"]:
        raise where.fail(at, f"collection {cid!r}, split {split!r} is not one of the manifest's collections")
    kind, part = table.split("_")
    if kind != cid.split(":")[0]:
        raise where.fail(f"{at}.table", f"{table!r} does not belong to {cid}")
    folder = f"{collection_path(cid)}/{part}/"
    match = SHARD_NAME.fullmatch(path[len(folder):]) if type(path) is str and path.startswith(folder) else None
    if match is None or match.group(1) != split:
        raise where.fail(f"{at}.path", f"{path!r} is not {folder}{split}-<i>-of-<n>.parquet")
    where.integers(entry, ("rows", "row_groups", "bytes"), at)
    where.sha256(entry["sha256"], f"{at}.sha256")
    if "shard_id" in entry and not (type(entry["shard_id"]) is str and _SHARD_ID.fullmatch(entry["shard_id"])):
        raise where.fail(f"{at}.shard_id", f"{entry['shard_id']!r} is not a shard id (32 hex digits)")
    first, last = entry["first_graph"], entry["last_graph"]
    if type(first) is not str or type(last) is not str or not first <= last:
        raise where.fail(at, f"first_graph {first!r} and last_graph {last!r} are not an ordered pair of graph ids")
    return cid, split, part


def check_manifest(m: Any, path: Path) -> dict:
    """Check what readers rely on, cheaply (≈ 4 µs per input or shard entry): format and major
    version, the options, collections, every input (graph id, path, counts) and shard entry (table,
    collection, split, path shape), and that every converted graph falls in the graph range of a
    ``graphs`` and a ``configs`` shard of its collection and split. Raises ``BadShards`` (one line:
    file, address, problem). ``validate_schema`` is the full JSON Schema check (``tpuprep verify``).
    """
    where = _Where(path)
    version = check_version(m, where)
    where.mapping(m, "", ("versions", "options", "collections", "inputs", "shards", "quarantine"))
    check_options(m["options"], where, version)
    _check_collections(m["collections"], where, version)
    graphs: dict[str, tuple[str, int]] = {}
    for i, entry in enumerate(where.array(m["inputs"], "inputs")):
        found = _check_input(i, entry, where, version)
        if found is None:
            continue
        gid, split = found
        if gid in graphs:
            raise where.fail(f"inputs[{i}].graph_id", f"{gid!r} is listed twice")
        if split not in m["collections"].get(gid.rsplit(":", 1)[0], {}).get("splits", {}):
            raise where.fail(f"inputs[{i}]", f"{gid!r} ({split}) is missing from collections")
        graphs[gid] = (split, i)
    ranges: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
    for i, entry in enumerate(where.array(m["shards"], "shards")):
        key = _check_shard(i, entry, m["collections"], where)
        ranges.setdefault(key, []).append((entry["first_graph"], entry["last_graph"]))
    firsts = {key: [r[0] for r in sorted(rs)] for key, rs in ranges.items()}
    for key in ranges:
        ranges[key].sort()
    for gid, (split, i) in graphs.items():
        for part in ("graphs", "configs"):
            key = (gid.rsplit(":", 1)[0], split, part)
            k = bisect.bisect_right(firsts.get(key, []), gid) - 1
            if k < 0 or gid > ranges[key][k][1]:
                raise where.fail(f"inputs[{i}]", f"no {part} shard entry holds graph {gid!r} ({split})")
    where.array(m["quarantine"], "quarantine")
    return m


def validate_schema(m: dict, path: Path) -> str | None:
    """The full JSON Schema check of a manifest against ``schemas/manifest.schema.json``: None when it
    conforms, else one line naming the address and what is wrong. Slow on large manifests (≈ 0.9 s
    for 5,000 inputs and 5,000 shards with jsonschema, against ≈ 40 ms for ``check_manifest``, the cheap
    check every reader runs), hence only ``tpuprep verify`` runs it."""
    import jsonschema

    schema = manifest_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(m))
    if error is None:
        return None
    address = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".")
    message = error.message if len(error.message) <= 200 else error.message[:200] + "…"
    return f"{path}: {address or '<top level>'}: does not conform to schemas/manifest.schema.json: {message}"


def read_manifest(root: str | Path | Store) -> dict:
    """Read and check ``<root>/manifest.json`` (``check_manifest``). Raises ``BadShards`` — one line
    naming the file and what is wrong — when it is missing, not a regular file, implausibly large, not
    JSON, or fails the check. ``root`` is a folder, a URL or a ``Store`` (``io.storage.resolve``); the
    file is read through the store (``Store.read_bytes``), and for an object store a missing bucket or
    a refused request is its one-line ``FatalError`` naming the URL."""
    store = root if isinstance(root, Store) else resolve(root)
    path = store.location_of(MANIFEST)
    try:
        with store.request_errors(str(path)):  # a refused request to an object store: its one line
            try:
                data = store.read_bytes(MANIFEST, limit=MAX_MANIFEST_BYTES, follow_links=True)
            except FileNotFoundError:
                if store.missing_bucket():
                    raise  # the store's line names the bucket
                raise BadShards(f"{path}: missing: {store.display} is not a finished tpuprep build (an "
                                "interrupted build is finished with tpuprep build --resume)") from None
            except NotARegularFile:  # a folder, FIFO, device; remotely a prefix
                raise BadShards(f"{path}: is not a regular file") from None
            except FileTooLarge as exc:
                raise BadShards(f"{path}: {exc.size} bytes is implausibly large for a manifest") from None
    except OSError as exc:  # a local file's own problem (an object store's became its line above)
        raise BadShards(f"{path}: cannot be read: {exc.strerror or exc}") from None
    try:
        m = json.loads(data, parse_constant=_no_constant)
    except UnicodeDecodeError as exc:
        raise BadShards(f"{path}: is not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise BadShards(f"{path}: is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError as exc:
        raise BadShards(f"{path}: is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadShards(f"{path}: is not a manifest: nested too deeply") from None
    return check_manifest(m, path)


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not allowed in a manifest")
