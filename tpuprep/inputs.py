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
import io
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from .errors import BadInput, FatalError, UsageError, display_name
from .io.archive import MemberView, Skipped, TarMember, index_tar, is_archive_name
from .io.local_store import LocalStore
from .io.storage import local_path, resolve
from .io.store import Store
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
    """Where an input's bytes are when it is not a plain local file: a member of a tar archive (local
    or remote) or a remote object. Plain data, so a task sent to another process carries it and the
    worker opens the store itself.

    url: the archive or object (a local absolute path, or a URL without credentials); member: the
    member's name inside the archive (None for an object); offset: byte offset of the member's data
    in the archive (0 for an object); version: the archive's or object's identity when it was listed
    (``<size>:<mtime ns>`` locally, the ETag or modification time remotely; part of the --resume
    fingerprint); archive: how the manifest names the archive (its path relative to --src, or its
    base name when --src is the archive; None for an object); storage_options: the fsspec options
    of the store (never shown, compared or recorded); remote: ``url`` is in an object store (set
    from the ``Source`` it was listed from: nothing decides it again from the string).
    """

    url: str
    member: str | None = None
    offset: int = 0
    version: str = ""
    archive: str | None = None
    storage_options: dict | None = field(default=None, compare=False, repr=False)
    remote: bool = False


@dataclass(frozen=True, order=True)
class InputFile:
    """One input file. ``relpath`` is canonical (``layout/xla/random/train/x.npz``), whatever --src was.

    ``path`` names the file to people: a local ``Path`` for a plain local file, else a string (a URL,
    or ``<archive>!<member>`` for a member of a tar archive), and then ``origin`` says where its bytes are.
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
    def local_file(self) -> Path | None:
        """The local file whose bytes a task reads (the file itself or its archive), None if remote."""
        if self.origin is None:
            return Path(self.path)
        return None if self.origin.remote else Path(self.origin.url)

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
    downstream decides again whether it is local or a URL.

    ``store``: where it lives (locally rooted at the path with links resolved, else the object-store
    root); ``kind``: ``"folder"``, ``"npz"`` or ``"tar"`` for a local source, None for a URL (its
    listing tells); ``storage_options``: the fsspec options of a URL's store (never shown; None when
    empty)."""

    store: Store
    kind: str | None = None
    storage_options: dict | None = field(default=None, repr=False, hash=False)

    @property
    def is_local(self) -> bool:
        return isinstance(self.store, LocalStore)

    @property
    def location(self) -> Path | str:
        """The source as records name it: the resolved local ``Path``, or the URL (``scheme://root``,
        no credentials), which every listed object's URL starts with."""
        return Path(self.store.root) if self.is_local else self.store.url()

    @property
    def display(self) -> str:
        """The source in messages: the resolved local path, or the URL as given without credentials."""
        return self.store.root if self.is_local else self.store.display

    @property
    def root_parts(self) -> tuple[str, ...]:
        """The path components of the root, as a listed entry's ``parts`` start."""
        return Path(self.store.root).parts if self.is_local else tuple(self.store.root.split("/"))


def resolve_source(src: str | os.PathLike | Source, storage_options: dict | None = None) -> Source:
    """The one place ``--src`` is classified: a URL (not ``file://``) becomes its store, unchecked
    (listing it reports a missing bucket or key); a local path (also ``file://``) is resolved (links
    followed) and must be a folder, an ``.npz`` file or a tar archive. A ``Source`` is returned as it
    is. Raises UsageError (``MissingSource`` when a local ``src`` does not exist)."""
    if isinstance(src, Source):
        return src
    if not str(src):
        raise UsageError("--src must not be empty")
    if local_path(src, "--src") is None:
        return Source(resolve(src, storage_options, what="--src"), None, storage_options or None)
    given = resolve(src, what="--src").display  # file:// as resolve reads it; a path as given
    path = Path(given).resolve()
    if not path.exists():
        raise MissingSource(f"--src {given} does not exist")
    kind = ("folder" if path.is_dir() else None if not path.is_file()
            else "npz" if path.name.endswith(".npz") else "tar" if is_archive_name(path.name) else None)
    if kind is None:
        raise UsageError(f"--src {given} is neither a folder, an .npz file nor a tar archive (*.tar)")
    return Source(resolve(path), kind)


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


class Unlisted(BadInput):
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


