"""Reading npz files in place inside uncompressed tar archives (``npz_all.tar``, the per-collection
``npz_<kind>_<source>[_<search>]_<split>.tar``), never extracting them.

``index_tar`` walks the archive's headers once (``tarfile``, headers only: the data of each member is
skipped by seeking, so a remote archive costs a few ranged reads) and returns, per regular member, its
name, the offset of its data in the archive and its size. ``MemberView`` is a read-only, seekable
file object over one member's bytes of an open archive, so ``NpzFile`` and the hashing read the member
where it lies. Links, devices, FIFOs and sparse members (``tar --sparse``: their data is not ``size``
plain bytes) in an archive are refused per member, with the reason. A name stored more than once (an
archive appended to with ``tar -r``) is read as ``tar -x`` would leave it: the last member of the name
wins, and the older copies are reported as skipped.
"""

from __future__ import annotations

import os
import posixpath
import tarfile
from dataclasses import dataclass
from typing import BinaryIO

from ..errors import BadInput
from .window import ByteWindow

ARCHIVE_SUFFIX = ".tar"
"""File names ending in this are read as tar archives of npz files."""


@dataclass(frozen=True)
class TarMember:
    """One regular file of a tar archive: ``name`` as stored (e.g. ``npz/tile/xla/train/a.npz``),
    ``offset`` of its first data byte from the start of the archive and its ``size``, both in bytes."""

    name: str
    offset: int
    size: int


def is_archive_name(name: str) -> bool:
    """Whether a file name is read as a tar archive (``*.tar``, any case)."""
    return name.lower().endswith(ARCHIVE_SUFFIX)


def _refusal(info: tarfile.TarInfo) -> str | None:
    """Why a member that is not a regular file is refused (None for a regular file)."""
    if info.issym():
        return f"is a symbolic link (to {info.linkname}) inside the archive; links are not followed"
    if info.islnk():
        return f"is a hard link (to {info.linkname}) inside the archive; only regular members are read"
    if info.ischr() or info.isblk():
        return "is a device inside the archive, not a regular file; only regular members are read"
    if info.isfifo():
        return "is a FIFO inside the archive, not a regular file; only regular members are read"
    if not info.isreg():
        return "is not a regular file inside the archive; only regular members are read"
    if info.issparse():
        return ("is a sparse member (tar --sparse): its data is not stored as plain bytes; "
                "re-create the archive without --sparse")
    if info.type not in PLAIN_TYPES:
        return f"has tar type {info.type!r}, whose data is not plain bytes; only regular members are read"
    return None


PLAIN_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE)
"""Member types whose data is exactly ``size`` plain bytes from the data offset (``tarfile.isreg()``
also counts GNU sparse members as regular; their data is a map of the non-zero regions)."""


@dataclass(frozen=True)
class Skipped:
    """An entry of a source that is not read, and why (``path`` names it as errors do)."""

    path: str
    reason: str


def _other_member(name: str, suffix: str) -> str:
    """Why a member named ``name`` is not read: not a ``suffix`` member (a name ending in it in other
    case, ``a.NPZ``, says so: names are case-sensitive)."""
    if name.lower().endswith(suffix) and not name.endswith(suffix):
        return (f"not a {suffix} member: its name ends in {name[-len(suffix):]!r}, not {suffix!r} (names are "
                "case-sensitive)")
    return f"not a {suffix} member"


def member_key(name: str) -> str:
    """The file a member's name extracts to, as ``tar -x`` sees it (``./a//b.npz`` and ``a/b.npz``
    are one file): two members with one key are two versions of one file."""
    return posixpath.normpath(name.lstrip("/"))


END_CHUNK = 1 << 20
"""Bytes read at a time when checking that only zeros follow the last member."""


def _past_the_end(fh: BinaryIO, offset: int, archive_size: int) -> str | None:
    """None when bytes ``[offset, archive_size)`` of ``fh`` are all zero (the end-of-archive blocks and
    the record padding), else what is there: ``tarfile`` ends its listing at the first invalid header
    after the first member, which would drop every member behind a damaged header without a word.
    Reads until the first non-zero byte (a valid archive: its ≤ 10 KB of padding)."""
    fh.seek(offset)
    at = offset
    while at < archive_size:
        chunk = fh.read(min(END_CHUNK, archive_size - at))
        if not chunk:
            return f"it ends at byte {at}, before its declared size of {archive_size} bytes"
        if chunk.count(0) != len(chunk):
            first = at + next(i for i, b in enumerate(chunk) if b)
            if first == offset:
                return (f"byte {first} is not a valid member header nor the zero end of the archive "
                        f"(a damaged header?); the members after it are not read")
            return (f"data follows its end-of-archive marker at byte {first} (archives concatenated with "
                    f"cat? tar -x also stops at the marker unless --ignore-zeros); it is not read")
        at += len(chunk)
    return None


