"""``verify``'s own checks of the inputs themselves: what could not be listed under ``--src``
(``listing_problems``), and each input's zip structure read independently of the build's reader
(``io/npz.py`` uses ``zipfile`` for the directory; this is ``struct`` from the zip specification,
APPNOTE 4.3, with the members inflated from its own offsets and sizes).

``zip_problems(fh, size)`` checks that the ``size`` bytes of an input — a file, or a tar member's
window of its archive — are exactly one zip archive: its end record (zip64 records too) ends the
window exactly; the central directory lies where the end record says and runs up to it; every entry
is a ``.npy`` member, unencrypted, STORED or DEFLATE, whose local header agrees with the central
directory (name, method, sizes), whose data lies inside the window before the directory and overlaps
no other member; and every member inflates to exactly the uncompressed size the directory declares,
with its CRC-32. A window over the wrong bytes (a sparse tar member read as ``size`` plain bytes
ends in the middle of some other file, or holds another zip inside) fails here whatever the build's
reader made of it.

``zip_entries`` makes the structure checks alone (nothing inflated) and ``MemberReader`` inflates one
member (ISA-L through ``io/inflate.py``), checking its size and CRC-32 on the bytes it hands out:
``verify`` reads the arrays it compares through it, so each member is inflated once for both.
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from .errors import BadInput
from .inputs import InputFile, Unlisted
from .io import inflate

END = struct.Struct("<4s4H2LH")  # signature, disk, cd disk, entries here, entries, cd size, cd offset, comment
END64_LOCATOR = struct.Struct("<4sLQL")  # signature, disk of the zip64 end record, its offset, disks
END64 = struct.Struct("<4sQ2H2L4Q")  # signature, size, made by, needed, disk, cd disk, entries x2, cd size, cd offset
CENTRAL = struct.Struct("<4s6H3L5H2L")
LOCAL = struct.Struct("<4s5H3L2H")
FULL = 0xFFFFFFFF
BLOCK = 1 << 20


def _read(fh: BinaryIO, offset: int, n: int) -> bytes:
    fh.seek(offset)
    return fh.read(n)


def _end_record(fh: BinaryIO, size: int) -> tuple[int, int, int, int] | str:
    """(entries, directory size, directory offset, where the directory must end) from the end
    records, or the problem: no end record ending the window exactly."""
    start = max(0, size - END.size - 0xFFFF)
    tail = _read(fh, start, size - start)
    at = tail.rfind(b"PK\x05\x06")
    while at >= 0 and not (at + END.size <= len(tail)
                           and at + END.size + END.unpack_from(tail, at)[7] == len(tail)):
        at = tail.rfind(b"PK\x05\x06", 0, at)
    if at < 0:
        return "no zip end record ends the member's bytes (they are not one whole zip: another file's data?)"
    _, disk, cd_disk, here, entries, cd_size, cd_offset, _ = END.unpack_from(tail, at)
    pos = start + at
    if disk or cd_disk or here != entries:
        return "the zip end record describes a multi-disk archive"
    if pos >= END64_LOCATOR.size:
        loc = _read(fh, pos - END64_LOCATOR.size, END64_LOCATOR.size)
        if loc[:4] == b"PK\x06\x07":
            _, _, rec, _ = END64_LOCATOR.unpack(loc)
            raw = _read(fh, rec, END64.size)
            if len(raw) != END64.size or raw[:4] != b"PK\x06\x06":
                return "the zip64 end record is missing where its locator points"
            _, rsize, _, _, _, _, _, entries, cd_size, cd_offset = END64.unpack(raw)
            if rec + 12 + rsize != pos - END64_LOCATOR.size:
                return "the zip64 end record does not reach its locator"
            pos = rec
    return entries, cd_size, cd_offset, pos


def _zip64(extra: bytes, fields: list[int]) -> list[int] | None:
    """``fields`` (uncompressed size, compressed size, offset) with each 0xFFFFFFFF replaced from the
    zip64 extra field, in that order; None when the field is missing or short."""
    i = 0
    while i + 4 <= len(extra):
        tag, n = struct.unpack_from("<2H", extra, i)
        if tag == 1:
            body, out, j = extra[i + 4 : i + 4 + n], list(fields), 0
            for k, v in enumerate(fields):
                if v == FULL:
                    if j + 8 > len(body):
                        return None
                    out[k] = struct.unpack_from("<Q", body, j)[0]
                    j += 8
            return out
        i += 4 + n
    return None if FULL in fields else list(fields)


@dataclass(frozen=True)
class Entry:
    """One member as the zip directory declares it (zip64 sizes resolved): ``start`` is the offset of
    its data (after the local header) in the checked window; ``method`` 0 (STORED) or 8 (DEFLATE);
    ``csize``/``usize`` compressed/inflated bytes; ``crc`` its CRC-32."""

    name: str
    method: int
    start: int
    csize: int
    usize: int
    crc: int


class MemberProblem(Exception):
    """A member's data is not what the zip directory declares (the message says how)."""


