"""Raw DEFLATE decompressors: the fastest one installed, stdlib zlib as the fallback.

``isal`` (Intel ISA-L, on PyPI as ``isal``) and ``zlib_ng`` (``zlib-ng``) inflate the same streams
faster than zlib; tpuprep uses the first one importable unless ``TPUPREP_INFLATE`` names one of
``isal``, ``zlib-ng`` or ``zlib``. All three expose the zlib ``decompressobj(wbits=-15)`` interface.

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


def raw_decompressor():
    """A decompressor for raw DEFLATE data (no zlib or gzip header)."""
    return backend()[1].decompressobj(-15)


def crc32(data, value: int = 0) -> int:
    return backend()[1].crc32(data, value)
