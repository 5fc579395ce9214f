"""What a build may touch in ``--dst``: the entries tpuprep writes, and the lock held while it writes.

One implementation over a ``Store`` (``io.store``), whatever its backend: a local folder or an
object-store prefix (``--dst s3://bucket/prefix``).

``contents`` sorts every entry under ``--dst`` (``Store.walk``) into what tpuprep wrote (recognised by
tpuprep's own layout and names: ``manifest.json``, ``quarantine.jsonl``, ``README.md``,
``layout/<xla|nlp>/<default|random>/`` and ``tile/xla/`` with
``{graphs,configs}/<split>-NNNNN-of-NNNNN.parquet``, the staging folder ``.tpuprep/parts/...``, the
``.<name>.tmp-<pid>`` temporaries of a store that writes by rename, and the lock) and everything else
("foreign"); a ``README.md`` is tpuprep's only when it is a dataset card tpuprep wrote
(``is_tpuprep_card``: a user's own README is never replaced by the card nor deleted).
``--overwrite`` and ``--resume`` delete only the former (``clear``) and refuse a
``--dst`` holding any of the latter; symbolic links, FIFOs, sockets and devices are always foreign
and never followed or opened, and a folder tpuprep does not create is foreign without being entered.

``Lock`` is held for a whole build, so two builds never write one ``--dst``: the lock at
``<dst>/.tpuprep.lock`` that ``Store.lock_at`` gives (``io.locks``). Locally an exclusive ``flock`` on
that file (which records pid, host and start time): the kernel releases it when its holder dies, so
the lock of a killed build is taken over by the next one without any clean-up. In an object store a
lock object created with a conditional write, renewed while the build runs and taken over when stale
(``io.locks.lock_is_stale``). ``Lock.check`` runs just before the manifest is written: a lock object
taken over meanwhile stops the build (exit 1) before it publishes anything. ``probe`` asks whether a
live build holds the lock, writing nothing (checks and ``--dry-run``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ..errors import FatalError, UsageError
from ..io.files import TEMPORARY
from ..io.locks import LOCK_STALE_SECONDS, CannotLock, FileLock, LeaseLock, LockBusy
from ..io.store import NotARegularFile, Store
from ..tpugraphs import COLLECTIONS, SPLITS, collection_path
from .layout import (
    CARD,
    CARD_HEADING,
    LOCK,
    MANIFEST,
    PART_NAME,
    QUARANTINE,
    SHARD_NAME,
    STAGING,
    TABLES,
)

_TOP = re.compile("|".join(re.escape(n) for n in (MANIFEST, QUARANTINE, CARD)))


@dataclass(frozen=True)
class _Folder:
    """A folder tpuprep creates: which file names it writes there (None: only folders), and for
    shard and part folders the collection (and split) those files belong to."""

    names: re.Pattern | None = None
    collection: str | None = None
    split: str | None = None


def _prefixes(rel: str) -> list[str]:
    parts = rel.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _own_folders() -> dict[str, _Folder]:
    folders: dict[str, _Folder] = {"": _Folder(_TOP)}
    for collection in COLLECTIONS:
        path = collection_path(collection)
        for table in TABLES:
            for rel in _prefixes(f"{path}/{table}"):
                folders.setdefault(rel, _Folder())
            folders[f"{path}/{table}"] = _Folder(SHARD_NAME, collection)
        for split in SPLITS:
            for rel in _prefixes(f"{STAGING}/parts/{path}/{split}"):
                folders.setdefault(rel, _Folder())
            folders[f"{STAGING}/parts/{path}/{split}"] = _Folder(PART_NAME, collection, split)
    return folders


OWN_FOLDERS = _own_folders()


@dataclass
class Contents:
    """The entries under ``--dst``, as paths relative to it.

    files / dirs: what tpuprep wrote (dirs deepest first; the lock file is not among them);
    foreign: what it did not (never deleted); held: the (collection, split) pairs that have shards or
    staged parts; lock: whether a lock file is present.
    """

    files: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    held: set[tuple[str, str]] = field(default_factory=set)
    lock: bool = False

    @property
    def empty(self) -> bool:
        """Nothing but (perhaps) a lock file."""
        return not (self.files or self.dirs or self.foreign)


def _own_file(folder: _Folder, name: str, temporaries: bool) -> re.Match | None:
    """The match of ``name`` against the names tpuprep writes in ``folder`` (``temporaries``: its
    ``.<name>.tmp-<pid>`` temporaries too), or None."""
    if folder.names is None:
        return None
    temporary = TEMPORARY.fullmatch(name)
    if temporary and not temporaries:
        return None
    return folder.names.fullmatch(temporary.group(1) if temporary else name)


CARD_PROBE_BYTES = 1 << 20
"""How much of a ``README.md`` is read to tell tpuprep's card (its front matter is ~15 KB)."""


