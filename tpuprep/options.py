"""What a build does to each file: ``BuildOptions``, recorded in the manifest and part of the resume
fingerprint. A plain dataclass with no heavy imports, so the CLI, run files and the manifest can use it
without loading the kernels."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass

REPAD_RULE = 2
"""The re-padding rule (docs/spec.md §2.2) this tpuprep applies, recorded in the manifest's options as
``repad_rule`` (null with ``--no-repad``): 1 re-pads cols 95–98, 101–104 and 134–139 (manifests of schema
3.2 and before, which do not record it); 2 also cols 31–36, the HLO ``dimensions`` attribute (schema 3.3)."""


@dataclass(frozen=True)
class BuildOptions:
    """Build options (docs/spec.md §2, §3). Sizes in bytes (uncompressed unless said otherwise).

    hops: pruning radius K; prune / repad / dedup: the three transformations; folds: K of the grouped
    K-fold ids; compression_level: zstd level; chunk_bytes: inflated bytes of node_config_feat streamed
    per step; row_group_bytes: budget of one Parquet row group; shard_bytes: budget of one graphs shard.
    """

    hops: int = 1
    prune: bool = True
    repad: bool = True
    dedup: bool = True
    folds: int = 5
    compression_level: int = 3
    chunk_bytes: int = 1 << 20  # fits the L2 cache: inflate, CRC and packing pass over it while it is hot
    row_group_bytes: int = 128 << 20
    shard_bytes: int = 1 << 30

    @property
    def repad_rule(self) -> int | None:
        """The re-padding rule a build with these options applies (``REPAD_RULE``), None without re-padding."""
        return REPAD_RULE if self.repad else None

    def to_dict(self) -> dict:
        """The options as the manifest records them: every field, then ``repad_rule``."""
        return asdict(self) | {"repad_rule": self.repad_rule}

    def fingerprint(self) -> str:
        """16 hex digits that change whenever any option does (the --resume key)."""
        text = ",".join(f"{k}={v}" for k, v in sorted(self.to_dict().items()))
        return hashlib.sha256(text.encode()).hexdigest()[:16]
