"""Setting up a worker process: thread caps, malloc tuning, Numba kernels loaded once (and compiled
once, by the process that starts local workers: ``compile_if_missing``).

Used by the local process pool (as its initializer) and by the Dask worker plugin, so a worker of
either kind converts its first file at full speed.
"""

from __future__ import annotations

import gc
import os

THREAD_ENV = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
              "POLARS_MAX_THREADS")


def cap_threads(threads: int = 1) -> None:
    """Limit this process's native thread pools to ``threads``.

    The environment variables only reach libraries imported afterwards (call this before heavy
    imports where possible); Arrow's pools are resized at once. tpuprep's Numba kernels are serial,
    so Numba's own pool size does not matter for them.
    """
    threads = max(int(threads), 1)
    for name in THREAD_ENV:
        os.environ[name] = str(threads)
    import pyarrow as pa

    pa.set_cpu_count(threads)
    pa.set_io_thread_count(threads)


MMAP_THRESHOLD = 32 << 20  # glibc's largest; its default is dynamic and grows to this as large blocks are freed
TRIM_THRESHOLD = 128 << 20


def tune_malloc() -> bool:
    """Let glibc reuse freed large blocks instead of unmapping them (Linux/glibc; False elsewhere).

    A conversion allocates and frees arrays of megabytes per file and per row group. glibc normally learns to keep
    them (its mmap threshold grows as large blocks are freed), but setting ``MALLOC_TRIM_THRESHOLD_``
    — which Dask's nanny does for every worker (65,536) — turns that learning off: every block over
    128 KB is then mmapped and unmapped again, page-faulting fresh memory each time (measured: 35 %
    slower on a 2.69 GB layout file). Fixing both thresholds restores the fast path in any worker; at
    most 128 MB of freed memory stays mapped.
    """
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (e.g. musl)
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
    return bool(mallopt(m_mmap_threshold, MMAP_THRESHOLD)) and bool(mallopt(m_trim_threshold, TRIM_THRESHOLD))


def as_converter(kernels: bool = False) -> None:
    """Set up this process to convert many files: tune malloc, keep layout store buffers between
    graphs (``kernels.keep_spare_store``), load the build's Numba kernels (``kernels``: ``kernels.warm``,
    before the first file, so a first compile is announced before any progress) and freeze the heap
    (``_freeze_heap``). Workers do it; so does the CLI's serial path (a library caller's process is
    left alone)."""
    from .. import kernels as kernel_module

    tune_malloc()
    kernel_module.keep_spare_store()
    if kernels:
        kernel_module.warm()
    _freeze_heap()


def compile_if_missing() -> bool:
    """When the disk cache lacks some of the build's kernels, compile them in this process now (≈ 5 s of
    CPU; ``kernels.jit`` announces it), before worker processes start on this machine: they then load
    them (≈ 0.4 s each) instead of each compiling all of them at the same time. When the cache has them
    all (read from its index, nothing loaded) or kernels are not cached at all, nothing. True when it
    compiled. (A process that converts the files itself needs none of this: its kernels compile on
    first use, only those it calls.)"""
    from ..kernels import build_kernels, jit, warm

    if not jit.CACHE or all(jit.is_cached(k) for k in build_kernels()):
        return False
    warm()
    return True


def _freeze_heap() -> None:
    """Move every object alive now (those of the modules and kernels loaded) out of the garbage
    collector's reach. They live as long as the process, yet each full collection walked them all (the
    collector was ≈ 1.2 % of a build's CPU: benchmarks/RESULTS.md §21)."""
    gc.freeze()


def warm_worker(threads: int = 1, kernels: bool = True) -> None:
    """Cap threads and set up a converter (``as_converter``) with the build's Numba kernels loaded, so no
    task pays a compile or cache load (``kernels=False``: not the kernels, for tasks that use none, such
    as ``verify``'s: ≈ 0.25 s of CPU per worker)."""
    cap_threads(threads)
    as_converter(kernels)