def is_tpuprep_card(head: bytes) -> bool:
    """Whether ``head``, the first bytes of a ``README.md``, begins as every dataset card tpuprep writes:
    YAML front matter (a ``---`` line, ..., a ``---`` line), then ``CARD_HEADING`` as the first line that
    is not blank."""
    text = head.decode("utf-8", "replace").replace("\r\n", "\n")
    end = text.find("\n---\n", 3) if text.startswith("---\n") else -1
    return end >= 0 and text[end + 5:].lstrip("\n").startswith(CARD_HEADING + "\n")


def _own_card(dst: Store, rel: str) -> bool:
    """Whether the regular file ``rel`` (``README.md``) is a card tpuprep wrote (``is_tpuprep_card``)."""
    with dst.open(rel, "rb") as fh:
        return is_tpuprep_card(fh.read(CARD_PROBE_BYTES))


def contents(dst: Store) -> Contents:
    """Sort every entry under ``dst`` into tpuprep's own and foreign ones (an absent folder holds
    nothing). Never follows a link, never enters a folder tpuprep does not create."""
    out = Contents()
    for entry in dst.walk(lambda rel: rel in OWN_FOLDERS):
        rel, kind = entry.rel, entry.kind
        folder_rel, _, name = rel.rpartition("/")
        folder = OWN_FOLDERS.get(folder_rel)
        if kind == "gone":  # removed while it was listed
            continue
        if kind == "unlisted":  # one of tpuprep's folders whose entries cannot be known: never guess
            raise FatalError(f"--dst {dst.display}: its folder {rel} cannot be listed ({entry.detail})")
        if kind == "folder":
            if rel in OWN_FOLDERS:
                out.dirs.append(rel)
            else:
                out.foreign.append(rel + "/")
        elif kind != "file" or folder is None:
            out.foreign.append(rel)
        elif not folder_rel and name == LOCK:
            out.lock = True
        elif (m := _own_file(folder, name, dst.writes_temporaries)) and (rel != CARD or _own_card(dst, rel)):
            out.files.append(rel)
            if folder.collection:
                out.held.add((folder.collection, folder.split or m.group(1)))
        else:
            out.foreign.append(rel)
    out.dirs.sort(key=lambda r: -r.count("/"))  # deepest first (stable: siblings stay sorted)
    return out


def selection(dst: Store) -> set[tuple[str, str]]:
    """The (collection, split) pairs a finished build's ``manifest.json`` under ``dst`` lists (empty
    if there is none, or it is not a regular file, or cannot be understood). A refused request or
    another read failure is raised."""
    try:
        manifest = json.loads(dst.read_bytes(MANIFEST))
        return {(cid, split) for cid, coll in manifest["collections"].items() for split in coll["splits"]}
    except (FileNotFoundError, NotARegularFile):
        return set()
    except (ValueError, KeyError, TypeError, AttributeError):  # UnicodeDecodeError is a ValueError
        return set()


def clear(dst: Store, files: list[str], dirs: list[str] = ()) -> None:
    """Delete these files of ``dst`` (what ``contents`` listed as tpuprep's), then these folders if
    they are empty (a folder something else was put into meanwhile is kept, with its contents; an
    object store has no folders)."""
    dst.remove(files, dirs)


# ----------------------------------------------------------------------------------------- the lock


def _busy(dst: Store, busy: LockBusy) -> UsageError:
    info = busy.holder
    holder = (f"pid {info.get('pid')} on {info.get('host')}, started {info.get('started')}"
              if info.get("pid") is not None else "holder not recorded yet")
    return UsageError(f"--dst {dst.display} is being written by another tpuprep build ({holder}); wait "
                      f"for it to end ({busy.release_rule})")


def probe(dst: Store) -> None:
    """Raise UsageError naming the holder if a live build holds ``dst``'s lock. Writes nothing."""
    lock = dst.lock_at(LOCK)
    holder = lock.holder()
    if holder is not None:
        raise _busy(dst, LockBusy(holder, lock.release_rule))


class Lock:
    """``dst`` taken for one build (see the module docstring); a context manager that releases it."""

    def __init__(self, dst: Store, held: FileLock | LeaseLock):
        self.dst, self.held = dst, held

    @classmethod
    def acquire(cls, dst: Store) -> Lock:
        """Take the lock (creating a local ``dst`` folder first). UsageError naming the holder when a
        live build holds it; FatalError when no lock can be taken there."""
        dst.makedirs()
        held = dst.lock_at(LOCK)
        try:
            held.take()
        except LockBusy as busy:
            raise _busy(dst, busy) from None
        except CannotLock as exc:
            raise FatalError(f"--dst {dst.display}: {exc}") from None
        return cls(dst, held)

    def check(self) -> None:
        """Raise FatalError when another build has taken the lock over (only a stale lock object is)."""
        if not self.held.still_held():
            raise FatalError(f"--dst {self.dst.display}: another build took over this build's lock "
                             f"{LOCK} (it was not renewed for {LOCK_STALE_SECONDS:.0f} s); nothing was published: run again "
                             "with --resume")

    def release(self) -> None:
        """Give the lock back (removing the lock file or object). Safe to call twice."""
        self.held.release()

    def __enter__(self) -> Lock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def lock(dst: Store) -> Lock:
    """``Lock.acquire(dst)``: take ``dst`` for one build."""
    return Lock.acquire(dst)
