"""``LocalStore``: a folder (or one file) on this machine, through plain ``os`` calls — no fsspec layer,
no slowdown.

What a local folder guarantees, behind the ``Store`` interface: a file is written under a temporary
name (``.<name>.tmp-<pid>``) and renamed over its name when complete; no link is followed at the last
component of a path that is read or written (``O_NOFOLLOW``), nor a FIFO waited on (``O_NONBLOCK``);
copies are hard links placed atomically (``io.files.place``); the build lock is an ``flock``
(``io.locks.FileLock``).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import FatalError, one_line
from .archive import MemberView
from .files import atomic_path, place, temporary_path
from .locks import FileLock
from .store import (
    Entry,
    FileReplaced,
    FileTooLarge,
    NotARegularFile,
    NotConfined,
    Opened,
    ShardFile,
    Store,
)

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True)
class LocalStore(Store):
    """A local folder (or file): ``root`` its absolute path, ``display`` the path as it was given."""

    root: str
    display: str

    # ----------------------------------------------------------------------------------------- naming

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *(p for p in parts if p))

    def url(self, *parts: str) -> str:
        return self.path(*parts)

    @property
    def location(self) -> Path:
        return Path(self.display)

    def resolved(self) -> LocalStore:
        real = str(Path(self.root).resolve())
        return LocalStore(root=real, display=real)

    # ------------------------------------------------------------------------ what truly differs

    @property
    def writes_temporaries(self) -> bool:
        return True

    @property
    def root_not_a_folder(self) -> bool:
        return os.path.lexists(self.root) and not os.path.isdir(self.root)

    def worker_paths(self, rel: str = "") -> tuple[str, ...]:
        return (self.path(rel),)

    def contains(self, other: Store) -> bool:
        """Compared by resolved path, then by device and inode (the same folder under another name)."""
        if not isinstance(other, LocalStore):
            return False
        top, inner = Path(self.root).resolve(), Path(other.root).resolve()
        if top == inner or top in inner.parents:
            return True
        mine = _identity(top)
        return mine is not None and mine in {i for p in (inner, *inner.parents) if (i := _identity(p))}

    # ------------------------------------------------------------------------------------ failures

    def failure(self, exc: BaseException, what: str, action: str = "read") -> FatalError:
        """A local file's own problem, with its errno's words (a file's mode or owner, never credentials)."""
        if isinstance(exc, FileNotFoundError):
            return FatalError(f"{what}: does not exist")
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else one_line(exc)
        return FatalError(f"{what}: cannot be {action}: {why}")

    # ------------------------------------------------------------------------------- whole files

    def walk(self, enter: Callable[[str], bool] = lambda _rel: True) -> list[Entry]:
        if not os.path.isdir(self.root):
            return []
        return _walk(self.root, "", enter)

    def root_entry(self) -> Entry:
        st = os.lstat(self.root)
        return _entry(self.root, "", st)

    def peek(self) -> str:
        if not os.path.exists(self.root):
            return "missing"
        return "folder" if os.path.isdir(self.root) else "file" if os.path.isfile(self.root) else "other"

    def open_input(self, rel: str, *, size: int, version: int | str = "", offset: int | None = None) -> Opened:
        """The file opened once (no link followed, no FIFO waited on), its stamp from that open file
        (``fstat``): size, hash and conversion all see this one inode; a member read in place
        (``MemberView``: ``pread`` of the open archive)."""
        fd, st = self._open_regular(rel)
        if offset is None:
            return _Input(io.FileIO(fd, "rb"))
        if offset + size > st.st_size:
            os.close(fd)
            raise FileReplaced("the archive is shorter than when it was listed (changed?)")
        return _Member(open(fd, "rb"), offset, size)

    def open_scan(self, rel: str, size: int) -> BinaryIO:
        fd, _ = self._open_regular(rel)
        return open(fd, "rb")

    def stamp(self, rel: str, *, size: int, version: int | str = "", offset: int | None = None) -> list | None:
        """From ``lstat`` of the file (of the archive for a member, whose bytes must still be there)."""
        try:
            st = os.lstat(self.path(rel))
        except OSError:
            return None
        if offset is None:
            return [st.st_size, st.st_mtime_ns]
        return [size, st.st_mtime_ns] if offset + size <= st.st_size else None

    def _open_regular(self, rel: str) -> tuple[int, os.stat_result]:
        """A descriptor of the regular file ``rel`` (blocking once opened) and its ``fstat``: opened
        without following a link or blocking on a FIFO or device, checked on the open file."""
        path = self.path(rel)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _O_CLOEXEC)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise NotARegularFile(path, "a symbolic link") from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise NotARegularFile(path, kind_of(st.st_mode))
            os.set_blocking(fd, True)
            return fd, st
        except BaseException:
            os.close(fd)
            raise

    def exists(self, rel: str) -> bool:
        return os.path.lexists(self.path(rel))

    def read_bytes(self, rel: str, *, limit: int | None = None, follow_links: bool = False) -> bytes:
        """Opened once with ``O_NONBLOCK`` (a FIFO never blocks) and, unless ``follow_links`` (a manifest
        a user linked), ``O_NOFOLLOW``; the checks are made on the open file."""
        path = self.path(rel)
        flags = os.O_RDONLY | os.O_NONBLOCK | _O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
        try:
            fd = os.open(path, flags)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise NotARegularFile(path, "a symbolic link") from None
            if exc.errno == errno.EISDIR:
                raise NotARegularFile(path, "a folder") from None
            raise
        st = os.fstat(fd)  # before open(): Python refuses a folder's fd with its own error
        if not stat.S_ISREG(st.st_mode) or (limit is not None and st.st_size > limit):
            os.close(fd)
            if not stat.S_ISREG(st.st_mode):
                raise NotARegularFile(path, kind_of(st.st_mode))
            raise FileTooLarge(st.st_size)
        with open(fd, "rb") as fh:
            return fh.read() if limit is None else fh.read(limit + 1)

    def write_bytes(self, rel: str, data: bytes, *, exclusive: bool = False, durable: bool = False,
                    before_commit: Callable[[], None] | None = None) -> None:
        """A temporary renamed over the file (``exclusive``: hard-linked to the name, which never
        replaces: ``EEXIST``); ``durable``: fsync'ed before the rename or link."""
        path = Path(self.path(rel))
        path.parent.mkdir(parents=True, exist_ok=True)
        if not exclusive:
            with atomic_path(path, durable=durable, before_rename=before_commit) as tmp, \
                    _create_temporary(tmp) as fh:
                fh.write(data)
            return
        tmp = temporary_path(path)
        try:
            with _create_temporary(tmp) as fh:
                fh.write(data)
                if durable:
                    fh.flush()
                    os.fsync(fh.fileno())
            if before_commit is not None:
                before_commit()
            os.link(tmp, path)  # EEXIST when the file is there: never replaced
        finally:
            tmp.unlink(missing_ok=True)

    def put_file(self, local: str | os.PathLike, rel: str) -> None:
        """A hard link (a copy across filesystems) placed atomically."""
        Path(self.path(rel)).parent.mkdir(parents=True, exist_ok=True)
        place(local, self.path(rel))

    def get_file(self, rel: str, local: str | os.PathLike) -> None:
        shutil.copyfile(self.path(rel), local)

    def copy(self, rel: str, to: str) -> None:
        """A hard link placed atomically."""
        Path(self.path(to)).parent.mkdir(parents=True, exist_ok=True)
        place(self.path(rel), self.path(to))

    def remove(self, rels: list[str], folders: Iterable[str] = ()) -> None:
        """Another failure of a folder's removal than "not empty" or "gone" (``EACCES``) is raised."""
        parents = set()
        for rel in rels:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path(rel))
            parents.update(_parents(rel))
        for parent in sorted(parents, key=lambda p: -p.count("/")):  # deepest first
            with contextlib.suppress(OSError):  # not empty, or gone
                os.rmdir(self.path(parent))
        for rel in sorted(folders, key=lambda r: -r.count("/")):
            try:
                os.rmdir(self.path(rel))
            except OSError as exc:
                if exc.errno not in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST):
                    raise

    def makedirs(self) -> None:
        os.makedirs(self.root, exist_ok=True)

    def check_reachable(self) -> None:
        """Nothing to check: the build creates the folder (and says so if it cannot)."""

    @contextlib.contextmanager
    def writing(self, rel: str) -> Iterator[Path]:
        """A temporary beside the file, renamed over it."""
        path = Path(self.path(rel))
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            yield tmp

    @contextlib.contextmanager
    def reading(self, rel: str) -> Iterator[Path]:
        """The file itself."""
        yield Path(self.path(rel))

    def open(self, rel: str, mode: str = "rb", **kwargs: Any):
        return open(self.path(rel), mode, **kwargs)

    def open_url(self, url: str, mode: str = "rb", **kwargs: Any):
        return open(url, mode, **kwargs)

    def lock_at(self, rel: str) -> FileLock:
        """An ``flock`` on that file, which the kernel releases when its holder dies."""
        return FileLock(self.path(rel))

    def arrow_filesystem(self):
        import pyarrow.fs as pafs

        return pafs.LocalFileSystem()

    # ------------------------------------------------------------------------------------- shards

    def open_shard_file(self, rel: str) -> LocalShardFile:
        """Its real path (symbolic links resolved), which must stay below the root's real path and be
        a regular file, opened once and pinned by device, inode, size, mtime and ctime."""
        top = Path(self.root).resolve()
        try:
            real = (top / rel).resolve(strict=True)
        except FileNotFoundError:
            raise NotConfined("the file does not exist") from None
        except (OSError, RuntimeError) as exc:
            raise NotConfined(f"cannot be resolved: {' '.join(str(exc).split())}") from None
        if not real.is_relative_to(top):
            raise NotConfined(f"leads outside the shard folder (to {real}) through a symbolic link")
        if not stat.S_ISREG(os.lstat(real).st_mode):
            raise NotConfined("is not a regular file")
        try:
            return LocalShardFile(real)
        except FileNotFoundError:
            raise NotConfined("the file does not exist") from None
        except OSError as exc:
            raise self.failure(exc, str(real)) from None


