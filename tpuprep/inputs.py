"""Finding TpuGraphs input files and reading one graph's small members, validated (SPEC §7).

The collection and split of a file come from its path: ``.../tile/xla/<split>/<stem>.npz`` or
``.../layout/<xla|nlp>/<default|random>/<split>/<stem>.npz``. ``--src`` may point at ``npz/``,
``npz_all/npz``, a collection folder, a split folder or one file; a file or flat folder outside such a
tree is built with ``--collection``/``--split`` saying what its files are. Large ``node_config_feat`` members are not
read here: ``NpzFile.iter_rows`` streams them.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

from .errors import BadInput, UsageError
from .io.npz import Member, NpzFile
from .tpugraphs import (
    COLLECTIONS,
    LAYOUT_KEYS,
    LAYOUT_SLOTS,
    NODE_FEATURES,
    SPLITS,
    TILE_CONFIG_FEATURES,
    TILE_KEYS,
    classify,
    collection_kind,
    collection_path,
    graph_id_of,
    is_safe_stem,
    selected,
)

# sanity bounds far above the real maxima (n 43,615, nc 3,143, c 100,040): a header that claims more
# is rejected before anything is allocated
MAX_NODES = 50_000_000
MAX_EDGES = 200_000_000
MAX_CONFIGS = 50_000_000
MAX_CONFIG_NODES = 1_000_000
MAX_WHOLE_MEMBER_BYTES = 4 << 30
DEFLATE_MAX_RATIO = 1100  # DEFLATE cannot exceed ~1032:1


@dataclass(frozen=True, order=True)
class InputFile:
    """One input file. ``relpath`` is canonical (``layout/xla/random/train/x.npz``), whatever --src was."""

    graph_id: str
    relpath: str
    path: Path = field(compare=False)
    kind: str = field(compare=False)  # "layout" | "tile"
    collection: str = field(compare=False)
    split: str = field(compare=False)
    stem: str = field(compare=False)
    size: int = field(compare=False)


def check_selection(collections: Iterable[str] | None, splits: Iterable[str] | None) -> None:
    """Raise UsageError for a ``--collections`` entry that names no collection (not an id nor a prefix of
    one, e.g. ``layout:xla:rand``) or a ``--splits`` entry that is not train, valid or test."""
    for w in collections or ():
        if not any(selected(c, [w]) for c in COLLECTIONS):
            raise UsageError(f"--collections {w!r} names no collection (ids: {', '.join(COLLECTIONS)}; "
                             "a prefix such as layout:xla or tile selects several)")
    for s in splits or ():
        if s not in SPLITS:
            raise UsageError(f"--splits {s!r} is not a split ({', '.join(SPLITS)})")


def inventory(inputs: Iterable[InputFile]) -> str:
    """``layout:xla:random (train, valid), tile:xla (train)``: the collections and splits of ``inputs``."""
    found: dict[str, set[str]] = {}
    for inp in inputs:
        found.setdefault(inp.collection, set()).add(inp.split)
    return ", ".join(f"{c} ({', '.join(s for s in SPLITS if s in found[c])})" for c in sorted(found))


def _not_regular(mode: int) -> str:
    kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a folder" if stat.S_ISDIR(mode) else "not a regular file")
    return f"is {kind}, not a regular file; only regular files are read"


def open_input(path: Path) -> tuple[BinaryIO, os.stat_result]:
    """Open an input file for reading without following a symbolic link and without blocking on a FIFO
    or device, and check that what was opened is a regular file. Returns the open binary file (the
    caller closes it) and its ``fstat``, so size, hash and conversion all see this one inode.

    Raises BadInput (naming ``path``) when it vanished, became a link or is not a regular file.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise BadInput(path, None, "vanished after it was found (deleted or moved while the build ran)") from None
    except OSError as exc:
        if os.path.islink(path):
            raise BadInput(path, None, "was replaced by a symbolic link after it was found; not followed") from None
        raise BadInput(path, None, f"cannot open: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(path, None, _not_regular(st.st_mode))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb"), st
    except BaseException:
        os.close(fd)
        raise


