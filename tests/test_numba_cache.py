"""The Numba disk cache (``tpuprep/kernels/jit.py``): where it goes, that it follows the kernels'
sources, and that an unwritable cache location never breaks an import."""

from __future__ import annotations

import ast
import json
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


def _tpuprep_imports(rel: str) -> set[str]:
    """Paths under tpuprep/ of the tpuprep modules the module ``rel`` imports from (relative or absolute)."""
    here = (PACKAGE / rel).parent
    found = set()
    for node in ast.walk(ast.parse((PACKAGE / rel).read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = here.joinpath(*[".."] * (node.level - 1), *(node.module or "").split(".")).resolve()
        elif (node.module or "").split(".")[0] == "tpuprep":
            base = PACKAGE.joinpath(*node.module.split(".")[1:])
        else:
            continue
        names = [base / alias.name for alias in node.names] + [base]
        found |= {p.with_suffix(".py").relative_to(PACKAGE).as_posix() for p in names if p.with_suffix(".py").is_file()}
    return found


def test_kernel_modules_lists_every_module_with_a_kernel_and_what_they_import():
    """The digest covers every module that defines a kernel and every tpuprep module those import from
    (their constants and callees are compiled into the kernels), and only those: a kernel added to another
    module, or a constant it reads from one, would otherwise escape the invalidation."""
    wanted = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
              if re.search(r"^@kernel\b", p.read_text(encoding="utf-8"), re.M)}
    assert "kernels/repad.py" in wanted
    todo = set(wanted)
    while todo:
        new = _tpuprep_imports(todo.pop()) - wanted
        wanted |= new
        todo |= new
    assert {"tpugraphs.py", "kernels/jit.py", "kernels/base7.py"} <= wanted
    assert wanted == set(jit.KERNEL_MODULES)


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


NUMBA_FIRST = """
import numba  # first, as torch_geometric (and so tpuprep.pyg) imports it: Numba has read its config
import numpy as np
from tpuprep.kernels import jit, pack_chunk, planes
assert (pack_chunk(np.full((2, 3, 18), 5, np.float32)) == 7**6 - 1).all()
print(planes._join._cache._cache_path)
print(jit.compiling_message())
"""


def test_cache_goes_to_the_digest_folder_when_numba_was_imported_first(tmp_path):
    """Numba reads NUMBA_CACHE_DIR when first imported: jit.py has it read the folder it sets, or the
    kernels would go to the package's __pycache__ (no sources digest, a read-only install written into)
    while the message named the digest folder."""
    environ = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "TPUPREP_NUMBA_CACHE")}
    proc = subprocess.run([sys.executable, "-c", NUMBA_FIRST], env=environ | {"XDG_CACHE_HOME": str(tmp_path / "xdg")},
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cache_path, message = proc.stdout.splitlines()
    folder = tmp_path / "xdg" / "tpuprep" / "numba" / jit.sources_digest()
    assert Path(cache_path).is_relative_to(folder), cache_path
    assert message == f"compiling tpuprep's kernels once (cached in {folder} for later runs) ..."
    assert list(folder.rglob("base7.*.nbi")), "pack_chunk's kernel was not cached in the digest folder"


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


# ---------------------------------------------------------------- the first minute (issue #37 item 7)

WARM = """
import sys
from numba.core import event
from tpuprep import kernels
from tpuprep.kernels import jit
from tpuprep.build import build
from tpuprep.options import BuildOptions

assert not any(jit.is_cached(k) for k in kernels.build_kernels())
kernels.warm()
assert [len(k.signatures) for k in kernels.build_kernels()] == [1] * 7
assert all(jit.is_cached(k) for k in kernels.build_kernels())
compiled = []

class Compiles(event.Listener):
    def on_start(self, ev):
        compiled.append(ev.data["dispatcher"].py_func.__qualname__)

    def on_end(self, ev):
        pass

event.register("numba:compile", Compiles())
src, dst = sys.argv[1], sys.argv[2]
build(src, dst + "/a")
build(src, dst + "/b", BuildOptions(prune=False, dedup=False))
assert compiled == [], compiled
assert [len(k.signatures) for k in kernels.build_kernels()] == [1] * 7
"""

AGAIN = """
from tpuprep.kernels import build_kernels, jit
from tpuprep.runners.worker import compile_if_missing
assert all(jit.is_cached(k) for k in build_kernels())
assert not compile_if_missing()  # nothing compiled, nothing loaded
assert [len(k.signatures) for k in build_kernels()] == [0] * 7
"""


def _python(code: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "TPUPREP_NUMBA_CACHE")}
    return subprocess.run([sys.executable, "-c", code, *args], env={**environ, **env}, capture_output=True,
                          text=True, timeout=600)