def index_tar(fh: BinaryIO, display: str, archive_size: int, suffix: str = ".npz",
              skipped: list[Skipped] | None = None) -> tuple[list[TarMember], list[BadInput]]:
    """The regular members of the uncompressed tar archive open in ``fh`` whose names end in
    ``suffix``, in archive order, and a ``BadInput`` per such member refused (a link, a device, a FIFO,
    a sparse member, data past the end of the archive). Folders are passed over; other files, and the
    older copies of a name stored again later (the last member of a name wins, as with ``tar -x``:
    a refused later member refuses the name), are appended to ``skipped`` when it is given.

    ``display`` names the archive in errors (``<display>!<member>``); ``archive_size`` is its size in
    bytes. Raises ``BadInput`` naming the archive when it is not a readable, uncompressed tar archive;
    an archive corrupt or truncated further on keeps the members before the damage, and the damage is
    one more refusal naming the archive.
    """
    try:
        tf = tarfile.open(fileobj=fh, mode="r:")  # noqa: SIM115 (the caller owns and closes fh)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BadInput(display, None, f"not a readable uncompressed tar archive ({exc})") from None
    latest: dict[str, TarMember | BadInput] = {}  # by member_key, in the order of the winning copies
    damage: list[BadInput] = []
    headers = 0  # every member header read so far: folders, other files and refused members included
    try:
        while True:
            try:
                info = tf.next()
            except (tarfile.TarError, OSError, EOFError) as exc:
                # the members indexed so far are read; what follows is refused as one entry
                kept = sum(isinstance(m, TarMember) for m in latest.values())
                damage.append(BadInput(display, None, f"the tar archive is corrupt or truncated after "
                                       f"{headers} members ({kept} {suffix} members are read) ({exc})"))
                break
            if info is None:  # tarfile also stops here at an invalid header after the first: look past it
                problem = _past_the_end(fh, tf.offset, archive_size)
                if problem is not None:
                    kept = sum(isinstance(m, TarMember) for m in latest.values())
                    damage.append(BadInput(display, None, f"the tar archive is corrupt after {headers} members "
                                           f"({kept} {suffix} members are read): {problem}"))
                break
            headers += 1
            tf.members.clear()  # headers only: keep no TarInfo per member (7,868 in npz_all.tar)
            where = f"{display}!{info.name}"
            if info.isdir():
                continue
            if not info.name.endswith(suffix):
                if skipped is not None:
                    skipped.append(Skipped(where, _other_member(info.name, suffix)))
                continue
            problem = _refusal(info)
            if problem is None and info.offset_data + info.size > archive_size:
                problem = "its data extends past the end of the archive (truncated?)"
            key = member_key(info.name)
            older = latest.pop(key, None)
            if older is not None and skipped is not None:
                name = older.name if isinstance(older, TarMember) else older.path[len(display) + 1 :]
                skipped.append(Skipped(f"{display}!{name}", f"an older copy: a later member of the archive "
                                       f"({info.name}) replaces it, as with tar -x"))
            latest[key] = BadInput(where, None, problem) if problem else \
                TarMember(info.name, info.offset_data, info.size)
    finally:
        tf.close()  # closes nothing of fh (tarfile does not own a file object it was given)
    members = [m for m in latest.values() if isinstance(m, TarMember)]
    members.sort(key=lambda m: m.offset)
    return members, [m for m in latest.values() if isinstance(m, BadInput)] + damage


class MemberView(ByteWindow):
    """A read-only, seekable file object over bytes ``[offset, offset + size)`` of an open local
    archive file ``fh`` (read with ``os.pread``: no shared file position, no copy of the member).

    ``close()`` closes ``fh``. ``archive`` is the open archive file (for ``fstat``).
    """

    def __init__(self, fh: BinaryIO, offset: int, size: int):
        super().__init__(size)
        self.archive = fh
        self._fd = fh.fileno()
        self._offset = offset

    def fill(self, view: memoryview, pos: int) -> int:
        return os.preadv(self._fd, [view], self._offset + pos)

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes (all that is left when negative) by one ``os.pread``, no buffer copy."""
        left = max(0, self.size - self.pos)
        n = left if size is None or size < 0 else min(size, left)
        if n == 0:
            return b""
        data = os.pread(self._fd, n, self._offset + self.pos)
        self.pos += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def close(self) -> None:
        if not self.closed:
            self.archive.close()
        super().close()
