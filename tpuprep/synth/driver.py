"""The top-level driver: ``synthesize`` writes every npz file of a profile with its truth side file
and returns a ``SynthSummary`` (files, per-collection counts, bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..io.npz_writer import StreamedArray, prefetched, write_npy, write_npz
from ..tpugraphs import selected, unselected
from .configs import draw_choices
from .constants import COLLECTIONS
from .files import FileSpec, draw_layout_config_count, file_plan, layout_graph_for
from .journal import Journal, remove_temporaries
from .names import layout_family
from .profiles import DUP_SPREAD, DUP_TARGET, PROFILES, Profile
from .seeding import keyed_rng, loguniform
from .tile import build_tile_graph, tile_configs

_CHUNK_BYTES = 32 << 20
"""Target size of one streamed node_config_feat chunk (bytes, before compression)."""


@dataclass
class CollectionCount:
    """Files and configs (rows) written for one collection."""

    files: int = 0
    configs: int = 0


@dataclass
class SynthSummary:
    """What ``synthesize`` wrote: npz files (relative paths, in order), their truth side files,
    per-collection counts, and bytes on disk (npz files; truth files separately); ``fraction`` of the
    profile's files per (collection, split); ``reused``: files found finished and skipped."""

    root: Path
    profile: str
    seed: int
    files: list[str] = field(default_factory=list)
    truth_files: list[str] = field(default_factory=list)
    counts: dict[str, CollectionCount] = field(default_factory=dict)
    total_bytes: int = 0
    truth_bytes: int = 0
    fraction: float = 1.0
    reused: int = 0


def _write_layout(spec: FileSpec, prof: Profile, seed: int, root: Path) -> tuple[int, int, int]:
    """Write one layout file and its truth; returns (npz bytes, truth bytes, configs)."""
    family, search = layout_family(spec.collection)
    graph, plan, _ = layout_graph_for(spec, prof, seed)
    crng = keyed_rng(seed, "configs", spec.collection, spec.split, spec.index)
    c = draw_layout_config_count(spec, prof, crng)
    share = float(
        np.clip(DUP_TARGET[spec.collection] + crng.normal(0.0, DUP_SPREAD[family]), 0.0, 0.95)
    )
    choices = draw_choices(plan, crng, search, c, share)
    truth = plan.truth(choices)
    if spec.split == "test":
        runtime = np.zeros(c, np.int64)
    else:
        runtime = np.rint(truth * (1.0 + plan.noise * crng.standard_normal(c))).astype(np.int64)
    nc = len(plan.group_of)
    rows = max(1, _CHUNK_BYTES // max(1, nc * 18 * 4))
    chunks = plan.feature_chunks(choices, rows)
    feat = StreamedArray(
        (c, nc, 18), np.dtype(np.float32), prefetched(chunks) if c > rows else chunks
    )
    members = [
        ("edge_index", graph.edge_index),
        ("node_feat", graph.node_feat),
        ("node_opcode", graph.node_opcode),
        ("node_config_feat", feat),
        ("node_config_ids", plan.node_config_ids),
        ("node_splits", graph.node_splits),
        ("config_runtime", runtime),
    ]
    nbytes = write_npz(root / spec.relpath, members)
    tbytes = write_npy(root / spec.truth_relpath, truth)
    return nbytes, tbytes, c


def _write_tile(spec: FileSpec, prof: Profile, seed: int, root: Path) -> tuple[int, int, int]:
    """Write one tile file and its truth; returns (npz bytes, truth bytes, configs)."""
    rng = keyed_rng(seed, "tile", spec.split, spec.index)
    graph = build_tile_graph(rng, prof.tile_nodes, spec.kind)
    feat, truth, default = tile_configs(graph, rng, int(loguniform(rng, *prof.tile_configs)))
    c = len(truth)
    sigma = loguniform(rng, 0.002, 0.3) if spec.kind == "reshape" else loguniform(rng, 5e-4, 0.02)
    measured = np.maximum(1, np.rint(truth * np.exp(sigma * rng.standard_normal(c)))).astype(
        np.int64
    )
    if spec.split == "test":
        runtime, normalizer = np.zeros(c, np.int64), np.ones(c, np.int64)
    else:
        runtime, normalizer = measured, np.full(c, measured[default], np.int64)
    members = [
        ("node_feat", graph.node_feat),
        ("node_opcode", graph.node_opcode),
        ("edge_index", graph.edge_index),
        ("config_feat", feat),
        ("config_runtime", runtime),
        ("config_runtime_normalizers", normalizer),
    ]
    nbytes = write_npz(root / spec.relpath, members)
    tbytes = write_npy(root / spec.truth_relpath, truth)
    return nbytes, tbytes, c


def synthesize(
    dst: str | Path,
    profile: str = "tiny",
    seed: int = 0,
    *,
    collections: Sequence[str] | None = None,
    fraction: float = 1.0,
    progress: Callable[[str], None] | None = None,
) -> SynthSummary:
    """Write a synthetic TpuGraphs tree under dst: ``npz/...`` exactly like the dataset, plus the
    noise-free runtime of every config under ``truth/<same path>.npy`` (float64 ns, shape (c,)).

    profile: one of PROFILES; seed: any int (same (profile, seed) -> byte-identical files);
    collections: restrict to these collection ids or prefixes (``layout:xla``, ``tile``), as
    ``tpuprep build --collections`` selects (each file's bytes do not depend on it);
    fraction: in (0, 1]: only the first ceil(fraction × count) files of every (collection, split),
    each identical to the same file of the whole profile (``files.file_plan``);
    progress: called with the npz path (relative to dst) after each file (written or reused).

    Resumable: every finished file slot is recorded in ``dst/synth-journal.jsonl`` (``journal``); a
    slot whose npz and truth files are still exactly as recorded for this generator, profile and seed
    is skipped (``SynthSummary.reused``), anything else is written (again).
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose one of {sorted(PROFILES)}")
    if unknown := unselected(collections):
        raise ValueError(f"unknown collection(s) {unknown}; known: {list(COLLECTIONS)}")
    prof = PROFILES[profile]
    root = Path(dst)
    plan = file_plan(prof, seed, fraction)
    summary = SynthSummary(root=root, profile=profile, seed=int(seed), fraction=float(fraction))
    journal = Journal(root, profile, seed)
    for spec in plan:
        if not selected(spec.collection, collections):
            continue
        done = journal.finished(spec.relpath)
        if done is None:
            for rel in (spec.relpath, spec.truth_relpath):
                remove_temporaries(root, rel)
            writer = _write_tile if spec.collection == "tile:xla" else _write_layout
            _, _, configs = writer(spec, prof, seed, root)
            done = journal.record(spec.relpath, spec.truth_relpath, configs)
        else:
            summary.reused += 1
        count = summary.counts.setdefault(spec.collection, CollectionCount())
        count.files += 1
        count.configs += done.configs
        summary.files.append(spec.relpath)
        summary.truth_files.append(spec.truth_relpath)
        summary.total_bytes += done.npz_bytes
        summary.truth_bytes += done.truth_bytes
        if progress is not None:
            progress(spec.relpath)
    return summary
