"""Resuming ``synthesize``: a journal of the files already written, so a second run skips them.

``dst/synth-journal.jsonl`` gets one JSON line per finished file slot (after both its npz and its
truth file are in place): the generator fingerprint, profile, seed, both relative paths, their byte
sizes and sha256, and the slot's number of configs. A later run skips a slot only when the journal
has a line for it with the same (fingerprint, profile, seed) *and* both files on disk still have
the recorded size and sha256 — so a missing, truncated or otherwise changed file is written again,
and so is every file after the generator's code, NumPy or zlib changed (the fingerprint). Lines that
do not parse (a run killed while appending one) are ignored; the last line of a path wins.
"""

from __future__ import annotations

import ast
import hashlib
import json
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..io.files import TEMPORARY, sha256_file

JOURNAL = "synth-journal.jsonl"
"""The journal's file name, directly under dst."""


def _code_of(source: str) -> str:
    """The syntax tree of a module without its docstrings (comments are not in it either), so that
    editing documentation does not invalidate a journal; any change of code does."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, include_attributes=False)


def generator_fingerprint() -> str:
    """sha256 (16 hex digits) of what decides a file's bytes besides (profile, seed): the code (not
    the comments or docstrings) of ``tpuprep/synth/*.py`` and ``tpuprep/io/npz_writer.py``, the NumPy
    version and the zlib version."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for src in [*sorted(here.glob("*.py")), here.parent / "io" / "npz_writer.py"]:
        h.update(src.name.encode() + b"\0" + _code_of(src.read_text(encoding="utf-8")).encode() + b"\0")
    h.update(f"numpy {np.__version__} zlib {zlib.ZLIB_RUNTIME_VERSION}".encode())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Entry:
    """One finished slot: relative paths, sizes (bytes) and sha256 of its npz and truth files, and
    its number of configs c; ``key`` is (fingerprint, profile, seed)."""

    fingerprint: str
    profile: str
    seed: int
    npz: str
    npz_bytes: int
    npz_sha256: str
    truth: str
    truth_bytes: int
    truth_sha256: str
    configs: int


def _intact(root: Path, rel: str, size: int, sha: str) -> bool:
    """True when root/rel exists with exactly ``size`` bytes and this sha256."""
    path = root / rel
    try:
        if path.stat().st_size != size:
            return False
    except OSError:
        return False
    return sha256_file(path) == sha


class Journal:
    """The journal of one dst for one (profile, seed) under the current generator."""

    def __init__(self, root: Path, profile: str, seed: int):
        self.root, self.profile, self.seed = root, profile, int(seed)
        self.fingerprint = generator_fingerprint()
        self.path = root / JOURNAL
        self._done: dict[str, Entry] = {}
        if self.path.is_file():
            for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    entry = Entry(**json.loads(line))
                except (ValueError, TypeError):
                    continue
                self._done[entry.npz] = entry

    def finished(self, npz_rel: str) -> Entry | None:
        """The entry of a slot whose files are already right for this (profile, seed), else None."""
        e = self._done.get(npz_rel)
        if e is None or (e.fingerprint, e.profile, e.seed) != (self.fingerprint, self.profile, self.seed):
            return None
        if not (_intact(self.root, e.npz, e.npz_bytes, e.npz_sha256)
                and _intact(self.root, e.truth, e.truth_bytes, e.truth_sha256)):
            return None
        return e

    def record(self, npz_rel: str, truth_rel: str, configs: int) -> Entry:
        """Append the line of a slot whose two files were just written (hashing them from disk)."""
        npz, truth = self.root / npz_rel, self.root / truth_rel
        entry = Entry(self.fingerprint, self.profile, self.seed,
                      npz_rel, npz.stat().st_size, sha256_file(npz),
                      truth_rel, truth.stat().st_size, sha256_file(truth), int(configs))
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(asdict(entry)) + "\n")
        self._done[npz_rel] = entry
        return entry


def remove_temporaries(root: Path, rel: str) -> None:
    """Delete what a killed writer left beside root/rel (``.<name>.tmp-<pid>``)."""
    path = root / rel
    if not path.parent.is_dir():
        return
    for stale in path.parent.glob(f".{path.name}.tmp*"):
        m = TEMPORARY.fullmatch(stale.name)
        if m and m.group(1) == path.name:
            stale.unlink(missing_ok=True)