@dataclass(frozen=True)
class _Entry:
    """A file found under --src before it is classified: its path components (the last is the file
    name), how it is named to people, its size in bytes and where its bytes are (None: a plain local
    file at ``path``)."""

    parts: tuple[str, ...]
    path: Path | str
    size: int
    origin: Origin | None = None


def _archive_entries(fh: BinaryIO, display: str, size: int, origin: Origin,
                     skipped: list[Skipped]) -> tuple[list[_Entry], list[BadInput]]:
    """The npz members of the tar archive open in ``fh`` (``origin``: the archive, no member yet);
    other members and superseded copies are appended to ``skipped``."""
    try:
        members, refused = index_tar(fh, display, size, skipped=skipped)
    except BadInput as exc:
        return [], [exc]
    return [_member_entry(m, display, origin) for m in members], refused


def _member_entry(m: TarMember, display: str, origin: Origin) -> _Entry:
    return _Entry(tuple(m.name.split("/")), f"{display}!{m.name}", m.size,
                  dataclasses.replace(origin, member=m.name, offset=m.offset))


def _local_archive(path: Path, archive: str, skipped: list[Skipped]) -> tuple[list[_Entry], list[BadInput]]:
    """Index a local tar archive (opened without following a link; headers only)."""
    try:
        fh, st = open_input(path)
    except BadInput as exc:
        return [], [exc]
    with fh:
        origin = Origin(str(path), version=f"{st.st_size}:{st.st_mtime_ns}", archive=archive)
        return _archive_entries(fh, str(path), st.st_size, origin, skipped)


def _unlisted(root: Path, refused: list[BadInput]) -> Callable[[OSError], None]:
    """``os.walk``'s error handler: a folder that cannot be listed is refused (``Unlisted``); ``root``
    itself is a FatalError (nothing of --src could be read)."""
    def failed(exc: OSError) -> None:
        where = Path(exc.filename) if exc.filename is not None else root
        why = exc.strerror or type(exc).__name__
        if where == root:
            raise FatalError(f"--src {root}: cannot be listed: {why}") from None
        refused.append(Unlisted(where, None, f"folder cannot be listed ({why}); the files in it are not read"))
    return failed


def _dangling(path: Path) -> str | None:
    """Where the symbolic link ``path`` points when its target does not exist, else None."""
    try:
        path.stat()
    except FileNotFoundError:
        try:
            return os.readlink(path)
        except OSError:  # removed since it was listed
            return "?"
    except OSError:  # EACCES, ELOOP ...: the target exists but cannot be reached; not dangling
        return None
    return None


def _local_entries(root: Path, skipped: list[Skipped]) -> tuple[list[_Entry], list[BadInput]]:
    """Every ``*.npz`` and ``*.tar`` at or under ``root``, a local folder or one file (links never
    followed, nothing opened but the archives, whose headers are indexed). A folder that cannot be
    listed and a dangling link are refused; files of other names are appended to ``skipped``."""
    entries: list[_Entry] = []
    refused: list[BadInput] = []
    walk: Iterable[tuple[str, list[str], list[str]]] = (
        os.walk(root, onerror=_unlisted(root, refused), followlinks=False) if root.is_dir()
        else [(str(root.parent), [], [root.name])])
    for dirpath, dirnames, filenames in walk:
        here = Path(dirpath)
        for d in sorted(dirnames):
            if (here / d).is_symlink():
                refused.append(BadInput(here / d, None, "is a symbolic link to a folder; not followed"))
        dirnames.sort()
        for name in sorted(filenames):
            archive = is_archive_name(name)
            path = here / name
            if not (name.endswith(".npz") or archive):
                target = _dangling(path) if path.is_symlink() else None
                if target is not None:
                    refused.append(BadInput(path, None, f"is a dangling symbolic link (to {target}); what "
                                            "it stood for (a file or a folder) is not read"))
                else:
                    skipped.append(Skipped(str(path), skip_reason(name)))
                continue
            try:
                st = path.lstat()
            except FileNotFoundError:
                refused.append(BadInput(path, None, "vanished while the source was listed"))
                continue
            except OSError as exc:
                refused.append(BadInput(path, None, f"cannot be examined: {exc.strerror or exc}"))
                continue
            if stat.S_ISLNK(st.st_mode):
                refused.append(BadInput(path, None, "is a symbolic link; links are not followed (they may escape --src)"))
                continue
            if not stat.S_ISREG(st.st_mode):
                refused.append(BadInput(path, None, _not_regular(st.st_mode)))
                continue
            if archive:
                found, bad = _local_archive(path, path.name if path == root else path.relative_to(root).as_posix(),
                                            skipped)
                entries += found
                refused += bad
            else:
                entries.append(_Entry(path.parts, path, st.st_size))
    return entries, refused


