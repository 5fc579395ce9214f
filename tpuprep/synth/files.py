"""The file tree of a profile: a ``FileSpec`` (collection, split, names, paths) for every file
(``file_plan``), and what each file slot holds — its layout graph and config plan
(``layout_graph_for``), its number of configs (``layout_config_count``), its tile kernel
(``tile_graph_for``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .configs import LayoutPlan, plan_layout
from .constants import COLLECTIONS, MAX_CONFIGS, SPLITS
from .graph import SynthGraph
from .names import layout_family, program_vocabulary
from .profiles import Profile, resolve_profile
from .programs import build_program
from .seeding import hex32, keyed_rng, loguniform, signed_hex64
from .tile import TILE_KIND_P, TILE_KINDS, build_tile_graph


@dataclass(frozen=True)
class FileSpec:
    """One file of a synthetic tree.

    relpath: 'npz/...' path of the .npz relative to dst; truth_relpath: 'truth/...' path of its
    noise-free runtimes (.npy); program: the program the graph models (layout; for test files a
    hidden name); kind: tile kernel kind (tile).
    """

    collection: str
    split: str
    index: int
    stem: str
    relpath: str
    truth_relpath: str
    program: str = ""
    kind: str = ""


def _collection_dir(collection: str) -> str:
    parts = collection.split(":")
    return "/".join(parts)  # tile/xla, layout/xla/random


def _family_names(profile: Profile, seed: int, family: str) -> dict[str, list[str]]:
    """Program names per split for one layout family: unique across splits, shared by default and
    random (slot k of a split is the same program in both collections)."""
    need = [
        max(
            profile.counts.get(f"layout:{family}:{search}", (0, 0, 0))[k]
            for search in ("default", "random")
        )
        for k in range(3)
    ]
    vocab = program_vocabulary(family)
    if sum(need) > len(vocab):
        raise ValueError(
            f"profile {profile.name!r} needs {sum(need)} {family} programs; {len(vocab)} known"
        )
    order = keyed_rng(seed, "names", family).permutation(len(vocab))
    names = [vocab[int(i)] for i in order]
    out, at = {}, 0
    for split, k in zip(SPLITS, need, strict=True):
        out[split] = names[at : at + k]
        at += k
    return out


def kept_count(count: int, fraction: float) -> int:
    """Files kept of a (collection, split) with ``count`` files at ``fraction``: ceil(count × fraction),
    at least 1 when count ≥ 1 (so every split of the profile stays represented)."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    return min(count, max(1, math.ceil(count * fraction - 1e-9))) if count else 0


def file_plan(profile: Profile | str, seed: int = 0, fraction: float = 1.0) -> list[FileSpec]:
    """Every file of a profile, in generation order (collections, splits, index).

    fraction: keep only the first ``kept_count(count, fraction)`` slots (by index) of every
    (collection, split). A kept slot is the very same file as in the whole profile (names, graph,
    configs and bytes are keyed by the slot, never by how many slots are kept), so a fraction tree is
    a subset of the whole tree with the whole profile's per-file size distribution.
    """
    prof = resolve_profile(profile)
    kept_count(1, fraction)  # checks the fraction
    if fraction != 1.0:
        counts = prof.counts
        return [s for s in file_plan(prof, seed)
                if s.index < kept_count(counts[s.collection][SPLITS.index(s.split)], fraction)]
    specs: list[FileSpec] = []
    names = {fam: _family_names(prof, seed, fam) for fam in ("xla", "nlp")}
    for collection in COLLECTIONS:
        counts = prof.counts.get(collection, (0, 0, 0))
        cdir = _collection_dir(collection)
        for split, count in zip(SPLITS, counts, strict=True):
            for index in range(count):
                if collection == "tile:xla":
                    krng = keyed_rng(seed, "tile-kind", split, index)
                    kind = str(krng.choice(TILE_KINDS, p=TILE_KIND_P))
                    prefix = "fusion" if kind in ("fusion", "conv") else kind
                    number = int(krng.integers(1, 400))
                    stem = f"{prefix}.{number}_{signed_hex64(seed, 'tile', split, index)}"
                    program = ""
                else:
                    family, _ = layout_family(collection)
                    kind = ""
                    program = names[family][split][index]
                    stem = hex32(seed, "test", family, index) if split == "test" else program
                rel = f"{cdir}/{split}/{stem}"
                specs.append(FileSpec(collection, split, index, stem, f"npz/{rel}.npz", f"truth/{rel}.npy",
                                      program, kind))  # fmt: skip
    tiles = [s.stem for s in specs if s.collection == "tile:xla"]
    if len(set(tiles)) != len(tiles):
        raise RuntimeError("tile stem collision; choose another seed")
    return specs


