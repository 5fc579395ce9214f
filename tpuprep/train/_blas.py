"""Limit the BLAS thread pool while the trainer runs.

The model's matmuls are tall and skinny ((B·nodes) × H by H × H with H ≈ 32–64). OpenBLAS splits them
across threads and then waits on every call; on a busy machine a single thread was measured 4× faster
(and it keeps results independent of the machine's core count). :func:`blas_threads` sets the pool
size for a ``with`` block and restores it afterwards, through ``threadpoolctl`` (a dependency), which
knows OpenBLAS, MKL and BLIS on every platform.

The controller (the scan of the libraries loaded into the process) is made once and reused: a fresh
``threadpool_limits`` rescans them on every entry, ≈ 1.9 ms here, against ≈ 45 µs for ``limit`` on a
kept controller (the trainer enters the block once per run, so either is far below a training step,
0.2–1.3 s). A BLAS loaded after the first entry is picked up by :func:`reset_controller`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any


@cache
def _controller() -> Any:
    import numpy  # noqa: F401  (NumPy's BLAS must be loaded before the scan)
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def reset_controller() -> None:
    """Forget the scanned libraries (the next :func:`blas_threads` scans again)."""
    _controller.cache_clear()


@contextmanager
def blas_threads(n: int | None) -> Iterator[None]:
    """Run the block with at most ``n`` BLAS threads (None: leave the pool as it is)."""
    if n is None:
        yield
        return
    with _controller().limit(limits=n, user_api="blas"):
        yield