class Unplaced(BadInput):
    """A ``*.npz`` file whose path does not say its collection and split (it lies outside a TpuGraphs
    tree); ``--collection``/``--split`` can say them instead."""


def check_assignment(collection: str | None, split: str | None, collections: Iterable[str] | None = None,
                     splits: Iterable[str] | None = None) -> None:
    """Raise UsageError unless ``--collection`` and ``--split`` are both given or both omitted, name one
    collection id exactly (``layout:xla:random``, not a prefix) and one split, and come without the
    ``--collections``/``--splits`` filters (which select from a tree; an assignment has nothing to select)."""
    if collection is None and split is None:
        return
    if collection is None or split is None:
        given, missing = ("--collection", "--split") if split is None else ("--split", "--collection")
        raise UsageError(f"{given} needs {missing} too: together they say what the files under a --src "
                         "outside a TpuGraphs tree are")
    if collection not in COLLECTIONS:
        raise UsageError(f"--collection {collection!r} is not a collection id ({', '.join(COLLECTIONS)})")
    if split not in SPLITS:
        raise UsageError(f"--split {split!r} is not a split ({', '.join(SPLITS)})")
    for flag, value in (("--collections", collections), ("--splits", splits)):
        if value:
            raise UsageError(f"--collection/--split and {flag} exclude each other: {flag} selects from a "
                             "TpuGraphs tree, --collection/--split say what the files of a plain file or "
                             "folder are")


def _walk_npz(root: Path) -> Iterator[tuple[Path, int, bool] | BadInput]:
    """Every ``*.npz`` entry at or under ``root`` (a folder, or one file), sorted: ``(path, size, top)``
    for a regular file (``top``: directly in ``root``, or ``root`` itself), a BadInput for a symbolic
    link (to a folder or a file), a FIFO, device or socket, or one that vanished. Only ``lstat``."""
    if not root.is_dir():
        entries: Iterable[tuple[str, list[str], list[str]]] = [(str(root.parent), [], [root.name])]
    else:
        entries = os.walk(root, followlinks=False)
    for dirpath, dirnames, filenames in entries:
        here = Path(dirpath)
        for d in sorted(dirnames):
            if (here / d).is_symlink():
                yield BadInput(here / d, None, "is a symbolic link to a folder; not followed")
        dirnames.sort()
        for name in sorted(filenames):
            if not name.endswith(".npz"):
                continue
            path = here / name
            try:
                st = path.lstat()
            except FileNotFoundError:
                yield BadInput(path, None, "vanished while the source was listed")
                continue
            if stat.S_ISLNK(st.st_mode):
                yield BadInput(path, None, "is a symbolic link; links are not followed (they may escape --src)")
            elif not stat.S_ISREG(st.st_mode):
                yield BadInput(path, None, _not_regular(st.st_mode))
            else:
                yield path, st.st_size, here == root or path == root


def _input_file(path: Path, size: int, kind: str, collection: str, split: str, relpath: str
                ) -> InputFile | BadInput:
    stem = path.name[:-4]
    if not is_safe_stem(stem):
        return BadInput(path, None, f"file name {stem!r} is not a safe graph id "
                        "(letters, digits and . _ + - only)")
    return InputFile(graph_id_of(collection, stem), relpath, path, kind, collection, split, stem, size)


def _unique(found: list[InputFile], refused: list[BadInput]) -> list[InputFile]:
    """``found`` sorted, without graph-id clashes (each clash appended to ``refused``)."""
    unique: list[InputFile] = []
    for inp in sorted(found):
        if unique and unique[-1].graph_id == inp.graph_id:
            refused.append(BadInput(inp.path, None, f"graph id {inp.graph_id} clashes with "
                                    f"{unique[-1].relpath}; graph ids must be unique within a build"))
            continue
        unique.append(inp)
    return unique


