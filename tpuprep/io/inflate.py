"""Raw DEFLATE decompressors: the fastest one installed, stdlib zlib as the fallback.

``isal`` (Intel ISA-L, on PyPI as ``isal``) and ``zlib_ng`` inflate the same streams faster than zlib;
tpuprep uses the first one importable unless ``TPUPREP_INFLATE`` names one of ``isal``, ``zlib-ng`` or
``zlib``. All three expose the zlib ``decompressobj(wbits=-15)`` interface.
"""

from __future__ import annotations

import os
import zlib
from types import ModuleType


def _candidates() -> list[tuple[str, str]]:
    return [("isal", "isal.isal_zlib"), ("zlib-ng", "zlib_ng.zlib_ng"), ("zlib", "zlib")]


def select_backend(name: str | None = None) -> tuple[str, ModuleType]:
    """Return (backend name, module with ``decompressobj`` and ``crc32``)."""
    import importlib

    wanted = name or os.environ.get("TPUPREP_INFLATE")
    for label, module in _candidates():
        if wanted and label != wanted:
            continue
        try:
            return label, importlib.import_module(module)
        except ImportError:
            if wanted:
                raise
    return "zlib", zlib


BACKEND_NAME, BACKEND = select_backend()


def raw_decompressor():
    """A decompressor for raw DEFLATE data (no zlib or gzip header)."""
    return BACKEND.decompressobj(-15)


def crc32(data, value: int = 0) -> int:
    return BACKEND.crc32(data, value)