class MemberReader:
    """One member's data inflated once, in order, from the zip directory's own offsets and sizes
    (ISA-L through ``io.inflate`` when installed), counting every inflated byte and its CRC-32.

    ``read(n)`` returns the next ``n`` bytes (raises ``MemberProblem`` when the data is corrupt,
    cut short, or inflates past the declared size); ``finish()`` reads what is left and returns the
    member's problem (None when it inflates to exactly the declared size with the declared CRC-32).
    Verify reads the arrays it checks through this, so the zip's content check shares their one
    inflate pass.
    """

    def __init__(self, fh: BinaryIO, entry: Entry):
        self.entry = entry
        self._fh, self._pos, self._left = fh, entry.start, entry.csize
        self._d = inflate.raw_inflater() if entry.method == 8 else None
        self._pending = b""
        self.produced = self.crc = 0
        self.problem: str | None = None

    def _fail(self, problem: str) -> MemberProblem:
        self.problem = self.problem or problem
        return MemberProblem(self.problem)

    def _input(self) -> bytes:
        if self._left <= 0:
            return b""
        data = _read(self._fh, self._pos, min(BLOCK, self._left))
        if not data:
            raise self._fail("its data is cut short")
        self._pos, self._left = self._pos + len(data), self._left - len(data)
        return data

    def _next(self, limit: int) -> bytes:
        """Up to ``limit`` new inflated bytes, b"" at the end of the member's data."""
        if self._pending:
            out, self._pending = self._pending[:limit], self._pending[limit:]
        elif self._d is None:
            data = self._input()
            out, self._pending = data[:limit], data[limit:]
        else:
            out, starved = b"", False
            while not out and not self._d.eof:
                data = b""
                if self._d.needs_input or starved:
                    data = self._input()
                    if not data:
                        break
                try:
                    out = self._d.decompress(data, limit)
                except Exception as exc:  # zlib.error, isal's IsalError and the others' equivalents
                    raise self._fail(f"corrupt DEFLATE data ({exc})") from None
                starved = not data
        if out:
            self.crc = inflate.crc32(out, self.crc)
            self.produced += len(out)
            if self.produced > self.entry.usize:
                raise self._fail(f"inflates to more than the {self.entry.usize:,} bytes the zip directory declares")
        return out

    def read(self, n: int, scratch: np.ndarray | None = None) -> bytes | memoryview:
        """The next ``n`` inflated bytes: the inflater's own output when it comes in one piece, else
        assembled in ``scratch`` (a reusable uint8 buffer of at least ``n`` bytes) or a new buffer."""
        piece = self._next(n)
        if len(piece) == n:
            return piece
        if scratch is None or scratch.nbytes < n:
            scratch = np.empty(n, np.uint8)
        buf = memoryview(scratch)[:n]
        filled = 0
        while piece:
            buf[filled : filled + len(piece)] = piece
            filled += len(piece)
            if filled == n:
                return buf
            piece = self._next(n - filled)
        raise self._fail(f"inflates to {self.produced:,} bytes, the zip directory declares {self.entry.usize:,}")

    def finish(self) -> str | None:
        """Inflate what is left; the member's problem, or None when it is intact."""
        try:
            while self._next(BLOCK):
                pass
        except MemberProblem:
            return self.problem
        if self.problem:
            return self.problem
        if self._d is not None and not self._d.eof:
            return "its DEFLATE stream does not end inside its compressed size"
        if self.produced != self.entry.usize:
            return f"inflates to {self.produced:,} bytes, the zip directory declares {self.entry.usize:,}"
        if self.crc & 0xFFFFFFFF != self.entry.crc:
            return f"CRC-32 {self.crc & 0xFFFFFFFF:08x} differs from the zip directory's {self.entry.crc:08x}"
        return None


def zip_problems(fh: BinaryIO, size: int) -> list[str]:
    """What is wrong with the zip structure of bytes ``[0, size)`` of ``fh`` (see the module); an
    empty list when they are one whole, intact zip of ``.npy`` members."""
    problems, entries = zip_entries(fh, size)
    for entry in entries:
        problem = MemberReader(fh, entry).finish()
        if problem:
            problems.append(f"{entry.name}: {problem}")
    return problems


