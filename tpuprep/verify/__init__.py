"""``tpuprep verify``: prove that the shards reconstruct the inputs exactly, and that everything the shard
folder says about them is true.

Deliberately independent of the Numba kernels: every check is plain NumPy written from docs/spec.md §2, so
a kernel bug cannot hide behind itself. What is checked:

- the manifest: the full JSON Schema (``schemas/manifest.schema.json``) on top of the cheap check every
  reader runs (``manifest.check_manifest``); its options are a valid ``BuildOptions``;
- every shard file: inside the folder, a regular file, size and sha256 as in the manifest, each column
  compressed as its schema says (zstd, or uncompressed where the schema says ``none``), the
  ``table`` its metadata names and that table's columns, rows, row groups, first and last graph as in
  the manifest; runtimes (``runtime``, ``runtime_spread``, tile ``normalizer``) null on every row of a
  test ``configs`` shard and on none of another split's; ``graphs``
  rows hold exactly the manifest's converted graphs of that collection and split (each once, sorted);
  ``configs`` rows are sorted by ``(graph_id, config_id)`` with ``config_id`` = 0..c_u−1 per graph and
  each graph's rows in one shard;
- every folder under ``--src`` listed (one that cannot be is a problem: its inputs would go unchecked);
  every input's zip structure read independently of the build's reader (``inputcheck``: the end
  record ends the file or archive member exactly, sizes and CRC-32 of every member as the zip
  directory declares, computed on the same single inflate pass that reads the arrays checked below:
  ``reading.InputReader``); its declared shapes within the input limits (``limits.py``);
- per graph, against its input file: the kept node set and edge set (NumPy breadth-first search);
  ``node_feat`` rows re-padded exactly by the docs/spec.md §2.2 rule (or untouched with ``--no-repad``),
  opcodes, remapped edges, ``node_config_ids`` and ``node_splits``; every original config row (streamed),
  its values integers in −1..5, encoded to base-7 codes by verify's own NumPy (docs/spec.md §2.4), each
  tied node's codes equal to its stored column's, against the stored ``codes`` of its unique config via
  ``config_inverse``; ``config_node_tie`` numbering its stored columns 0..nt−1 in order of first
  appearance; every original runtime; the
  minimum-runtime / ``group_size`` / ``first_index`` bookkeeping; with dedup, unique configs pairwise
  distinct, without it one config per group; every scalar column of the ``graphs`` row (``num_edges``,
  ``fold`` = ``graph_fold(graph_id, folds)``, ``source_sha256`` = the input's sha256 ...) and the
  manifest's per-input counts;
- per collection and split: the manifest's totals (sums of the per-input counts, shard bytes) and the
  train ``node_feat_stats`` recomputed from the shards' feature rows.

Layout configs are compared in the stored domain, never decoded (``layout``): the input's rows are
encoded the way the shards store them (``reference.LayoutEncoder``: multiply-adds, no division) and
compared with the ``codes`` byte planes read by verify itself with pyarrow (``stored``), joined to
int32 with every byte kept. Both stream in order; the input row where a unique config first occurs is
compared with its stored codes directly, every other row (a repeat) by a key of its codes
(``reference.RowKeys``: m exact float64 sums with random weights drawn per graph, a false "equal"
≤ 2^-128 per pair whatever the data), against its unique config's stored key; "pairwise distinct" is
distinct stored keys. Memory is O(c) per graph whatever nc, so ``verify`` runs beside a full-size build.

What this does not prove: that the reader decodes the stored codes back to the same values (the
reader's ``decode_base7``, ``join_planes``, ``expand_tied`` and ``StoredCodes`` are not run by verify;
their own tests and property tests against the NumPy reference cover them), and that the ties are
maximal (two stored columns equal in every config would pass: the shards would be larger, not wrong).

With ``sample`` (``tpuprep verify --sample FRACTION --seed N``) only a seeded subset of the converted
inputs is checked against its graph; every shard-side check and the manifest's totals still cover
everything, and the report says how many graphs of how many were checked.

The package splits these by job: ``shards`` (the shard folder), ``graph`` (one graph against its
input), ``layout`` (a layout graph's configs against its input's rows), ``stored`` (a layout graph's
configs rows read as stored), ``reading`` (an input's members inflated once), ``reference`` (the NumPy
reference rules), ``run`` (the orchestration, ``verify``), ``report``.

Options that leave no trace in the shards (``chunk_bytes``, ``row_group_bytes``, ``shard_bytes``, the
zstd level) are checked for type and range only.
"""

from .graph import verify_graph
from .layout import VERIFY_BLOCK_BYTES
from .reference import (
           InputFacts,
           expected_structure,
           feature_moments,
           hop_distances,
           repad_reference,
)
from .report import VerifyReport
from .run import Progress, sample_inputs, sample_size, verify, verify_input
from .shards import RUNTIME_COLUMNS

__all__ = ["RUNTIME_COLUMNS", "VERIFY_BLOCK_BYTES", "InputFacts", "Progress", "VerifyReport", "expected_structure",
           "feature_moments", "hop_distances", "repad_reference", "sample_inputs", "sample_size", "verify", "verify_graph",
           "verify_input"]
