"""``RemoteStore``: a prefix of an object store (``s3://``, ``gs://``, ``memory://``, any fsspec protocol)
through its fsspec filesystem.

What an object store guarantees, behind the ``Store`` interface: an object appears only when complete
(no temporaries), ``exclusive`` is a conditional write (S3 ``If-None-Match``), copies are server-side,
the build lock is a renewed lease object (``io.locks.LeaseLock``). Reads are requests with their own
latency: ranged reads fetch exactly the bytes asked for, a sample's ranges at once, concurrently.
"""

from __future__ import annotations

import bisect
import contextlib
import datetime
import errno
import io
import os
import posixpath
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from ..errors import FatalError
from .locks import LeaseLock
from .store import (
    Entry,
    FileReplaced,
    FileTooLarge,
    NotARegularFile,
    NotConfined,
    Opened,
    ShardFile,
    Store,
    library_error,
    request_failure,
)
from .window import ByteWindow

if TYPE_CHECKING:
    import fsspec


@dataclass(frozen=True)
class RemoteStore(Store):
    """A prefix of an object store: ``root`` is ``bucket/prefix`` (no scheme), ``display`` the URL as
    given without credentials, ``fs`` its fsspec filesystem, ``protocol`` its scheme, ``options`` the
    filesystem's storage options (never shown, compared or recorded)."""

    root: str
    display: str
    fs: fsspec.AbstractFileSystem = field(compare=False, repr=False)
    protocol: str = "s3"
    options: dict | None = field(default=None, compare=False, repr=False)

    # ----------------------------------------------------------------------------------------- naming

    def path(self, *parts: str) -> str:
        parts = tuple(p for p in parts if p)
        return posixpath.join(self.root, *parts) if parts else self.root

    def url(self, *parts: str) -> str:
        return f"{self.protocol}://{self.path(*parts)}"

    @property
    def location(self) -> str:
        return self.url()

    @property
    def storage_options(self) -> dict | None:
        return self.options or None

    # ------------------------------------------------------------------------ what truly differs

    @property
    def writes_temporaries(self) -> bool:
        return False

    def contains(self, other: Store) -> bool:
        """The same scheme, and ``other``'s key prefix at or below this one."""
        if not isinstance(other, RemoteStore) or other.protocol != self.protocol:
            return False
        top = self.root.rstrip("/")
        return other.root.rstrip("/") == top or other.root.startswith(top + "/")

    def polars_options(self, storage_options: dict | None) -> dict:
        return {"storage_options": storage_options} if storage_options else {}

    # ------------------------------------------------------------------------------------ failures

    def failure(self, exc: BaseException, what: str, action: str = "read") -> FatalError:
        """A denied request names the credentials; a missing object under a missing bucket, the bucket."""
        if isinstance(exc, FileNotFoundError):
            bucket = self.missing_bucket()
            if bucket:
                return FatalError(f"{what}: the bucket {bucket} does not exist (or is not visible to the "
                                  "credentials in use)")
        return request_failure(exc, what, action)

    def missing_bucket(self) -> str | None:
        bucket = self.root.split("/", 1)[0]
        try:
            return None if self.fs.exists(bucket) else f"{self.protocol}://{bucket}"
        except Exception as exc:  # cannot tell: the request that failed says what is wrong
            if library_error(exc):
                return None
            raise

    @contextlib.contextmanager
    def request_errors(self, what: str, action: str = "read") -> Iterator[None]:
        """A failed request (an ``OSError`` or the filesystem library's own error, e.g. botocore's
        ``NoCredentialsError``) becomes ``failure``'s one line."""
        try:
            yield
        except Exception as exc:
            if not library_error(exc):
                raise
            raise self.failure(exc, what, action) from None

    # ------------------------------------------------------------------------------- whole files

    def walk(self, enter: Callable[[str], bool] = lambda _rel: True) -> list[Entry]:
        """Every object under the prefix, fresh (no cached listing), whatever its key: an object store
        has no folders to enter or not (``enter`` is not asked)."""
        self.fs.invalidate_cache()
        prefix = self.root.rstrip("/") + "/"
        try:
            found = self.fs.find(self.root, withdirs=False, detail=True)
        except FileNotFoundError:
            return []
        out = []
        for key, meta in sorted(found.items()):
            if not key.startswith(prefix):
                continue
            rel = key[len(prefix):]
            if meta.get("type") == "directory" or key.endswith("/"):
                out.append(Entry(rel.rstrip("/"), "folder"))
            else:
                out.append(Entry(rel, "file", int(meta.get("size") or 0), object_version(meta)))
        return out

    def root_entry(self) -> Entry:
        meta = self.fs.info(self.root)
        if meta.get("type") == "directory":
            return Entry("", "folder")
        return Entry("", "file", int(meta.get("size") or 0), object_version(meta))

    def peek(self) -> None:
        return None

    def open_input(self, rel: str, *, size: int, version: int | str = "", offset: int | None = None) -> Opened:
        """One GET into memory of the object's ``size`` bytes (or a member's, from ``offset``) of the
        ``version`` listed (``_fetch``: on S3 conditional, ``If-Match``; elsewhere one info request
        after it); an object replaced since, even by one of the same size, is ``FileReplaced``. Without
        a version (a store that gives none) the whole object, so that a grown one is seen."""
        if version:
            start = offset or 0
            (data,) = self._fetch(rel, [(start, start + size)], str(version), "listed")
        else:
            end = None if offset is None else offset + size
            data = self.fs.cat_file(self.path(rel), start=offset, end=end)
        if len(data) != size:
            raise FileReplaced(f"is {len(data)} bytes, it was {size} when listed (changed?)")
        return _Fetched(data, version)

    def open_scan(self, rel: str, size: int) -> BinaryIO:
        """Read ahead in blocks of 1 MiB (a tar archive's headers: a few ranged reads)."""
        return self.fs.open(self.path(rel), "rb", block_size=1 << 20, cache_type="readahead")

    def stamp(self, rel: str, *, size: int, version: int | str = "", offset: int | None = None) -> list:
        """The listed version: no request per file (the build's own listing is fresh)."""
        return [size, version]

    def exists(self, rel: str) -> bool:
        return bool(self.fs.exists(self.path(rel)))

    def read_bytes(self, rel: str, *, limit: int | None = None, follow_links: bool = False) -> bytes:
        """``limit``: the object's size from its info, before it is read (an object store has no links)."""
        if limit is None:
            return self.fs.cat_file(self.path(rel))
        info = self.fs.info(self.path(rel))
        if info.get("type") != "file":
            raise NotARegularFile(self.url(rel), "a prefix, not an object")
        if (info.get("size") or 0) > limit:
            raise FileTooLarge(info["size"])
        with self.open(rel, "rb") as fh:
            return fh.read(limit + 1)

    def write_bytes(self, rel: str, data: bytes, *, exclusive: bool = False, durable: bool = False,
                    before_commit: Callable[[], None] | None = None) -> None:
        """One whole object (durable once written); ``exclusive`` is a conditional write.
        ``before_commit`` runs before the upload starts: the object becomes visible when it ends."""
        if before_commit is not None:
            before_commit()
        with self.fs.open(self.path(rel), "xb" if exclusive else "wb") as fh:
            fh.write(data)

    def put_file(self, local: str | os.PathLike, rel: str) -> None:
        """An upload (multipart in blocks: memory bounded)."""
        self.fs.put_file(os.fspath(local), self.path(rel))

    def get_file(self, rel: str, local: str | os.PathLike) -> None:
        self.fs.get_file(self.path(rel), os.fspath(local))

    def copy(self, rel: str, to: str) -> None:
        """Server-side."""
        self.fs.copy(self.path(rel), self.path(to))

    def remove(self, rels: list[str], folders: Iterable[str] = ()) -> None:
        """One request per 1,000 objects (S3); an object store has no folders to remove."""
        if rels:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm([self.path(r) for r in rels])

    def makedirs(self) -> None:
        """Nothing: an object store has no folders."""

    def check_reachable(self) -> None:
        self.fs.info(self.root.split("/", 1)[0])

    @contextlib.contextmanager
    def writing(self, rel: str) -> Iterator[Path]:
        """A file in a local temporary folder, uploaded whole when the block ends."""
        with tempfile.TemporaryDirectory(prefix="tpuprep-write-") as tmp:
            local = Path(tmp) / posixpath.basename(rel)
            yield local
            self.put_file(local, rel)

    @contextlib.contextmanager
    def reading(self, rel: str) -> Iterator[Path]:
        """A download into a temporary folder, removed afterwards."""
        with tempfile.TemporaryDirectory(prefix="tpuprep-read-") as tmp:
            local = Path(tmp) / posixpath.basename(rel)
            self.get_file(rel, local)
            yield local

    def open(self, rel: str, mode: str = "rb", **kwargs: Any):
        return self.fs.open(self.path(rel), mode, **kwargs)

    def open_url(self, url: str, mode: str = "rb", **kwargs: Any):
        return self.fs.open(self.fs._strip_protocol(url), mode, **kwargs)

    def lock_at(self, rel: str) -> LeaseLock:
        """A lease object: conditionally created, renewed, taken over when stale."""
        return LeaseLock(self, rel)

    def arrow_filesystem(self):
        import pyarrow.fs as pafs

        return pafs.PyFileSystem(pafs.FSSpecHandler(self.fs))

    # ------------------------------------------------------------------------------------- shards

    def open_shard_file(self, rel: str) -> RemoteShardFile:
        """The object's size and version (ETag, generation …) from one info request: every later read
        is of that version."""
        url = self.url(rel)
        try:
            info = self.fs.info(self.path(rel))
        except FileNotFoundError:
            raise NotConfined("the file does not exist") from None
        except Exception as exc:  # botocore's errors are not all OSErrors
            if not library_error(exc):
                raise
            raise self.failure(exc, url) from None
        if info.get("type") != "file":
            raise NotConfined("is not a file")
        return RemoteShardFile(self, url, int(info["size"]), object_version(info))

    def get_ranges(self, rel: str, ranges: list[tuple[int, int]], version: str = "") -> list[bytes]:
        """The bytes of each range [start, end) of the object ``rel``, fetched at once (one ranged GET
        each, concurrently on an async filesystem such as s3fs), all of the object's ``version`` when
        given: on S3 every GET is conditional on it (``If-Match``: no extra request); elsewhere one info
        request after the GETs compares it. ``FileReplaced`` when the object is gone, shorter, or
        another version; another failure is the store's one line."""
        url = self.url(rel)
        try:
            return self._fetch(rel, ranges, version, "opened")
        except FileReplaced as exc:
            raise FileReplaced(f"{url} {exc}") from None
        except FileNotFoundError:
            raise FileReplaced(f"{url} no longer exists") from None
        except Exception as exc:  # botocore's NoCredentialsError ...
            if not library_error(exc):
                raise
            raise self.failure(exc, url) from None

    def _fetch(self, rel: str, ranges: list[tuple[int, int]], version: str, since: str) -> list[bytes]:
        """``get_ranges``'s reads: ``FileReplaced`` saying (without naming the object) what changed
        since it was ``since`` ("opened", "listed"); a failed request (a missing object too) as the
        filesystem raises it."""
        try:
            if version and _conditional(self.fs):
                return _if_match(self.fs, self.path(rel), ranges, version)
            blocks = self.fs.cat_ranges([self.path(rel)] * len(ranges), [a for a, _ in ranges],
                                        [b for _, b in ranges])
            for block in blocks:
                if isinstance(block, BaseException):
                    raise block
            if version and object_version(self.fs.info(self.path(rel), refresh=True)) != version:
                raise FileReplaced(f"was replaced after it was {since}: another version")
            return blocks
        except OSError as exc:
            if exc.errno == errno.EINVAL and "pre-condition" in str(exc):
                raise FileReplaced(f"was replaced after it was {since}: another ETag") from None
            if exc.errno == errno.EINVAL and "range" in str(exc).lower():
                raise FileReplaced(f"is shorter than when it was {since}") from None
            raise

    def check_version(self, rel: str, version: str) -> None:
        """``FileReplaced`` unless the object ``rel`` is still of ``version`` (one info request)."""
        try:
            now = object_version(self.fs.info(self.path(rel), refresh=True))
        except FileNotFoundError:
            raise FileReplaced(f"{self.url(rel)} no longer exists") from None
        if now != version:
            raise FileReplaced(f"{self.url(rel)} was replaced after it was opened: another version")