def zip_entries(fh: BinaryIO, size: int) -> tuple[list[str], list[Entry]]:
    """The structure checks of ``zip_problems`` (everything but the members' data): (problems, the
    members that passed them, whose data ``MemberReader`` then inflates and checks)."""
    found = _end_record(fh, size)
    if isinstance(found, str):
        return [found], []
    entries, cd_size, cd_offset, cd_end = found
    if cd_offset + cd_size != cd_end:
        return [f"the zip directory is said to span {cd_offset:,}..{cd_offset + cd_size:,}, but the end "
                f"record lies at {cd_end:,} (bytes before or inside the zip that are not part of it)"], []
    directory = _read(fh, cd_offset, cd_size)
    problems: list[str] = []
    spans: list[tuple[int, int, str]] = []
    found_entries: list[Entry] = []
    i = 0
    for _ in range(entries):
        if i + CENTRAL.size > len(directory) or directory[i : i + 4] != b"PK\x01\x02":
            return [*problems, "the zip directory is corrupt (an entry header is missing)"], found_entries
        (_, _, _, flags, method, _, _, crc, csize, usize, nlen, xlen, clen, disk, _, _, offset
         ) = CENTRAL.unpack_from(directory, i)
        name = directory[i + CENTRAL.size : i + CENTRAL.size + nlen].decode("utf-8", "replace")
        sizes = _zip64(directory[i + CENTRAL.size + nlen : i + CENTRAL.size + nlen + xlen], [usize, csize, offset])
        i += CENTRAL.size + nlen + xlen + clen
        if sizes is None:
            problems.append(f"{name}: its zip64 sizes are missing")
            continue
        usize, csize, offset = sizes
        got = _entry(fh, name, flags, method, crc, csize, usize, offset, disk, cd_offset, spans)
        if isinstance(got, str):
            problems.append(f"{name}: {got}")
        else:
            found_entries.append(got)
    if i != len(directory):
        problems.append(f"the zip directory holds {len(directory) - i:,} bytes after its {entries} entries")
    spans.sort()
    for (_, end, a), (start, _, b) in itertools.pairwise(spans):
        if start < end:
            problems.append(f"{b}: its bytes overlap those of {a}")
    return problems, found_entries


def _entry(fh: BinaryIO, name: str, flags: int, method: int, crc: int, csize: int, usize: int,
           offset: int, disk: int, cd_offset: int, spans: list) -> str | Entry:
    """The problem of one central directory entry, or the ``Entry`` whose data is then checked."""
    if not name.endswith(".npy"):
        return "is not a .npy member"
    if disk or flags & 0x1:
        return "is encrypted or on another disk"
    if method not in (0, 8):
        return f"unsupported compression method {method}"
    raw = _read(fh, offset, LOCAL.size)
    if len(raw) != LOCAL.size or raw[:4] != b"PK\x03\x04":
        return "its local header is missing where the zip directory points"
    _, _, lflags, lmethod, _, _, lcrc, lcsize, lusize, lnlen, lxlen = LOCAL.unpack(raw)
    lname = _read(fh, offset + LOCAL.size, lnlen).decode("utf-8", "replace")
    lsizes = _zip64(_read(fh, offset + LOCAL.size + lnlen, lxlen), [lusize, lcsize, 0])
    if lname != name or lmethod != method:
        return f"its local header says {lname!r} (method {lmethod}), the zip directory {name!r} (method {method})"
    if not lflags & 0x8 and (lsizes is None or lsizes[:2] != [usize, csize] or lcrc != crc):
        return "its local header's sizes or CRC-32 differ from the zip directory's"
    start = offset + LOCAL.size + lnlen + lxlen
    if start + csize > cd_offset:
        return "its data runs into the zip directory"
    spans.append((offset, start + csize, name))
    return Entry(name, method, start, csize, usize, crc)


def member_problems(inp: InputFile, fh: BinaryIO) -> list[str]:
    """``zip_problems`` of the open input ``fh`` (``inputs.open_source``), one line each naming the
    input: for an archive member ``<archive>!<member>``, whose window of the archive is checked."""
    where = inp.path if inp.origin is not None and inp.origin.member else inp.relpath
    return [f"{where}: {problem}" for problem in zip_problems(fh, inp.size)]


def listing_problems(refused: list[BadInput]) -> list[str]:
    """One line per folder under ``--src`` that could not be listed (``inputs.Unlisted``): the inputs
    in it are not checked, which must not pass for "all exact"."""
    return [f"{exc.path}: cannot be listed, so the inputs in it are not checked ({exc.problem})"
            for exc in refused if isinstance(exc, Unlisted)]
