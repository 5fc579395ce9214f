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

On an object store (``--dst s3://bucket/prefix``) there are no folders, links or ``flock``:
``scan_store`` sorts the objects under the prefix with the same names, and ``StoreLock`` is the object
``<prefix>/.tpuprep.lock`` (JSON: owner token, host, pid, start and renewal time). It is created with
a conditional write (S3 ``If-None-Match``: of two builds starting together exactly one gets it),
renewed every ``LOCK_RENEW_SECONDS`` while the build runs and removed when it ends. A lock is taken
over when it is stale: not renewed for ``LOCK_STALE_SECONDS`` (its holder died or lost the network),
or held by a process of this host that no longer exists (a killed build, so ``--resume`` can follow
at once). Taking over a stale lock (delete, then create again) is the one step that is advisory: two
builds taking over the same stale lock in the same instant could both proceed, so the build checks
just before writing the manifest that the lock is still its own and stops (exit 1) otherwise.
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
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import FatalError, UsageError
from ..io.files import TEMPORARY
from ..io.storage import Store
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


def scan_store(store: Store) -> Contents:
    """``scan`` for an object store: every object under the prefix sorted by its name alone (there
    are no folders or links; objects appear only when complete, so there are no temporaries)."""
    out = Contents()
    for rel in store.listing():
        folder_rel, _, name = rel.rpartition("/")
        folder = OWN_FOLDERS.get(folder_rel)
        if not folder_rel and name == LOCK:
            out.lock = True
        elif folder is not None and name and not TEMPORARY.fullmatch(name) and (m := _own_file(folder, name)):
            out.files.append(rel)
            if folder.collection:
                out.held.add((folder.collection, folder.split or m.group(1)))
        else:
            out.foreign.append(rel)
    return out


def store_manifest_selection(store: Store) -> set[tuple[str, str]]:
    """``manifest_selection`` of a build in an object store."""
    try:
        return _selection(json.loads(store.read_bytes(MANIFEST)))
    except FileNotFoundError:
        return set()
    except (ValueError, KeyError, TypeError, AttributeError):
        return set()


def _selection(manifest: dict) -> set[tuple[str, str]]:
    return {(cid, split) for cid, coll in manifest["collections"].items() for split in coll["splits"]}


def manifest_selection(dst: Path) -> set[tuple[str, str]]:
    """The (collection, split) pairs a finished build's ``manifest.json`` lists (empty if unreadable)."""
    try:
        return _selection(json.loads((dst / MANIFEST).read_text()))
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


def contents(dst: Store) -> Contents:
    """What ``dst`` holds, sorted into tpuprep's own and foreign entries: ``scan`` of a local folder
    (an absent one holds nothing), ``scan_store`` of an object store."""
    if not dst.is_local:
        return scan_store(dst)
    return scan(Path(dst.root)) if os.path.isdir(dst.root) else Contents()


def selection(dst: Store) -> set[tuple[str, str]]:
    """The (collection, split) pairs the manifest under ``dst`` lists (empty if absent or unreadable)."""
    return manifest_selection(Path(dst.root)) if dst.is_local else store_manifest_selection(dst)


def probe_lock(dst: Store) -> None:
    """Raise UsageError if another build holds ``dst`` (``probe`` / ``probe_store``); writes nothing."""
    if dst.is_local:
        probe(Path(dst.root))
    else:
        probe_store(dst)


def lock(dst: Store) -> DestinationLock | StoreLock:
    """Take ``dst`` for one build: ``flock`` on a lock file in a folder (created first), a renewed lock
    object in an object store. Both are context managers with ``check()`` and ``release()``."""
    if dst.is_local:
        dst.makedirs()
        return DestinationLock.acquire(Path(dst.root))
    return StoreLock.acquire(dst)


def clear(dst: Store, files: list[str], dirs: list[str] = ()) -> None:
    """Delete these files of ``dst`` (what ``contents`` listed as tpuprep's), then these folders if
    they are empty (``remove``; an object store has no folders)."""
    if dst.is_local:
        remove(Path(dst.root), files, list(dirs))
    else:
        dst.remove(files)


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

    def check(self) -> None:
        """Nothing to check: an ``flock`` is not taken over while its holder lives (``StoreLock.check``
        is the object-store counterpart, which is)."""

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


# ------------------------------------------------------------------------- the lock of an object store

LOCK_RENEW_SECONDS = 60.0
"""How often a build renews its lock object."""
LOCK_STALE_SECONDS = 600.0
"""A lock object not renewed for this long is stale: its holder is gone, and the next build takes it."""


def _lock_info(store: Store) -> dict | None:
    """The lock object's contents; None when there is none; {} when it cannot be understood."""
    try:
        info = json.loads(store.read_bytes(LOCK))
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError):
        return {}
    return info if isinstance(info, dict) else {}


