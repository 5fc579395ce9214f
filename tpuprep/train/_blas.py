"""Limit the BLAS thread pool while the trainer runs.

The model's matmuls are tall and skinny ((B·nodes) × H by H × H with H ≈ 32–64). OpenBLAS splits them
across threads and then waits on every call; on a busy machine a single thread was measured 4× faster
(and it keeps results independent of the machine's core count). :func:`blas_threads` sets the pool
size for a ``with`` block and restores it afterwards: through ``threadpoolctl`` when it is installed,
else through the OpenBLAS that NumPy has loaded (found in /proc/self/maps), else it does nothing.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_", "openblas_set_num_threads")
_GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
            "openblas_get_num_threads64_", "openblas_get_num_threads")


def _openblas_libs() -> list[Any]:
    """ctypes handles of the OpenBLAS libraries mapped into this process (Linux only)."""
    import numpy  # noqa: F401  (make sure NumPy's BLAS is loaded)

    paths: list[str] = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rsplit(" ", 1)[-1].strip()
                if "openblas" in os.path.basename(path).lower() and path not in paths:
                    paths.append(path)
    except OSError:
        return []
    libs = []
    for p in paths:
        try:
            libs.append(ctypes.CDLL(p))
        except OSError:
            continue
    return libs


def _funcs() -> list[tuple[Any, Any]]:
    out = []
    for lib in _openblas_libs():
        setter = next((getattr(lib, s) for s in _SETTERS if hasattr(lib, s)), None)
        getter = next((getattr(lib, g) for g in _GETTERS if hasattr(lib, g)), None)
        if setter is not None and getter is not None:
            getter.restype = ctypes.c_int
            out.append((setter, getter))
    return out


@contextmanager
def blas_threads(n: int | None) -> Iterator[None]:
    """Run the block with at most ``n`` BLAS threads (None: leave the pool as it is)."""
    if n is None:
        yield
        return
    try:
        from threadpoolctl import threadpool_limits  # type: ignore[import-not-found]
    except ImportError:
        threadpool_limits = None
    if threadpool_limits is not None:
        with threadpool_limits(limits=n, user_api="blas"):
            yield
        return
    funcs = _funcs()
    saved = []
    for setter, getter in funcs:
        saved.append((setter, int(getter())))
        setter(ctypes.c_int(n))
    try:
        yield
    finally:
        for setter, old in saved:
            setter(ctypes.c_int(old))
