"""The storage interface: ``Store``, where a tree of files lives, and what its methods return.

Every file tpuprep reads or writes goes through a ``Store``; ``io.storage.resolve`` makes one from what
the user typed (a folder, a file, a URL), once per command, and it is passed along (like pyarrow's
``filesystem=``, resolved once). Two backends implement it: ``local_store.LocalStore`` (plain ``os``
calls, no fsspec layer) and ``remote_store.RemoteStore`` (an fsspec filesystem: ``s3://``, ``gs://``,
``memory://`` …). Callers never ask which one they hold: what truly differs between them is a named
property or method of the interface, implemented by each (``writes_temporaries``,
``root_not_a_folder``, ``worker_paths``, ``contains``, ``polars_options``, ``request_errors``).

Every backend keeps the same guarantees: a file appears whole (never half written), ``exclusive``
never replaces, ``copy`` moves no bytes through this process where it can, and a failure is one line
(``failure``) naming the file or URL, never the credentials. Endpoints and credentials come from the
filesystem's standard sources (for S3 the ``AWS_*`` environment variables) and ``storage_options``;
they are never part of ``display`` and so never logged or written to a manifest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol
from urllib.parse import urlsplit, urlunsplit

from ..errors import FatalError, UsageError

if TYPE_CHECKING:  # pyarrow is imported only where a file is read or written through it
    import pyarrow.fs

    from .locks import FileLock, LeaseLock


class Store(ABC):
    """Where a tree of files lives (an abstract interface; see the module docstring).

    Each backend is a frozen dataclass with at least ``root`` (locally an absolute path, remotely the
    path without the scheme, e.g. ``bucket/prefix``) and ``display`` (the location as shown to people:
    a local path as given, a URL without credentials). Paths below the root (``rel``) are relative
    POSIX paths.
    """

    root: str
    display: str

    # ----------------------------------------------------------------------------------------- naming

    @abstractmethod
    def path(self, *parts: str) -> str:
        """The store path of ``parts`` below the root (locally an absolute path, remotely ``bucket/key``;
        empty parts are left out: ``path("")`` is the root)."""

    @abstractmethod
    def url(self, *parts: str) -> str:
        """``path(*parts)`` as a location a person or another process can resolve again (locally the
        absolute path, remotely ``scheme://bucket/key``; never credentials)."""

    @property
    @abstractmethod
    def location(self) -> Path | str:
        """The root as readers name it (``Dataset.root``, errors): a local folder as it was given, a
        URL without credentials."""

    def location_of(self, rel: str) -> Path | str:
        """``rel`` below ``location``, named the same way."""
        where = self.location
        return where / rel if isinstance(where, Path) else f"{where.rstrip('/')}/{rel}"

    @property
    def storage_options(self) -> dict | None:
        """The options this store's filesystem was made with (for a process that resolves ``url()``
        again; never shown or recorded); None when there are none."""
        return None

    def child(self, rel: str) -> Store:
        """The store rooted at ``rel`` below this one (same filesystem)."""
        return dataclasses.replace(self, root=self.path(rel), display=f"{self.display.rstrip('/')}/{rel}")

    def resolved(self) -> Store:
        """This store with the symbolic links of its root resolved (locally; an object store has none)."""
        return self

    # ------------------------------------------------------------------------ what truly differs

    @property
    @abstractmethod
    def writes_temporaries(self) -> bool:
        """Whether files are written under a temporary name and renamed (``.<name>.tmp-<pid>``, which a
        killed writer may leave behind) rather than appearing whole by themselves (an object)."""

    @property
    def root_not_a_folder(self) -> bool:
        """Whether something that is not a folder (a file, a link to one) sits where the root folder
        must be. A store without folders (an object store) never has one there."""
        return False

    def worker_paths(self, rel: str = "") -> tuple[str, ...]:
        """The paths on this machine another process must see to read ``rel`` (the root when "")
        itself: a local file or folder; none for an object store (every worker asks the store)."""
        return ()

    @abstractmethod
    def contains(self, other: Store) -> bool:
        """Whether ``other``'s root is this root or lies below it, on the same storage (locally also
        through another name of the same folder: a bind mount, a link)."""

    def overlaps(self, other: Store) -> bool:
        """Whether one of the two roots lies inside the other (or they are the same)."""
        return self.contains(other) or other.contains(self)

    def polars_options(self, storage_options: dict | None) -> dict:
        """Keyword arguments for ``polars.scan_parquet`` of this store's files (``storage_options`` in
        polars' spelling, when given and when polars needs them)."""
        return {}

    # ------------------------------------------------------------------------------------ failures

    @abstractmethod
    def failure(self, exc: BaseException, what: str, action: str = "read") -> FatalError:
        """One line (``FatalError``, exit 1) for ``exc``, raised while ``what`` (a file, a URL, an
        argument and its value) was being ``action``-ed: a missing bucket, a denied request or file, or
        another error, named by ``what`` only (never credentials)."""

    def missing_bucket(self) -> str | None:
        """``scheme://bucket`` when the bucket of the root does not exist (or is invisible to the
        credentials in use); None when it exists, cannot be told, or the store has no buckets."""
        return None

    @contextlib.contextmanager
    def request_errors(self, what: str, action: str = "read") -> Iterator[None]:
        """Turn what a failed request to this store raises inside the block into its one line
        (``failure``). Locally nothing is turned: an ``OSError`` names its file and errno, and the
        CLI's guard prints it as it is."""
        yield

    # ------------------------------------------------------------------------------- whole files

    @abstractmethod
    def walk(self, enter: Callable[[str], bool] = lambda _rel: True) -> list[Entry]:
        """Every entry below the root, sorted (a folder before its own entries, which follow only when
        ``enter(rel)``): files with their size and version, folders, symbolic links (never followed),
        other entries (FIFOs, sockets, devices) and folders that cannot be listed (``unlisted``, with
        why). [] when the root is missing. ``OSError`` when the root itself cannot be listed."""

    @abstractmethod
    def root_entry(self) -> Entry:
        """What the root itself is, as an ``Entry`` with ``rel`` "" (a file, a folder, …).
        ``FileNotFoundError`` when there is nothing there; a failed request as the backend raises it."""

    @abstractmethod
    def peek(self) -> str | None:
        """What the root is when that is known without a request: ``"folder"``, ``"file"``,
        ``"missing"`` or ``"other"``; None when only a request (a listing) can tell (an object store)."""

    @abstractmethod
    def open_input(self, rel: str, *, size: int, version: int | str = "", offset: int | None = None) -> Opened:
        """The bytes of the file ``rel`` (the root when "") listed with ``size`` and ``version``, to be
        read once: the whole file (``offset`` None), or ``size`` bytes from ``offset`` (a tar member). A
        seekable binary file the caller closes, whose ``stamp()`` is [size, version] of what it reads,
        as it is now. Locally opened once without following a link or waiting on a FIFO and read in
        place; remotely fetched by one (ranged) read of the ``version`` listed. ``FileNotFoundError``
        (gone), ``NotARegularFile`` (something else there now), ``FileReplaced`` (shorter than listed;
        remotely also another version than listed, even of the same size: the stamp would be the
        listing's, not the bytes'; locally the file opened is the one read, and its stamp, from the
        open file, says which); another failure as the backend raises it."""

    @abstractmethod
    def open_scan(self, rel: str, size: int) -> BinaryIO:
        """The file ``rel`` (``size`` bytes) opened for a scan of its structure, a little at a time and
        seeking past the rest (a tar archive's headers): locally as ``open_input``, remotely read ahead
        in blocks (each block one ranged read). Errors as ``open_input``."""

    @abstractmethod
    def stamp(self, rel: str, *, size: int, version: int | str = "", offset: int | None = None) -> list | None:
        """``open_input``'s stamp of the same bytes as they are now, without opening them; None when they
        are gone. Locally from ``lstat``; remotely the ``version`` listed (a new listing is what tells
        a change)."""

    def listing(self) -> list[str]:
        """Every file (object) below the root as sorted relative POSIX paths (fresh; locally every entry
        that is not a folder: regular files, links (none followed), FIFOs, sockets and devices)."""
        return [e.rel for e in self.walk() if e.kind not in ("folder", "unlisted")]

    # ------------------------------------------------------------------------------------- shards

    @abstractmethod
    def open_shard_file(self, rel: str) -> ShardFile:
        """The file ``rel`` (a relative POSIX path without ``..``) opened for random-access reads and
        pinned to the very file or object found there now (``ShardFile``). ``NotConfined`` naming the
        problem unless it is a file inside the root (locally: its real path, links resolved, stays
        below the root's and is a regular file; remotely: an object, not a prefix); a refused request
        is the store's one line (``failure``)."""

    @abstractmethod
    def exists(self, rel: str) -> bool:
        """Whether anything (also a link, which is not followed) is at ``rel``."""

    @abstractmethod
    def read_bytes(self, rel: str, *, limit: int | None = None, follow_links: bool = False) -> bytes:
        """The whole file ``rel``. A link (unless ``follow_links``), FIFO, device or folder there is
        ``NotARegularFile``, never followed or waited on. ``FileTooLarge`` over ``limit`` bytes (checked
        before it is read). ``FileNotFoundError`` when missing; any other failure as the backend raises it."""

    @abstractmethod
    def write_bytes(self, rel: str, data: bytes, *, exclusive: bool = False, durable: bool = False,
                    before_commit: Callable[[], None] | None = None) -> None:
        """Write one whole file, visible only when complete. ``exclusive``: ``FileExistsError`` if it
        exists (never replaced). ``durable``: on stable storage before it becomes visible.
        ``before_commit()`` runs after the bytes are written and just before the file becomes visible
        (the rename or link) locally; on an object store before the upload starts (an upload becomes
        visible by itself when it ends), so nothing of the object is written yet when it runs."""

    @abstractmethod
    def put_file(self, local: str | os.PathLike, rel: str) -> None:
        """Put the finished local file ``local`` at ``rel``, keeping ``local`` (streamed, memory bounded)."""

    @abstractmethod
    def get_file(self, rel: str, local: str | os.PathLike) -> None:
        """Copy ``rel`` to the local file ``local`` (streamed)."""

    @abstractmethod
    def copy(self, rel: str, to: str) -> None:
        """Copy ``rel`` to ``to`` inside the store, without the bytes passing through this process
        where the backend can."""

    @abstractmethod
    def remove(self, rels: list[str], folders: Iterable[str] = ()) -> None:
        """Delete these files (missing ones are ignored), then ``folders`` (relative paths) where they
        are empty, deepest first (one something else was put into meanwhile is kept). A folder left
        empty by the deletion goes too, up to (not including) the root."""

    @abstractmethod
    def makedirs(self) -> None:
        """Create the root folder (and its parents) where the store has folders."""

    @abstractmethod
    def check_reachable(self) -> None:
        """``FileNotFoundError`` / ``PermissionError`` when the root cannot be written at all (a
        missing or forbidden bucket), before anything is written."""

    @abstractmethod
    def writing(self, rel: str) -> contextlib.AbstractContextManager[Path]:
        """A context that yields a local path to write the file ``rel`` at; it becomes ``rel`` (whole)
        when the block ends without error, else it is removed. For writers that need a path
        (``pq.ParquetWriter``): the bytes are the same on every backend."""

    @abstractmethod
    def reading(self, rel: str) -> contextlib.AbstractContextManager[Path]:
        """A context that yields a local path holding the file ``rel`` for the block."""

    @abstractmethod
    def open(self, rel: str, mode: str = "rb", **kwargs: Any):
        """The file ``rel`` opened (``open`` locally, ``fs.open`` remotely)."""

    @abstractmethod
    def open_url(self, url: str, mode: str = "rb", **kwargs: Any):
        """``url``, a location under this store as ``url()`` or a reader names it, opened."""

    @abstractmethod
    def lock_at(self, rel: str) -> FileLock | LeaseLock:
        """The exclusive lock at the file ``rel`` (not yet taken; ``io.locks``)."""

    @abstractmethod
    def arrow_filesystem(self) -> pyarrow.fs.FileSystem:
        """The same storage as a pyarrow filesystem."""


class ShardFile(ABC):
    """A file or object a reader opened, pinned to that very version: every read returns its bytes or
    raises ``FileReplaced`` (the file was replaced, rewritten in place, shortened or removed since it
    was opened), never the bytes of another file or object put under its name.

    ``name``: how it is named in errors (locally its real path, remotely its URL); ``size``: its size in
    bytes when it was opened. Reads through ``source`` (pyarrow's) are checked by ``verify`` after them;
    ``read_ranges`` checks its own.
    """

    name: Path | str
    size: int

    @abstractmethod
    def source(self) -> Any:
        """What ``pyarrow.parquet.ParquetFile`` reads the footer and row groups from (locally the open
        file itself, native reads; remotely a file object whose every read is one ranged request of
        exactly those bytes). Call ``verify`` after reading through it."""

    @abstractmethod
    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """The bytes of each range [start, end), read at once (locally ``pread``s, remotely one
        concurrent ranged request each), checked to come from the pinned version."""

    def prefetched(self, ranges: list[tuple[int, int]]) -> Any | None:
        """A source like ``source()`` with these ranges fetched at once, for a read of a few row groups
        (remotely one round trip instead of one per row group); None where nothing is gained (a local
        file: read ``source()``). Call ``verify`` after reading through it."""
        return None

    @abstractmethod
    def verify(self) -> None:
        """``FileReplaced`` unless what was read through ``source``/``prefetched`` came from the pinned
        version (locally: the open file and the file at ``name`` are still it; remotely every read is
        conditional on it where the store allows, else one request asks)."""

    @abstractmethod
    def close(self) -> None:
        """Let the file go (a local descriptor; nothing for an object)."""


class Opened(Protocol):
    """What ``Store.open_input`` returns: a seekable binary file that knows what it reads."""

    def read(self, size: int = -1) -> bytes: ...
    def seek(self, pos: int, whence: int = 0) -> int: ...
    def close(self) -> None: ...

    def stamp(self) -> list:
        """[size in bytes, version] of the bytes this file reads, as they are now."""


@dataclasses.dataclass(frozen=True)
class Entry:
    """One entry of a store (``Store.walk``, ``Store.root_entry``).

    rel: its POSIX path relative to the root ("" for the root itself); kind: ``"file"`` (a regular
    file; every object of an object store), ``"folder"``, ``"link"`` (a symbolic link, never
    followed), ``"other"`` (a FIFO, socket or device), ``"unlisted"`` (a folder that cannot be
    listed), ``"gone"`` (it vanished while it was listed) or ``"unexamined"`` (it cannot be
    examined); size: bytes (files); version: what identifies this version of a file (locally its
    mtime in ns, remotely its ETag, generation or modification time); detail: what an ``other``
    entry is (``"a FIFO"``), why an ``unlisted`` or ``unexamined`` one could not be read, or for a
    link ``"folder"`` (it leads to one) or ``"dangling"`` (to nothing: ``target`` says where).
    """

    rel: str
    kind: str
    size: int = 0
    version: int | str = ""
    detail: str = ""
    target: str = ""

    @property
    def name(self) -> str:
        return self.rel.rsplit("/", 1)[-1]


class NotConfined(ValueError):
    """A file a reader was pointed at that is not a file inside the store's root."""


class FileReplaced(Exception):
    """A file that is no longer the one a reader opened (or listed): replaced, rewritten, shortened
    or gone. ``str()`` says which file and what changed."""


class FileTooLarge(ValueError):
    """A file larger than a reader accepts (``Store.read_bytes(limit=)``); ``size`` is its size in bytes."""

    def __init__(self, size: int):
        super().__init__(f"{size} bytes")
        self.size = size


class NotARegularFile(OSError):
    """An entry that is not a regular file (a link, FIFO, device, folder; remotely a prefix) where
    one was read; ``what`` says what it is (``"a FIFO"``, ``"a symbolic link"`` …)."""

    def __init__(self, path: str, what: str = "not a regular file"):
        super().__init__(errno.EINVAL, what, path)
        self.what = what


def without_credentials(url: str) -> str:
    """``url`` with any ``user:password@`` part and query string removed (safe to print or record)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def request_failure(exc: BaseException, what: str, action: str = "read") -> FatalError:
    """The one line (``FatalError``) of a failed request to an object store, for ``what`` (a URL): a
    denied request (the credentials in use may not do it) or another error, named by ``what`` only.
    For what pyarrow re-raises from a remote file object, where no store is at hand; a store says more
    (a missing bucket: ``Store.failure``)."""
    detail = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, PermissionError):
        verb = {"read": "read", "written": "write", "listed": "list"}.get(action, action)
        return FatalError(f"{what}: permission denied: the credentials in use may not {verb} it ({detail})")
    if isinstance(exc, FileNotFoundError):
        return FatalError(f"{what}: does not exist")
    return FatalError(f"{what}: cannot be {action}: {type(exc).__name__}: {detail}")


STORAGE_PACKAGES = frozenset({"fsspec", "s3fs", "gcsfs", "adlfs", "botocore", "aiobotocore", "boto3", "aiohttp",
                              "google", "azure", "urllib3", "requests"})
"""The top-level packages of the filesystems a ``Store`` reaches storage through (fsspec, its S3, GCS and
Azure implementations and their clients): what they raise is a failed request or a refused option."""


def library_error(exc: BaseException) -> bool:
    """Whether ``exc`` is what storage raises — a failed request, a file's own problem, a store refusing
    its options — to be worded as one line naming the file or URL (``Store.failure``), rather than a
    bug or another component's failure, which keeps its type and traceback.

    Storage's: an exception of a storage library (``STORAGE_PACKAGES``: botocore's
    ``NoCredentialsError``, aiohttp's, gcsfs' ``HttpError``); any exception raised inside a storage
    library's code (botocore's ``ValueError`` for an invalid endpoint, aiobotocore's ``TypeError`` for
    an unknown option); an ``OSError`` of Python's own or tpuprep's (``FileNotFoundError``,
    ``PermissionError`` — which s3fs also translates S3's errors into —, ``NotARegularFile``) raised
    by tpuprep's storage calls or a storage library. Not: tpuprep's own errors (a ``FatalError`` is
    already one line; a ``TypeError`` raised in tpuprep is a bug), nor another installed package's,
    even an ``OSError`` (pyarrow's ``ArrowInvalid``, Dask's ``CommClosedError`` or its connect
    timeout). Who raised it is the innermost frame of its traceback outside the standard library and
    code that is neither tpuprep nor installed (a test's stand-in)."""
    if isinstance(exc, (FatalError, UsageError)):
        return False
    package = _package(type(exc).__module__)
    if package in STORAGE_PACKAGES:
        return True
    oserror = isinstance(exc, OSError) and package in ("builtins", "ssl", "socket", "tpuprep")
    tb, owners = exc.__traceback__, []
    while tb is not None:
        owners.append(_owner(tb.tb_frame.f_globals))
        tb = tb.tb_next
    for owner in reversed(owners):
        if owner == "storage":
            return True
        if owner == "tpuprep":
            return oserror
        if owner == "installed":
            return False
    return oserror


def _package(module: object) -> str:
    return str(module or "").split(".", 1)[0]


def _owner(namespace: dict) -> str | None:
    """Whose code a frame runs (its globals): ``"storage"`` (``STORAGE_PACKAGES``), ``"tpuprep"``,
    ``"installed"`` (another installed package: Dask, pyarrow, NumPy), or None (the standard library,
    or code that is not installed: a test, a script)."""
    package = _package(namespace.get("__name__"))
    if package in STORAGE_PACKAGES or package == "tpuprep":
        return "storage" if package != "tpuprep" else "tpuprep"
    if package in sys.stdlib_module_names:
        return None
    where = str(namespace.get("__file__") or "")
    return "installed" if "site-packages" in where or "dist-packages" in where else None