def discover(
    src: str | Path,
    collections: Iterable[str] | None = None,
    splits: Iterable[str] | None = None,
    *,
    collection: str | None = None,
    split: str | None = None,
) -> tuple[list[InputFile], list[BadInput]]:
    """All ``*.npz`` at or under ``src`` (a folder or one file) sorted by graph id, and the entries
    refused (symlinks, FIFOs, devices and other non-regular files, bad names, unknown places — an
    ``Unplaced`` — and graph-id clashes). Symbolic links are never followed and nothing is opened:
    each entry is only ``lstat``-ed.

    Without ``collection``/``split``, each file's collection and split come from its path in a TpuGraphs
    tree, filtered by ``collections``/``splits``. With them (both, see ``check_assignment``), ``src`` is
    a plain file or a flat folder: its ``.npz`` files (those directly in it; one in a subfolder is
    refused) belong to that collection and split, and their ``relpath`` is the one they would have in
    the tree. UsageError when ``src`` is a tree after all (its paths already say collection and split).
    """
    root = Path(src).resolve()
    if not root.exists():
        raise FileNotFoundError(f"--src {src} does not exist")
    check_assignment(collection, split, collections, splits)
    if collection is not None and split is not None:
        return _discover_assigned(src, root, collection, split)
    wanted = list(collections or [])
    split_set = set(splits or SPLITS)

    def place(path: Path, _top: bool) -> Place | BadInput | None:
        try:
            kind, coll, sp, relpath = classify(path.parts)
        except ValueError as exc:
            return Unplaced(path, None, f"cannot tell its collection and split: {exc}")
        return (kind, coll, sp, relpath) if selected(coll, wanted) and sp in split_set else None

    return _collect(root, place)


def _discover_assigned(src: str | Path, root: Path, collection: str, split: str
                       ) -> tuple[list[InputFile], list[BadInput]]:
    """``discover`` for a plain file or flat folder whose files are all ``collection``/``split``."""
    placed, _ = discover(root)
    if placed:
        inp = placed[0]
        raise UsageError(f"--src {src} is a TpuGraphs tree: the path of {inp.path.name} already says "
                         f"{inp.collection} {inp.split}; drop --collection/--split (they are for a file or "
                         "folder outside a tree)")
    kind, folder = collection_kind(collection), f"{collection_path(collection)}/{split}"

    def place(path: Path, top: bool) -> Place | BadInput:
        if not top:
            return BadInput(path, None, "lies in a subfolder of --src; with --collection/--split only the "
                            ".npz files directly in --src are read")
        return kind, collection, split, f"{folder}/{path.name}"

    return _collect(root, place)


Place = tuple[str, str, str, str]
"""(kind, collection, split, canonical relpath) of an input file."""


def _collect(root: Path, place: Callable[[Path, bool], Place | BadInput | None]
             ) -> tuple[list[InputFile], list[BadInput]]:
    """The inputs at or under ``root`` (sorted, unique graph ids) and the refusals: ``place(path, top)``
    says where each regular ``*.npz`` belongs, refuses it (a BadInput) or leaves it out (None)."""
    found: list[InputFile] = []
    refused: list[BadInput] = []
    for entry in _walk_npz(root):
        if isinstance(entry, BadInput):
            refused.append(entry)
            continue
        path, size, top = entry
        where = place(path, top)
        if where is None:
            continue
        made = where if isinstance(where, BadInput) else _input_file(path, size, *where)
        (refused if isinstance(made, BadInput) else found).append(made)
    return _unique(found, refused), refused


# --------------------------------------------------------------------------- reading one graph


