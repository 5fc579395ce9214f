"""An input's members read once for ``verify``: the arrays its checks compare, and on the same inflated
bytes the zip content check of every member (inflated size and CRC-32 as the zip directory declares).

Before, ``verify`` inflated each member twice: once with zlib for the zip check (``inputcheck``) and
once through the build's reader for the arrays. Here each member is inflated once, by
``inputcheck.MemberReader`` (ISA-L through ``io/inflate.py`` when installed), from the offsets and
sizes of ``inputcheck``'s own reading of the zip directory; the build's reader (``NpzFile``) only
supplies each member's ``.npy`` header (shape, dtype, where the array data starts), and is checked
against the input limits before any data is read. A member the structure check refused is read
through ``NpzFile`` instead (its problem is already reported).

A Fortran-ordered member is streamed by rows here too, by this module's own code (a pass over the
member per window of ``FORTRAN_WINDOW_BYTES`` of rows, each column copied on its own), not by the
build's ``NpzFile.fortran_rows``: a bug in that transposition cannot pass for an exact build.
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
        member = self.f.member(key)
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

    def iter_rows(self, key: str, rows_per_chunk: int,
                  window_bytes: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        member = self.f.member(key)
        if not member.shape:
            yield from self.f.iter_rows(key, rows_per_chunk)  # refused there, with the build's words
            return
        if member.by_columns and f"{key}.npy" in self._entries and f"{key}.npy" not in self._done:
            yield from self._fortran_rows(key, rows_per_chunk, window_bytes)
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

    def _fortran_rows(self, key: str, rows_per_chunk: int,
                      window_bytes: int | None) -> Iterator[tuple[int, np.ndarray]]:
        """``iter_rows`` of a Fortran-ordered member (r, d1, ..., dk), whose data is its columns (all but
        the first index, d1 fastest), r values each: per window of rows that fits ``window_bytes`` (None:
        ``FORTRAN_WINDOW_BYTES``; ``Member.window_rows``), one pass inflating the member from its zip
        entry, copying every column's values of the window into it one column at a time; the pass's
        size and CRC-32 are checked before its rows are given."""
        member, entry = self.f.member(key), self._entries[f"{key}.npy"]
        rows, row_shape, dtype = member.shape[0], member.shape[1:], member.dtype
        columns = int(np.prod(row_shape, dtype=np.int64))
        width = member.window_rows(window_bytes)
        scratch = np.empty(rows * dtype.itemsize, np.uint8)
        for first in range(0, rows, width):
            last = min(rows, first + width)
            window = np.empty((last - first, columns), dtype)  # window[i, c]: row first + i, column c
            reader = MemberReader(self._fh, entry)
            try:
                reader.read(member.data_offset)
                for c in range(columns):
                    window[:, c] = np.frombuffer(reader.read(rows * dtype.itemsize, scratch), dtype)[first:last]
            except MemberProblem as exc:
                raise self._fail(key, reader, exc) from None
            problem = reader.finish()
            self._done[f"{key}.npy"] = problem
            if problem:
                raise BadInput(self.f.path, key, problem)
            # column c = j1 + d1·(j2 + d2·(...)): a C-order reshape to (w, dk, ..., d1), then axes reversed
            rows_of = window.reshape(last - first, *row_shape[::-1]).transpose(0, *range(len(row_shape), 0, -1))
            step = max(1, int(rows_per_chunk))
            for start in range(0, last - first, step):
                yield first + start, np.ascontiguousarray(rows_of[start:start + step], dtype.newbyteorder("="))
            del window, rows_of  # before the next pass's window: one held at a time

    def finish(self) -> list[str]:
        """Inflate every member not read yet; one line per member whose data is not as declared."""
        for name, entry in self._entries.items():
            if name not in self._done:
                self._done[name] = MemberReader(self._fh, entry).finish()
        return [f"{name}: {problem}" for name, problem in self._done.items() if problem]