def test_warm_compiles_each_build_kernel_once_and_builds_need_no_other(tmp_path, synth_root):
    """``kernels.warm`` compiles the seven kernels a build calls, one signature each (every array a kernel
    reads is passed read-only, ``jit.frozen``), and builds of layout and tile graphs of every split, pruned
    or not, deduplicated or not, compile nothing more; the next process finds them in the cache's index."""
    cache = str(tmp_path / "cache")
    proc = _python(WARM, str(synth_root / "npz"), str(tmp_path), NUMBA_CACHE_DIR=cache)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = _python(AGAIN, NUMBA_CACHE_DIR=cache)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_is_cached_says_no_when_it_cannot_tell():
    assert jit.is_cached(object()) is False


def _saved(stdout: str) -> list[str]:
    """The cache data files Numba wrote (``NUMBA_DEBUG_CACHE``): one per compiled signature and process."""
    return re.findall(r"\[cache\] data saved to '([^']+)'", stdout)


def test_a_first_build_says_it_compiles_once_and_its_workers_compile_nothing(tmp_path, synth_root):
    """Cold cache, 2 worker processes: one line on stderr and in the log file (not on the --json stdout)
    while the parent compiles the kernels, once; the workers load them (no data file written twice).
    Warm cache: no line, nothing compiled."""
    cache = tmp_path / "cache"
    cmd = ["-c", "import sys; from tpuprep.cli import main; sys.exit(main())", "build", "--src", str(synth_root / "npz"), "--workers", "2", "--json"]
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "TPUPREP_NUMBA_CACHE")}
    env |= {"NUMBA_CACHE_DIR": str(cache)}
    log = tmp_path / "build.log"
    cold = subprocess.run([sys.executable, *cmd, "--dst", str(tmp_path / "a"), "--log-file", str(log)],
                          env=env | {"NUMBA_DEBUG_CACHE": "1"}, capture_output=True, text=True, timeout=600)
    assert cold.returncode == 0, cold.stderr[-3000:]
    message = f"compiling tpuprep's kernels once (cached in {cache} for later runs) ..."
    assert cold.stderr.count(message) == 1 and message not in cold.stdout
    assert json.loads(cold.stdout.splitlines()[-1])["status"] == "ok"
    assert log.read_text().count(message) == 1
    saved = _saved(cold.stdout)
    assert len(saved) >= 7 and len(set(saved)) == len(saved)  # each kernel compiled by one process only
    warm = subprocess.run([sys.executable, *cmd, "--dst", str(tmp_path / "b")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert warm.returncode == 0, warm.stderr[-3000:]
    assert message not in warm.stderr and json.loads(warm.stdout)["status"] == "ok"


def test_a_first_serial_build_compiles_what_it_calls_and_says_so_quietly_in_the_log(tmp_path, synth_root):
    """One process, cold cache, -q: the kernels compile on first use, only those the tile graphs need (no
    layout kernel), and the line goes to the log file only."""
    cache, log = tmp_path / "cache", tmp_path / "build.log"
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "TPUPREP_NUMBA_CACHE")}
    proc = subprocess.run([sys.executable, "-c", "import sys; from tpuprep.cli import main; sys.exit(main())",
                           "build", "--src", str(synth_root / "npz" / "tile"), "--dst", str(tmp_path / "s"), "-q",
                           "--log-file", str(log)], env=env | {"NUMBA_CACHE_DIR": str(cache), "NUMBA_DEBUG_CACHE": "1"},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    message = f"compiling tpuprep's kernels once (cached in {cache} for later runs) ..."
    assert message not in proc.stderr and log.read_text().count(message) == 1
    compiled = {Path(p).name.split("-")[0] for p in _saved(proc.stdout)}
    assert {"dedup._add_rows", "repad._repad"} <= compiled  # cache files are named <module>.<function>-...
    assert not any(name.startswith(("tied.", "prune.")) for name in compiled), compiled


def test_commands_show_tpuprep_notes_on_stderr_and_in_the_log(tmp_path, capsys):
    """``cli.common.notes``: what ``tpuprep.kernels`` logs for people goes to stderr (not with -q) and to
    the log file while a command runs; outside a command, nothing is printed (a library stays silent)."""
    import logging

    from tpuprep.cli import common

    logger = logging.getLogger(jit.LOGGER)
    common.open_log(tmp_path / "run.log")
    try:
        with common.notes():
            logger.info("note shown")
        with common.notes(quiet=True):
            logger.info("note logged only")
        logger.info("note outside a command")
    finally:
        common._end_session()
    out, err = capsys.readouterr()
    assert out == "" and err == "note shown\n"
    assert [line.split(" ", 1)[1] for line in (tmp_path / "run.log").read_text().splitlines()] == [
        "note shown", "note logged only"]


def test_processes_starting_together_do_not_remove_each_others_write_probe(tmp_path):
    """Each process probes the cache folder with a file of its own: with one shared name, one process
    could remove another's probe between its touch and unlink, and that one would then compile in
    memory on every run. Threads of one process stand in for processes started at once."""
    from concurrent.futures import ThreadPoolExecutor

    def start(_: int) -> bool:
        return all(jit.writable_folder(tmp_path / "cache") for _ in range(300))

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(start, range(8)))
    assert not list((tmp_path / "cache").iterdir())  # no probe left behind