def _pid_gone(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def lock_is_stale(info: dict, now: float | None = None) -> bool:
    """Whether a lock object (``_lock_info``) may be taken over: not renewed for
    ``LOCK_STALE_SECONDS``, unreadable, or held by a process of this host that has ended."""
    renewed = info.get("renewed")
    if not isinstance(renewed, (int, float)):
        return True
    if (time.time() if now is None else now) - renewed > LOCK_STALE_SECONDS:
        return True
    return info.get("host") == socket.gethostname() and _pid_gone(info.get("pid"))


def _store_busy(store: Store, info: dict) -> UsageError:
    holder = (f"pid {info.get('pid')} on {info.get('host')}, started {info.get('started')}" if info
              else "holder not recorded")
    return UsageError(f"--dst {store.display} is being written by another tpuprep build ({holder}); wait "
                      f"for it to end (a lock not renewed for {LOCK_STALE_SECONDS:.0f} s is taken over)")


def probe_store(store: Store) -> None:
    """``probe`` for an object store: raise UsageError if a live build holds the lock object."""
    info = _lock_info(store)
    if info is not None and not lock_is_stale(info):
        raise _store_busy(store, info)


class StoreLock:
    """The lock object of a build writing to an object store (see the module docstring)."""

    def __init__(self, store: Store, info: dict):
        self.store, self.info = store, info
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="tpuprep-lock", daemon=True)
        self._thread.start()

    @classmethod
    def acquire(cls, store: Store) -> StoreLock:
        info = {"owner": uuid.uuid4().hex, "pid": os.getpid(), "host": socket.gethostname(),
                "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "renewed": time.time()}
        for _ in range(2):
            try:
                cls._create(store, info)
                break
            except FileExistsError:
                held = _lock_info(store)
                if held is not None and not lock_is_stale(held):
                    raise _store_busy(store, held) from None
                store.remove([LOCK])  # stale: take it over
        else:
            raise _store_busy(store, _lock_info(store) or {})
        if (_lock_info(store) or {}).get("owner") != info["owner"]:
            raise _store_busy(store, _lock_info(store) or {})
        return cls(store, info)

    @staticmethod
    def _create(store: Store, info: dict) -> None:
        data = (json.dumps(info) + "\n").encode()
        try:
            store.write_bytes(LOCK, data, exclusive=True)
        except (NotImplementedError, ValueError):  # no conditional writes on this store: advisory
            if store.exists(LOCK):
                raise FileExistsError(LOCK) from None
            store.write_bytes(LOCK, data)

    def _renew(self) -> None:
        while not self._stop.wait(LOCK_RENEW_SECONDS):
            with contextlib.suppress(OSError, ValueError):
                if self.held():
                    self.info["renewed"] = time.time()
                    self.store.write_bytes(LOCK, (json.dumps(self.info) + "\n").encode())

    def held(self) -> bool:
        """Whether the lock object is still this build's."""
        return (_lock_info(self.store) or {}).get("owner") == self.info["owner"]

    def check(self) -> None:
        """Raise FatalError when another build has taken the lock over (before the manifest)."""
        if not self.held():
            raise FatalError(f"--dst {self.store.display}: another build took over this build's lock "
                             f"{LOCK} (it was not renewed for {LOCK_STALE_SECONDS:.0f} s); nothing was "
                             "published: run again with --resume")

    def release(self) -> None:
        """Stop renewing and remove the lock object if it is still this build's. Safe to call twice."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=5)
        with contextlib.suppress(OSError):
            if self.held():
                self.store.remove([LOCK])

    def __enter__(self) -> StoreLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()