class LocalShardFile(ShardFile):
    """A local file opened once (``pyarrow.OSFile``: pyarrow reads this descriptor natively, ``pread``
    reads it too), pinned by (device, inode, size, mtime ns, ctime ns) of the open file: a file
    rewritten in place (``cp`` over it, ``rsync --inplace``, even with its mtime put back: the ctime
    moves, and nobody can set it back) or replaced under its name (a rename, a new build) is refused
    by ``verify``."""

    def __init__(self, real: Path):
        import pyarrow as pa

        self.name = real
        self._file = pa.OSFile(os.fspath(real), "r")
        st = os.fstat(self._file.fileno())
        self.size, self._pin = st.st_size, _pin(st)
        self._check_name()  # the name still leads to the file opened (not swapped while it was opened)

    def source(self):
        return self._file

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        fd = self._file.fileno()
        blocks = [os.pread(fd, end - start, start) for start, end in ranges]
        self.verify()  # after the reads: a write that began before this check changed the ctime already
        return blocks

    def verify(self) -> None:
        self._check_name()  # first: a file replaced under its name changes the old one's ctime too (unlink)
        if _pin(os.fstat(self._file.fileno())) != self._pin:
            raise FileReplaced(f"{self.name} was rewritten after it was opened")

    def _check_name(self) -> None:
        try:
            st = os.stat(self.name)
        except OSError:
            raise FileReplaced(f"{self.name} no longer exists") from None
        if (st.st_dev, st.st_ino) != self._pin[:2]:
            raise FileReplaced(f"{self.name} was replaced after it was opened")

    def close(self) -> None:
        self._file.close()


