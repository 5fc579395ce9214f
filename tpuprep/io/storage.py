"""The storage seam: one place that turns what the user typed (a folder, a file, a URL) into where
tpuprep reads and writes.

``resolve(target, storage_options)`` is called once per command for ``--src`` and once for ``--dst``
(like pyarrow's ``filesystem=`` argument, resolved once and then passed along). A local path stays a
local path: plain ``open``/``os`` calls, no fsspec layer, no slowdown. A URL (``s3://``, ``gs://``,
``memory://``, …) gets an fsspec filesystem; ``file://`` is a local path.

Endpoints and credentials come from each filesystem's standard sources (for S3 the ``AWS_*``
environment variables, e.g. ``AWS_ENDPOINT_URL`` for MinIO, Ceph or moto) and from
``storage_options`` (run files); they are never part of ``Store.display`` and so never logged or
written to a manifest.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import errno
import io
import os
import posixpath
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from ..errors import FatalError, UsageError
from .files import atomic_path, looks_like_url, place, temporary_path
from .locks import FileLock, LeaseLock
from .window import ByteWindow

if TYPE_CHECKING:  # fsspec and pyarrow are imported only when a URL is used
    import fsspec
    import pyarrow.fs

EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs"}
"""URL scheme → the ``tpuprep[...]`` extra that installs its filesystem package."""

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]+)://")


@dataclass(frozen=True)
class Store:
    """Where a tree of files lives.

    ``fs`` is None for local storage (``root`` is then an absolute local path) and an fsspec filesystem
    otherwise (``root`` is the path without the scheme, e.g. ``bucket/prefix``). ``display`` is the
    location as shown to people: the URL without credentials.
    """

    root: str
    display: str
    fs: fsspec.AbstractFileSystem | None = field(default=None, compare=False)
    protocol: str = "file"

    @property
    def is_local(self) -> bool:
        return self.fs is None

    @property
    def writes_temporaries(self) -> bool:
        """Whether files are written under a temporary name and renamed (locally: a killed writer may
        leave ``.<name>.tmp-<pid>`` behind); an object appears only when complete, so an object store
        holds no temporaries of tpuprep's."""
        return self.is_local

    @property
    def root_not_a_folder(self) -> bool:
        """Whether something that is not a folder (a file, a link to one) sits where the local root
        folder must be; never in an object store (a prefix is not an object)."""
        return self.is_local and os.path.lexists(self.root) and not os.path.isdir(self.root)

    @property
    def os_errors_name_files(self) -> bool:
        """Whether an ``OSError`` from this store names a file on this machine with its errno (the
        CLI's guard prints it as it is); an object store's failures are refused requests, which a
        caller names by the URL instead."""
        return self.is_local

    def path(self, *parts: str) -> str:
        """The store path of ``parts`` below the root (POSIX separators remotely)."""
        if self.is_local:
            return os.path.join(self.root, *parts)
        return posixpath.join(self.root, *parts) if parts else self.root

    def url(self, *parts: str) -> str:
        """``path(*parts)`` as a URL a person or another process can resolve again (no credentials)."""
        if self.is_local:
            return self.path(*parts)
        return f"{self.protocol}://{self.path(*parts)}"

    def open(self, rel: str, mode: str = "rb", **kwargs: Any):
        """Open the file ``rel`` below the root (``fs.open`` remotely, ``open`` locally)."""
        if self.is_local:
            return open(self.path(rel), mode, **kwargs)
        return self.fs.open(self.path(rel), mode, **kwargs)

    def open_url(self, url: str, mode: str = "rb", **kwargs: Any):
        """Open ``url``, a location under this store as ``url()`` gives it (a local path locally)."""
        if self.is_local:
            return open(url, mode, **kwargs)
        return self.fs.open(self.fs._strip_protocol(url), mode, **kwargs)

    def open_ranged(self, url: str, size: int | None = None):
        """``url`` opened for random-access reads of Parquet footers and row groups: locally the path
        itself (pyarrow opens it); remotely an fsspec file without read-ahead, so that every read is
        one ranged GET of exactly the bytes asked for (pyarrow's ``pre_buffer`` merges a row group's
        pages into few such reads). ``size`` in bytes, when known, saves a metadata request.
        Measured against ``arrow_filesystem()`` (whose files read ahead up to the filesystem's block
        size, 50 MiB for s3fs): benchmarks/RESULTS.md §10. The row groups of a sample are fetched
        through ``open_prefetched`` instead (the same ranges, concurrently)."""
        if self.is_local:
            return url
        kwargs = {"size": size} if size is not None else {}
        return self.open_url(url, "rb", cache_type="none", **kwargs)

    def open_prefetched(self, url: str, ranges: list[tuple[int, int]], size: int) -> io.RawIOBase:
        """``url`` (remote, ``size`` bytes) as a read-only file whose byte ``ranges`` [start, end) were
        fetched at once, concurrently (``fs.cat_ranges``: one ranged GET each, in parallel on async
        filesystems such as s3fs); a read outside them is one more ranged GET of just that read."""
        path = self.fs._strip_protocol(url)
        blocks = self.cat_ranges(url, ranges)
        return _Prefetched(self.fs, path, size, [(a, b) for (a, _), b in zip(ranges, blocks, strict=True)])

    def cat_ranges(self, url: str, ranges: list[tuple[int, int]]) -> list[bytes]:
        """The bytes of each range [start, end) of the remote ``url``, fetched at once (``fs.cat_ranges``:
        one ranged GET each, concurrent on async filesystems); the first failure is raised."""
        path = self.fs._strip_protocol(url)
        blocks = self.fs.cat_ranges([path] * len(ranges), [a for a, _ in ranges], [b for _, b in ranges])
        for block in blocks:
            if isinstance(block, BaseException):
                raise block
        return blocks
    # Whole-object operations, the same on every backend. Locally: temporary name + rename (readers
    # never see half a file), no link followed at the last component (``O_NOFOLLOW``), hard links for
    # copies (``io.files.place``); remotely: whole objects, server-side copies.

    def child(self, rel: str) -> Store:
        """The store rooted at ``rel`` below this one (same filesystem)."""
        return dataclasses.replace(self, root=self.path(rel), display=f"{self.display.rstrip('/')}/{rel}")

    def walk(self, enter: Callable[[str], bool]) -> list[tuple[str, str]]:
        """Every entry below the root as (POSIX path relative to it, kind), sorted: kind ``"file"``
        (a regular file; every object of an object store), ``"folder"`` (locally; the folder's own
        entries follow it only when ``enter(rel)``), ``"link"`` (a symbolic link, never followed) or
        ``"other"`` (a FIFO, socket or device). [] when the local root is missing. An object store has
        no folders: its objects are listed whatever their prefix (``enter`` is not asked)."""
        if not self.is_local:
            return [(rel, "file") for rel in self.listing()]
        if not os.path.isdir(self.root):
            return []
        return _local_walk(self.root, "", enter)

    def listing(self) -> list[str]:
        """Every file (object) below the root as sorted POSIX paths relative to it (fresh: no cached
        listing; locally every entry that is not a folder: regular files, links (none followed), FIFOs,
        sockets and devices)."""
        if self.is_local:
            return sorted(rel for rel, kind in self.walk(lambda _: True) if kind != "folder")
        self.fs.invalidate_cache()
        prefix = self.root.rstrip("/") + "/"
        try:
            found = self.fs.find(self.root, withdirs=False)
        except FileNotFoundError:
            return []
        return sorted(p[len(prefix):] for p in found if p.startswith(prefix))

    def exists(self, rel: str) -> bool:
        if self.is_local:
            return os.path.lexists(self.path(rel))
        return bool(self.fs.exists(self.path(rel)))

    def read_bytes(self, rel: str, *, limit: int | None = None, follow_links: bool = False) -> bytes:
        """The whole file ``rel``. Locally opened once with ``O_NONBLOCK`` (a FIFO there never blocks) and,
        unless ``follow_links`` (a manifest a user linked), ``O_NOFOLLOW``: a link, FIFO, device or folder
        there is ``NotARegularFile`` (an ``OSError``), never followed or waited on; the checks are made on
        the open file. ``limit``: ``FileTooLarge`` over ``limit`` bytes (remotely from the object's info,
        before it is read). ``FileNotFoundError`` when missing; any other failure as the backend raises it."""
        if self.is_local:
            path = self.path(rel)
            flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow_links else os.O_NOFOLLOW)
            try:
                fd = os.open(path, flags)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.EISDIR):
                    raise NotARegularFile(exc.errno, "not a regular file", path) from None
                raise
            st = os.fstat(fd)  # before open(): Python refuses a folder's fd with its own error
            if not stat.S_ISREG(st.st_mode) or (limit is not None and st.st_size > limit):
                os.close(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise NotARegularFile(errno.EINVAL, "not a regular file", path)
                raise FileTooLarge(st.st_size)
            with open(fd, "rb") as fh:
                return fh.read() if limit is None else fh.read(limit + 1)
        if limit is None:
            return self.fs.cat_file(self.path(rel))
        info = self.fs.info(self.path(rel))
        if info.get("type") != "file":
            raise NotARegularFile(errno.EINVAL, "not a file", self.url(rel))
        if (info.get("size") or 0) > limit:
            raise FileTooLarge(info["size"])
        with self.open(rel, "rb") as fh:
            return fh.read(limit + 1)

    def write_bytes(self, rel: str, data: bytes, *, exclusive: bool = False, durable: bool = False,
                    before_commit: Callable[[], None] | None = None) -> None:
        """Write one whole file (visible only when complete). ``exclusive``: fail with
        ``FileExistsError`` if it exists (locally a hard link of the finished temporary, which never
        replaces; on S3 a conditional write). ``durable``: locally fsync before the rename (an object
        is durable once written). ``before_commit()`` runs just before the file becomes visible
        (locally between the write and the rename; remotely before the upload)."""
        if not self.is_local:
            if before_commit is not None:
                before_commit()
            with self.fs.open(self.path(rel), "xb" if exclusive else "wb") as fh:
                fh.write(data)
            return
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
        """Put the finished local file ``local`` at ``rel``, keeping ``local``: remotely an upload
        (streamed: multipart in blocks, memory bounded), locally a hard link (a copy across
        filesystems) placed atomically."""
        if self.is_local:
            Path(self.path(rel)).parent.mkdir(parents=True, exist_ok=True)
            place(local, self.path(rel))
            return
        self.fs.put_file(os.fspath(local), self.path(rel))

    def get_file(self, rel: str, local: str | os.PathLike) -> None:
        """Copy ``rel`` to the local file ``local`` (streamed)."""
        if self.is_local:
            shutil.copyfile(self.path(rel), local)
            return
        self.fs.get_file(self.path(rel), os.fspath(local))

    def copy(self, rel: str, to: str) -> None:
        """Copy ``rel`` to ``to`` inside the store without the bytes passing through this process
        where possible: server-side remotely, a hard link placed atomically locally."""
        if self.is_local:
            Path(self.path(to)).parent.mkdir(parents=True, exist_ok=True)
            place(self.path(rel), self.path(to))
            return
        self.fs.copy(self.path(rel), self.path(to))

    def remove(self, rels: list[str], folders: Iterable[str] = ()) -> None:
        """Delete these files (missing ones are ignored; S3 deletes up to 1,000 per request). Locally
        a folder left empty by it is removed too, up to (not including) the root, as a store has no
        empty folders; then ``folders`` (relative paths) if they are empty, deepest first (one
        something else was put into meanwhile is kept; another failure, e.g. ``EACCES``, is raised).
        An object store has no folders."""
        if not self.is_local:
            if rels:
                with contextlib.suppress(FileNotFoundError):
                    self.fs.rm([self.path(r) for r in rels])
            return
        self._remove_local(rels)
        for rel in sorted(folders, key=lambda r: -r.count("/")):
            try:
                os.rmdir(self.path(rel))
            except OSError as exc:
                if exc.errno not in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST):
                    raise

    def _remove_local(self, rels: list[str]) -> None:
        """Unlink these local files, then prune the folders they leave empty (not the root)."""
        parents = set()
        for rel in rels:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path(rel))
            parents.update(_parents(rel))
        for parent in sorted(parents, key=lambda p: -p.count("/")):  # deepest first
            with contextlib.suppress(OSError):  # not empty, or gone
                os.rmdir(self.path(parent))

    def lock_at(self, rel: str) -> FileLock | LeaseLock:
        """The exclusive lock at the file ``rel`` (not yet taken; ``io.locks``): locally an ``flock``
        on that file, in an object store a renewed lock object with a staleness rule. Both answer
        ``holder``, ``take``, ``still_held`` and ``release``."""
        if self.is_local:
            return FileLock(self.path(rel))
        return LeaseLock(self, rel)

    def makedirs(self) -> None:
        """Create the root folder (and its parents) locally; nothing in an object store (no folders)."""
        if self.is_local:
            os.makedirs(self.root, exist_ok=True)

    @contextlib.contextmanager
    def writing(self, rel: str) -> Iterator[Path]:
        """Yield a local path to write the file ``rel`` at; it becomes ``rel`` when the block ends
        without error (locally a temporary beside it, renamed over it; remotely a file in a local
        temporary folder, then uploaded whole), else it is removed. For writers that need a path
        (``pq.ParquetWriter``, Arrow IPC): the bytes are the same on every backend."""
        if self.is_local:
            path = Path(self.path(rel))
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(path) as tmp:
                yield tmp
            return
        with tempfile.TemporaryDirectory(prefix="tpuprep-write-") as tmp:
            local = Path(tmp) / posixpath.basename(rel)
            yield local
            self.put_file(local, rel)

    @contextlib.contextmanager
    def reading(self, rel: str) -> Iterator[Path]:
        """Yield a local path holding the file ``rel`` for the block (locally the file itself;
        remotely a download into a temporary folder, removed afterwards)."""
        if self.is_local:
            yield Path(self.path(rel))
            return
        with tempfile.TemporaryDirectory(prefix="tpuprep-read-") as tmp:
            local = Path(tmp) / posixpath.basename(rel)
            self.get_file(rel, local)
            yield local

    @property
    def local_root(self) -> str | None:
        """The root folder when it is on this machine's filesystem (worker processes must see it too),
        else None."""
        return self.root if self.is_local else None

    def check_reachable(self) -> None:
        """Raise ``FileNotFoundError`` / ``PermissionError`` when the root's bucket (its first path
        component) is missing or may not be read, before anything is written. Locally nothing to
        check: the build creates the folder."""
        if self.is_local:
            return
        self.fs.info(self.root.split("/", 1)[0])

    def arrow_filesystem(self) -> pyarrow.fs.FileSystem:
        """The same storage as a pyarrow filesystem (for ``pq.ParquetFile`` / ``pq.ParquetWriter``)."""
        import pyarrow.fs as pafs

        if self.is_local:
            return pafs.LocalFileSystem()
        return pafs.PyFileSystem(pafs.FSSpecHandler(self.fs))

    # --- reading
    # What the shard reader (shards/shard_files.py) asks of a store: one call for a local folder and an
    # object store alike, so the reader has no local/remote branch of its own. Where a local file is
    # read differently for a reason (links resolved and confined to the root, ``pread`` on the file
    # opened again, its inode as its identity), the method's name and docstring say what it does.

    @property
    def reads_are_requests(self) -> bool:
        """True when every read is a request with its own latency (an object store): a reader then keeps
        footers it has read and fetches the byte ranges a read needs at once; False for local files,
        which are opened again cheaply (a reader sees the file there now)."""
        return not self.is_local

    @property
    def holds_open_files(self) -> bool:
        """True when a file a reader opened stays readable as it was after it is replaced under the same
        name (a local file descriptor); False for an object store, where each read is a new request."""
        return self.is_local

    def reading_root(self, given: str | os.PathLike) -> Path | str:
        """The root as readers name it (in ``Dataset.root`` and in errors): a local folder as the user
        gave it (``file://…`` as its path), a remote one as its URL (``url()``, no credentials)."""
        if self.is_local:
            return Path(given) if scheme_of(given) is None else Path(self.root)
        return self.url()

    def reading_name(self, root_name: Path | str, rel: str) -> Path | str:
        """``rel`` below a ``reading_root`` as readers name it: a ``Path`` locally, a URL remotely."""
        return Path(root_name) / rel if self.is_local else self.url(rel)

    def confined_file(self, rel: str) -> tuple[Path | str, int]:
        """The file ``rel`` (a relative POSIX path without ``..``) as readers open it, and its size in
        bytes. Locally its real path (symbolic links resolved), which must stay below the root's real
        path and be a regular file; remotely the URL of an object (not a prefix). ``NotConfined`` naming
        the problem otherwise; a denied request is the store's one line (``storage_error``)."""
        if self.is_local:
            top = Path(self.root).resolve()
            try:
                real = (top / rel).resolve(strict=True)
            except FileNotFoundError:
                raise NotConfined("the file does not exist") from None
            except (OSError, RuntimeError) as exc:
                raise NotConfined(f"cannot be resolved: {' '.join(str(exc).split())}") from None
            if not real.is_relative_to(top):
                raise NotConfined(f"leads outside the shard folder (to {real}) through a symbolic link")
            st = os.lstat(real)
            if not stat.S_ISREG(st.st_mode):
                raise NotConfined("is not a regular file")
            return real, st.st_size
        url = self.url(rel)
        try:
            info = self.fs.info(self.path(rel))
        except FileNotFoundError:
            raise NotConfined("the file does not exist") from None
        except OSError as exc:
            raise storage_error(exc, url, self) from None
        if info.get("type") != "file":
            raise NotConfined("is not a file")
        return url, int(info["size"])

    def open_random_access(self, name: Path | str, size: int | None = None):
        """A source for ``pyarrow.parquet.ParquetFile`` to read a file's footer and row groups from:
        locally the file opened now (``pyarrow.OSFile``: native reads; ``FileNotFoundError`` when it is
        gone), remotely ``open_ranged`` (one ranged GET per read; ``size`` saves a request)."""
        if self.is_local:
            import pyarrow as pa

            return pa.OSFile(os.fspath(name), "r")
        return self.open_ranged(str(name), size)

    def identity(self, name: Path | str) -> tuple[int, int, int, int] | None:
        """What identifies the very file at ``name`` now: locally (device, inode, size, mtime ns), so a
        file replaced under the same name has another; None when it cannot be stat'ed, and remotely
        (``read_ranges`` checks an object's size and footer instead)."""
        if not self.is_local:
            return None
        try:
            st = os.stat(name)
        except OSError:
            return None
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns

    def read_ranges(self, name: Path | str, ranges: list[tuple[int, int]], *, size: int, footer_length: int,
                    identity: tuple[int, int, int, int] | None) -> list[bytes]:
        """The bytes of each range [start, end) of the file ``name`` (``size`` bytes, its Parquet footer
        ``footer_length`` bytes) whose footer a reader holds, read at once. Locally one ``pread`` each
        of the file opened again, which must be the file of ``identity`` (``Store.identity``, taken
        when the footer was read); remotely one concurrent ``cat_ranges`` that also fetches the last 8
        bytes, which must be that footer's length and ``PAR1`` in an object of ``size`` bytes.
        ``FileReplaced`` (one line naming the file) when it is gone or another file now; any other
        failure of an object store is its one line (``storage_error``)."""
        if self.is_local:
            try:
                fd = os.open(name, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError as exc:
                raise FileReplaced(f"{name} cannot be opened again: {exc.strerror}") from None
            try:
                st = os.fstat(fd)
                if identity is None or (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != identity:
                    raise FileReplaced(f"{name} was replaced after its footer was read")
                return [os.pread(fd, end - start, start) for start, end in ranges]
            finally:
                os.close(fd)
        url = str(name)
        tail = footer_length.to_bytes(4, "little") + b"PAR1"
        try:
            *blocks, last = self.cat_ranges(url, [*ranges, (size - 8, size)])
        except FileNotFoundError:
            raise FileReplaced(f"{url} no longer exists") from None
        except OSError as exc:  # ranges of the footer read at open, past the object's end now
            if exc.errno == errno.EINVAL and "range" in str(exc).lower():
                raise FileReplaced(f"{url} is shorter than the object whose footer was read") from None
            raise storage_error(exc, url, self) from None
        except Exception as exc:  # botocore's NoCredentialsError ...: the store's one line
            raise storage_error(exc, url, self) from None
        if last != tail:
            raise FileReplaced(f"{url} is no longer the object whose footer was read")
        return blocks

    def fetched_source(self, name: Path | str, ranges: list[tuple[int, int]], size: int):
        """A source for pyarrow to read a few row groups whose column chunks are ``ranges`` of the file
        ``name`` (``size`` bytes): remotely those ranges fetched at once, concurrently
        (``open_prefetched``: one round trip, not one per row group); None locally, where the file the
        reader already holds open is read as it is (no round trip to save). ``FileNotFoundError`` when
        gone."""
        if self.is_local:
            return None
        return self.open_prefetched(str(name), ranges, size)

    def polars_options(self, storage_options: dict | None) -> dict:
        """Keyword arguments for ``polars.scan_parquet`` of this store's files: remotely
        ``storage_options`` in polars' spelling when given; locally none (polars reads paths)."""
        if self.is_local or storage_options is None:
            return {}
        return {"storage_options": storage_options}


class NotConfined(ValueError):
    """A file a reader was pointed at that is not a file inside the store's root (``confined_file``)."""


class FileReplaced(Exception):
    """A file that is no longer the one whose footer a reader holds (``Store.read_ranges``)."""


class _Prefetched(ByteWindow):
    """A seekable read-only view of a remote file of which some byte ranges are already in memory
    (``Store.open_prefetched``); other reads fetch exactly what they ask for."""

    def __init__(self, fs: fsspec.AbstractFileSystem, path: str, size: int, blocks: list[tuple[int, bytes]]):
        super().__init__(size)
        self.fs, self.path = fs, path
        self.blocks = sorted(blocks, key=lambda b: b[0])
        self.starts = [start for start, _ in self.blocks]

    def fill(self, view: memoryview, pos: int) -> int:
        end = pos + len(view)
        i = bisect.bisect_right(self.starts, pos) - 1
        if i >= 0 and end <= self.starts[i] + len(self.blocks[i][1]):
            data = memoryview(self.blocks[i][1])[pos - self.starts[i]: end - self.starts[i]]
        else:
            data = memoryview(self.fs.cat_file(self.path, start=pos, end=end))
        view[: len(data)] = data
        return len(data)


class FileTooLarge(ValueError):
    """A file larger than a reader accepts (``Store.read_bytes(limit=)``); ``size`` is its size in bytes."""

    def __init__(self, size: int):
        super().__init__(f"{size} bytes")
        self.size = size


class NotARegularFile(OSError):
    """A local entry that is not a regular file (a link, FIFO, device, folder) where one was read."""


def _create(path: Path):
    """A new file at ``path`` opened for writing; ``FileExistsError`` if anything (also a link) is there."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
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


def _local_walk(root: str, rel: str, enter: Callable[[str], bool]) -> list[tuple[str, str]]:
    """``Store.walk`` of the local folder ``root`` from its subfolder ``rel`` (sorted by name, a
    folder before its entries; no link followed)."""
    out: list[tuple[str, str]] = []
    with os.scandir(os.path.join(root, rel) if rel else root) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        child = f"{rel}/{entry.name}" if rel else entry.name
        if entry.is_symlink():
            out.append((child, "link"))
        elif entry.is_dir(follow_symlinks=False):
            out.append((child, "folder"))
            if enter(child):
                out.extend(_local_walk(root, child, enter))
        elif entry.is_file(follow_symlinks=False):
            out.append((child, "file"))
        else:
            out.append((child, "other"))
    return out


def missing_bucket(store: Store) -> str | None:
    """``protocol://bucket`` when the bucket at the start of a remote ``store``'s root does not exist
    (or is invisible to the credentials in use), else None (also for local stores)."""
    if store.is_local:
        return None
    bucket = store.root.split("/", 1)[0]
    try:
        return None if store.fs.exists(bucket) else f"{store.protocol}://{bucket}"
    except OSError:  # cannot tell: the request that failed says what is wrong
        return None


def storage_error(exc: Exception, url: str, store: Store | None = None) -> FatalError:
    """One line for a storage failure on ``url`` (``FatalError``, exit 1): a missing bucket
    (asked of ``store`` when given), a denied request or another error (an ``OSError``, or the
    filesystem library's own, e.g. botocore's ``NoCredentialsError``), named by the URL only (never
    the credentials)."""
    detail = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, PermissionError):
        if store is not None and store.is_local:  # a file's mode or owner, not credentials
            return FatalError(f"{url}: permission denied ({detail})")
        return FatalError(f"{url}: permission denied: the credentials in use may not read it ({detail})")
    if isinstance(exc, FileNotFoundError):
        bucket = missing_bucket(store) if store is not None else None
        if bucket:
            return FatalError(f"{url}: the bucket {bucket} does not exist (or is not visible to the "
                              "credentials in use)")
        return FatalError(f"{url}: does not exist")
    return FatalError(f"{url}: cannot be read: {type(exc).__name__}: {detail}")


def scheme_of(target: str | os.PathLike) -> str | None:
    """The URL scheme of ``target`` in lower case, or None for a local path."""
    text = os.fspath(target)
    if not looks_like_url(text):
        return None
    match = _SCHEME.match(text)
    if match is None:  # "s3:/bucket": pathlib squeezed the double slash of a URL
        return text.split(":", 1)[0].lower()
    return match.group(1).lower()


def without_credentials(url: str) -> str:
    """``url`` with any ``user:password@`` part and query string removed (safe to print or record)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def filesystem_class(scheme: str, what: str) -> type:
    """The fsspec filesystem class for ``scheme``, or a ``UsageError`` naming what to install."""
    import fsspec

    try:
        return fsspec.get_filesystem_class(scheme)
    except ImportError as exc:
        extra = EXTRAS.get(scheme)
        hint = (f"pip install 'tpuprep[{extra}]'" if extra
                else f"install the fsspec implementation for {scheme}:// ({exc})")
        raise UsageError(f"{what}: {scheme}:// needs a package that is not installed: {hint}") from None
    except ValueError:
        raise UsageError(f"{what}: unknown storage scheme {scheme}:// (use a local path, file://, "
                         "s3://, gs:// or another fsspec protocol)") from None


def resolve(target: str | os.PathLike, storage_options: dict | None = None, *,
            what: str = "path") -> Store:
    """The ``Store`` for a local path or URL. ``what`` names the argument in errors (``--dst``)."""
    text = os.fspath(target)
    scheme = scheme_of(text)
    if scheme is None or scheme == "file":
        local = text
        if scheme == "file":
            parts = urlsplit(text)
            if parts.netloc not in ("", "localhost"):  # file://tmp/x would silently mean /x
                raise UsageError(f"{what} {text}: a file URL names no host (file:///path, or the path "
                                 f"itself); {parts.netloc!r} would be dropped")
            local = parts.path
        return Store(root=str(Path(local).expanduser().absolute()), display=local)
    if "://" not in text:
        text = text.replace(":/", "://", 1)
    cls = filesystem_class(scheme, what)
    fs = cls(**(storage_options or {}))
    root = cls._strip_protocol(text).rstrip("/")
    return Store(root=root, display=without_credentials(text), fs=fs, protocol=scheme)
