"""Deterministic synthetic TpuGraphs generator (docs/spec.md §6).

``synthesize(dst, profile, seed)`` writes a tree that the published loaders cannot tell from the real
dataset (TPUGRAPHS.md §1–§5), plus the hidden truth::

    dst/npz/tile/xla/{train,valid,test}/<kernel>_<hex>.npz
    dst/npz/layout/{xla,nlp}/{default,random}/{train,valid,test}/<program or 32-hex hash>.npz
    dst/truth/<same relative path>.npy     float64 (c,): noise-free runtime (ns) of every config row
                                           (test files too; tile: per row, before measurement noise)

Files. Keys, key order and dtypes are those of the released files (layout: edge_index int64 (m,2),
node_feat float32 (n,140), node_opcode uint8, node_config_feat float32 (c,nc,18), node_config_ids
int64, node_splits int64 (1,s), config_runtime int64; tile: node_feat, node_opcode, edge_index,
config_feat float32 (c,24), config_runtime, config_runtime_normalizers int64). Every file is a
ZIP_DEFLATED zip written member by member like ``np.savez_compressed`` (same zipfile calls, same .npy
headers, fixed 1980-01-01 entry time); node_config_feat is streamed in ≤32 MiB row chunks, so memory
never holds it whole, and the bytes are identical to what ``np.savez_compressed`` writes for the same
arrays (tested). Test files store runtime 0 (tile normalizers 1); layout test files have
``Profile.test_configs`` rows (1,000; two files with 1,001 in ``full``).

Determinism. Every random draw comes from a generator keyed by (seed, purpose, …): programs by
(seed, family, split, slot) — so default and random share the program, node_feat and tie groups of a
slot, like the real collections —, configs by (seed, collection, split, index), tile kernels by
(seed, split, index), names by (seed, family). Files depend neither on generation order nor on
``collections=``; same (profile, seed) → byte-identical files.

Graphs. An HLO builder emits computations in order — scalar reducer computations (one per
reduce-like instruction, as XLA regions), small while loops (some with dots/reshapes: configurable
nodes in earlier computations), the training loop's body and condition, the entry — and featurizes
every instruction by the tpu_graphs recipe (featurizers.h): exact element-type one-hot, col 1 = 0,
shape dims/sum/product (empty product 1, tuples rank 0), tuple size, parameter number, the
``dimensions`` attribute (broadcast/reduce/transpose/concat/iota), windows (conv, reduce-window,
select-and-scatter), conv dimension numbers (forward NHWC/HWIO, input-grad, filter-grad; 1-, 2-, 3-D),
group counts, slice/dynamic-slice/pad, layout minor_to_major; every _product column is 1 where the
attribute is absent, and the zero padding of cols 31–36, 95–98, 101–104, 134–139 is the real,
ambiguous one. Layouts are the default descending permutation except ~1.5 % of rank≥2 outputs and
20 % of transposes; occasionally a zero-size dim (then "count the non-zero dims" is wrong, while the
rule r = max(1 + last non-zero dim, 1 + max layout), 0 for tuples and scalars, is exact — tested).
Edges are [user, operand] plus caller → called root, deduplicated and sorted; u > v always.
node_splits follow the encoder: a boundary after while bodies/conditions (randomly named), then n.
Models: conv nets (residual, inception, pooling, batch norm), transformer encoders (einsum or
reshape projections, tanh/erf GELU, masks), embedding MLPs; training graphs get a generic backward
pass (input/filter-grad convs, dot grads, select-and-scatter, scatter, pads, …), an optimizer (SGD,
momentum or Adam, global-norm or value clipping, NaN guards, all-reduce, LR schedule) and u32 RNG key
chains for dropout. Some layout train graphs (every ``isolated_every``-th slot) carry an isolated
configurable node — a reshape with no edges at all.

Configs. Only convolution, dot and reshape are configurable. Options per node: conv — each of the
3 tensors sets exactly its 2 most-minor slots with its {batch, feature} dims (kernel: {in, out}) in
either order; dot — the output's 2 most-minor dims in either order, operands both set (either
order each) or both −1; reshape — bitcast-compatible pairs of full permutations (segments of the
reshape permuted, unit dims most-major), or −1 / (0) for rank ≤ 1, sometimes an all −1 option. The
modal output option is the node's own layout in node_feat, so "non-modal" is visible. Nodes with
identical option tables are tied into groups (choices drawn per group, copied to members). Rows:
'default' — 0/1/2/3 conv/dot groups get a non-modal output with p = 0.62/0.28/0.08/0.02; 'random' —
each conv/dot group independently with p ∈ [0.12, 0.40]; reshapes non-modal with p ∈ [0.1, 0.5];
operand options near-uniform (Dirichlet(6)). Natural row collisions are redrawn, then rows are
re-sampled from earlier rows (mostly uniformly chosen original rows, 25 % following earlier copies)
until the file's duplicate share is reached (collection target + N(0, 0.05) for xla).
Runtime (ns) = base · (1 + Σ_g jump_g(choice)) · (1 + noise): base = 2e7 + 0.05 · Σ output bytes; a
conv/dot group with a non-modal output adds S · Σ_members √cost / max_g(Σ √cost), cost = output
elements × window size (conv) or × contraction size (dot: the product of the contracted dims, batch
dims excluded; either gradient of a dot costs what the forward dot does), i.e. multiply-adds,
S ~ logU(0.03, 6) per program; operand choices add ≤ 3e-4 · rel, reshape choices ≤ 2e-4 per node;
noise ~ N(0, σ), σ ~ logU(1e-4, 6e-4) per program — additive over visible per-node terms, hence
learnable: one hand-made feature, the share of the graph's configurable √multiply-adds whose output
left its modal layout (trainer ``features.config_summary``, cost recovered from node_feat and edges),
reaches Kendall τ (vs measured runtimes, valid graphs of small, seed 0) 0.67 on xla:default (ceiling,
measured vs truth, 0.785: near-ties), 0.97 on xla:random, 0.73 on nlp:default (ceiling 0.77) and
0.99 on nlp:random — ``tau_modal_work`` and ``tau_oracle`` of ``python -m benchmarks.training``.

Tile. Kernels: fusions (72 %, parameters → elementwise/broadcast/reduce DAG whose values all reach
the root, sometimes a 2-output tuple, called by a fusion node in the entry), convolution fusions
(10 %, kernel_bounds set), copies and reshapes (2 nodes). Configs: distinct output_bounds vectors
over the output's dims major to minor by its layout (as in the real files), values ≤ ceil(extent /
unit), unit 128 lanes on the minor-most dim, 8 sublanes on the next, 1 elsewhere; input_bounds always
empty (product 0), reshape kernels one all-zero config measured 2–3 times, ~20 % of files one
duplicate config. Time = (padded traffic + per-tile overhead saturating at 20× traffic) · VMEM spill
penalty; measured with lognormal noise σ ~ logU(5e-4, 0.02) (reshapes up to 0.3); the normalizer is
the measured runtime of the default row (the fastest in 60 % of files, else one of the best quarter).

Profiles (2 shared cores, seed 0): tiny — 23 files, 0.16 MB, 0.2–0.5 s; small — 348 files
(layout 12/3/2 per collection, n 300–2,000, c 300–3,000; tile 200/40/40), 9.6 MB, 7–11 s; bench — 544
files, 103 MB on disk, 4.5 GB inflated, 57 s, 306 MB peak RSS, including exactly one layout graph
(xla:random train 0) at c = 100,040 with nc ≥ 350 (seed 0: nc 373, node_config_feat 2.69 GB
inflated / 56 MB deflated, written in 25 s; nc 355–371 for seeds 1–7); full — the published 7,868
files, calibrated per collection (``profiles.FULL_TARGETS``: the published mean c of the random
collections, every k-th layout train/valid file at c = 100,040 — 136 of them, in every collection —
nc up to 3,541): by its plan (seed 0) 397.9 GB of inflated train + valid node_config_feat, the real
dataset's ≈ 400 GB (hours, bounded memory). ``layout_size_plan`` gives c and nc of every layout file
without writing it; ``tpuprep synth --profile full --dry-run`` prints the totals.

Fractions and resuming. ``fraction=F`` (``tpuprep synth --fraction F``) keeps the first ceil(F × count)
files of every (collection, split) of a profile — at least one — and each kept file is byte-identical
to the same file of the whole profile, so a fraction has the whole profile's per-file size
distribution (``full`` at 0.25: 1,972 files, 113 GB of node_config_feat, 34 layout files at c =
100,040 in every layout collection; at 0.5: 227 GB). Every finished file slot is recorded in ``dst/synth-journal.jsonl``
(``journal``); running the same command again skips the slots whose npz and truth files still have the
recorded size and sha256 for the same generator code, profile and seed, and writes the rest — so an
interrupted run resumes, and a larger fraction into the same dst adds only its extra files. One writer
per dst at a time.

Calibration (targets: STATS.md / TPUGRAPHS.md, A = alexnet, F = main__.10904, T = the 15 tile
kernels; produced: profile small, seed 0, all files of the collection unless noted)

=====================================  ==============================  ===============================
statistic                              target                          produced
=====================================  ==============================  ===============================
m/n (layout)                           1.605 (A), 1.616 (F)            1.540 xla, 1.584 nlp
out-degree 0/1/2/3/≥4 (%)              A 18/32/39/10/1.6,              xla 12/41/40/7/0.4,
                                       F 11/33/46/9/0.5                nlp 10/39/44/6/0.2
nc / n                                 7.0 % (A), 2.0 % (F)            6.1 % xla, 5.2 % nlp
output rank 0/1/2/3/4/5 (%)            A 42/16/20/0/22/0,              xla 19/24/12/11/23/10,
                                       F 21/41/0/0/1/37                nlp 17/22/21/30/9/0
element types                          f32 76–79 %, bf16 0–10 %,       f32 85–87 %, bf16 7–9 %,
                                       u32 4–11 %, pred 4–6 %,         pred 1–2 %, s32 2 %, u32 1 %,
                                       s32 3 %, tuple 1–3 %            tuple 0.7 %
top opcodes                            A gte 17, param 12, bcast 10,   xla gte 15, bcast 15, mul 14,
                                       add 7, mul 7 (%); F mul 19,     add 14, param 10, conv 4.6 (%);
                                       add 12, bcast 12, param 9       nlp mul 20, add 16, bcast 14
computations (is_root) per graph       23 (A), 143 (F)                 median 43 xla, 45 nlp
configurable nodes before last split   A: all in split 0; F: 3 of 62   10 of 12 xla, 11 of 12 nlp
                                                                       multi-split graphs have some
non-default layouts, rank ≥ 2          3.2 % (A), 0.75 % (F)           1.5 % (+20 % of transposes)
−1 share of node_config_feat           0.694 (A), 0.690 (F)            0.675 / 0.676 xla def/rand,
                                                                       0.698 / 0.695 nlp
−1 share by opcode                     conv 0.667, dot 0.710,          conv 0.667, dot 0.71,
                                       reshape 0.77–0.82               reshape 0.64–0.71
values                                 integers in −1..5               −1..4 (rank ≤ 5)
duplicate rows (train+valid)           xla:default 43.8 %,             46.4 %, 32.3 %, 0.06 %, 0.05 %
                                       xla:random 30.5 %, nlp 0.06 %
dup group sizes at c=47,712, 37.3 %    A 1×19,927 2×5,925 3×2,196      1×19,462 2×6,439 3×2,304
                                       4×936 5×463 6×245, max 58       4×910 5×411 6×196, max 19
conv/dot modal output share            94 % (A)                        95 % xla:default, 97 % nlp
rows with 0/1/2/3 non-modal groups     A 64/36/0/0, F 35/38/22/5 (%)   xla:default 61/30/8/1
tie groups                             A 26 nodes → 9, F 62 → 8        distinct node columns / nc
                                                                       0.27 xla, 0.53 nlp
runtime max/min (median file)          5.39 (A), 1.016 (F)             1.44 xla:default, 1.56 random
rows within 1 % / 0.1 % of best        69.2 / 19.9 % (A), 89/81 % (F)  76 / 41 % xla:default (median)
duplicate-group relative range         0.027 / 0.096 / 0.18 %          0.027 / 0.081 / 0.24 %
(median / p90 / max)                   (A)                             (xla:default)
runtime magnitude                      ≫ 2²⁴ ns, int64                 ≥ 2e7 ns, int64
tile n, m/n                            2–56, 0.5–1.1 per file          2–65 (median 13.5), 0.5–1.56
tile c                                 2–579, median 10                2–577, median 15
tile files with a duplicate config     3 of 15                         21 %
tile runtime / normalizer              min < 1 in 4/15 files,          min < 1 in 35 % of files,
                                       per-file median 1.0–2.4,        per-file median 1.0–4.3 (p95),
                                       max up to 26                    max median 2.1, up to 33
tile normalizer                        598 ns – 0.27 ms                293 ns – 0.75 ms
=====================================  ==============================  ===============================

Modules (lower ones never import higher ones; ``driver`` is imported by nobody but this package):
``constants`` ids and columns · ``profiles`` sizes and calibration targets · ``seeding`` keyed
randomness · ``names`` program names · ``graph`` shapes,
windows, ``SynthGraph`` · ``hlo`` the HLO builder and featurizer · ``model`` forward passes ·
``training`` backward pass and optimizer · ``programs`` whole layout programs · ``configs`` layout
config plans and sampling · ``tile`` tile kernels and configs · ``files`` the file plan and each
slot's graph · ``journal`` what is finished (resuming) · ``driver`` ``synthesize``.
"""

