"""Finding TpuGraphs input files and reading one graph's small members, validated (docs/spec.md §7).

The collection and split of a file come from its path: ``.../tile/xla/<split>/<stem>.npz`` or
``.../layout/<xla|nlp>/<default|random>/<split>/<stem>.npz``. ``--src`` may point at ``npz/``,
``npz_all/npz``, a collection folder, a split folder or one file, a tar archive of such a tree
(``npz_all.tar``, a per-collection tar, with or without the leading ``npz/``) or a folder holding tars —
locally or as a URL (``s3://bucket/npz/``, ``s3://bucket/npz_all.tar``); a local file or flat folder
outside such a tree is built with ``--collection``/``--split`` saying what its files are. Archive members are read in place (an
``io.archive.MemberView`` locally, one ranged read remotely), never extracted. Large
``node_config_feat`` members are not read here: ``NpzFile.iter_rows`` streams them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from .errors import BadInput, UsageError, display_name, one_line
from .io.archive import Skipped, index_tar, is_archive_name
from .io.storage import resolve, shown
from .io.store import Entry, FileReplaced, NotARegularFile, Store, library_error
from .limits import scale as limit_scale
from .readgraph import GraphArrays, read_graph  # noqa: F401 (re-exported for the converter)
from .tpugraphs import (
    COLLECTIONS,
    SPLITS,
    classify,
    collection_kind,
    collection_path,
    graph_id_of,
    is_safe_stem,
    selected,
    unselected,
)


@dataclass(frozen=True)
class Origin:
    """Where an input's bytes are: a file of the source's store, or a member of a tar archive in it.
    A task sent to another process carries it (a store pickles with its options) and opens the bytes
    through ``store`` itself: nothing decides again from a string where they are.

    store: the ``Source``'s store (never shown, compared or recorded); rel: the file or archive below
    its root ("" when the root is that file); member: the member's name inside the archive (None for a
    file); offset: byte offset of the member's data in the archive (0 for a file); version: the file's
    or archive's version when it was listed (``Entry.version``: locally its mtime in ns, remotely its
    ETag or generation); archive: how the manifest names the archive (its path relative to --src, or
    its base name when --src is the archive; None for a file).
    """

    store: Store = field(compare=False, repr=False)
    rel: str = ""
    member: str | None = None
    offset: int = 0
    version: int | str = ""
    archive: str | None = None


@dataclass(frozen=True, order=True)
class InputFile:
    """One input file. ``relpath`` is canonical (``layout/xla/random/train/x.npz``), whatever --src was.

    ``path`` names the file to people: its path or URL (``Store.url``), ``<archive>!<member>`` for a
    member of a tar archive; ``origin`` says where its bytes are (``discover`` sets it). None only for
    a file built by hand: its bytes are then the file at ``path`` (``convert_file``, ``open_source`` and
    ``current_stamp`` open it by that path; nothing was listed, so no version is checked).
    """

    graph_id: str
    relpath: str
    path: Path | str = field(compare=False)
    kind: str = field(compare=False)  # "layout" | "tile"
    collection: str = field(compare=False)
    split: str = field(compare=False)
    stem: str = field(compare=False)
    size: int = field(compare=False)
    origin: Origin | None = field(default=None, compare=False)

    @property
    def worker_paths(self) -> tuple[str, ...]:
        """The local paths a process converting this input must see (``Store.worker_paths``: the file
        or its archive; none in an object store)."""
        return self.origin.store.worker_paths(self.origin.rel) if self.origin is not None else (str(self.path),)

    def describe(self) -> dict:
        """The manifest's record of where the input came from when it is an archive member:
        ``{"archive": <archive relative to --src>, "member": <name inside it>}`` (else empty)."""
        if self.origin is None or self.origin.member is None:
            return {}
        return {"archive": self.origin.archive, "member": self.origin.member}


class MissingSource(UsageError):
    """A local ``--src`` that does not exist (exit 2); a run file with ``[synth]`` then synthesises it."""


@dataclass(frozen=True)
class Source:
    """``--src`` resolved once (``resolve_source``) and passed along instead of the string, so nothing
    downstream resolves or classifies it again.

    ``store``: where it lives (a local one rooted at the path with links resolved); ``kind``:
    ``"folder"``, ``"npz"`` or ``"tar"`` when the store can tell without a request (``Store.peek``:
    a local source), None when only its listing tells (an object store)."""

    store: Store
    kind: str | None = None

    @property
    def location(self) -> Path | str:
        """The source as records name it (``Store.location``: the resolved local ``Path``, or the URL
        without credentials), which every listed entry's name starts with."""
        return self.store.location

    @property
    def display(self) -> str:
        """The source in messages: the resolved local path, or the URL as given without credentials."""
        return self.store.display

    @property
    def name(self) -> str:
        """The last component of the root (the archive's name when --src is one)."""
        return self.store.url().rstrip("/").rsplit("/", 1)[-1]

    def name_of(self, rel: str) -> str:
        """How the entry ``rel`` below the root is named to people: its path or URL."""
        return self.store.url(rel)

    def relative(self, name: str | Path | None) -> str:
        """How records name an entry shown as ``name`` (``name_of``, perhaps ``!<member>``): relative to
        --src, or to its folder when --src is a file (``<archive>!<member>``); anything else without
        credentials."""
        text, root = str(name or self.store.url()), self.store.url().rstrip("/")
        if text.startswith(root + "/"):
            return text[len(root) + 1:]
        if text == root or text.startswith(root + "!"):
            return self.name + text[len(root):]
        return shown(text)