def _pin(st: os.stat_result) -> tuple[int, int, int, int, int]:
    """What identifies one version of a local file: device, inode, size, mtime and ctime (ns)."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


class _Input(io.BufferedReader):
    """A local input file opened once (``LocalStore.open_input``)."""

    def stamp(self) -> list:
        st = os.fstat(self.fileno())
        return [st.st_size, st.st_mtime_ns]


class _Member(MemberView):
    """A member of a local tar archive, read in place (``LocalStore.open_input``)."""

    def stamp(self) -> list:
        return [self.size, os.fstat(self.archive.fileno()).st_mtime_ns]


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def kind_of(mode: int) -> str:
    """What a non-regular entry is, in words (``"a FIFO"`` …)."""
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a folder" if stat.S_ISDIR(mode) else "a symbolic link" if stat.S_ISLNK(mode)
            else "not a regular file")


def _entry(path: str, rel: str, st: os.stat_result) -> Entry:
    """The ``Entry`` of ``path`` (``rel`` below the root) from its ``lstat``."""
    if stat.S_ISREG(st.st_mode):
        return Entry(rel, "file", st.st_size, st.st_mtime_ns)
    if stat.S_ISDIR(st.st_mode):
        return Entry(rel, "folder")
    if stat.S_ISLNK(st.st_mode):
        try:
            target_mode = os.stat(path).st_mode
        except FileNotFoundError:
            try:
                target = os.readlink(path)
            except OSError:  # removed since it was listed
                target = "?"
            return Entry(rel, "link", st.st_size, detail="dangling", target=target)
        except OSError:  # EACCES, ELOOP ...: the target exists but cannot be reached; not dangling
            return Entry(rel, "link", st.st_size)
        return Entry(rel, "link", st.st_size, detail="folder" if stat.S_ISDIR(target_mode) else "")
    return Entry(rel, "other", st.st_size, detail=kind_of(st.st_mode))


def _walk(root: str, rel: str, enter: Callable[[str], bool]) -> list[Entry]:
    """``LocalStore.walk`` from the subfolder ``rel`` of ``root`` (sorted by name, a folder before
    its entries; no link followed). ``root`` itself unlistable raises; a subfolder is ``unlisted``."""
    here = os.path.join(root, rel) if rel else root
    with os.scandir(here) as it:
        names = sorted(e.name for e in it)
    out: list[Entry] = []
    for name in names:
        child = f"{rel}/{name}" if rel else name
        path = os.path.join(here, name)
        try:
            entry = _entry(path, child, os.lstat(path))
        except FileNotFoundError:
            out.append(Entry(child, "gone"))
            continue
        except OSError as exc:
            out.append(Entry(child, "unexamined", detail=exc.strerror or one_line(exc)))
            continue
        out.append(entry)
        if entry.kind == "folder" and enter(child):
            try:
                out.extend(_walk(root, child, enter))
            except OSError as exc:
                out[-1] = Entry(child, "unlisted", detail=exc.strerror or type(exc).__name__)
    return out


def _create(path: Path):
    """A new file at ``path`` opened for writing; ``FileExistsError`` if anything (also a link) is there."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _O_CLOEXEC
    return open(os.open(path, flags, 0o666), "wb")


def _create_temporary(tmp: Path):
    """``_create`` for this process's temporary ``tmp`` (``.<name>.tmp-<pid>``). One already there
    was left by an earlier process with the same pid that died while writing (this process, the
    only live one with that pid, is not writing it): removed (a link only unlinked), then created."""
    try:
        return _create(tmp)
    except FileExistsError:
        tmp.unlink(missing_ok=True)
        return _create(tmp)


def _parents(rel: str) -> list[str]:
    """The folders above ``rel`` (POSIX, relative to the root), deepest first: ``a/b/c`` → ``a/b``, ``a``."""
    parts = rel.split("/")[:-1]
    return ["/".join(parts[:i]) for i in range(len(parts), 0, -1)]
