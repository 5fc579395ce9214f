"""What a build does to each file: ``BuildOptions``, recorded in the manifest and part of the resume
fingerprint. A plain dataclass with no heavy imports, so the CLI, run files and the manifest can use it
without loading the kernels."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass


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

    def to_dict(self) -> dict:
        return asdict(self)

    def fingerprint(self) -> str:
        """16 hex digits that change whenever any option does (the --resume key)."""
        text = ",".join(f"{k}={v}" for k, v in sorted(self.to_dict().items()))
        return hashlib.sha256(text.encode()).hexdigest()[:16]