@dataclass
class GraphArrays:
    """The small members of one input graph, validated, in canonical dtypes.

    node_feat (n, 140) float32; node_opcode (n,) uint8; edge_index (m, 2) int64;
    node_config_ids (nc,) int64 and node_splits (s,) int64 (layout, else None);
    config_runtime (c,) int64 ns; config_feat (c, 24) float32 and config_runtime_normalizers (c,) int64
    (tile, else None); num_configs c; warnings: non-fatal remarks (e.g. unknown extra keys).
    """

    node_feat: np.ndarray
    node_opcode: np.ndarray
    edge_index: np.ndarray
    config_runtime: np.ndarray
    num_configs: int
    node_config_ids: np.ndarray | None = None
    node_splits: np.ndarray | None = None
    config_feat: np.ndarray | None = None
    config_runtime_normalizers: np.ndarray | None = None
    warnings: list[str] = field(default_factory=list)


def _member(f: NpzFile, key: str) -> Member:
    return f.members[key]


def _check_kind(f: NpzFile, key: str, kinds: str, what: str) -> Member:
    m = _member(f, key)
    if m.dtype.kind not in kinds:
        raise BadInput(f.path, key, f"dtype {m.dtype} is not {what}")
    return m


def _read_small(f: NpzFile, key: str) -> np.ndarray:
    m = _member(f, key)
    if m.nbytes > MAX_WHOLE_MEMBER_BYTES:
        raise BadInput(f.path, key, f"member of {m.nbytes} bytes is implausibly large")
    return f.read(key)


def _check_ratio(f: NpzFile) -> None:
    for key, m in f.members.items():
        if m.compress_type and m.file_size > DEFLATE_MAX_RATIO * m.compress_size + (1 << 20):
            raise BadInput(f.path, key, "declared size is impossible for its compressed size (zip bomb?)")


def _as_int(f: NpzFile, key: str, arr: np.ndarray, lo: int, hi: int, dtype) -> np.ndarray:
    if arr.size and (arr.min() < lo or arr.max() > hi):
        bad = arr[(arr < lo) | (arr > hi)].reshape(-1)[0]
        raise BadInput(f.path, key, f"value {bad} out of range {lo}..{hi}")
    return arr.astype(dtype, copy=False)


def _count(f: NpzFile, key: str, count: int, limit: int, what: str, empty: str) -> int:
    """``count`` (rows of ``key``) if it is neither 0 (``empty``: the problem) nor above ``limit``."""
    if count == 0:
        raise BadInput(f.path, key, empty)
    if count > limit:
        raise BadInput(f.path, key, f"{count} {what} is implausibly many")
    return count


def _finite(f: NpzFile, key: str, arr: np.ndarray) -> np.ndarray:
    if not np.isfinite(arr).all():
        idx = np.argwhere(~np.isfinite(arr))[0]
        raise BadInput(f.path, key, f"non-finite value {arr[tuple(idx)]} at index {tuple(int(i) for i in idx)}")
    return arr


