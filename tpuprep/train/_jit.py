"""Numba set-up for the trainer: reuse the project's cached ``kernel`` decorator when it exists."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

try:  # the project-wide decorator configures a writable on-disk cache before importing numba
    from tpuprep.kernels._jit import kernel as _project_kernel
except Exception:  # pragma: no cover - only when the kernels package is absent or broken
    _project_kernel = None


def kernel(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a nopython kernel (cached on disk where possible, releases the GIL)."""
    if _project_kernel is not None:
        return _project_kernel(fn)
    import numba  # pragma: no cover

    return numba.njit(nogil=True)(fn)  # pragma: no cover
