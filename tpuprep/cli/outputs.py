"""Where a command may write: never into a shard folder, never onto or into one of its own inputs.

Every command that writes a file or a folder (``train --out``, ``predict --out``, ``evaluate --out``,
``export --dst-npz``, ``synth --dst``, ``--log-file`` of ``build``/``verify``/``run``) calls
:func:`check_output` on it before anything is opened. Refused, as one usage line (exit 2):

* an empty path (it would mean the current folder);
* a path in a shard folder, i.e. the path itself or any folder above it holds a tpuprep
  ``manifest.json`` (``"format": "tpuprep-shards"``), a build's lock ``.tpuprep.lock`` or its
  staging folder ``.tpuprep/`` (``train --out S/manifest`` would replace ``S/manifest.json``);
* a path inside (or equal to) one of the command's input folders (``--shards``, ``--src``, verify's
  ``--dst``);
* a path inside the shard folder the command writes (a build's ``--dst``, a run's ``dst``), even a
  fresh one: a shard folder holds only what tpuprep writes, and a log there would make ``--dst``
  non-empty and be a file ``--resume``/``--overwrite`` refuse as not tpuprep's (the message says so
  and proposes a path beside it);
* a path that is one of the command's input files (``--log-file`` naming the input ``.npz`` would
  append to it; a model's ``.npz``/``.json``; the run file), also through a symbolic or hard link;
* for a log file (appended to), an existing file that holds data: an ``.npz``, ``.npy``, Parquet or
  tar file (an input of the command reached through another name, or any other data file).

Paths are compared after resolving symbolic links, and folders also by device and inode (a bind mount
is the same folder); URLs are not local paths and are not checked here.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from ..errors import UsageError
from ..io.storage import local_path
from ..shards.layout import LOCK, MANIFEST, STAGING

MANIFEST_PROBE_BYTES = 4096
"""How much of a ``manifest.json`` is read to tell a tpuprep manifest (its ``format`` key comes first)."""
SHARD_FORMAT = b'"tpuprep-shards"'

Input = tuple[str, "str | os.PathLike[str] | None"]
"""An input of the command: (the option naming it, e.g. ``--shards``; its path or URL, None if unset)."""


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _is_tpuprep_manifest(path: Path) -> bool:
    """``path`` is a regular file that starts like a tpuprep manifest (read at most a few KB; a FIFO or
    device of that name is never opened)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as fh:
            return SHARD_FORMAT in fh.read(MANIFEST_PROBE_BYTES)
    except (OSError, ValueError):
        return False


def is_shard_folder(folder: Path) -> bool:
    """``folder`` holds a finished build (a tpuprep manifest) or one being written (its lock or staging
    folder)."""
    return (_is_tpuprep_manifest(folder / MANIFEST) or os.path.lexists(folder / LOCK)
            or os.path.isdir(folder / STAGING))


def shard_folder_holding(target: Path) -> Path | None:
    """The shard folder that is ``target`` or holds it (the nearest one), or None."""
    for folder in (target, *target.parents):
        if is_shard_folder(folder):
            return folder
    return None


def within(target: Path, folder: Path) -> bool:
    """Whether the resolved path ``target`` is ``folder`` or lies inside it: a path test (never a string
    prefix: ``/data/shards-evil`` is not inside ``/data/shards``), then by device and inode of the
    folders above ``target`` that exist (another name for the same folder, e.g. a bind mount)."""
    if target == folder or folder in target.parents:
        return True
    wanted = _identity(folder)
    return wanted is not None and any(_identity(p) == wanted for p in (target, *target.parents))


def _same_file(target: Path, other: Path) -> bool:
    if target == other:
        return True
    a, b = _identity(target), _identity(other)
    return a is not None and a == b


DATA_MAGIC = {b"PK\x03\x04": "a zip (.npz) file", b"PK\x05\x06": "a zip (.npz) file",
              b"\x93NUMPY": "a .npy file", b"PAR1": "a Parquet file"}
"""Leading bytes of data files that a log file never starts with."""


def _data_kind(path: Path) -> str | None:
    """What data ``path`` holds when it is an existing regular file that is not text (an ``.npz``, ``.npy``,
    Parquet or tar file), else None. Devices and FIFOs (``/dev/stderr``) are not read."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with open(path, "rb") as fh:
            head = fh.read(512)
    except (OSError, ValueError):
        return None
    for magic, kind in DATA_MAGIC.items():
        if head.startswith(magic):
            return kind
    return "a tar archive" if head[257:262] == b"ustar" else None


def check_output(path: str | os.PathLike[str] | None, option: str, inputs: Iterable[Input] = (), *,
                 append: bool = False, writes: Iterable[Input] = ()) -> Path | None:
    """Refuse (``UsageError``, one line naming ``option``) an output ``path`` that is empty, lies in a
    shard folder, lies in an input folder, is an input file, or lies in a shard folder the command
    writes (``writes``: a build's ``--dst``) (see the module docstring); with ``append`` (a log file)
    also an existing file that holds data (an ``.npz``, ``.npy``, Parquet or tar file: e.g. an input
    reached through a hard link). Returns ``path`` resolved (None for None; a URL as given, unchecked)."""
    if path is None:
        return None
    text = os.fspath(path)
    if not text:
        raise UsageError(f"{option} must not be empty (it would mean the current folder): name the output")
    if local_path(text, option) is None:  # an object-store URL
        return path  # type: ignore[return-value]
    if "\0" in text:
        raise UsageError(f"{option} contains a NUL byte, which no path can hold: {text!r}")
    target = Path(text).resolve()
    shard = shard_folder_holding(target)
    if shard is not None:
        where = "is" if shard == target else "lies inside"
        raise UsageError(f"{option} {target} {where} the shard folder {shard}; a command never writes into "
                         "a shard folder: choose a path outside it")
    for name, value in inputs:
        where = local_path(value, name) if value is not None and os.fspath(value) else None
        if where is None:  # absent, or an object-store URL
            continue
        source = where.resolve()
        if source.is_dir() or not source.exists():  # a folder (or one a build is about to create)
            if within(target, source):
                raise UsageError(f"{option} {target} lies inside {name} {source}, an input of this command: "
                                 "choose a path outside it")
        elif _same_file(target, source):
            raise UsageError(f"{option} {target} is {name} {source}, an input of this command: "
                             "refusing to write onto it")
    for name, value in writes:
        where = local_path(value, name) if value is not None and os.fspath(value) else None
        if where is None:
            continue
        folder = where.resolve()
        if within(target, folder):
            raise UsageError(f"{option} {target} lies inside {name} {folder}, the shard folder this command "
                             "writes, which holds only what tpuprep writes (a log there would be a file "
                             f"--resume and --overwrite refuse as not tpuprep's): write it beside, e.g. "
                             f"{option} {folder.parent / (folder.name + '.log')}")
    kind = _data_kind(target) if append else None
    if kind is not None:
        raise UsageError(f"{option} {target} is {kind}, not a log: refusing to append to it")
    return target


__all__ = ["check_output", "is_shard_folder", "shard_folder_holding", "within"]