def _remote_failure(store: Store, exc: BaseException) -> Exception:
    """The one-line error for a store that cannot be listed: a missing bucket or a permission
    problem is fatal (exit 1), a missing key under an existing bucket is a usage error (exit 2)."""
    if isinstance(exc, PermissionError):
        return FatalError(f"--src {store.display}: access denied (check the credentials and the "
                          "permissions of the bucket)")
    if isinstance(exc, FileNotFoundError):
        bucket = store.root.split("/", 1)[0]
        try:
            bucket_exists = bool(bucket) and store.fs.exists(bucket)
        except Exception:  # any failure to look: the bucket cannot be used
            bucket_exists = False
        if bucket and not bucket_exists:
            return FatalError(f"--src {store.display}: the bucket {store.protocol}://{bucket} does not "
                              "exist or cannot be reached")
        return UsageError(f"--src {store.display} does not exist")
    return FatalError(f"--src {store.display}: cannot be listed ({type(exc).__name__}: {exc})")


def _version(meta: dict) -> str:
    """An object's identity from its listing: ETag, else modification time (for --resume)."""
    for key in ("ETag", "etag", "LastModified", "mtime", "updated", "created"):
        if meta.get(key):
            return str(meta[key])
    return ""


def _remote_entries(store: Store, storage_options: dict | None,
                    skipped: list[Skipped]) -> tuple[list[_Entry], list[BadInput]]:
    """Every ``*.npz`` and ``*.tar`` object at or under ``store.root`` (archives indexed by ranged
    reads of their headers); objects of other names are appended to ``skipped``."""
    fs = store.fs
    try:
        meta = fs.info(store.root)
        if meta.get("type") == "directory":
            objects = sorted(fs.find(store.root, detail=True).items())
        else:
            objects = [(store.root, meta)]
    except Exception as exc:  # botocore's errors are not all OSErrors
        raise _remote_failure(store, exc) from None
    single = len(objects) == 1 and objects[0][0] == store.root
    entries: list[_Entry] = []
    refused: list[BadInput] = []
    for key, meta in objects:
        name = key.rsplit("/", 1)[-1]
        url = f"{store.protocol}://{key}"
        if name.endswith(".npz") and not single:
            entries.append(_Entry(tuple(key.split("/")), url, int(meta["size"]),
                                  Origin(url, version=_version(meta), storage_options=storage_options,
                                         remote=True)))
        elif is_archive_name(name):
            archive = name if single else key[len(store.root):].lstrip("/")
            origin = Origin(url, version=_version(meta), archive=archive, storage_options=storage_options,
                            remote=True)
            try:
                with fs.open(key, "rb", block_size=1 << 20, cache_type="readahead") as fh:
                    found, bad = _archive_entries(fh, url, int(meta["size"]), origin, skipped)
            except Exception as exc:  # as above
                raise _remote_failure(store, exc) from None
            entries += found
            refused += bad
        elif single:
            raise UsageError(f"--src {store.display} is neither a folder nor a tar archive")
        elif meta.get("type") != "directory" and not key.endswith("/"):
            skipped.append(Skipped(url, skip_reason(name)))
    return entries, refused


def list_source(source: Source, skipped: list[Skipped] | None = None) -> tuple[list[_Entry], list[BadInput]]:
    """What ``source`` holds (a local folder, file or tar archive, or a URL of one), not yet
    classified. ``skipped``: when given, what is not read (other file names, superseded archive
    members) and why is appended to it."""
    skipped = [] if skipped is None else skipped
    if not source.is_local:
        return _remote_entries(source.store, source.storage_options, skipped)
    return _local_entries(Path(source.store.root), skipped)


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
    is opened: each entry is only ``lstat``-ed (or listed), archives have their headers indexed.

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
            return Unplaced(e.path, None, f"cannot tell its collection and split: {exc}")
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
            member = e.origin is not None and e.origin.member is not None
            where = "is a member of an archive" if member else "lies in a subfolder"
            return BadInput(e.path, None, f"{where} of --src; with --collection/--split only the .npz "
                            "files directly in --src are read")
        return kind, collection, split, f"{folder}/{e.parts[-1]}"

    return _collect(source, place, listing)


Place = tuple[str, str, str, str]
"""(kind, collection, split, canonical relpath) of an input file."""