def resolve_source(src: str | os.PathLike | Source, storage_options: dict | None = None) -> Source:
    """``--src`` resolved once (``io.storage.resolve``, which alone classifies it): a store that can
    tell what its root is without a request (a local path, also ``file://``) must hold a folder, an
    ``.npz`` file or a tar archive there; an object store's root is checked when it is listed (a
    missing bucket or key). A ``Source`` is returned as it is. Raises UsageError (``MissingSource``
    when a local ``src`` does not exist)."""
    if isinstance(src, Source):
        return src
    if not str(src):
        raise UsageError("--src must not be empty")
    given = resolve(src, storage_options, what="--src")
    store = given.resolved()
    what = store.peek()
    if what is None:
        return Source(store)
    if what == "missing":
        raise MissingSource(f"--src {given.display} does not exist")
    source = Source(store)
    kind = ("folder" if what == "folder" else None if what != "file"
            else "npz" if source.name.endswith(".npz") else "tar" if is_archive_name(source.name) else None)
    if kind is None:
        raise UsageError(f"--src {given.display} is neither a folder, an .npz file nor a tar archive (*.tar)")
    return Source(store, kind)


def check_selection(collections: Iterable[str] | None, splits: Iterable[str] | None) -> None:
    """Raise UsageError for a ``--collections`` entry that names no collection (not an id nor a prefix of
    one, e.g. ``layout:xla:rand``) or a ``--splits`` entry that is not train, valid or test."""
    if unknown := unselected(collections):
        raise UsageError(f"--collections {unknown[0]!r} names no collection (ids: {', '.join(COLLECTIONS)}; "
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


class Refused(BadInput):
    """An entry of ``--src`` refused while it was listed; ``size``: its bytes as listed (0 when unknown)."""

    def __init__(self, path: str | Path | None, key: str | None, problem: str, size: int = 0):
        super().__init__(path, key, problem)
        self.size = size


class Unlisted(Refused):
    """A folder under ``--src`` that cannot be listed (permission denied, an I/O error, gone while the
    source was listed): whatever it holds is not read, so it is refused (a quarantine record, exit 3)
    and ``verify`` reports it rather than checking less than the build holds."""


COMPRESSED_TAR = (".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar.zst", ".tar.lz4")


def skip_reason(name: str) -> str:
    """Why a file named ``name`` (neither ``*.npz`` nor ``*.tar``) under ``--src`` is not read."""
    lower = name.lower()
    if lower.endswith(".npz"):
        return f"its name ends in {name[-4:]!r}, not '.npz' (names are case-sensitive); rename it to read it"
    if lower.endswith(COMPRESSED_TAR):
        return ("a compressed tar archive; only uncompressed .tar archives are read in place "
                "(decompress it first, e.g. gunzip)")
    return "neither an .npz file nor a .tar archive"


class Unplaced(Refused):
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


@dataclass(frozen=True)
class _Entry:
    """A file found under --src before it is classified: its path components (the last is the file
    name), how it is named to people, its size in bytes and where its bytes are."""

    parts: tuple[str, ...]
    path: str
    size: int
    origin: Origin


def _unlistable(source: Source, exc: BaseException) -> Exception:
    """The one line for a source that cannot be listed: a missing key under an existing bucket (or a
    local root gone meanwhile) is a usage error (exit 2); a missing bucket, a denied request or folder
    and any other failure of the store are fatal (exit 1, ``Store.failure``)."""
    if isinstance(exc, FileNotFoundError) and not source.store.missing_bucket():
        return UsageError(f"--src {source.display} does not exist")
    return source.store.failure(exc, f"--src {source.display}", "listed")


def _refusal(entry: Entry) -> str | None:
    """Why an ``*.npz`` or ``*.tar`` entry that is not a regular file is refused (None: a file)."""
    if entry.kind == "file":
        return None
    if entry.kind == "gone":
        return "vanished while the source was listed"
    if entry.kind == "unexamined":
        return f"cannot be examined: {entry.detail}"
    if entry.kind == "link":
        return "is a symbolic link; links are not followed (they may escape --src)"
    what = entry.detail or ("a folder" if entry.kind == "folder" else "not a regular file")
    return f"is {what}, not a regular file; only regular files are read"


def _archive(source: Source, entry: Entry, origin: Origin, display: str,
             skipped: list[Skipped]) -> tuple[list[_Entry], list[BadInput]]:
    """The npz members of the tar archive ``entry`` (headers only: ``Store.open_scan``); other members
    and superseded copies are appended to ``skipped``. An archive that cannot be read (gone since it
    was listed, a link now, denied, a failed request) is refused as ``open_source`` refuses an input,
    and the batch goes on; only a bucket gone meanwhile is fatal, a line naming the archive."""
    try:
        with source.store.open_scan(entry.rel, entry.size) as fh:
            members, refused = index_tar(fh, display, entry.size, skipped=skipped)
    except BadInput as exc:  # not a readable tar archive: refused whole, with its size
        return [], [Refused(exc.path, exc.key, exc.problem, entry.size)]
    except Exception as exc:  # botocore's errors are not all OSErrors
        if not (library_error(exc) or isinstance(exc, FileReplaced)):
            raise
        if isinstance(exc, FileNotFoundError) and source.store.missing_bucket():
            raise source.store.failure(exc, display, "read") from None
        return [], [Refused(display, None, opening_problem(exc), entry.size)]
    return [_Entry(tuple(m.name.split("/")), f"{display}!{m.name}", m.size,
                   dataclasses.replace(origin, member=m.name, offset=m.offset)) for m in members], refused


def opening_problem(exc: BaseException) -> str:
    """Why an input (or archive) listed a moment ago cannot be read now, from what its store raised."""
    if isinstance(exc, FileNotFoundError):
        return "vanished after it was found (deleted or moved while the build ran)"
    if isinstance(exc, NotARegularFile):
        if exc.what == "a symbolic link":
            return "was replaced by a symbolic link after it was found; not followed"
        return f"is {exc.what}, not a regular file; only regular files are read"
    if isinstance(exc, FileReplaced):
        return str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return f"cannot be read: {exc.strerror}"
    return f"cannot be read ({type(exc).__name__}: {one_line(exc)})"


def list_source(source: Source, skipped: list[Skipped] | None = None) -> tuple[list[_Entry], list[BadInput]]:
    """What ``source`` holds (a folder, file or tar archive, in any store), not yet classified: the
    store's entries (``Store.walk``) whose names end in ``.npz`` or ``.tar`` (archives indexed, their
    headers only), and the entries refused (links, FIFOs, devices, folders that cannot be listed). No
    npz is opened. ``skipped``: when given, what is not read (other names, superseded archive members)
    and why is appended to it. The source itself unlistable is one line (``_unlistable``)."""
    skipped = [] if skipped is None else skipped
    store = source.store
    try:
        top = store.root_entry()
        listing = [top] if top.kind != "folder" else store.walk()
    except Exception as exc:  # botocore's errors are not all OSErrors
        if not library_error(exc):
            raise
        raise _unlistable(source, exc) from None
    root = tuple(store.url().rstrip("/").split("/"))
    entries: list[_Entry] = []
    refused: list[BadInput] = []
    for e in listing:
        name, display = e.name or source.name, source.name_of(e.rel)
        npz, archive = name.endswith(".npz"), is_archive_name(name)
        if e.kind == "folder":
            continue  # entered by the walk (an object store's folder markers hold nothing)
        if e.kind == "unlisted":
            refused.append(Unlisted(display, None, f"folder cannot be listed ({e.detail}); the files in it "
                                    "are not read", e.size))
            continue
        if e.kind == "link" and e.detail == "folder":
            refused.append(Refused(display, None, "is a symbolic link to a folder; not followed", e.size))
            continue
        if not (npz or archive):
            if e.kind == "link" and e.detail == "dangling":
                refused.append(Refused(display, None, f"is a dangling symbolic link (to {e.target}); what it "
                                       "stood for (a file or a folder) is not read", e.size))
            elif e.kind != "gone":
                skipped.append(Skipped(display, skip_reason(name)))
            continue
        problem = _refusal(e)
        if problem is not None:
            refused.append(Refused(display, None, problem, e.size))
            continue
        parts = (*root, *e.rel.split("/")) if e.rel else root
        origin = Origin(store, e.rel, version=e.version)
        if archive:
            found, bad = _archive(source, e, dataclasses.replace(origin, archive=e.rel or name), display, skipped)
            entries += found
            refused += bad
        else:
            entries.append(_Entry(parts, display, e.size, origin))
    return entries, refused


def discover(
    src: Source | str | Path,
    collections: Iterable[str] | None = None,
    splits: Iterable[str] | None = None,
    storage_options: dict | None = None,
    *,
    collection: str | None = None,
    split: str | None = None,
    skipped: list[Skipped] | None = None,
) -> tuple[list[InputFile], list[BadInput]]:
    """All ``*.npz`` under ``src`` sorted by graph id, and the entries refused (symlinks, FIFOs, devices
    and other non-regular files, bad names, unknown places — an ``Unplaced`` — and graph-id clashes).
    ``src`` is a local folder or file, a tar archive or a folder holding tars, or a URL of any of these
    (``storage_options``: the fsspec options of its store), as a ``Source`` or as given (then
    ``resolve_source`` resolves it, with its UsageErrors). Symbolic links are never followed and no npz
    is opened: each entry is only listed (``Store.walk``), archives have their headers indexed.

    Without ``collection``/``split``, each file's collection and split come from its path in a TpuGraphs
    tree, filtered by ``collections``/``splits``. With them (both, see ``check_assignment``), ``src`` is
    a plain local file or a flat folder, local or in a store: its ``.npz`` files (those directly in it;
    one in a subfolder or an archive is refused) belong to that collection and split, and their ``relpath`` is the one they
    would have in the tree. UsageError when ``src`` is a tree after all (its paths already say them).

    ``skipped``: when given, every entry passed over without a refusal (a file of another name such as
    ``*.NPZ`` or ``*.tar.gz``, a non-npz archive member, an archive member superseded by a later copy)
    is appended as a ``Skipped`` (path, reason). A folder that cannot be listed is an ``Unlisted``
    refusal; ``src`` itself unlistable is a FatalError.
    """
    check_assignment(collection, split, collections, splits)
    limit_scale()  # a bad TPUPREP_INPUT_LIMIT_SCALE is a usage error before anything is read
    source = resolve_source(src, storage_options)
    if collection is not None and split is not None:
        return _discover_assigned(source, collection, split, skipped)
    wanted = list(collections or [])
    split_set = set(splits or SPLITS)

    def place(e: _Entry, _top: bool) -> Place | BadInput | None:
        try:
            kind, coll, sp, relpath = classify(e.parts)
        except ValueError as exc:
            return Unplaced(e.path, None, f"cannot tell its collection and split: {exc}", e.size)
        return (kind, coll, sp, relpath) if selected(coll, wanted) and sp in split_set else None

    return _collect(source, place, list_source(source, skipped))


def _discover_assigned(source: Source, collection: str, split: str,
                       skipped: list[Skipped] | None = None) -> tuple[list[InputFile], list[BadInput]]:
    """``discover`` for a plain file or flat folder whose files are all ``collection``/``split``."""
    listing = list_source(source, skipped)
    for e in listing[0]:
        try:
            _, in_coll, in_split, relpath = classify(e.parts)
        except ValueError:
            continue
        raise UsageError(f"--src {source.display} is a TpuGraphs tree: the path of {relpath} already says "
                         f"{in_coll} {in_split}; drop --collection/--split (they are for a file or "
                         "folder outside a tree)")
    kind, folder = collection_kind(collection), f"{collection_path(collection)}/{split}"

    def place(e: _Entry, top: bool) -> Place | BadInput:
        if not top:
            member = e.origin.member is not None
            where = "is a member of an archive" if member else "lies in a subfolder"
            return Refused(e.path, None, f"{where} of --src; with --collection/--split only the .npz "
                           "files directly in --src are read", e.size)
        return kind, collection, split, f"{folder}/{e.parts[-1]}"

    return _collect(source, place, listing)


Place = tuple[str, str, str, str]
"""(kind, collection, split, canonical relpath) of an input file."""


def _collect(source: Source, place: Callable[[_Entry, bool], Place | BadInput | None],
             listing: tuple[list[_Entry], list[BadInput]]) -> tuple[list[InputFile], list[BadInput]]:
    """The inputs of ``source`` (sorted, unique graph ids) and the refusals: ``place(entry, top)`` says
    where each ``*.npz`` belongs, refuses it (a BadInput) or leaves it out (None); ``top``: a file or
    object (not an archive member) that is the source itself or lies directly in it. ``listing``: what
    ``list_source`` returned for ``source`` (a source is listed once). Of inputs with one graph id,
    the first by canonical path is kept and every other refused, wherever they lie in the tree."""
    entries, refused = listing
    refused = list(refused)
    found: list[InputFile] = []
    for e in entries:
        top = e.origin.member is None and "/" not in e.origin.rel
        where = place(e, top)
        if where is None:
            continue
        if isinstance(where, BadInput):
            refused.append(where)
            continue
        kind, coll, sp, relpath = where
        stem = e.parts[-1][:-4]
        if not is_safe_stem(stem):
            refused.append(Refused(e.path, None, f"file name '{display_name(stem)}' is not a safe graph id "
                                   "(letters, digits and . _ + - only)", e.size))
            continue
        found.append(InputFile(graph_id_of(coll, stem), relpath, e.path, kind, coll, sp, stem, e.size, e.origin))
    found.sort()
    first: dict[str, InputFile] = {}
    for inp in found:
        if inp.graph_id in first:
            refused.append(Refused(inp.path, None, f"graph id {inp.graph_id} clashes with "
                                   f"{first[inp.graph_id].relpath}; graph ids must be unique within a build", inp.size))
            continue
        first[inp.graph_id] = inp
    return list(first.values()), refused


Stamp = list | None
"""[size in bytes, version] of an input file as it was read or as it is now (locally its mtime in ns,
remotely the version it was listed with), or None when it is gone. Part of the --resume fingerprint."""


def _origin(inp: InputFile) -> Origin:
    """Where the bytes of ``inp`` are: its ``origin``, or for a file built by hand the file at its
    ``path`` (a store rooted at that file)."""
    return inp.origin if inp.origin is not None else Origin(resolve(inp.path))


def current_stamp(inp: InputFile) -> Stamp:
    """The stamp of ``inp`` as it is now, without opening it (``Store.stamp``)."""
    o = _origin(inp)
    return o.store.stamp(o.rel, size=inp.size, version=o.version, offset=None if o.member is None else o.offset)


def open_source(inp: InputFile) -> tuple[BinaryIO, Stamp]:
    """Open the bytes of ``inp`` for reading (the caller closes the file) and return them with their
    stamp (``Store.open_input``: a file opened once without following a link, an archive member read
    in place, a remote object by one ranged read). Raises BadInput naming the input when they cannot
    be read, or are not those listed (shorter, another version)."""
    o = _origin(inp)
    try:
        fh = o.store.open_input(o.rel, size=inp.size, version=o.version,
                                offset=None if o.member is None else o.offset)
    except Exception as exc:  # botocore's errors are not all OSErrors
        if not (library_error(exc) or isinstance(exc, FileReplaced)):
            raise
        raise BadInput(inp.path, None, opening_problem(exc)) from None
    return fh, fh.stamp()
