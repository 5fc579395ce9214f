"""The build id in a shard's Parquet key-value metadata (``build_id``), which the manifest repeats.

A reader compares the two whenever it opens a shard, so a dataset rebuilt (``--overwrite``) under an
open ``Dataset`` fails with one line instead of mixing two builds' rows. ``graphs`` shards are written
at merge time with the id in their schema metadata (``schema_metadata``); ``configs`` shards are a
task's part file placed as is, so ``place_stamped`` copies the part's pages unchanged and writes a
new footer holding the id: the same row groups, offsets, page checksums and page index (only the
footer is re-serialised, by pyarrow, from the part's own footer).
"""

from __future__ import annotations

import hashlib
import io
import os
import struct
from pathlib import Path

from ..io.files import atomic_path

BUILD_ID_KEY = b"build_id"
"""The key of the build id in a shard's Parquet key-value metadata (and Arrow schema metadata)."""
_MAGIC = b"PAR1"


def schema_metadata(metadata: dict | None, build_id: str | None) -> dict:
    """An Arrow schema's ``metadata`` with the build id added (unchanged when ``build_id`` is None)."""
    out = dict(metadata or {})
    if build_id is not None:
        out[BUILD_ID_KEY] = build_id.encode()
    return out


def stamped_footer(path: Path | str, build_id: str) -> tuple[int, bytes]:
    """(offset where the footer of the Parquet file ``path`` starts, a footer (FileMetaData, its length,
    ``PAR1``) equal to it plus ``build_id`` in the key-value metadata)."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    size = os.stat(path).st_size
    with open(path, "rb") as fh:
        fh.seek(size - 8)
        tail = fh.read(8)
    if tail[4:] != _MAGIC:
        raise ValueError(f"{path}: not a Parquet file (no PAR1 at its end)")
    start = size - 8 - struct.unpack("<I", tail[:4])[0]
    schema = pf.schema_arrow
    schema = schema.with_metadata(schema_metadata(schema.metadata, build_id))
    buf = io.BytesIO()
    pq.write_metadata(schema, buf, metadata_collector=[pf.metadata])  # PAR1, footer, length, PAR1
    data = buf.getvalue()
    if data[:4] != _MAGIC or data[-4:] != _MAGIC or pf.metadata.num_row_groups != \
            pq.ParquetFile(io.BytesIO(data)).metadata.num_row_groups:
        raise ValueError(f"{path}: its footer could not be re-written")
    return start, data[4:]


def place_stamped(src: Path | str, path: Path | str, build_id: str) -> tuple[str, int]:
    """Put a copy of the finished Parquet file ``src`` at ``path`` atomically, its footer holding
    ``build_id`` (``src`` is kept unchanged: a part ``--resume`` may reuse). Returns the copy's
    (hex sha256, bytes), hashed as it is written."""
    start, footer = stamped_footer(src, build_id)
    digest = hashlib.sha256()
    with atomic_path(Path(path)) as tmp, open(src, "rb") as fin, open(tmp, "wb") as fout:
        left = start
        while left:  # the pages as they are
            block = fin.read(min(left, 1 << 22))
            if not block:
                raise OSError(f"{src}: ended {left} bytes before its footer")
            digest.update(block)
            fout.write(block)
            left -= len(block)
        digest.update(footer)
        fout.write(footer)
    return digest.hexdigest(), start + len(footer)


def shard_build_id(metadata: dict | None) -> str | None:
    """The build id of a shard from its Parquet key-value metadata (``pf.metadata.metadata``), None for
    a shard written before build ids (schema < 3.2)."""
    value = (metadata or {}).get(BUILD_ID_KEY)
    return None if value is None else value.decode(errors="replace")


__all__ = ["BUILD_ID_KEY", "place_stamped", "schema_metadata", "shard_build_id", "stamped_footer"]