def _collect(source: Source, place: Callable[[_Entry, bool], Place | BadInput | None],
             listing: tuple[list[_Entry], list[BadInput]]) -> tuple[list[InputFile], list[BadInput]]:
    """The inputs of ``source`` (sorted, unique graph ids) and the refusals: ``place(entry, top)`` says
    where each ``*.npz`` belongs, refuses it (a BadInput) or leaves it out (None); ``top``: a file or
    object (not an archive member) that is the source itself or lies directly in it. ``listing``: what
    ``list_source`` returned for ``source`` (a source is listed once)."""
    entries, refused = listing
    refused = list(refused)
    root = source.root_parts
    found: list[InputFile] = []
    for e in entries:
        top = (e.origin is None or e.origin.member is None) and root in (e.parts, e.parts[:-1])
        where = place(e, top)
        if where is None:
            continue
        if isinstance(where, BadInput):
            refused.append(where)
            continue
        kind, coll, sp, relpath = where
        stem = e.parts[-1][:-4]
        if not is_safe_stem(stem):
            refused.append(BadInput(e.path, None, f"file name '{display_name(stem)}' is not a safe graph id "
                                    "(letters, digits and . _ + - only)"))
            continue
        found.append(InputFile(graph_id_of(coll, stem), relpath, e.path, kind, coll, sp, stem, e.size,
                               e.origin))
    found.sort()
    unique: list[InputFile] = []
    for inp in found:
        if unique and unique[-1].graph_id == inp.graph_id:
            refused.append(BadInput(inp.path, None, f"graph id {inp.graph_id} clashes with "
                                    f"{unique[-1].relpath}; graph ids must be unique within a build"))
            continue
        unique.append(inp)
    return unique, refused


Stamp = list | None
"""[size in bytes, mtime in ns (local) or the object's version string (remote)] of an input file as it
was read or as it is now, or None when it is gone. Part of the --resume fingerprint."""


def current_stamp(inp: InputFile) -> Stamp:
    """The stamp of ``inp`` as it is now: ``lstat`` of the file, or of its local archive; a remote
    input's version from this build's listing."""
    local = inp.local_file
    if local is None:
        return [inp.size, inp.origin.version]
    try:
        st = local.lstat()
    except OSError:
        return None
    if inp.origin is None:
        return [st.st_size, st.st_mtime_ns]
    return [inp.size, st.st_mtime_ns] if inp.origin.offset + inp.size <= st.st_size else None


def open_source(inp: InputFile) -> tuple[BinaryIO, Stamp]:
    """Open the bytes of ``inp`` for reading (the caller closes the file) and return them with their
    stamp: a plain local file through ``open_input``; a member of a local archive as a ``MemberView``
    of the archive (opened the same way); a remote object or archive member fetched whole by one
    (ranged) read into memory. Raises BadInput naming the input when it cannot be read."""
    o = inp.origin
    if o is None:
        fh, st = open_input(Path(inp.path))
        return fh, [st.st_size, st.st_mtime_ns]
    if not o.remote:
        fh, st = open_input(Path(o.url))
        if o.offset + inp.size > st.st_size:
            fh.close()
            raise BadInput(inp.path, None, "the archive is shorter than when it was listed (changed?)")
        return MemberView(fh, o.offset, inp.size), [inp.size, st.st_mtime_ns]
    store = resolve(o.url, o.storage_options, what="--src")
    start, end = (o.offset, o.offset + inp.size) if o.member else (None, None)
    try:
        data = store.fs.cat_file(store.root, start=start, end=end)
    except FileNotFoundError:
        raise BadInput(inp.path, None, "vanished after it was found (deleted while the build ran)") from None
    except Exception as exc:  # botocore's errors are not all OSErrors
        raise BadInput(inp.path, None, f"cannot be read ({type(exc).__name__}: {exc})") from None
    if len(data) != inp.size:
        raise BadInput(inp.path, None, f"is {len(data)} bytes, it was {inp.size} when listed (changed?)")
    return io.BytesIO(data), [inp.size, o.version]


def reopened_stamp(fh: BinaryIO, stamp: Stamp) -> Stamp:
    """The stamp of the file ``open_source`` returned, as it is now (to see a change during a read)."""
    if isinstance(fh, io.BytesIO):
        return stamp
    st = os.fstat((fh.archive if isinstance(fh, MemberView) else fh).fileno())
    return [stamp[0] if isinstance(fh, MemberView) else st.st_size, st.st_mtime_ns]
