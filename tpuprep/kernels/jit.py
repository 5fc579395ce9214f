"""One place that configures Numba for every tpuprep kernel.

Compiled kernels are cached on disk so that only the first process on a machine pays the compile
time. The cache directory defaults to ``$XDG_CACHE_HOME/tpuprep/numba/<sources>`` (``~/.cache/...``),
which keeps a read-only install working; ``NUMBA_CACHE_DIR`` overrides it as Numba users expect, and
``TPUPREP_NUMBA_CACHE=0`` turns disk caching off altogether. Numba reads ``NUMBA_CACHE_DIR`` when it is
first imported, which may be before this module (``torch_geometric`` imports it, and so
``tpuprep.pyg``): this module then has Numba read its configuration again before any kernel is defined.

``<sources>`` is a digest of every module the kernels' compiled code depends on (``KERNEL_MODULES``).
Numba checks a cached function only against the file that defines it, so a kernel that calls (and
inlines) a kernel of another module would otherwise keep running the callee's old code after that module
changed, e.g. in an editable install after a ``git pull`` (found when ``base7.pack_valid`` changed under
``tied._pack_rows``); the same holds for a module-level constant a kernel reads (Numba bakes it into the
code) and for the compile options of ``kernel`` below.

A process that compiles a kernel (a cache miss, not a load) logs ``compiling_message`` once, on the
``tpuprep.kernels`` logger: the first run on a machine takes longer, and the commands say why
(``cli.common.notes``). ``frozen`` gives each kernel one signature; ``is_cached`` reads the cache's index.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

KERNEL_MODULES = ("kernels/base7.py", "kernels/dedup.py", "kernels/jit.py", "kernels/planes.py",
                  "kernels/prune.py", "kernels/repad.py", "kernels/tied.py", "tpugraphs.py", "train/kernels.py",
                  "train/metrics.py")
"""Paths under ``tpuprep/`` of every module that defines a ``@kernel`` and of every tpuprep module those
import from (this one: the compile options; ``tpugraphs.py``: the column and opcode constants of
``repad``'s kernels): their bytes name the cache directory. A test keeps the list exactly that."""


def sources_digest(root: Path | None = None) -> str:
    """16 hex digits of sha256 over the bytes of ``KERNEL_MODULES`` under ``root`` (default: this
    package; ≈ 80 KB read once per process). A module that cannot be read counts as absent."""
    root = Path(__file__).resolve().parent.parent if root is None else root
    h = hashlib.sha256()
    for rel in KERNEL_MODULES:
        try:
            data = (root / rel).read_bytes()
        except OSError:
            data = b"(absent)"
        h.update(rel.encode() + b"\0" + data + b"\0")
    return h.hexdigest()[:16]


def writable_folder(folder: Path) -> bool:
    """Whether ``folder`` exists (made if missing) and takes a new file: a probe file named by this
    process and a random token, so that processes starting at once never remove each other's."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-probe-{os.getpid()}-{secrets.token_hex(4)}"
        probe.touch()
        probe.unlink(missing_ok=True)
    except OSError:
        return False
    return True


def _configure_cache_dir() -> bool:
    if os.environ.get("TPUPREP_NUMBA_CACHE", "1") == "0":
        return False
    if "NUMBA_CACHE_DIR" not in os.environ:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        cache_dir = base / "tpuprep" / "numba" / sources_digest()
        if not writable_folder(cache_dir):
            return False  # nowhere writable: compile in memory, never fail an import
        os.environ["NUMBA_CACHE_DIR"] = str(cache_dir)
    return True


CACHE = _configure_cache_dir()

import logging  # noqa: E402

import numba  # noqa: E402  (must follow the environment set-up above)
import numpy as np  # noqa: E402
from numba.core import config, event  # noqa: E402

config.reload_config()  # Numba imported before the set-up above (torch_geometric does) reads it now

LOGGER = __package__
"""``tpuprep.kernels``: the logger ``compiling_message`` goes to (level INFO). ``tpuprep``'s commands show
it on stderr and in their ``--log-file`` (``cli.common.notes``); a library caller sees it if it
configures logging."""


def compiling_message() -> str:
    """What a process says when it starts compiling tpuprep's kernels (where they will be cached)."""
    where = config.CACHE_DIR if CACHE else ""  # where Numba puts the kernels defined from now on
    if not where:
        return "compiling tpuprep's kernels (their disk cache is off or not writable: every run compiles them) ..."
    home = os.path.expanduser("~")
    shown = "~" + where[len(home):] if home != "~" and where.startswith(home + os.sep) else where
    return f"compiling tpuprep's kernels once (cached in {shown} for later runs) ..."


class _FirstCompile(event.Listener):
    """Logs ``compiling_message`` when this process first compiles a tpuprep kernel: Numba sends
    "numba:compile" only for a signature it compiles, not for one it loads from the disk cache."""

    said = False

    def on_start(self, ev: event.Event) -> None:
        if not self.said and ev.data["dispatcher"].py_func.__module__.startswith("tpuprep."):
            type(self).said = True
            logging.getLogger(LOGGER).info(compiling_message())

    def on_end(self, ev: event.Event) -> None:
        pass


event.register("numba:compile", _FirstCompile())


def kernel(fn):
    """Decorate a nopython kernel: cached on disk, releases the GIL, no fastmath (results are exact)."""
    return numba.njit(cache=CACHE, nogil=True)(fn)


def is_cached(dispatcher) -> bool:
    """Whether the disk cache holds compiled code of ``dispatcher`` (a ``@kernel``) for today's source:
    read from Numba's cache index of the function, without loading any code (a private part of Numba,
    hence False whenever it cannot tell: the caller then compiles, which is always correct)."""
    try:
        return bool(dispatcher._cache._cache_file._load_index())
    except Exception:  # any change of Numba's internals means "cannot tell"
        return False


def frozen(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a``. Numba compiles a kernel once per argument type, and a writable array
    is another type than a read-only one (a view of inflated bytes): the wrappers pass every array a
    kernel only reads as ``frozen``, so each kernel has one signature, the one ``kernels.warm`` compiles."""
    view = a.view()
    view.flags.writeable = False
    return view
