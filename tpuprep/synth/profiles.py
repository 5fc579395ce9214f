"""Profiles and calibration targets: how many files of which sizes a synthetic tree has
(``Profile``, ``PROFILES``), ``resolve_profile``, and the per-collection targets the layout
config sampler aims at (duplicate-row shares, non-modal output rates; STATS.md / TPUGRAPHS.md).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from .constants import MAX_CONFIGS


@dataclass(frozen=True)
class Profile:
    """Sizes of one synthetic tree.

    counts: collection id -> (train, valid, test) file counts. Ranges are (low, high) and drawn
    log-uniformly per file: ``xla_nodes`` / ``nlp_nodes`` target node counts n of layout graphs,
    ``layout_configs`` configs c of layout train/valid files, ``tile_nodes`` / ``tile_configs`` the same
    for tile kernels. ``test_configs`` is c of every layout test file; ``test_configs_1001`` lists
    (collection, index) test files that get one more config (the published set has two such files).
    ``max_config_share``: share of layout train/valid files whose c is pinned to ``MAX_CONFIGS``.
    ``configs_by``: per layout collection, ``(low, high, max_every)``: its train/valid files take c
    log-uniform in [low, high], except every ``max_every``-th file of a split (index ≡ max_every // 2
    mod max_every), pinned at ``MAX_CONFIGS`` — spread evenly, so every ``--fraction`` of the profile
    keeps its share of them (replaces ``layout_configs`` and ``max_config_share``; ``config_range``).
    ``big``: (collection, split, index, nc_min) of the single layout graph written at c = MAX_CONFIGS
    with at least nc_min configurable nodes (bench). ``isolated_every``: every k-th layout program
    (by slot index) carries one isolated configurable node (0 = never).
    """

    name: str
    counts: dict[str, tuple[int, int, int]]
    xla_nodes: tuple[int, int]
    nlp_nodes: tuple[int, int]
    layout_configs: tuple[int, int]
    test_configs: int
    tile_nodes: tuple[int, int]
    tile_configs: tuple[int, int]
    max_config_share: float = 0.0
    test_configs_1001: tuple[tuple[str, int], ...] = ()
    big: tuple[str, str, int, int] | None = None
    isolated_every: int = 5
    configs_by: dict[str, tuple[int, int, int]] = field(default_factory=dict)

    def pins_max_configs(self, family: str) -> bool:
        """Whether some train/valid file of this layout family (``xla``/``nlp``) may get c = MAX_CONFIGS."""
        return self.max_config_share > 0 or any(
            every > 0 for c, (_, _, every) in self.configs_by.items() if c.startswith(f"layout:{family}:"))


def resolve_profile(profile: Profile | str) -> Profile:
    """A profile given by name (a key of ``PROFILES``) or as a ``Profile``."""
    return PROFILES[profile] if isinstance(profile, str) else profile


def _tuples(value: Any) -> Any:
    """TOML arrays as tuples, nested ones too (``Profile`` is frozen and hashable-minded)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def load_profiles(text: str) -> dict[str, Profile]:
    """The ``Profile`` of every table of a profiles TOML document (``profiles.toml``)."""
    profiles = {}
    for name, table in tomllib.loads(text).items():
        fields = {key: ({k: _tuples(v) for k, v in value.items()} if isinstance(value, dict) else _tuples(value))
                  for key, value in table.items()}
        profiles[name] = Profile(name=name, **fields)
        for low, high, *_ in [profiles[name].layout_configs, *profiles[name].configs_by.values()]:
            if not 1 <= low <= high <= MAX_CONFIGS:
                raise ValueError(f"profile {name!r}: configs range {low}..{high} outside 1..{MAX_CONFIGS}")
    return profiles


PROFILES: dict[str, Profile] = load_profiles(
    resources.files(__package__).joinpath("profiles.toml").read_text(encoding="utf-8"))
"""Every profile, from ``profiles.toml`` (the sizes are data; this module says what they mean)."""

FULL_TARGETS = {
    "config_feat_train_valid_bytes": 400e9,
    "mean_configs": {"layout:xla:random": 11_000, "layout:nlp:random": 66_000},
    "max_config_files": 3,
}
"""What the ``full`` profile's plan is calibrated to (``synth.layout_size_plan``, seed 0).

- ``config_feat_train_valid_bytes``: inflated float32 ``node_config_feat`` of all train + valid layout
  files, "≈ 400 GB" (TPUGRAPHS.md §1); the plan gives 397.9 GB (per collection: xla:random 34.2,
  xla:default 22.2, nlp:random 277.2, nlp:default 64.3 GB; the test files add 0.7 GB).
- ``mean_configs``: the published average c per graph, "over 11,000" for layout:xla:random and "over
  66,000" for layout:nlp:random (the TGraph paper: Khizbullin et al., "Graph neural networks with
  configuration cross-attention for tensor compilers"); the plan gives 11,492 and
  67,310 over train + valid. Nothing is published per collection for the default collections or for
  bytes: they take the rest of the 400 GB (mean c 11,814 xla:default, 14,628 nlp:default).
- ``max_config_files``: at least this many train/valid files at c = 100,040 in every layout collection
  (the plan: 4 xla:random, 4 xla:default, 113 nlp:random, 15 nlp:default; ``--fraction 0.25`` keeps 34
  of them, in every collection).
- The per-collection and per-split file counts are the published ones (TPUGRAPHS.md §1), exactly.

``nlp_nodes`` stops at 14,000 instead of the published n ≤ 21,919: this generator's configurable share
grows at large n, so up to 21,919 it planned nc up to 2,067 (published maximum 848) and a mean nc of
340, with which the published mean c of nlp:random alone (66,000) made ≈ 370 GB. At 14,000 the nlp
mean nc is 235 (maximum 1,157), which lets all three published figures hold together.
"""


DUP_TARGET = {
    "layout:xla:default": 0.44,
    "layout:xla:random": 0.30,
    "layout:nlp:default": 0.0006,
    "layout:nlp:random": 0.0006,
}
"""Share of duplicate node_config_feat rows per layout collection (STATS.md §3, TPUGRAPHS.md §2)."""
DUP_SPREAD = {"xla": 0.05, "nlp": 0.0}
"""Standard deviation of a file's own duplicate share around its collection target."""
NONMODAL_ROWS_DEFAULT = (0.62, 0.28, 0.08, 0.02)
"""P(0, 1, 2, 3 conv/dot groups take a non-modal output layout in a row), 'default' collections."""
NONMODAL_P_RANDOM = (0.12, 0.40)
"""Per-group probability range of a non-modal output layout in 'random' collections."""
