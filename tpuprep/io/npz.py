"""Reading TpuGraphs ``.npz`` files without inflating whole members.

An ``.npz`` is a zip of ``.npy`` members, DEFLATE-compressed by ``np.savez_compressed`` (STORED by
``np.savez``). ``NpzFile`` reads the zip directory and each member's ``.npy`` header, validates the
header against the size the zip declares (so a header that claims a gigantic shape is rejected before
any allocation), reads small members whole and streams large ones in row chunks, checking the CRC.
Object arrays are never unpickled: a member whose header tpuprep cannot use (an object or structured
dtype, a header that lies about the member's size) is set aside in ``NpzFile.unreadable`` with the
reason, and only reading it is an error, so a file with an extra member nobody reads stays usable.

A member in Fortran order (``np.save`` of a transposed or ``np.asfortranarray`` array) stores its first
axis fastest: the bytes of one row of a (c, nc, 18) array are spread over the whole member, so no row is
complete before the member's last column is inflated. ``iter_rows`` still streams it with bounded
memory: each pass over the member keeps a window of rows (``FORTRAN_WINDOW_BYTES``), so a member of B
bytes costs ⌈B / window⌉ passes of inflating it and holds one window.
"""

from __future__ import annotations

import ast
import os
import struct
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..errors import BadInput
from ..faults import checkpoint
from . import inflate

_LOCAL_HEADER = struct.Struct("<4s5H3L2H")
_LOCAL_MAGIC = b"PK\x03\x04"
_READ_BLOCK = 1 << 20  # compressed bytes read per step
_NPY_MAGIC = b"\x93NUMPY"
_MAX_HEADER = 1 << 16
_END_MAGIC = b"PK\x05\x06"
_END_RECORD = 22  # bytes of the end of central directory record before its comment
_END_SEARCH = _END_RECORD + 0xFFFF  # the record and the longest comment

FORTRAN_WINDOW_BYTES = 256 << 20
"""Bytes of rows a pass over a Fortran-ordered member keeps (``NpzFile.iter_rows``): the most its
streaming holds besides one read block, and the divisor of its passes over the member."""


