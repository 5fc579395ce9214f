"""What a build may touch in ``--dst``: the entries tpuprep writes, and the lock held while it writes.

``scan`` sorts every entry under ``--dst`` into what tpuprep wrote (recognised by tpuprep's own layout
and names: ``manifest.json``, ``quarantine.jsonl``, ``README.md``, ``layout/<xla|nlp>/<default|random>/``
and ``tile/xla/`` with ``{graphs,configs}/<split>-NNNNN-of-NNNNN.parquet``, the staging folder
``.tpuprep/parts/...``, their ``.<name>.tmp-<pid>`` temporaries and the lock file) and everything else
("foreign"). ``--overwrite`` and ``--resume`` delete only the former and refuse a folder holding any of
the latter; symbolic links are always foreign and never followed.

``DestinationLock`` is an exclusive ``flock`` on ``<dst>/.tpuprep.lock`` (which records pid, host and
start time) held for a whole build, so two builds never write one folder. The kernel releases it when
its holder dies, so the lock of a killed build is taken over by the next one without any clean-up.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import socket
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import FatalError, UsageError
from ..io.files import TEMPORARY
from ..tpugraphs import COLLECTIONS, SPLITS, collection_path
from .layout import CARD, LOCK, MANIFEST, PART_NAME, QUARANTINE, SHARD_NAME, STAGING, TABLES

_TOP = re.compile("|".join(re.escape(n) for n in (MANIFEST, QUARANTINE, CARD)))


@dataclass(frozen=True)
class _Folder:
    """A folder tpuprep creates: which file names it writes there (None: only folders), and for
    shard and part folders the collection (and split) those files belong to."""

    names: re.Pattern | None = None
    collection: str | None = None
    split: str | None = None


def _prefixes(rel: str) -> list[str]:
    parts = rel.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _own_folders() -> dict[str, _Folder]:
    folders: dict[str, _Folder] = {"": _Folder(_TOP)}
    for collection in COLLECTIONS:
        path = collection_path(collection)
        for table in TABLES:
            for rel in _prefixes(f"{path}/{table}"):
                folders.setdefault(rel, _Folder())
            folders[f"{path}/{table}"] = _Folder(SHARD_NAME, collection)
        for split in SPLITS:
            for rel in _prefixes(f"{STAGING}/parts/{path}/{split}"):
                folders.setdefault(rel, _Folder())
            folders[f"{STAGING}/parts/{path}/{split}"] = _Folder(PART_NAME, collection, split)
    return folders


OWN_FOLDERS = _own_folders()


@dataclass
class Contents:
    """The entries under ``--dst``, as paths relative to it.

    files / dirs: what tpuprep wrote (dirs deepest first; the lock file is not among them);
    foreign: what it did not (never deleted); held: the (collection, split) pairs that have shards or
    staged parts; lock: whether a lock file is present.
    """

    files: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    held: set[tuple[str, str]] = field(default_factory=set)
    lock: bool = False

    @property
    def empty(self) -> bool:
        """Nothing but (perhaps) a lock file."""
        return not (self.files or self.dirs or self.foreign)


def _own_file(folder: _Folder, name: str) -> re.Match | None:
    if folder.names is None:
        return None
    temporary = TEMPORARY.fullmatch(name)
    return folder.names.fullmatch(temporary.group(1) if temporary else name)


def scan(dst: Path) -> Contents:
    """Sort every entry under ``dst`` (an existing folder) into tpuprep's own and foreign ones,
    without following symbolic links."""
    out = Contents()

    def walk(rel: str) -> None:
        folder = OWN_FOLDERS[rel]
        with os.scandir(dst / rel if rel else dst) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            child = f"{rel}/{entry.name}" if rel else entry.name
            if entry.is_symlink():
                out.foreign.append(child)
            elif entry.is_dir(follow_symlinks=False):
                if child in OWN_FOLDERS:
                    walk(child)
                    out.dirs.append(child)
                else:
                    out.foreign.append(child + "/")
            elif not entry.is_file(follow_symlinks=False):
                out.foreign.append(child)
            elif not rel and entry.name == LOCK:
                out.lock = True
            elif m := _own_file(folder, entry.name):
                out.files.append(child)
                if folder.collection:
                    out.held.add((folder.collection, folder.split or m.group(1)))
            else:
                out.foreign.append(child)

    walk("")
    return out


def manifest_selection(dst: Path) -> set[tuple[str, str]]:
    """The (collection, split) pairs a finished build's ``manifest.json`` lists (empty if unreadable)."""
    try:
        manifest = json.loads((dst / MANIFEST).read_text())
        return {(cid, split) for cid, coll in manifest["collections"].items() for split in coll["splits"]}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return set()


def remove(dst: Path, files: list[str], dirs: list[str]) -> None:
    """Delete these files, then these folders if they are empty (a folder something else was put into
    meanwhile is kept, with its contents). Paths are relative to ``dst``."""
    for rel in files:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(dst / rel)
    for rel in sorted(dirs, key=lambda r: -r.count("/")):
        try:
            os.rmdir(dst / rel)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST):
                raise


# ----------------------------------------------------------------------------------------- the lock


def _holder(fd: int) -> str:
    """What the lock file says about its holder: ``pid 123 on host, started 2024-01-01T00:00:00Z``."""
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode())
        return f"pid {info['pid']} on {info['host']}, started {info['started']}"
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
        return "holder not recorded yet"


def _busy(dst: Path, fd: int) -> UsageError:
    return UsageError(f"--dst {dst} is being written by another tpuprep build ({_holder(fd)}); wait for "
                      "it to end (the lock of a build that died is released by the system and taken over)")


def probe(dst: Path) -> None:
    """Raise UsageError if a build holds ``dst``'s lock. Writes nothing (for checks and --dry-run)."""
    try:
        fd = os.open(dst / LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return  # no lock file (or not one tpuprep wrote: scan reports it)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _busy(dst, fd) from None
        except OSError:
            return  # no file locks here: acquire() will say so
    finally:
        os.close(fd)  # also releases the shared lock


class DestinationLock:
    """An exclusive lock on ``dst`` for one build; ``release()`` removes the lock file and unlocks.

    ``acquire`` retries for ``wait`` seconds (a ``probe`` from a dry run holds the lock for an instant),
    then raises UsageError naming the holder.
    """

    def __init__(self, path: Path, fd: int):
        self.path, self.fd = path, fd

    @classmethod
    def acquire(cls, dst: Path, wait: float = 0.5) -> DestinationLock:
        path = dst / LOCK
        deadline = time.monotonic() + wait
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise FatalError(f"--dst {dst}: cannot create its lock file {LOCK} ({exc.strerror or exc})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if not isinstance(exc, BlockingIOError):
                    os.close(fd)
                    raise FatalError(f"--dst {dst}: cannot lock {LOCK} ({exc.strerror or exc}); a build needs "
                                     "a filesystem with file locks") from None
                if time.monotonic() < deadline:
                    os.close(fd)
                    time.sleep(0.05)
                    continue
                try:
                    raise _busy(dst, fd) from None
                finally:
                    os.close(fd)
            if cls._still_there(path, fd):
                break
            os.close(fd)  # the previous holder removed the file as we opened it: lock the new one
        info = {"pid": os.getpid(), "host": socket.gethostname(),
                "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        return cls(path, fd)

    @staticmethod
    def _still_there(path: Path, fd: int) -> bool:
        try:
            st = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)

    def release(self) -> None:
        """Remove the lock file (while still holding it), then unlock. Safe to call twice."""
        if self.fd < 0:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        os.close(self.fd)
        self.fd = -1

    def __enter__(self) -> DestinationLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()
