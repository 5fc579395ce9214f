"""Reading TpuGraphs ``.npz`` files without inflating whole members.

An ``.npz`` is a zip of ``.npy`` members, DEFLATE-compressed by ``np.savez_compressed`` (STORED by
``np.savez``). ``NpzFile`` reads the zip directory and each member's ``.npy`` header, validates the
header against the size the zip declares (so a header that claims a gigantic shape is rejected before
any allocation), reads small members whole and streams large ones in row chunks, checking the CRC.
Object arrays are never unpickled.
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
    if len(head) < 10 or not head.startswith(_NPY_MAGIC):
        raise BadInput(path, key, "member is not a .npy array (bad magic)")
    major = head[6]
    if major == 1:
        hlen = struct.unpack("<H", head[8:10])[0]
        start = 10
    elif major in (2, 3):
        if len(head) < 12:
            raise BadInput(path, key, ".npy header is truncated")
        hlen = struct.unpack("<I", head[8:12])[0]
        start = 12
    else:
        raise BadInput(path, key, f"unsupported .npy format version {major}")
    if hlen > _MAX_HEADER or len(head) < start + hlen:
        raise BadInput(path, key, ".npy header is truncated or too long")
    text = head[start : start + hlen].decode("latin1" if major < 3 else "utf8", errors="replace")
    try:
        meta = ast.literal_eval(text)
        descr, fortran, shape = meta["descr"], meta["fortran_order"], meta["shape"]
    except Exception:
        raise BadInput(path, key, ".npy header is unreadable") from None
    if not isinstance(shape, tuple) or not all(isinstance(s, int) and s >= 0 for s in shape):
        raise BadInput(path, key, f".npy header has an invalid shape {shape!r}")
    if not isinstance(descr, str):
        raise BadInput(path, key, f"structured dtype {descr!r} is not supported")
    try:
        dtype = np.dtype(descr)
    except TypeError:
        raise BadInput(path, key, f"unknown dtype {descr!r}") from None
    if dtype.hasobject or dtype.kind in "OVSUMm":
        raise BadInput(path, key, f"dtype {dtype} is not a numeric array (objects are never unpickled)")
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

    ``members`` maps key (member name without ``.npy``) to ``Member``. Raises BadInput when the file
    is not a readable zip of ``.npy`` members.
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
            if key in members:
                raise BadInput(self.path, key, "member appears twice in the archive")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise BadInput(self.path, key, f"unsupported zip compression method {info.compress_type}")
            if info.flag_bits & 0x1:
                raise BadInput(self.path, key, "member is encrypted")
            members[key] = self._read_member(info, key)
        return members

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
            raise BadInput(
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
        member = self.members[key]
        stream = self._open_data(member)
        buf = np.empty(member.nbytes, np.uint8)
        stream.readinto(memoryview(buf))
        stream.finish()
        arr = buf.view(member.dtype)
        arr = arr.reshape(member.shape, order="F" if member.fortran_order else "C")
        if not member.dtype.isnative:
            arr = arr.astype(member.dtype.newbyteorder("="))
        return np.ascontiguousarray(arr)

    def iter_rows(self, key: str, rows_per_chunk: int) -> Iterator[tuple[int, np.ndarray]]:
        """Stream a member along its first axis: yields (first row, (k, ...) chunk in native order).

        Chunks are read-only and may share memory with the decompressor's output: use each before
        asking for the next, or copy it. The CRC is checked after the last chunk.
        """
        member = self.members[key]
        if member.fortran_order and len(member.shape) > 1 and member.nbytes:
            raise BadInput(self.path, key, "Fortran-ordered arrays cannot be streamed by rows")
        if not member.shape:
            raise BadInput(self.path, key, "expected an array with at least one axis, got a scalar")
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
