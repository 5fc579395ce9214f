"""An input's members read once for ``verify``: the arrays its checks compare, and on the same inflated
bytes the zip content check of every member (inflated size and CRC-32 as the zip directory declares).

Before, ``verify`` inflated each member twice: once with zlib for the zip check (``inputcheck``) and
once through the build's reader for the arrays. Here each member is inflated once, by
``inputcheck.MemberReader`` (ISA-L through ``io/inflate.py`` when installed), from the offsets and
sizes of ``inputcheck``'s own reading of the zip directory; the build's reader (``NpzFile``) only
supplies each member's ``.npy`` header (shape, dtype, where the array data starts), and is checked
against the input limits before any data is read. A member the structure check refused is read
through ``NpzFile`` instead (its problem is already reported).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

import numpy as np

from ..errors import BadInput
from ..inputcheck import Entry, MemberProblem, MemberReader
from ..io.npz import NpzFile


class InputReader:
    """Arrays of an open ``NpzFile`` ``f`` whose bytes ``fh`` are read through ``entries`` (the
    members ``inputcheck.zip_entries`` found intact), each member inflated at most once.

    ``read(key)`` → the whole array (native byte order, C order); ``iter_rows(key, rows)`` → (first
    row, (k, ...) chunk) along the first axis, read-only, valid until the next chunk. ``finish()``
    inflates the members no check read and returns one problem line per member whose data is not
    what the zip directory declares (``"<member>.npy: <problem>"``, as ``inputcheck.zip_problems``).
    A read of a corrupt member raises ``BadInput`` naming the file and the key.
    """

    def __init__(self, f: NpzFile, fh: BinaryIO, entries: list[Entry]):
        self.f, self._fh = f, fh
        self._entries = {e.name: e for e in entries}
        self._done: dict[str, str | None] = {}

    def _open(self, key: str) -> MemberReader | None:
        """A reader positioned at the array data of member ``key``; None when the structure check
        refused the member or it was read already (then ``NpzFile`` reads it)."""
        name = f"{key}.npy"
        if name not in self._entries or name in self._done:
            return None
        reader = MemberReader(self._fh, self._entries[name])
        try:
            reader.read(self.f.members[key].data_offset)  # the .npy header (counted in the CRC)
        except MemberProblem as exc:
            self._done[name] = reader.problem
            raise BadInput(self.f.path, key, str(exc)) from None
        return reader

    def _close(self, key: str, reader: MemberReader) -> None:
        self._done[f"{key}.npy"] = reader.finish()

    def _fail(self, key: str, reader: MemberReader, exc: MemberProblem) -> BadInput:
        self._done[f"{key}.npy"] = reader.problem
        return BadInput(self.f.path, key, str(exc))

    def read(self, key: str) -> np.ndarray:
        member = self.f.members[key]
        reader = self._open(key)
        if reader is None:
            return self.f.read(key)
        try:
            data = reader.read(member.nbytes) if member.nbytes else b""
        except MemberProblem as exc:
            raise self._fail(key, reader, exc) from None
        self._close(key, reader)
        arr = np.frombuffer(data, member.dtype).reshape(member.shape, order="F" if member.fortran_order else "C")
        if not member.dtype.isnative:
            arr = arr.astype(member.dtype.newbyteorder("="))
        return np.ascontiguousarray(arr)

    def iter_rows(self, key: str, rows_per_chunk: int) -> Iterator[tuple[int, np.ndarray]]:
        member = self.f.members[key]
        if (member.fortran_order and len(member.shape) > 1 and member.nbytes) or not member.shape:
            yield from self.f.iter_rows(key, rows_per_chunk)  # refused there, with the build's words
            return
        reader = self._open(key)
        if reader is None:
            yield from self.f.iter_rows(key, rows_per_chunk)
            return
        rows, row_shape = member.shape[0], member.shape[1:]
        row_bytes = int(np.prod(row_shape, dtype=np.int64)) * member.dtype.itemsize
        step = max(1, int(rows_per_chunk))
        scratch = np.empty(min(step, rows) * row_bytes, np.uint8)
        for start in range(0, rows, step):
            k = min(step, rows - start)
            try:
                data = reader.read(k * row_bytes, scratch) if row_bytes else b""
            except MemberProblem as exc:
                raise self._fail(key, reader, exc) from None
            chunk = np.frombuffer(data, member.dtype).reshape(k, *row_shape) if row_bytes else \
                np.empty((k, *row_shape), member.dtype)
            if not member.dtype.isnative:
                chunk = chunk.astype(member.dtype.newbyteorder("="))
            yield start, chunk
        self._close(key, reader)

    def finish(self) -> list[str]:
        """Inflate every member not read yet; one line per member whose data is not as declared."""
        for name, entry in self._entries.items():
            if name not in self._done:
                self._done[name] = MemberReader(self._fh, entry).finish()
        return [f"{name}: {problem}" for name, problem in self._done.items() if problem]
