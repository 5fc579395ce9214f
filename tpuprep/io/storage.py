"""``resolve``: what the user typed (a folder, a file, a URL) → the ``Store`` where tpuprep reads and writes
it — the only factory of stores, and ``location`` the only place a location is classified.

``resolve(target, storage_options)`` is called once per command for ``--src`` and once for ``--dst``
(and once per ``open_dataset``), and the store is passed along, never the string (like pyarrow's
``filesystem=`` argument, resolved once). A local path, or a ``file:`` URL naming one, is a
``LocalStore`` (plain ``os`` calls); any other URL (``s3://``, ``gs://``, ``memory://`` …) a
``RemoteStore`` over its fsspec filesystem (``storage_options`` go to that filesystem).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import UsageError
from .files import looks_like_url
from .local_store import LocalStore
from .remote_store import RemoteStore
from .store import Store, without_credentials

EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs"}
"""URL scheme → the ``tpuprep[...]`` extra that installs its filesystem package."""

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]+)://")
_FILE = re.compile(r"file:", re.IGNORECASE)


def _scheme(text: str) -> str | None:
    """The URL scheme of ``text`` in lower case, or None when it is a local path (``io.files.looks_like_url``)."""
    if not looks_like_url(text):
        return None
    match = _SCHEME.match(text)
    if match is None:  # "s3:/bucket": pathlib squeezed the double slash of a URL
        return text.split(":", 1)[0].lower()
    return match.group(1).lower()


def location(target: str | os.PathLike, what: str = "path") -> Path | str:
    """What ``target`` names, classified: a local ``Path`` (a path as given, or the absolute path a
    ``file:`` URL names: ``file:///x``, ``file:/x``), or the URL of an object store as a ``str``
    (``s3:/b``, as pathlib and click's Path type squeeze ``s3://b``, gets its ``//`` back). ``what``
    names the argument in errors.

    ``UsageError`` for a file URL that names a host (``file://tmp/x`` would silently mean ``/x``) or
    a relative path (``file:out``: a file URL names an absolute path; ``./file:out`` is the folder of
    that name)."""
    text = os.fspath(target)
    scheme = _scheme(text)
    if scheme is None:
        if _FILE.match(text):
            raise UsageError(f"{what} {text}: a file URL names an absolute path (file:///path/to/folder), "
                             f"or give the path itself (./{text} is a folder of that name)")
        return Path(text)
    if scheme != "file":
        return text if "://" in text else text.replace(":/", "://", 1)
    parts = urlsplit(text)
    if parts.netloc not in ("", "localhost"):
        raise UsageError(f"{what} {text}: a file URL names no host (file:///path, or the path itself); "
                         f"{parts.netloc!r} would be dropped")
    return Path(parts.path)


def local_path(target: str | os.PathLike, what: str = "path") -> Path | None:
    """The local path ``target`` names (``location``), or None for the URL of an object store."""
    where = location(target, what)
    return where if isinstance(where, Path) else None


def shown(location: str | os.PathLike) -> str:
    """A location as it may be printed or logged: a URL without credentials (``user:secret@``, query
    strings), a local path as it is."""
    text = os.fspath(location)
    return text if _scheme(text) is None else without_credentials(text)


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


def resolve(target: str | os.PathLike, storage_options: dict | None = None, *, what: str = "path",
            cache_dir: str | os.PathLike | None = None, cache_bytes: int | None = None) -> Store:
    """The ``Store`` of a local path or URL (``what`` names the argument in errors: ``--dst``).
    A local store is rooted at the absolute path (``~`` expanded; links kept: ``Store.resolved``
    follows them); its ``display`` is the path as given. With ``cache_dir``, a URL's store reads shards
    through that local cache folder of at most ``cache_bytes`` bytes (``cache_store.CachedStore``; a
    local folder is read in place and needs none)."""
    text = os.fspath(target)
    where = location(text, what)
    if cache_dir is not None or cache_bytes is not None:
        # imported here: SQLite and the cache's code only for who asks for a cache
        from .cache_store import cached, check_cache

        # also for a local folder: a mistake is refused everywhere
        cache_dir, cache_bytes = check_cache(cache_dir, cache_bytes)
    if isinstance(where, Path):
        return LocalStore(root=str(where.expanduser().absolute()), display=str(where) if _scheme(text) else text)
    scheme = _scheme(where)
    cls = filesystem_class(scheme, f"{what} {without_credentials(where)}")
    fs = cls(**(storage_options or {}))
    store = RemoteStore(root=cls._strip_protocol(where).rstrip("/"), display=without_credentials(where), fs=fs,
                        protocol=scheme, options=storage_options or None)
    return store if cache_dir is None else cached(store, cache_dir, cache_bytes)
