"""The Numba disk cache (``tpuprep/kernels/jit.py``): where it goes, that it follows the kernels'
sources, and that an unwritable cache location never breaks an import."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tpuprep.kernels import jit

PACKAGE = Path(jit.__file__).resolve().parent.parent

PROBE = """
import os, numpy as np
from tpuprep.kernels import jit, pack_chunk
codes = pack_chunk(np.full((2, 3, 18), 5, np.float32))
assert (codes == 7**6 - 1).all(), codes
print(jit.CACHE, os.environ.get("NUMBA_CACHE_DIR", ""))
"""


def _probe(tmp_path: Path, **env: str) -> tuple[str, str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "TPUPREP_NUMBA_CACHE")}
    environ.update(env)
    out = subprocess.run([sys.executable, "-c", PROBE], env=environ, cwd=tmp_path, capture_output=True,
                         text=True, check=True).stdout.split()
    return out[0], out[1] if len(out) > 1 else ""


def test_kernel_modules_lists_every_module_with_a_kernel():
    """The digest covers every module that defines a kernel, and only those: a kernel added to another
    module would otherwise escape the invalidation."""
    found = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
             if re.search(r"^@kernel\b", p.read_text(encoding="utf-8"), re.M)}
    assert found == set(jit.KERNEL_MODULES)


def test_digest_follows_every_kernel_module(tmp_path):
    for rel in jit.KERNEL_MODULES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(PACKAGE / rel, tmp_path / rel)
    assert jit.sources_digest(tmp_path) == jit.sources_digest()
    seen = {jit.sources_digest()}
    for rel in jit.KERNEL_MODULES:
        original = (tmp_path / rel).read_bytes()
        (tmp_path / rel).write_bytes(original + b"\n")
        seen.add(jit.sources_digest(tmp_path))
        (tmp_path / rel).write_bytes(original)
    assert len(seen) == len(jit.KERNEL_MODULES) + 1  # each module's change gives its own directory
    (tmp_path / jit.KERNEL_MODULES[0]).unlink()
    assert jit.sources_digest(tmp_path) not in seen


def test_default_cache_is_named_by_the_sources_and_filled(tmp_path):
    cached, where = _probe(tmp_path, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    assert cached == "True"
    assert Path(where) == tmp_path / "xdg" / "tpuprep" / "numba" / jit.sources_digest()
    assert list(Path(where).rglob("*.nbi")), "no kernel was cached"


def test_unwritable_cache_location_still_runs_the_kernels(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would go")  # mkdir fails, even for root
    cached, where = _probe(tmp_path, XDG_CACHE_HOME=str(blocker))
    assert (cached, where) == ("False", "")


def test_cache_can_be_turned_off_and_numba_cache_dir_is_honoured(tmp_path):
    assert _probe(tmp_path, XDG_CACHE_HOME=str(tmp_path / "xdg"), TPUPREP_NUMBA_CACHE="0") == ("False", "")
    assert not (tmp_path / "xdg").exists()
    mine = tmp_path / "mine"
    cached, where = _probe(tmp_path, NUMBA_CACHE_DIR=str(mine))
    assert (cached, Path(where)) == ("True", mine)
    assert list(mine.rglob("*.nbi"))
