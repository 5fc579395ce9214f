"""How a ``Store`` takes an exclusive lock at one file of its tree: the backend piece of
``shards.destination.Lock`` (``Store.lock_at(rel)`` picks it; everything above it exists once).

Both backends answer the same four questions — who holds it (``holder``: the holder's record, or None
when nobody live does), take it (``take``: write this process's record, or raise ``LockBusy``), is it
still mine (``still_held``), give it back (``release``) — and say how a dead holder's lock is freed
(``release_rule``, for the "busy" message).

- ``FileLock`` (a local folder): an exclusive ``flock`` on the lock file, which holds the record
  (pid, host, start time). The kernel releases it when its holder dies, so the lock of a killed build
  is taken over by the next one without any clean-up. Opened with ``O_NOFOLLOW``: a symbolic link in
  its place is never followed.
- ``LeaseLock`` (an object store: no ``flock``): the lock object (JSON: owner token, host, pid, start
  and renewal time), created with a conditional write (``write_bytes(exclusive=True)``, S3
  ``If-None-Match``: of two builds starting together exactly one gets it), renewed every
  ``LOCK_RENEW_SECONDS`` and removed at the end. It is taken over when stale (``lock_is_stale``): not
  renewed for ``LOCK_STALE_SECONDS`` (its holder died or lost the network), unreadable, or held by a
  process of this host that no longer exists. Taking over a stale lock (delete, then create again) is
  the one advisory step: two takers in the same instant could both proceed, so the holder checks
  ``still_held`` just before publishing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import stat
import threading
import time
import uuid
from typing import Protocol

LOCK_RENEW_SECONDS = 60.0
"""How often a holder renews its lock object."""
LOCK_STALE_SECONDS = 600.0
"""A lock object not renewed for this long is stale: its holder is gone, and the next build takes it."""


class Objects(Protocol):
    """What ``LeaseLock`` needs of a ``Store`` (io.storage; not imported here: it imports this module)."""

    def read_bytes(self, rel: str) -> bytes: ...
    def write_bytes(self, rel: str, data: bytes, *, exclusive: bool = False) -> None: ...
    def exists(self, rel: str) -> bool: ...
    def remove(self, rels: list[str]) -> None: ...


class LockBusy(Exception):
    """The lock is held by another live process: ``holder`` is its record ({} when not readable),
    ``release_rule`` says how the lock of a dead holder is freed."""

    def __init__(self, holder: dict, release_rule: str):
        super().__init__(holder, release_rule)
        self.holder, self.release_rule = holder, release_rule


class CannotLock(Exception):
    """The lock cannot be taken at all here (no lock file can be created, or no file locks): one
    line saying why."""


def _record(extra: dict | None = None) -> dict:
    """This process's lock record: pid, host, start time (UTC, ISO 8601), plus ``extra``."""
    return {"pid": os.getpid(), "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **(extra or {})}


def _parse(data: bytes) -> dict:
    """A lock record from its bytes; {} when it cannot be understood."""
    try:
        info = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return {}
    return info if isinstance(info, dict) else {}


# -------------------------------------------------------------------------------- a local folder


class FileLock:
    """An exclusive ``flock`` on the local file ``path`` (see the module docstring).

    ``take`` retries for ``wait`` seconds (a ``holder`` probe holds a shared lock for an instant).
    """

    release_rule = "the lock of a build that died is released by the system and taken over"

    def __init__(self, path: str, wait: float = 0.5):
        self.path, self.wait, self.fd = path, wait, -1

    def holder(self) -> dict | None:
        """The record of a live holder, or None. Writes nothing (a shared lock for an instant)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None  # no lock file (or not one tpuprep wrote: the scan reports it)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return self._read(fd)
            except OSError:
                return None  # no file locks here: take() will say so
            return None
        finally:
            os.close(fd)  # also releases the shared lock

    @staticmethod
    def _read(fd: int) -> dict:
        try:
            return _parse(os.pread(fd, 4096, 0))
        except OSError:
            return {}

    def take(self) -> dict:
        """Lock the file (created if missing) and write this process's record into it; returns the
        record. Raises ``LockBusy`` or ``CannotLock``."""
        deadline = time.monotonic() + self.wait
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise CannotLock(f"cannot create its lock file {os.path.basename(self.path)} "
                                 f"({exc.strerror or exc})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if not isinstance(exc, BlockingIOError):
                    os.close(fd)
                    raise CannotLock(f"cannot lock {os.path.basename(self.path)} ({exc.strerror or exc}); "
                                     "a build needs a filesystem with file locks") from None
                if time.monotonic() < deadline:
                    os.close(fd)
                    time.sleep(0.05)
                    continue
                try:
                    raise LockBusy(self._read(fd), self.release_rule) from None
                finally:
                    os.close(fd)
            try:
                if self._still_there(fd):
                    break
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # the previous holder removed the file as we opened it: lock the new one
        record = _record()
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        except BaseException:  # (ENOSPC, EIO): never keep the flock of a build that does not run
            os.close(fd)
            raise
        self.fd = fd
        return record

    def _still_there(self, fd: int) -> bool:
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)

    def still_held(self) -> bool:
        """True while taken: an ``flock`` is never taken over while its holder lives."""
        return self.fd >= 0

    def release(self) -> None:
        """Remove the lock file (while still holding it), then unlock. Safe to call twice."""
        if self.fd < 0:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        os.close(self.fd)
        self.fd = -1


# ----------------------------------------------------------------------------------- an object store


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
    """Whether a lock object's record may be taken over: not renewed for ``LOCK_STALE_SECONDS``,
    unreadable ({}), or held by a process of this host that has ended."""
    renewed = info.get("renewed")
    if not isinstance(renewed, (int, float)):
        return True
    if (time.time() if now is None else now) - renewed > LOCK_STALE_SECONDS:
        return True
    return info.get("host") == socket.gethostname() and _pid_gone(info.get("pid"))


class LeaseLock:
    """The lock object ``rel`` of ``store``, renewed while held (see the module docstring)."""

    release_rule = f"a lock not renewed for {LOCK_STALE_SECONDS:.0f} s is taken over"

    def __init__(self, store: Objects, rel: str):
        self.store, self.rel = store, rel
        self.record: dict = {}
        self._stop = threading.Event()
        self._writing = threading.Lock()  # a renewal in flight finishes before release removes the object
        self._thread: threading.Thread | None = None

    def _info(self) -> dict | None:
        """The lock object's record; None when there is none; {} when it cannot be understood."""
        try:
            return _parse(self.store.read_bytes(self.rel))
        except FileNotFoundError:
            return None

    def holder(self) -> dict | None:
        """The record of a live holder, or None (no lock object, or a stale one)."""
        info = self._info()
        return info if info is not None and not lock_is_stale(info) else None

    def take(self) -> dict:
        """Create the lock object (taking over a stale one) and start renewing it; returns the
        record. Raises ``LockBusy``."""
        self.record = _record({"owner": uuid.uuid4().hex, "renewed": time.time()})
        for _ in range(2):
            try:
                self._create()
                break
            except FileExistsError:
                held = self._info()
                if held is not None and not lock_is_stale(held):
                    raise LockBusy(held, self.release_rule) from None
                self.store.remove([self.rel])  # stale: take it over
        else:
            raise LockBusy(self._info() or {}, self.release_rule)
        if not self.still_held():
            raise LockBusy(self._info() or {}, self.release_rule)
        self._thread = threading.Thread(target=self._renew, name="tpuprep-lock", daemon=True)
        self._thread.start()
        return self.record

    def _create(self) -> None:
        data = (json.dumps(self.record) + "\n").encode()
        try:
            self.store.write_bytes(self.rel, data, exclusive=True)
        except (NotImplementedError, ValueError):  # no conditional writes on this store: advisory
            if self.store.exists(self.rel):
                raise FileExistsError(self.rel) from None
            self.store.write_bytes(self.rel, data)

    def _renew(self) -> None:
        while not self._stop.wait(LOCK_RENEW_SECONDS):
            with self._writing:
                if self._stop.is_set():  # released meanwhile: never write the object again
                    return
                # any failure (a lost connection, the store's own errors) is retried at the next renewal;
                # a lock that goes stale meanwhile is caught by Lock.check before the manifest is written
                with contextlib.suppress(Exception):
                    if self.still_held():
                        self.record["renewed"] = time.time()
                        self.store.write_bytes(self.rel, (json.dumps(self.record) + "\n").encode())

    def still_held(self) -> bool:
        """Whether the lock object is still this holder's (another may have taken a stale one over)."""
        return bool(self.record) and (self._info() or {}).get("owner") == self.record["owner"]

    def release(self) -> None:
        """Stop renewing and remove the lock object if it is still this holder's. Safe to call twice."""
        if self._thread is None or self._stop.is_set():
            return
        self._stop.set()
        with self._writing, contextlib.suppress(OSError):  # waits for a renewal in flight, which then stops
            if self.still_held():
                self.store.remove([self.rel])
        self._thread.join(timeout=5)