from __future__ import annotations

from ..io.npz_writer import StreamedArray, write_npz
from .configs import LayoutPlan, draw_choices, plan_layout
from .constants import (
    COLLECTIONS,
    CONFIGURABLE_OPCODES,
    CONVOLUTION,
    DOT,
    MAX_CONFIGS,
    PRODUCT_COLUMNS,
    RESHAPE,
    SPLITS,
)
from .driver import CollectionCount, SynthSummary, synthesize
from .files import (
    FileSpec,
    PlannedFile,
    file_plan,
    layout_config_count,
    layout_graph_for,
    layout_size_plan,
    tile_graph_for,
)
from .graph import SynthGraph
from .profiles import FULL_TARGETS, PROFILES, Profile
from .programs import build_program
from .tile import build_tile_graph, tile_configs

__all__ = [
    "COLLECTIONS",
    "CONFIGURABLE_OPCODES",
    "CONVOLUTION",
    "DOT",
    "FULL_TARGETS",
    "MAX_CONFIGS",
    "PRODUCT_COLUMNS",
    "PROFILES",
    "RESHAPE",
    "SPLITS",
    "CollectionCount",
    "FileSpec",
    "LayoutPlan",
    "PlannedFile",
    "Profile",
    "StreamedArray",
    "SynthGraph",
    "SynthSummary",
    "build_program",
    "build_tile_graph",
    "draw_choices",
    "file_plan",
    "layout_config_count",
    "layout_graph_for",
    "layout_size_plan",
    "plan_layout",
    "synthesize",
    "tile_configs",
    "tile_graph_for",
    "write_npz",
]
