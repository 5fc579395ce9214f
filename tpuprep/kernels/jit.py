"""One place that configures Numba for every tpuprep kernel.

Compiled kernels are cached on disk so that only the first process on a machine pays the compile
time. The cache directory defaults to ``$XDG_CACHE_HOME/tpuprep/numba`` (``~/.cache/...``), which
keeps a read-only install working; ``NUMBA_CACHE_DIR`` overrides it as Numba users expect, and
``TPUPREP_NUMBA_CACHE=0`` turns disk caching off altogether.
"""

from __future__ import annotations

import os
from pathlib import Path


def _configure_cache_dir() -> bool:
    if os.environ.get("TPUPREP_NUMBA_CACHE", "1") == "0":
        return False
    if "NUMBA_CACHE_DIR" not in os.environ:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        cache_dir = base / "tpuprep" / "numba"
        try:
            cache_dir.mkdir(parents=True, exist_ok=True)
            probe = cache_dir / ".write-probe"
            probe.touch()
            probe.unlink()
        except OSError:
            return False  # nowhere writable: compile in memory, never fail an import
        os.environ["NUMBA_CACHE_DIR"] = str(cache_dir)
    return True


CACHE = _configure_cache_dir()

import numba  # noqa: E402  (must follow the environment set-up above)


def kernel(fn):
    """Decorate a nopython kernel: cached on disk, releases the GIL, no fastmath (results are exact)."""
    return numba.njit(cache=CACHE, nogil=True)(fn)
