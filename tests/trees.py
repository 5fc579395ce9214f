"""Helpers the build tests share: tiny synthetic source trees, their reference builds, comparing two
built folders byte for byte, and waiting on a condition with a bound."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (hidden ones too), by POSIX path relative to it."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def tiny_tree(tmp_path_factory, name: str, collections: list[str] | None = None) -> Path:
    """A synthetic ``tiny`` tree (seed 0; every collection, or only ``collections``) in a new temporary
    folder named after ``name``: its ``npz`` folder."""
    from tpuprep.synth import synthesize

    root = tmp_path_factory.mktemp(name)
    synthesize(root, "tiny", 0, collections=collections)
    return root / "npz"


def reference_build(tmp_path_factory, src: Path, name: str) -> Path:
    """A local serial build of ``src`` with the default options, in a new temporary folder."""
    from tpuprep.build import build

    dst = tmp_path_factory.mktemp(name) / "shards"
    build(src, dst)
    return dst


def poll(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.05) -> object:
    """Wait until ``predicate()`` is truthy (and return it), failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def run_tpuprep(*args: str, crash: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``tpuprep ARGS`` in a new process of this interpreter (output captured as text). ``crash`` sets
    ``TPUPREP_CRASH_AT`` (``tpuprep/faults.py``: SIGKILL at that point); otherwise it is unset."""
    env = dict(os.environ)
    env.pop("TPUPREP_CRASH_AT", None)
    if crash:
        env["TPUPREP_CRASH_AT"] = crash
    code = "import sys; from tpuprep.cli import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=timeout)
