"""Shard ids: a content id in every shard's Parquet key-value metadata (key ``shard_id``), which the
shard's manifest entry repeats (schema >= 3.2).

A reader compares the two whenever it opens a shard, so a folder rebuilt (``--overwrite``) under an
open ``Dataset`` fails with one line instead of mixing two builds' rows. The id is written when the
shard's file is written, never by rewriting a file later:

- a ``configs`` shard is a task's part file placed as it is (hard link, server-side copy): its id
  (``part_id``) is a digest of what decides the part's bytes — schema and library versions, the build
  options and the batch's inputs (tree path, bytes, sha256) — known once the batch is converted,
  before the task writes the part;
- a ``graphs`` shard, written at merge time, gets ``merged_id`` of its member parts' ids.

Either way the writer is opened with the id in its Arrow schema's metadata (``with_shard_id``), which
pyarrow writes into the Parquet key-value metadata (and a ``pq.read_table``/``pq.write_table`` round
trip keeps).

Ids are 32 hex digits and deterministic: identical inputs and options give identical ids (and
bytes), whatever the runner, the number of workers or a ``--resume``; a part that is reused keeps the
id in its own footer.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence

import pyarrow as pa

from .manifest import library_versions
from .schema import SCHEMA_VERSION

SHARD_ID_KEY = b"shard_id"
"""The key of the shard id in a shard's Parquet key-value metadata."""


def _digest(doc: object) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]


def part_id(options: dict, inputs: Iterable[tuple[str, int, str]]) -> str:
    """The id (32 hex digits) of a task's ``configs`` part: a digest of the schema and library versions,
    the build ``options`` (``BuildOptions.to_dict()``) and the batch's converted inputs as (tree path,
    bytes, hex sha256) — everything that decides the part's bytes."""
    return _digest({"schema_version": SCHEMA_VERSION, "versions": library_versions(), "options": options,
                    "inputs": sorted([path, size, sha] for path, size, sha in inputs)})


def merged_id(ids: Sequence[str | None]) -> str | None:
    """The id of a ``graphs`` shard merged from parts of these ids (in graph-id order); None if a part
    has none (written before shard ids)."""
    if not ids or any(i is None for i in ids):
        return None
    return _digest({"parts": list(ids)})


def with_shard_id(schema: pa.Schema, shard_id: str | None) -> pa.Schema:
    """``schema`` with ``shard_id`` added to its metadata (unchanged when None): open a shard's
    ``ParquetWriter`` with it."""
    if shard_id is None:
        return schema
    return schema.with_metadata({**(schema.metadata or {}), SHARD_ID_KEY: shard_id.encode()})


def shard_id(metadata: dict | None) -> str | None:
    """The id of a shard from its Parquet key-value metadata (``pf.metadata.metadata``), None for a
    shard written before shard ids (schema < 3.2)."""
    value = (metadata or {}).get(SHARD_ID_KEY)
    return None if value is None else value.decode(errors="replace")


__all__ = ["SHARD_ID_KEY", "merged_id", "part_id", "shard_id", "with_shard_id"]
