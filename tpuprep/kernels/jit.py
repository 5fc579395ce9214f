"""One place that configures Numba for every tpuprep kernel.

Compiled kernels are cached on disk so that only the first process on a machine pays the compile
time. The cache directory defaults to ``$XDG_CACHE_HOME/tpuprep/numba/<sources>`` (``~/.cache/...``),
which keeps a read-only install working; ``NUMBA_CACHE_DIR`` overrides it as Numba users expect, and
``TPUPREP_NUMBA_CACHE=0`` turns disk caching off altogether.

``<sources>`` is a digest of every module that defines kernels (``KERNEL_MODULES``). Numba checks a
cached function only against the file that defines it, so a kernel that calls (and inlines) a kernel of
another module would otherwise keep running the callee's old code after that module changed, e.g. in an
editable install after a ``git pull`` (found when ``base7.pack_valid`` changed under ``tied._pack_rows``).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

KERNEL_MODULES = ("kernels/base7.py", "kernels/dedup.py", "kernels/planes.py", "kernels/prune.py",
                  "kernels/repad.py", "kernels/tied.py", "train/kernels.py", "train/metrics.py")
"""Every module of the package that defines a ``@kernel`` (paths under ``tpuprep/``; a test keeps the list
complete): their bytes name the cache directory."""


def sources_digest(root: Path | None = None) -> str:
    """16 hex digits of sha256 over the bytes of ``KERNEL_MODULES`` under ``root`` (default: this
    package; ≈ 60 KB read once per process). A module that cannot be read counts as absent."""
    root = Path(__file__).resolve().parent.parent if root is None else root
    h = hashlib.sha256()
    for rel in KERNEL_MODULES:
        try:
            data = (root / rel).read_bytes()
        except OSError:
            data = b"(absent)"
        h.update(rel.encode() + b"\0" + data + b"\0")
    return h.hexdigest()[:16]


def _configure_cache_dir() -> bool:
    if os.environ.get("TPUPREP_NUMBA_CACHE", "1") == "0":
        return False
    if "NUMBA_CACHE_DIR" not in os.environ:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        cache_dir = base / "tpuprep" / "numba" / sources_digest()
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
