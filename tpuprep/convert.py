"""Converting one input file: validated arrays in, pruned / re-padded / deduplicated arrays out.

This is the per-file unit of work of a build. It streams ``node_config_feat`` in row chunks of
about ``chunk_bytes`` inflated bytes into ``kernels.LayoutCollector``, which packs them to base-7
codes, deduplicates them and keeps each unique config only in its tie columns: neither the float32
config array nor the (c_u, nc, 3) codes are ever held whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from . import kernels
from .errors import BadInput
from .inputs import InputFile, read_graph
from .io.npz import NpzFile
from .moments import feature_moments
from .options import BuildOptions
from .tpugraphs import ConfigCounts, graph_fold


@dataclass
class ConvertedGraph(ConfigCounts):
    """Everything the shards hold for one graph (see schemas/*.json for the meaning of each array).

    Array fields share their names, shapes and dtypes with ``tpuprep.GraphRecord``, the reader's view of
    the same graph: what the build writes is what ``load_graph`` returns.
    """

    inp: InputFile
    sha256: str
    fold: int
    num_nodes_original: int
    num_edges_original: int
    node_index: np.ndarray  # (n',) int32
    node_feat: np.ndarray  # (n', 140) float32
    node_opcode: np.ndarray  # (n',) uint8
    edge_index: np.ndarray  # (m', 2) int32
    num_repad_anomalies: int
    dimensions_undecided: int  # kept nodes whose cols 31–36 length could not be told (docs/spec.md §2.2)
    config_inverse: np.ndarray  # (c,) int32
    config_runtime_original: np.ndarray | None  # (c,) int64, None on test
    group_size: np.ndarray  # (c_u,) int32
    first_index: np.ndarray  # (c_u,) int32
    config_runtime: np.ndarray | None  # (c_u,) int64, None on test
    node_config_ids: np.ndarray | None = None  # (nc,) int32, layout
    node_splits: np.ndarray | None = None  # (s,) int32, layout
    config_columns: kernels.TiedCodes | None = None  # the unique configs' codes in tie columns, layout
    config_feat: np.ndarray | None = None  # (c_u, 24) float32, tile
    config_runtime_normalizers: np.ndarray | None = None  # (c_u,) int64, tile, None on test
    config_runtime_normalizers_original: np.ndarray | None = None  # (c,) int64, tile, None on test
    warnings: tuple[str, ...] = ()

    @property
    def config_codes(self) -> np.ndarray | None:
        """(c_u, nc, 3) int32 base-7 codes of every unique config, expanded from ``config_columns`` (a new
        array each call, as large as the graph's codes: for tests and checks; the writer streams
        ``config_columns.stored``). None for tile graphs."""
        return None if self.config_columns is None else self.config_columns.full()

    def feature_moments(self) -> dict:
        """Mergeable moments of node_feat[:, :134] (``tpuprep.moments``)."""
        return feature_moments(self.node_feat)


class _KeepAll:
    """The ``--no-dedup`` stand-in for ``kernels.Deduplicator`` on tile graphs: every row is its own config."""

    def __init__(self, num_rows: int, width: int, *, with_runtime: bool, with_normalizer: bool = False):
        self.keys = np.empty((num_rows, width), np.int32)
        self.rt = np.empty(num_rows, np.int64) if with_runtime else None
        self.nz = np.empty(num_rows, np.int64) if with_normalizer else None

    def add(self, keys, runtime=None, normalizer=None):
        self.keys[:] = keys
        if self.rt is not None:
            self.rt[:] = runtime
        if self.nz is not None:
            self.nz[:] = normalizer

    def finish(self) -> kernels.DedupResult:
        c = self.keys.shape[0]
        ids = np.arange(c, dtype=np.int32)
        return kernels.DedupResult(self.keys, ids, np.ones(c, np.int32), ids.copy(), ids.copy(), self.rt, self.nz)


def rows_per_chunk(row_bytes: int, chunk_bytes: int) -> int:
    """Rows of ``row_bytes`` each streamed per chunk of about ``chunk_bytes`` (at least one)."""
    return max(1, chunk_bytes // max(row_bytes, 1))


def convert_file(inp: InputFile, opts: BuildOptions, sha256: str, fh: BinaryIO | None = None) -> ConvertedGraph:
    """Convert one validated input file (read from ``fh`` when given, an open binary file of it that
    the caller closes). Raises ``BadInput`` naming the file and key on bad input."""
    with NpzFile(inp.path, fh) as f:
        g = read_graph(f, inp)
        labelled = inp.split != "test"
        n, m = g.node_feat.shape[0], g.edge_index.shape[0]

        if inp.kind == "layout" and opts.prune:
            kept = kernels.prune_graph(g.edge_index, n, g.node_config_ids, opts.hops)
        else:
            kept = kernels.keep_all(g.edge_index, n, g.node_config_ids if g.node_config_ids is not None else np.empty(0, np.int64))
        node_opcode = g.node_opcode[kept.node_index]
        anomalies = undecided = 0
        if opts.repad:  # on the whole graph: a kept node's operands may be pruned
            node_feat, anomalous, unknown = kernels.repad_node_feat(g.node_feat, g.node_opcode, g.edge_index,
                                                                    kept.node_index)
            anomalies, undecided = int(anomalous.sum()), int(unknown.sum())
        else:
            node_feat = g.node_feat[kept.node_index]

        c = g.num_configs
        runtime = g.config_runtime if labelled else None
        if inp.kind == "layout":
            nc = g.node_config_ids.shape[0]
            collector = kernels.LayoutCollector(c, nc, with_runtime=labelled, dedup=opts.dedup)
            member = f.members["node_config_feat"]
            rows = rows_per_chunk(nc * kernels.base7.SLOTS * member.dtype.itemsize, opts.chunk_bytes)
            for start, chunk in f.iter_rows("node_config_feat", rows):
                try:
                    collector.add(chunk, None if runtime is None else runtime[start : start + len(chunk)])
                except kernels.ConfigValueError as exc:
                    raise BadInput(inp.path, "node_config_feat", str(exc)) from None
            result = collector.finish()
            extra = dict(node_config_ids=kept.node_config_ids,
                         node_splits=kernels.remap_node_splits(g.node_splits, kept.node_index),
                         config_columns=result.codes)
        else:
            normalizer = g.config_runtime_normalizers if labelled else None
            collector_type = kernels.Deduplicator if opts.dedup else _KeepAll
            dedup = collector_type(c, 24, with_runtime=labelled, with_normalizer=labelled)
            dedup.add(kernels.float_keys(g.config_feat), runtime, normalizer)
            result = dedup.finish()
            extra = dict(config_feat=np.ascontiguousarray(result.keys).view(np.float32),
                         config_runtime_normalizers=result.normalizer,
                         config_runtime_normalizers_original=normalizer)

    return ConvertedGraph(
        inp=inp, sha256=sha256, fold=graph_fold(inp.graph_id, opts.folds),
        num_nodes_original=n, num_edges_original=m,
        node_index=kept.node_index, node_feat=node_feat, node_opcode=node_opcode,
        edge_index=kept.edge_index, num_repad_anomalies=anomalies, dimensions_undecided=undecided,
        config_inverse=result.inverse, config_runtime_original=runtime,
        group_size=result.group_size, first_index=result.first_index, config_runtime=result.runtime,
        warnings=tuple(g.warnings), **extra,
    )