class RemoteShardFile(ShardFile):
    """An object of a ``RemoteStore`` pinned to the version (ETag, generation …) it had when opened."""

    def __init__(self, store: RemoteStore, url: str, size: int, version: str):
        self.store, self.name, self.size, self.version = store, url, size, version
        self.rel = store.fs._strip_protocol(url)[len(store.root.rstrip("/")) + 1:]
        self._checked = _conditional(store.fs) or not version  # reads need no separate check

    def source(self) -> _Window:
        return _Window(self, [])

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        return self.store.get_ranges(self.rel, ranges, self.version)

    def prefetched(self, ranges: list[tuple[int, int]]) -> _Window:
        return _Window(self, list(zip([a for a, _ in ranges], self.read_ranges(ranges), strict=True)))

    def fetch(self, start: int, end: int) -> bytes:
        """Bytes [start, end) for a read of ``source``: conditional on S3, unchecked (``verify``) elsewhere."""
        if self._checked:
            return self.read_ranges([(start, end)])[0]
        return self.store.get_ranges(self.rel, [(start, end)])[0]

    def verify(self) -> None:
        if not self._checked:
            self.store.check_version(self.rel, self.version)

    def close(self) -> None:
        """Nothing is held open."""


def _conditional(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether ``fs`` makes ranged GETs conditional on an ETag (s3fs: ``If-Match``)."""
    return callable(getattr(fs, "_call_s3", None))


def _if_match(fs: fsspec.AbstractFileSystem, path: str, ranges: list[tuple[int, int]], etag: str) -> list[bytes]:
    """One ranged ``GetObject`` per range, concurrently, each conditional on ``etag`` (``If-Match``: S3
    answers 412, which s3fs raises as ``OSError(EINVAL, "... pre-conditions ...")``)."""
    import asyncio

    from fsspec.asyn import sync

    bucket, key, _ = fs.split_path(path)

    async def get(start: int, end: int) -> bytes:
        if end <= start:
            return b""
        resp = await fs._call_s3("get_object", Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}",
                                 IfMatch=etag)
        try:
            return await resp["Body"].read()
        finally:
            resp["Body"].close()

    async def every() -> list[bytes]:
        return await asyncio.gather(*(get(a, b) for a, b in ranges))

    return sync(fs.loop, every)


class _Fetched(io.BytesIO):
    """An input's bytes fetched by ``RemoteStore.open_input``: they cannot change while it is read."""

    def __init__(self, data: bytes, version: int | str):
        super().__init__(data)
        self.size, self.version = len(data), version

    def stamp(self) -> list:
        return [self.size, self.version]


def object_version(meta: dict) -> str:
    """What identifies this version of an object, from its listing or info (the same either way): its
    ETag (S3), its generation (GCS), else its modification time (a ``datetime`` as its POSIX timestamp:
    ``memory://`` lists a float where its info has a ``datetime``); "" when the store says none."""
    for key in ("ETag", "etag", "generation", "LastModified", "mtime", "updated", "created"):
        value = meta.get(key)
        if value:
            return str(value.timestamp() if isinstance(value, datetime.datetime) else value)
    return ""


class _Window(ByteWindow):
    """A seekable read-only view of a ``RemoteShardFile`` (for pyarrow), some of whose byte ranges are
    already in memory (``prefetched``); any other read fetches exactly what it asks for (one ranged
    request of the pinned version)."""

    def __init__(self, shard: RemoteShardFile, blocks: list[tuple[int, bytes]]):
        super().__init__(shard.size)
        self.shard = shard
        self.blocks = sorted(blocks, key=lambda b: b[0])
        self.starts = [start for start, _ in self.blocks]

    def fill(self, view: memoryview, pos: int) -> int:
        end = pos + len(view)
        i = bisect.bisect_right(self.starts, pos) - 1
        if i >= 0 and end <= self.starts[i] + len(self.blocks[i][1]):
            data = memoryview(self.blocks[i][1])[pos - self.starts[i]: end - self.starts[i]]
        else:
            data = memoryview(self.shard.fetch(pos, end))
        view[: len(data)] = data
        return len(data)