def read_graph(f: NpzFile, inp: InputFile) -> GraphArrays:
    """Read and validate everything but the big config member of a layout or tile file."""
    layout = inp.kind == "layout"
    required = LAYOUT_KEYS if layout else TILE_KEYS
    missing = [k for k in required if k not in f.members]
    if missing:
        raise BadInput(f.path, missing[0], "required key is missing"
                       + (f" (also missing: {', '.join(missing[1:])})" if len(missing) > 1 else ""))
    warnings = [f"unknown key {k!r} ignored" for k in f.members if k not in required]
    _check_ratio(f)

    nf = _check_kind(f, "node_feat", "f", "floating point")
    if len(nf.shape) != 2 or nf.shape[1] != NODE_FEATURES:
        raise BadInput(f.path, "node_feat", f"shape {nf.shape}, expected (n, {NODE_FEATURES})")
    n = _count(f, "node_feat", nf.shape[0], MAX_NODES, "nodes", "the graph has no nodes")
    op = _check_kind(f, "node_opcode", "iu", "an integer type")
    if op.shape != (n,):
        raise BadInput(f.path, "node_opcode", f"shape {op.shape}, expected ({n},) to match node_feat")
    ei = _check_kind(f, "edge_index", "iu", "an integer type")
    if not (len(ei.shape) == 2 and ei.shape[1] == 2) and ei.shape != (0,):
        raise BadInput(f.path, "edge_index", f"shape {ei.shape}, expected (m, 2)")
    if ei.shape[0] > MAX_EDGES:
        raise BadInput(f.path, "edge_index", f"{ei.shape[0]} edges is implausibly many")
    rt = _check_kind(f, "config_runtime", "iu", "an integer type (runtimes are int64 ns)")
    if len(rt.shape) != 1:
        raise BadInput(f.path, "config_runtime", f"shape {rt.shape}, expected (c,)")
    c = _count(f, "config_runtime", rt.shape[0], MAX_CONFIGS, "configurations", "the file has no configurations")

    node_feat = _finite(f, "node_feat", _read_small(f, "node_feat").astype(np.float32, copy=False))
    node_opcode = _as_int(f, "node_opcode", _read_small(f, "node_opcode"), 0, 255, np.uint8)
    edge_index = _as_int(f, "edge_index", _read_small(f, "edge_index").reshape(-1, 2), 0, n - 1, np.int64)
    runtime = _as_int(f, "config_runtime", _read_small(f, "config_runtime"), 0, np.iinfo(np.int64).max, np.int64)
    g = GraphArrays(node_feat, node_opcode, edge_index, runtime, c, warnings=warnings)

    if layout:
        ncf = _check_kind(f, "node_config_feat", "fiu", "numeric")
        ids = _check_kind(f, "node_config_ids", "iu", "an integer type")
        if len(ids.shape) != 1 or ids.shape[0] == 0:
            raise BadInput(f.path, "node_config_ids", f"shape {ids.shape}, expected (nc,) with nc >= 1")
        nc = ids.shape[0]
        if nc > MAX_CONFIG_NODES:
            raise BadInput(f.path, "node_config_ids", f"{nc} configurable nodes is implausibly many")
        if ncf.shape != (c, nc, LAYOUT_SLOTS):
            raise BadInput(f.path, "node_config_feat",
                           f"shape {ncf.shape}, expected (c, nc, 18) = ({c}, {nc}, 18) from config_runtime and node_config_ids")
        sp = _check_kind(f, "node_splits", "iu", "an integer type")
        if len(sp.shape) not in (1, 2) or (len(sp.shape) == 2 and sp.shape[0] != 1):
            raise BadInput(f.path, "node_splits", f"shape {sp.shape}, expected (1, s) or (s,)")
        g.node_config_ids = _as_int(f, "node_config_ids", _read_small(f, "node_config_ids"), 0, n - 1, np.int64)
        if nc > 1 and not (np.diff(g.node_config_ids) > 0).all():
            i = int(np.argmin(np.diff(g.node_config_ids) > 0))
            raise BadInput(f.path, "node_config_ids",
                           f"not strictly increasing at position {i + 1} ({g.node_config_ids[i]} then {g.node_config_ids[i + 1]})")
        g.node_splits = _as_int(f, "node_splits", _read_small(f, "node_splits").reshape(-1), 0, n, np.int64)
        if (np.diff(g.node_splits) < 0).any():
            raise BadInput(f.path, "node_splits", "boundaries are not in ascending order")
    else:
        cf = _check_kind(f, "config_feat", "fiu", "numeric")
        if cf.shape != (c, TILE_CONFIG_FEATURES):
            raise BadInput(f.path, "config_feat", f"shape {cf.shape}, expected (c, 24) = ({c}, 24)")
        nz = _check_kind(f, "config_runtime_normalizers", "iu", "an integer type")
        if nz.shape != (c,):
            raise BadInput(f.path, "config_runtime_normalizers", f"shape {nz.shape}, expected ({c},)")
        g.config_feat = _finite(f, "config_feat", _read_small(f, "config_feat").astype(np.float32, copy=False))
        lowest = 0 if inp.split == "test" else 1
        g.config_runtime_normalizers = _as_int(
            f, "config_runtime_normalizers", _read_small(f, "config_runtime_normalizers"),
            lowest, np.iinfo(np.int64).max, np.int64)
    return g
