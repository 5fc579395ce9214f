"""Writing files so that a reader never sees half of one, placing finished files, hashing them.

Every file tpuprep writes goes to a temporary dot-name in its destination folder and is renamed over
the final name when complete (``os.replace`` is atomic on POSIX filesystems), so a crash leaves either
the old file, the new one, or a temporary that ``TEMPORARY`` recognises and a later run removes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

TEMPORARY = re.compile(r"\.(.+)\.tmp(?:-\d+)?")
"""Names of the temporaries that ``atomic_path`` uses (what a killed writer may leave behind);
group 1 is the name of the file being written."""


NAME_MAX = 255
"""Bytes a file name may have on the file systems tpuprep writes to (ext4, xfs, btrfs, tmpfs)."""


def temporary_path(path: Path, tag: str = "tmp") -> Path:
    """The temporary name beside ``path`` for this process: ``.<name>.<tag>-<pid>``; for a name too
    long to take the prefix and suffix (an input stem may have 251 characters), ``.<digest>.<tag>-<pid>``
    with the first 32 hex digits of the name's SHA-256, so a temporary never exceeds ``NAME_MAX``."""
    name = f".{path.name}.{tag}-{os.getpid()}"
    if len(os.fsencode(name)) > NAME_MAX:
        name = f".{hashlib.sha256(os.fsencode(path.name)).hexdigest()[:32]}.{tag}-{os.getpid()}"
    return path.with_name(name)


@contextmanager
def atomic_path(path: str | Path, *, durable: bool = False,
                before_rename: Callable[[], None] | None = None) -> Iterator[Path]:
    """Yield a temporary path to write; on success rename it over ``path`` (after an fsync when
    ``durable``, after ``before_rename()`` when given); on failure remove it and re-raise."""
    path = Path(path)
    tmp = temporary_path(path)
    try:
        yield tmp
        if durable:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        if before_rename is not None:
            before_rename()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_open(path: str | Path, mode: str = "w", *, durable: bool = False, **kwargs: Any) -> Iterator[IO]:
    """``open()`` a temporary beside ``path``; renamed over ``path`` when the block ends without error."""
    with atomic_path(path, durable=durable) as tmp, open(tmp, mode, **kwargs) as fh:
        yield fh


def write_bytes_atomic(path: str | Path, data: bytes, *, durable: bool = False) -> None:
    """Write ``data`` to ``path`` atomically (mode from the umask, like ``open()``)."""
    with atomic_open(path, "wb", durable=durable) as fh:
        fh.write(data)


def write_text_atomic(path: str | Path, text: str, *, durable: bool = False) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_open(path, "w", durable=durable, encoding="utf-8") as fh:
        fh.write(text)


def write_json_atomic(path: str | Path, obj: Any, *, durable: bool = True, indent: int | None = 1,
                      before_rename: Callable[[], None] | None = None) -> None:
    """Write ``obj`` as JSON (keys in insertion order, no NaN, trailing newline) to ``path`` atomically.

    ``durable`` fsyncs before the rename (the manifest); staging sidecars skip it: after a power loss an
    unreadable sidecar only means that batch is converted again.
    """
    # one dumps() call, not dump(): with indent=None that is the C encoder (json.dump always runs the
    # pure-Python one, 1.6 ms per tile file's sidecar entries); the text is the same
    text = json.dumps(obj, indent=indent, sort_keys=False, allow_nan=False)
    with atomic_path(path, durable=durable, before_rename=before_rename) as tmp, open(tmp, "w") as fh:
        fh.write(text)
        fh.write("\n")


def place(src: str | Path, path: str | Path) -> None:
    """Put a copy of the finished file ``src`` at ``path`` atomically, keeping ``src`` (a hard link; a
    copy across filesystems), so that a crash while placing never loses ``src``."""
    with atomic_path(path) as tmp:
        tmp.unlink(missing_ok=True)
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)


def sha256_stream(fh: IO[bytes], block: int = 1 << 22) -> tuple[str, int]:
    """(hex sha256, byte count) of an open binary file from its start, read in ``block``-byte steps."""
    h = hashlib.sha256()
    fh.seek(0)
    size = 0
    while chunk := fh.read(block):
        h.update(chunk)
        size += len(chunk)
    return h.hexdigest(), size


def sha256_file(path: str | Path, block: int = 1 << 22) -> str:
    """Hex sha256 of a file's bytes."""
    with open(path, "rb") as fh:
        return sha256_stream(fh, block)[0]


URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]+:/")


def looks_like_url(text: str | os.PathLike) -> bool:
    """True when ``text`` starts like a URL (``scheme://...``; also ``scheme:/...``, the form
    ``pathlib.Path`` makes of it). One-letter schemes are not URLs (``C:/`` is a drive)."""
    return bool(URL.match(os.fspath(text)))
