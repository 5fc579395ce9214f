"""Raw DEFLATE decompressors: the fastest one installed, stdlib zlib as the fallback.

``isal`` (Intel ISA-L, on PyPI as ``isal``) and ``zlib_ng`` (``zlib-ng``) inflate the same streams
faster than zlib; tpuprep uses the first one importable unless ``TPUPREP_INFLATE`` names one of
``isal``, ``zlib-ng`` or ``zlib``. ``raw_inflater()`` hides their differences behind one streaming
interface (``RawInflater``): ISA-L through its ``IgzipDecompressor``, which keeps unconsumed input
inside (the zlib-style ``decompressobj`` hands it back as ``unconsumed_tail``, a copy per call: 3x
slower on a 2.7 GB member with 1 MiB output steps, benchmarks/RESULTS.md §15).

The backend is chosen at the first decompression, not at import: a bad ``TPUPREP_INFLATE`` (an
unknown name, or a backend that is not installed) stops only a command that reads npz data, with
one ``FatalError`` line naming the variable.
"""

from __future__ import annotations

import functools
import importlib
import os
import zlib
from types import ModuleType

from ..errors import FatalError

ENV = "TPUPREP_INFLATE"
BACKENDS = {"isal": "isal.isal_zlib", "zlib-ng": "zlib_ng.zlib_ng", "zlib": "zlib"}
"""Backend name -> module, fastest first."""
PACKAGES = {"isal": "isal", "zlib-ng": "zlib-ng"}
"""Backend name -> the PyPI package that provides it."""


def select_backend(name: str | None = None) -> tuple[str, ModuleType]:
    """Return (backend name, module with ``decompressobj`` and ``crc32``).

    ``name`` (default: ``$TPUPREP_INFLATE``; empty means the fastest installed) must be a key of
    ``BACKENDS`` and installed, else ``FatalError``.
    """
    source = "backend" if name is not None else ENV
    wanted = (os.environ.get(ENV, "") if name is None else name).strip()
    if not wanted:
        for label, module in BACKENDS.items():
            try:
                return label, importlib.import_module(module)
            except ImportError:
                continue
        return "zlib", zlib
    if wanted not in BACKENDS:
        raise FatalError(f"{source}={wanted!r} is not a DEFLATE backend: use one of "
                         f"{', '.join(BACKENDS)} (or leave {ENV} unset for the fastest installed)")
    try:
        return wanted, importlib.import_module(BACKENDS[wanted])
    except ImportError:
        raise FatalError(f"{source}={wanted}, but {wanted} is not installed (pip install "
                         f"{PACKAGES[wanted]}); or set {ENV}=zlib, or unset it") from None


@functools.cache
def backend() -> tuple[str, ModuleType]:
    """The backend this process uses (chosen once, at the first call)."""
    return select_backend()


def __getattr__(attr: str):
    """``BACKEND_NAME`` and ``BACKEND``, as the module once had them (chosen lazily now)."""
    if attr == "BACKEND_NAME":
        return backend()[0]
    if attr == "BACKEND":
        return backend()[1]
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


class RawInflater:
    """Streaming inflate of raw DEFLATE data (no zlib or gzip header), output in bounded steps.

    ``decompress(data, limit)`` takes new input (``b""`` for none) and returns at most ``limit``
    inflated bytes (``limit`` ≥ 1); input not yet used is kept inside. ``needs_input``: True when no
    more output can come before new input is given; ``eof``: the end of the DEFLATE stream was reached.
    """

    needs_input: bool
    eof: bool

    def decompress(self, data: bytes, limit: int) -> bytes:  # pragma: no cover - interface
        raise NotImplementedError


class _Igzip(RawInflater):
    """ISA-L's ``IgzipDecompressor`` (bz2-style: buffers input and output inside, no copies back)."""

    def __init__(self):
        from isal import igzip_lib

        self._d = igzip_lib.IgzipDecompressor(flag=igzip_lib.DECOMP_DEFLATE)

    @property
    def needs_input(self) -> bool:
        return self._d.needs_input and not self._d.eof

    @property
    def eof(self) -> bool:
        return self._d.eof

    def decompress(self, data: bytes, limit: int) -> bytes:
        if self._d.eof:
            if data:
                raise ValueError("data after the end of the DEFLATE stream")
            return b""
        return self._d.decompress(data, limit)


class _ZlibStyle(RawInflater):
    """A zlib-style ``decompressobj(-15)`` (zlib, zlib-ng, isal_zlib): input it did not use comes back
    as ``unconsumed_tail`` and is fed again on the next call."""

    def __init__(self, module: ModuleType):
        self._d = module.decompressobj(-15)
        self._tail = b""
        self.needs_input = True

    @property
    def eof(self) -> bool:
        return self._d.eof

    def decompress(self, data: bytes, limit: int) -> bytes:
        if data and self._tail:
            raise ValueError("new input before the previous input was used")
        out = self._d.decompress(data or self._tail, limit)
        self._tail = self._d.unconsumed_tail
        # output may stop at ``limit`` with none of the input left over (some backends hold inflated
        # bytes back): only a call that came out short proves that new input is needed
        self.needs_input = not self._tail and len(out) < limit
        return out


def raw_inflater(name: str | None = None) -> RawInflater:
    """A ``RawInflater`` on this process's backend (or on backend ``name``, for tests and benchmarks)."""
    label, module = backend() if name is None else select_backend(name)
    return _Igzip() if label == "isal" else _ZlibStyle(module)


def crc32(data, value: int = 0) -> int:
    return backend()[1].crc32(data, value)