@dataclass(frozen=True)
class Member:
    """One ``.npy`` member: its zip entry and array header.

    data_start: offset of the raw (compressed) bytes in the file; data_offset: offset of the array
    data inside the inflated member (after the .npy header).
    """

    key: str
    compress_type: int
    compress_size: int
    file_size: int
    crc: int
    data_start: int
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool
    data_offset: int

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def by_columns(self) -> bool:
        """Whether its rows (along the first axis) are spread over the whole member: Fortran order with
        more than one axis and some data (``NpzFile.fortran_rows``)."""
        return self.fortran_order and len(self.shape) > 1 and self.nbytes > 0

    def window_rows(self, window_bytes: int | None = None) -> int:
        """Rows one pass of ``NpzFile.fortran_rows`` keeps: as many as fit ``window_bytes`` (None:
        ``FORTRAN_WINDOW_BYTES``), at least one."""
        window_bytes = FORTRAN_WINDOW_BYTES if window_bytes is None else window_bytes
        row_bytes = int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize
        return max(1, min(self.shape[0], window_bytes // max(row_bytes, 1)))

    def passes(self, window_bytes: int | None = None) -> int:
        """Passes over the member ``NpzFile.iter_rows`` makes: 1, or ⌈rows / window_rows⌉ by columns."""
        return -(-self.shape[0] // self.window_rows(window_bytes)) if self.by_columns else 1


class Unreadable(BadInput):
    """A member whose ``.npy`` header cannot be used: its dtype is not numeric (objects are never
    unpickled), or the header is unreadable or disagrees with the member's size."""


class _MemberStream:
    """Sequential reader of one member's inflated bytes, with CRC and size checks."""

    def __init__(self, fh, path: Path, key: str, compress_type: int, data_start: int,
                 compress_size: int, file_size: int, crc: int):
        self._fh = fh
        self._path = path
        self._key = key
        self._stored = compress_type == zipfile.ZIP_STORED
        self._remaining_in = compress_size
        self._pos_in = data_start
        self._file_size = file_size
        self._crc_expected = crc
        self._crc = 0
        self._produced = 0
        self._pending = b""
        self._decomp = None if self._stored else inflate.raw_inflater()

    def _fail(self, what: str) -> BadInput:
        return BadInput(self._path, self._key, what)

    def _more(self, limit: int) -> bytes:
        """Up to ``limit`` new inflated bytes (b"" at the end of the member)."""
        if self._pending:
            out, self._pending = self._pending[:limit], self._pending[limit:]
            return out
        if self._stored:
            data = self._read_input()
            return data[:limit] if len(data) <= limit else self._keep(data, limit)
        starved = False  # an empty step without new input: the inflater needs input after all
        while not self._decomp.eof:
            data = b""
            if self._decomp.needs_input or starved:
                data = self._read_input()
                if not data:
                    return b""
            out = self._inflate(data, limit)
            if out:
                return out
            starved = not data
        return b""

    def _read_input(self) -> bytes:
        """The next block of the member's compressed bytes (b"" after its last)."""
        if self._remaining_in <= 0:
            return b""
        self._fh.seek(self._pos_in)
        data = self._fh.read(min(_READ_BLOCK, self._remaining_in))
        if not data:
            raise self._fail("file is truncated inside this member")
        self._pos_in += len(data)
        self._remaining_in -= len(data)
        return data

    def _inflate(self, data: bytes, limit: int) -> bytes:
        try:
            return self._decomp.decompress(data, limit)
        except Exception as exc:  # zlib.error, isal's IsalError and the others' equivalents
            raise self._fail(f"corrupt DEFLATE data ({exc})") from None

    def _keep(self, data: bytes, limit: int) -> bytes:
        self._pending = data[limit:]
        return data[:limit]

    def readinto(self, buf: memoryview) -> int:
        """Fill ``buf`` completely; raise BadInput if the member ends early or exceeds its size."""
        filled = 0
        total = len(buf)
        while filled < total:
            chunk = self._more(total - filled)
            if not chunk:
                raise self._fail(
                    f"member ends after {self._produced} bytes, its header promises more"
                )
            buf[filled : filled + len(chunk)] = chunk
            filled += len(chunk)
            self._account(chunk)
        return filled

    def read(self, size: int) -> bytes:
        buf = bytearray(size)
        self.readinto(memoryview(buf))
        return bytes(buf)

    def read_exact(self, size: int, scratch: np.ndarray | None = None) -> bytes | memoryview:
        """``size`` bytes: the decompressor's own output when it comes in one piece (no copy), else
        assembled in ``scratch`` (a reusable uint8 buffer of at least ``size`` bytes, so its pages are
        touched once per member, not once per chunk)."""
        piece = self._more(size)
        if len(piece) == size:
            self._account(piece)
            return piece
        if scratch is None or scratch.nbytes < size:
            scratch = np.empty(size, np.uint8)
        buf = memoryview(scratch)[:size]
        if piece:
            buf[: len(piece)] = piece
            self._account(piece)
        self.readinto(buf[len(piece) :])
        return buf

    def _account(self, chunk: bytes) -> None:
        self._crc = inflate.crc32(chunk, self._crc)
        self._produced += len(chunk)
        if self._produced > self._file_size:
            raise self._fail("member inflates to more bytes than the zip directory declares")

    def finish(self) -> None:
        """Check that the member ends here with the right size and CRC."""
        rest = self._more(1)
        if rest:
            raise self._fail("member holds more bytes than its array header describes")
        if self._produced != self._file_size:
            raise self._fail(
                f"member inflates to {self._produced} bytes, the zip directory says {self._file_size}"
            )
        if (self._crc & 0xFFFFFFFF) != self._crc_expected:
            raise self._fail("CRC-32 mismatch: the member is corrupt")


def _parse_npy_header(head: bytes, path: Path, key: str) -> tuple[tuple[int, ...], np.dtype, bool, int]:
    """(shape, dtype, Fortran order, data offset) of a ``.npy`` header; ``Unreadable`` when it is not a
    header of a numeric array this reader can use."""
    if len(head) < 10 or not head.startswith(_NPY_MAGIC):
        raise Unreadable(path, key, "member is not a .npy array (bad magic)")
    major = head[6]
    if major == 1:
        hlen = struct.unpack("<H", head[8:10])[0]
        start = 10
    elif major in (2, 3):
        if len(head) < 12:
            raise Unreadable(path, key, ".npy header is truncated")
        hlen = struct.unpack("<I", head[8:12])[0]
        start = 12
    else:
        raise Unreadable(path, key, f"unsupported .npy format version {major}")
    if hlen > _MAX_HEADER or len(head) < start + hlen:
        raise Unreadable(path, key, ".npy header is truncated or too long")
    text = head[start : start + hlen].decode("latin1" if major < 3 else "utf8", errors="replace")
    try:
        meta = ast.literal_eval(text)
        descr, fortran, shape = meta["descr"], meta["fortran_order"], meta["shape"]
    except Exception:
        raise Unreadable(path, key, ".npy header is unreadable") from None
    if not isinstance(shape, tuple) or not all(isinstance(s, int) and s >= 0 for s in shape):
        raise Unreadable(path, key, f".npy header has an invalid shape {shape!r}")
    if not isinstance(descr, str):
        raise Unreadable(path, key, f"structured dtype {descr!r} is not supported")
    try:
        dtype = np.dtype(descr)
    except TypeError:
        raise Unreadable(path, key, f"unknown dtype {descr!r}") from None
    if dtype.hasobject or dtype.kind in "OVSUMm":
        raise Unreadable(path, key, f"dtype {dtype} is not a numeric array (objects are never unpickled)")
    return shape, dtype, bool(fortran), start + hlen


def _file_size(fh: BinaryIO) -> int:
    """Size in bytes of an open, seekable binary file: ``fstat`` for an OS file, else its end offset
    (an archive member view, an in-memory buffer)."""
    try:
        return os.fstat(fh.fileno()).st_size
    except (AttributeError, OSError):  # io.UnsupportedOperation is an OSError
        pos = fh.tell()
        end = fh.seek(0, os.SEEK_END)
        fh.seek(pos)
        return end


class NpzFile:
    """A TpuGraphs ``.npz`` opened for streaming. Use as a context manager.

    ``members`` maps key (member name without ``.npy``) to ``Member``; ``unreadable`` maps the key of
    each member whose header cannot be used to why (``Unreadable``; ``member`` and the reads raise it);
    ``keys`` lists both in the zip directory's order. Raises BadInput when the file is not a readable
    zip of ``.npy`` members.
    """

    def __init__(self, path: str | Path, fh: BinaryIO | None = None):
        """Open ``path``, or read the already open, seekable binary file ``fh`` (``path`` then only
        names it in errors, and ``close()`` leaves ``fh`` open for its owner). ``fh`` may be an OS
        file, an archive member (``archive.MemberView``) or an in-memory buffer."""
        self.path = path  # as given: a URL or "archive!member" must not be squeezed by Path
        self._owned = fh is None
        if fh is None:
            try:
                fh = open(self.path, "rb")  # noqa: SIM115 (closed by close())
            except OSError as exc:
                raise BadInput(self.path, None, f"cannot open: {exc.strerror}") from None
        self._fh = fh
        self.unreadable: dict[str, str] = {}
        self.keys: list[str] = []
        try:
            self._size = _file_size(fh)
            self.members = self._read_directory()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> NpzFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._owned:
            self._fh.close()

    def _check_end_record(self) -> None:
        """The zip's end record must end the file exactly (its comment reaching the last byte): a
        file whose end record lies further in is not one whole zip (a window over the wrong bytes,
        such as a sparse tar member read as plain bytes, or data appended to the file)."""
        size = self._size
        self._fh.seek(max(0, size - _END_SEARCH))
        tail = self._fh.read(_END_SEARCH)
        at = last = tail.rfind(_END_MAGIC)
        if at < 0:
            return  # no end record at all: zipfile says "not a zip"
        while at >= 0:
            if at + _END_RECORD <= len(tail):
                comment = struct.unpack("<H", tail[at + 20 : at + 22])[0]
                if at + _END_RECORD + comment == len(tail):
                    return
            at = tail.rfind(_END_MAGIC, 0, at)
        extra = len(tail) - last - _END_RECORD
        cut = extra < 0 or last + _END_RECORD + struct.unpack("<H", tail[last + 20 : last + 22])[0] > len(tail)
        if cut:
            raise BadInput(self.path, None, "not a readable zip archive: its end record is cut short "
                           "(a truncated file?)")
        raise BadInput(self.path, None, f"not a readable zip archive: {extra} bytes that are not part of it "
                       "follow its end record (the bytes of another file?)")

    def _read_directory(self) -> dict[str, Member]:
        self._check_end_record()
        try:
            with zipfile.ZipFile(self._fh) as zf:
                infos = zf.infolist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, struct.error, OSError) as exc:
            raise BadInput(self.path, None, f"not a readable zip archive ({exc})") from None
        members: dict[str, Member] = {}
        for info in infos:
            name = info.filename
            if not name.endswith(".npy"):
                raise BadInput(self.path, name, "member is not a .npy array")
            key = name[:-4]
            if key in self.keys:
                raise BadInput(self.path, key, "member appears twice in the archive")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise BadInput(self.path, key, f"unsupported zip compression method {info.compress_type}")
            if info.flag_bits & 0x1:
                raise BadInput(self.path, key, "member is encrypted")
            self.keys.append(key)
            try:
                members[key] = self._read_member(info, key)
            except Unreadable as exc:  # an error only for whoever reads it (a required key)
                self.unreadable[key] = exc.problem
        return members

    def member(self, key: str) -> Member:
        """The ``Member`` of ``key``: ``Unreadable`` (naming the file and key) when its header cannot be
        used, ``KeyError`` when the file has no such member."""
        if key in self.unreadable:
            raise Unreadable(self.path, key, self.unreadable[key])
        return self.members[key]

    def _data_start(self, info: zipfile.ZipInfo, key: str) -> int:
        size = self._size
        if not 0 <= info.header_offset < size:
            raise BadInput(self.path, key, "zip directory points outside the file")
        self._fh.seek(info.header_offset)
        raw = self._fh.read(_LOCAL_HEADER.size)
        if len(raw) != _LOCAL_HEADER.size or raw[:4] != _LOCAL_MAGIC:
            raise BadInput(self.path, key, "zip local header is missing or corrupt")
        fields = _LOCAL_HEADER.unpack(raw)
        name_len, extra_len = fields[-2], fields[-1]
        start = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len
        if start + info.compress_size > size:
            raise BadInput(self.path, key, "member extends past the end of the file (truncated?)")
        return start

    def _stream(self, info_like: Member | zipfile.ZipInfo, key: str, data_start: int) -> _MemberStream:
        return _MemberStream(
            self._fh, self.path, key, info_like.compress_type, data_start,
            info_like.compress_size, info_like.file_size,
            info_like.CRC if isinstance(info_like, zipfile.ZipInfo) else info_like.crc,
        )

    def _read_member(self, info: zipfile.ZipInfo, key: str) -> Member:
        start = self._data_start(info, key)
        stream = self._stream(info, key, start)
        head = bytearray()
        want = min(info.file_size, 128)
        while True:
            if want > len(head):
                head += stream.read(want - len(head))
            try:
                shape, dtype, fortran, offset = _parse_npy_header(bytes(head), self.path, key)
                break
            except BadInput:
                if want >= min(info.file_size, _MAX_HEADER + 12):
                    raise
                want = min(info.file_size, want * 4)
        nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if offset + nbytes != info.file_size:
            raise Unreadable(
                self.path, key,
                f"header claims shape {shape} of {dtype} ({nbytes} bytes) but the member holds "
                f"{info.file_size - offset} bytes of data",
            )
        return Member(key, info.compress_type, info.compress_size, info.file_size, info.CRC,
                      start, shape, dtype, fortran, offset)

    def _open_data(self, member: Member) -> _MemberStream:
        stream = self._stream(member, member.key, member.data_start)
        stream.read(member.data_offset)
        return stream

    def read(self, key: str) -> np.ndarray:
        """Read a whole member into memory (for the small members), native byte order, C order."""
        member = self.member(key)
        stream = self._open_data(member)
        buf = np.empty(member.nbytes, np.uint8)
        stream.readinto(memoryview(buf))
        stream.finish()
        arr = buf.view(member.dtype)
        arr = arr.reshape(member.shape, order="F" if member.fortran_order else "C")
        if not member.dtype.isnative:
            arr = arr.astype(member.dtype.newbyteorder("="))
        return np.ascontiguousarray(arr)

    def iter_rows(self, key: str, rows_per_chunk: int,
                  window_bytes: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """Stream a member along its first axis: yields (first row, (k, ...) chunk in native order, C
        order), k ≤ ``rows_per_chunk``.

        Chunks are read-only and may share memory with the decompressor's output: use each before
        asking for the next, or copy it. The CRC is checked after the last chunk (in C order; a
        Fortran-ordered member, ``fortran_rows``, checks it at the end of each pass, before its rows).
        """
        member = self.member(key)
        if not member.shape:
            raise BadInput(self.path, key, "expected an array with at least one axis, got a scalar")
        if member.by_columns:
            yield from self.fortran_rows(member, rows_per_chunk, window_bytes)
            return
        rows = member.shape[0]
        row_shape = member.shape[1:]
        row_bytes = int(np.prod(row_shape, dtype=np.int64)) * member.dtype.itemsize
        stream = self._open_data(member)
        step = max(1, int(rows_per_chunk))
        scratch = np.empty(min(step, rows) * row_bytes, np.uint8)
        for start in range(0, rows, step):
            k = min(step, rows - start)
            if row_bytes:
                data = stream.read_exact(k * row_bytes, scratch)
                chunk = np.frombuffer(data, member.dtype).reshape(k, *row_shape)
            else:
                chunk = np.empty((k, *row_shape), member.dtype)
            if not member.dtype.isnative:
                chunk = chunk.astype(member.dtype.newbyteorder("="))
            yield start, chunk
            checkpoint("inflate")
        stream.finish()

    def fortran_rows(self, member: Member, rows_per_chunk: int,
                     window_bytes: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """``iter_rows`` of a Fortran-ordered member of shape (r, d1, ..., dk): its data is d1·…·dk columns
        of r values each (the first axis fastest, then d1, ...), so rows [a, b) are the values a..b−1 of
        every column. Each pass inflates the whole member once and keeps of each column the values of a
        window of w = ``window_bytes`` (None: ``FORTRAN_WINDOW_BYTES``) // (row bytes) rows (at least
        one), reading ~1 MiB of whole columns
        at a time; the pass's size and CRC are checked before its rows are yielded. ⌈r / w⌉ passes; held:
        the window (≤ ``window_bytes``), one read block and one chunk."""
        rows, row_shape, dtype = member.shape[0], member.shape[1:], member.dtype
        columns = int(np.prod(row_shape, dtype=np.int64))
        column_bytes = rows * dtype.itemsize
        window = member.window_rows(window_bytes)
        per_read = max(1, _READ_BLOCK // column_bytes)  # whole columns per read
        scratch = np.empty(min(per_read, columns) * column_bytes, np.uint8)
        axes = (len(row_shape), *range(len(row_shape) - 1, -1, -1))  # (dk, ..., d1, w) → (w, d1, ..., dk)
        step = max(1, int(rows_per_chunk))
        for first in range(0, rows, window):
            last = min(rows, first + window)
            held = np.empty((columns, last - first), dtype)  # column j's values of rows first..last-1
            stream = self._open_data(member)
            for col in range(0, columns, per_read):
                n = min(per_read, columns - col)
                data = np.frombuffer(stream.read_exact(n * column_bytes, scratch), dtype).reshape(n, rows)
                held[col:col + n] = data[:, first:last]
            stream.finish()
            view = held.reshape(*row_shape[::-1], last - first).transpose(axes)
            for start in range(0, last - first, step):
                chunk = np.ascontiguousarray(view[start:start + step], dtype.newbyteorder("="))
                yield first + start, chunk
                checkpoint("inflate")
            del held, view