def layout_graph_for(
    spec: FileSpec, profile: Profile | str, seed: int = 0
) -> tuple[SynthGraph, LayoutPlan, int]:
    """(graph, config plan, target n) of a layout file slot; the graph is identical in default and
    random (same program), the plan too (the collections differ only in how configs are drawn)."""
    prof = resolve_profile(profile)
    family, _ = layout_family(spec.collection)
    grng = keyed_rng(seed, "graph", family, spec.split, spec.index)
    lo, hi = prof.xla_nodes if family == "xla" else prof.nlp_nodes
    n_target = int(loguniform(grng, lo, hi))
    nc_min = 0
    big_slot = False
    if prof.big is not None:
        bcoll, bsplit, bindex, bnc = prof.big
        big_slot = layout_family(bcoll)[0] == family and (bsplit, bindex) == (
            spec.split,
            spec.index,
        )
        nc_min = bnc if big_slot else 0
        n_target = min(n_target, 1500) if big_slot else n_target
    every = prof.isolated_every
    isolated = every > 0 and spec.split == "train" and spec.index % every == every - 1
    graph = build_program(grng, family, spec.program, n_target, nc_min=nc_min, isolated=isolated)
    attempt, target = 0, nc_min
    while len(graph.configurable) < nc_min:  # the big graph: nc is what matters, not n
        attempt += 1
        if attempt > 8:
            raise RuntimeError(f"could not reach {nc_min} configurable nodes")
        target = int(target * nc_min / max(len(graph.configurable), 1)) + 2
        retry = keyed_rng(seed, "graph", family, spec.split, spec.index, attempt)
        graph = build_program(
            retry, family, spec.program, min(n_target, 1500), nc_min=target, isolated=isolated
        )
    # one hint per program, whichever collection asks: default and random share graph and plan
    if spec.split == "test":
        c_hint = prof.test_configs + 1
    elif big_slot or prof.pins_max_configs(family):
        c_hint = MAX_CONFIGS
    else:
        c_hint = max([prof.layout_configs[1]] + [high for c, (_, high, _) in prof.configs_by.items()
                                                  if c.startswith(f"layout:{family}:")])
    plan = plan_layout(
        graph, keyed_rng(seed, "plan", family, spec.split, spec.index), family, c_hint
    )
    return graph, plan, n_target


def draw_layout_config_count(spec: FileSpec, prof: Profile, rng: np.random.Generator) -> int:
    """c of a layout file; the first draw of the file's config generator."""
    if spec.split == "test":
        extra = 1 if (spec.collection, spec.index) in prof.test_configs_1001 else 0
        return prof.test_configs + extra
    if prof.big is not None and prof.big[:3] == (spec.collection, spec.split, spec.index):
        return MAX_CONFIGS
    pinned = rng.random() < prof.max_config_share  # drawn in every case: the stream stays the same
    if spec.collection in prof.configs_by:
        low, high, every = prof.configs_by[spec.collection]
        pinned = every > 0 and spec.index % every == every // 2
    else:
        low, high = prof.layout_configs
    return MAX_CONFIGS if pinned else int(loguniform(rng, low, high))


def layout_config_count(spec: FileSpec, profile: Profile | str, seed: int = 0) -> int:
    """The number of configs c a layout file of the plan gets (without writing it)."""
    prof = resolve_profile(profile)
    return draw_layout_config_count(
        spec, prof, keyed_rng(seed, "configs", spec.collection, spec.split, spec.index)
    )


def tile_graph_for(spec: FileSpec, profile: Profile | str, seed: int = 0) -> SynthGraph:
    """The kernel graph of a tile file of the plan."""
    prof = resolve_profile(profile)
    return build_tile_graph(
        keyed_rng(seed, "tile", spec.split, spec.index), prof.tile_nodes, spec.kind
    )


@dataclass(frozen=True)
class PlannedFile:
    """The size of one layout file of a profile's plan, known without writing it: ``configs`` c and
    ``config_nodes`` nc, hence ``config_feat_bytes`` = c × nc × 18 × 4, the inflated float32
    ``node_config_feat`` array (its .npy header excluded)."""

    spec: FileSpec
    configs: int
    config_nodes: int

    @property
    def config_feat_bytes(self) -> int:
        return self.configs * self.config_nodes * 18 * 4


def layout_size_plan(profile: Profile | str, seed: int = 0, fraction: float = 1.0) -> list[PlannedFile]:
    """c and nc of every layout file of the plan (``file_plan`` order), without writing a file.

    nc needs each layout program built (default and random share it: one build per program); c is
    the file's first config draw. About 25 s for ``full`` on one core, well under a second for tiny.
    """
    prof = resolve_profile(profile)
    nodes: dict[tuple[str, str, int], int] = {}
    out: list[PlannedFile] = []
    for spec in file_plan(prof, seed, fraction):
        if spec.collection == "tile:xla":
            continue
        key = (layout_family(spec.collection)[0], spec.split, spec.index)
        if key not in nodes:
            nodes[key] = len(layout_graph_for(spec, prof, seed)[1].node_config_ids)
        out.append(PlannedFile(spec, layout_config_count(spec, prof, seed), nodes[key]))
    return out
