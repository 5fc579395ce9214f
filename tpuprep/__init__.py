"""tpuprep: exact, fast preprocessing of TpuGraphs into compact Parquet/zstd shards.

Stable API (SPEC §4): ``open_dataset``, ``Dataset``, ``GraphRecord``, ``encode_base7``, ``decode_base7``;
also ``safe_normalizer`` (the std 0 → 1 rule of ``Dataset.normalizer``).
"""

__version__ = "0.1.0"

from .kernels.base7 import decode_base7, encode_base7
from .shards.reader import Dataset, GraphRecord, open_dataset, safe_normalizer

__all__ = ["Dataset", "GraphRecord", "__version__", "decode_base7", "encode_base7", "open_dataset",
           "safe_normalizer"]
