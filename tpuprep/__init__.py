"""tpuprep: exact, fast preprocessing of TpuGraphs into compact Parquet/zstd shards.

Stable API (docs/spec.md §4): ``open_dataset``, ``Dataset``, ``GraphRecord``, ``encode_base7``, ``decode_base7``;
also ``safe_normalizer`` (the std 0 → 1 rule of ``Dataset.normalizer``), ``ConfigSample`` and
``sample_rows`` (what ``Dataset.sample_configs`` returns and draws) and ``ConfigBatches`` (seeded,
resumable, sharded batches of sampled configs; ``tpuprep.torch`` and ``tpuprep.jax`` adapt them).
They are loaded on first use
(module ``__getattr__``), so ``import tpuprep`` — and with it every ``tpuprep`` command — does not pay
for Numba and pyarrow until something needs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "decode_base7": ".kernels.base7",
    "encode_base7": ".kernels.base7",
    "ConfigBatches": ".sampling.batches",
    "ConfigSample": ".shards.reader",
    "Dataset": ".shards.reader",
    "GraphRecord": ".shards.reader",
    "open_dataset": ".shards.reader",
    "safe_normalizer": ".shards.reader",
    "sample_rows": ".shards.reader",
}

__all__ = ["ConfigBatches", "ConfigSample", "Dataset", "GraphRecord", "__version__", "decode_base7",
           "encode_base7", "open_dataset", "safe_normalizer", "sample_rows"]

if TYPE_CHECKING:  # for type checkers and IDEs; at run time __getattr__ imports them
    from .kernels.base7 import decode_base7, encode_base7
    from .sampling.batches import ConfigBatches
    from .shards.reader import (
        ConfigSample,
        Dataset,
        GraphRecord,
        open_dataset,
        safe_normalizer,
        sample_rows,
    )


def __getattr__(name: str) -> Any:
    """Import a public name's module on first access and cache the name in this module."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
