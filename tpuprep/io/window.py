"""``ByteWindow``: a read-only, seekable binary file of a known size whose bytes come from somewhere
other than one open file's position: a slice of a local archive (``archive.MemberView``, by
``os.preadv``) or a remote object partly fetched in advance (``remote_store``).
Subclasses say only how to fill a buffer from a position (``fill``).
"""

from __future__ import annotations

import io
import os


class ByteWindow(io.RawIOBase):
    """A read-only, seekable file object of ``size`` bytes; ``pos`` is the current position."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size
        self.pos = 0

    def fill(self, view: memoryview, pos: int) -> int:
        """Copy bytes ``[pos, pos + len(view))`` (all inside the window) into ``view``; return how
        many were copied."""
        raise NotImplementedError

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, pos: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self.pos, os.SEEK_END: self.size}[whence]
        if base + pos < 0:
            raise ValueError(f"negative seek position {base + pos}")
        self.pos = base + pos
        return self.pos

    def readinto(self, buf) -> int:
        view = memoryview(buf).cast("B")
        n = min(len(view), max(0, self.size - self.pos))
        if n == 0:
            return 0
        got = self.fill(view[:n], self.pos)
        self.pos += got
        return got
