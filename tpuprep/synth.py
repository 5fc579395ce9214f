"""Deterministic synthetic TpuGraphs generator (SPEC §6).

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
inflated / 56 MB deflated, written in 25 s; nc 355–371 for seeds 1–7); full — the published 7,868 files (c up to 100,040 for 30 % of layout train/valid
files, ≈ 400 GB inflated; hours, bounded memory).

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
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = [
    "COLLECTIONS",
    "CONFIGURABLE_OPCODES",
    "MAX_CONFIGS",
    "PROFILES",
    "SPLITS",
    "CollectionCount",
    "FileSpec",
    "LayoutPlan",
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
    "plan_layout",
    "synthesize",
    "tile_graph_for",
    "write_npz",
]

# ----------------------------------------------------------------------------------------- constants

COLLECTIONS: tuple[str, ...] = (
    "tile:xla",
    "layout:xla:default",
    "layout:xla:random",
    "layout:nlp:default",
    "layout:nlp:random",
)
SPLITS: tuple[str, ...] = ("train", "valid", "test")

# HLO opcode ids (tpu_graphs/process_data/xla/hlo_opcode.h)
ADD, AFTER_ALL, ALL_REDUCE, BITCAST = 2, 4, 5, 11
BROADCAST, COMPARE, CONCATENATE, CONSTANT, CONVERT = 13, 20, 22, 24, 25
CONVOLUTION, COPY, CUSTOM_CALL, DIVIDE, DOT = 26, 27, 31, 32, 34
DYNAMIC_SLICE, DYNAMIC_UPDATE_SLICE, EXPONENTIAL, FUSION, GATHER = 35, 36, 37, 41, 42
GET_TUPLE_ELEMENT, INFEED, IOTA, LOG, AND, NOT, OR = 45, 47, 48, 50, 52, 53, 54
MAXIMUM, MINIMUM, MULTIPLY, NEGATE, OUTFEED, PAD, PARAMETER = 57, 58, 59, 60, 61, 62, 63
POWER, REDUCE, REDUCE_WINDOW, RESHAPE, REVERSE, RNG = 66, 70, 72, 75, 76, 77
RSQRT, SCATTER, SELECT, SELECT_AND_SCATTER, SHIFT_RIGHT_LOGICAL = 81, 82, 83, 84, 89
SLICE, SORT, SQRT, SUBTRACT, TANH, TRANSPOSE, TUPLE, WHILE = 92, 93, 94, 95, 96, 98, 100, 102
BITCAST_CONVERT, SHIFT_LEFT, LOGISTIC, CLAMP = 12, 87, 107, 17
CONFIGURABLE_OPCODES: tuple[int, ...] = (CONVOLUTION, DOT, RESHAPE)

# element types = node_feat column of the one-hot (TPUGRAPHS.md §3)
PRED, S8, S32, S64, U8, U16, U32, F16, F32, BF16 = 3, 4, 6, 7, 8, 9, 10, 12, 13, 15
TUPLE_T, TOKEN_T = 18, 20
_ET_BYTES = {PRED: 1, S8: 1, S32: 4, S64: 8, U8: 1, U16: 2, U32: 4, F16: 2, F32: 4, BF16: 2}

# node_feat columns
COL_IS_ROOT, COL_DIMS, COL_DIMS_SUM, COL_DIMS_PROD = 0, 21, 27, 28
COL_TUPLE_SIZE, COL_PARAM_NUM, COL_DIMENSIONS = 29, 30, 31
COL_WINDOW, COL_CONV, COL_FGC, COL_BGC = 37, 93, 107, 108
COL_SLICE, COL_DYN_SLICE, COL_PAD, COL_IS_STABLE, COL_LAYOUT = 109, 121, 125, 133, 134
PRODUCT_COLUMNS: tuple[int, ...] = (28, 44, 52, 60, 68, 76, 84, 112, 116, 120, 124, 128, 132)
"""Aggregated ``_product`` columns of node_feat: 1 on nodes lacking the attribute (empty product)."""

MAX_CONFIGS = 100_040
"""The largest c in the published dataset (layout train/valid)."""

_UNSET = -1.0
_CHUNK_BYTES = 32 << 20
"""Target size of one streamed node_config_feat chunk (bytes, before compression)."""


# ------------------------------------------------------------------------------------------ profiles


@dataclass(frozen=True)
class Profile:
    """Sizes of one synthetic tree.

    counts: collection id -> (train, valid, test) file counts. Ranges are (low, high) and drawn
    log-uniformly per file: ``xla_nodes`` / ``nlp_nodes`` target node counts n of layout graphs,
    ``layout_configs`` configs c of layout train/valid files, ``tile_nodes`` / ``tile_configs`` the same
    for tile kernels. ``test_configs`` is c of every layout test file; ``test_configs_1001`` lists
    (collection, index) test files that get one more config (the published set has two such files).
    ``max_config_share``: share of layout train/valid files whose c is pinned to ``MAX_CONFIGS``.
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


def _layout_counts(xla: tuple[int, int, int], nlp: tuple[int, int, int]) -> dict:
    return {
        "layout:xla:default": xla,
        "layout:xla:random": xla,
        "layout:nlp:default": nlp,
        "layout:nlp:random": nlp,
    }


PROFILES: dict[str, Profile] = {
    "tiny": Profile(
        name="tiny",
        counts={"tile:xla": (3, 2, 2), **_layout_counts((2, 1, 1), (2, 1, 1))},
        xla_nodes=(120, 240),
        nlp_nodes=(120, 220),
        layout_configs=(120, 300),
        test_configs=100,
        tile_nodes=(2, 40),
        tile_configs=(2, 60),
        isolated_every=2,
    ),
    "small": Profile(
        name="small",
        counts={"tile:xla": (200, 40, 40), **_layout_counts((12, 3, 2), (12, 3, 2))},
        xla_nodes=(300, 2000),
        nlp_nodes=(300, 2000),
        layout_configs=(300, 3000),
        test_configs=1000,
        tile_nodes=(2, 80),
        tile_configs=(2, 600),
    ),
    "bench": Profile(
        name="bench",
        counts={"tile:xla": (400, 60, 60), **_layout_counts((4, 1, 1), (4, 1, 1))},
        xla_nodes=(1000, 9000),
        nlp_nodes=(1000, 7000),
        layout_configs=(2000, 12000),
        test_configs=1000,
        tile_nodes=(2, 100),
        tile_configs=(2, 3000),
        big=("layout:xla:random", "train", 0, 350),
    ),
    "full": Profile(
        name="full",
        counts={
            "tile:xla": (5709, 676, 844),
            "layout:xla:random": (69, 7, 8),
            "layout:xla:default": (61, 7, 8),
            "layout:nlp:random": (207, 20, 17),
            "layout:nlp:default": (198, 20, 17),
        },
        xla_nodes=(400, 43_615),
        nlp_nodes=(400, 21_919),
        layout_configs=(1000, MAX_CONFIGS),
        test_configs=1000,
        tile_nodes=(2, 120),
        tile_configs=(2, 7000),
        max_config_share=0.3,
        test_configs_1001=(("layout:xla:random", 3), ("layout:nlp:default", 5)),
    ),
}

# --------------------------------------------------------------------------- per-collection targets

_DUP_TARGET = {
    "layout:xla:default": 0.44,
    "layout:xla:random": 0.30,
    "layout:nlp:default": 0.0006,
    "layout:nlp:random": 0.0006,
}
"""Share of duplicate node_config_feat rows per layout collection (STATS.md §3, TPUGRAPHS.md §2)."""
_DUP_SPREAD = {"xla": 0.05, "nlp": 0.0}
"""Standard deviation of a file's own duplicate share around its collection target."""
_NONMODAL_ROWS_DEFAULT = (0.62, 0.28, 0.08, 0.02)
"""P(0, 1, 2, 3 conv/dot groups take a non-modal output layout in a row), 'default' collections."""
_NONMODAL_P_RANDOM = (0.12, 0.40)
"""Per-group probability range of a non-modal output layout in 'random' collections."""


# ------------------------------------------------------------------------------------- npz writing


@dataclass(frozen=True)
class StreamedArray:
    """An array member written chunk by chunk: never held whole in memory.

    shape/dtype: of the whole array; chunks: C-ordered pieces along axis 0 whose concatenation is the
    array (each piece: shape (k, *shape[1:]), any k ≥ 0).
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    chunks: Iterable[np.ndarray]


def _npy_header(fid, shape: tuple[int, ...], dtype: np.dtype) -> None:
    """Write the .npy header exactly as ``np.lib.format.write_array`` would for this array."""
    header = {
        "descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
        "fortran_order": False,
        "shape": tuple(int(s) for s in shape),
    }
    try:
        np.lib.format.write_array_header_1_0(fid, header)
    except ValueError:
        np.lib.format.write_array_header_2_0(fid, header)


def _write_member(zf: zipfile.ZipFile, name: str, value: np.ndarray | StreamedArray) -> None:
    with zf.open(name + ".npy", "w", force_zip64=True) as fid:
        if isinstance(value, np.ndarray):
            np.lib.format.write_array(fid, value, allow_pickle=False)
            return
        _npy_header(fid, value.shape, value.dtype)
        rows, row_shape, dtype = 0, tuple(value.shape[1:]), np.dtype(value.dtype)
        for chunk in value.chunks:
            piece = np.ascontiguousarray(chunk, dtype=dtype)
            if piece.shape[1:] != row_shape:
                raise ValueError(f"{name}: chunk shape {piece.shape} does not fit {value.shape}")
            rows += piece.shape[0]
            fid.write(piece.reshape(-1).view(np.uint8).data)
        if rows != value.shape[0]:
            raise ValueError(f"{name}: chunks hold {rows} rows, expected {value.shape[0]}")


def write_npz(path: str | Path, members: Sequence[tuple[str, np.ndarray | StreamedArray]]) -> int:
    """Write an ``np.savez_compressed``-compatible .npz; returns its size in bytes.

    members: (key, array) pairs in file order; a ``StreamedArray`` is deflated chunk by chunk. Plain
    arrays go through ``np.lib.format.write_array`` like ``np.savez_compressed`` does, into the same
    ZIP_DEFLATED, zip64-forced entries with the fixed 1980-01-01 timestamp, so the bytes are
    deterministic. The file appears atomically (written under a temporary name, then renamed).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    try:
        with zipfile.ZipFile(
            tmp, mode="w", compression=zipfile.ZIP_DEFLATED, allowZip64=True
        ) as zf:
            for name, value in members:
                _write_member(zf, name, value)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path.stat().st_size


def _write_npy(path: Path, array: np.ndarray) -> int:
    """Write one .npy file atomically (the truth side files); returns its size in bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as fh:
        np.lib.format.write_array(fh, array, allow_pickle=False)
    os.replace(tmp, path)
    return path.stat().st_size


def _prefetched(chunks: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
    """Yield the items of ``chunks`` while the next one is computed in a helper thread.

    NumPy gathers and zlib both release the GIL, so building chunk k+1 overlaps deflating chunk k.
    """
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(next, chunks, None)
        while True:
            item = pending.result()
            if item is None:
                return
            pending = pool.submit(next, chunks, None)
            yield item


# ---------------------------------------------------------------------------------------- rng, names


def _rng(seed: int, *keys: object) -> np.random.Generator:
    """A generator that depends only on (seed, keys), never on generation order."""
    digest = hashlib.blake2b(repr((int(seed), *keys)).encode(), digest_size=32).digest()
    return np.random.default_rng(np.frombuffer(digest, dtype=np.uint32))


def _loguniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi)))) if hi > lo else float(lo)


def _hex32(seed: int, *keys: object) -> str:
    return hashlib.blake2b(repr((int(seed), *keys)).encode(), digest_size=16).hexdigest()


def _signed_hex64(seed: int, *keys: object) -> str:
    """A 64-bit fingerprint printed as signed hex, like the real tile stems (e.g. '-d35a43855de59c9')."""
    raw = hashlib.blake2b(repr((int(seed), *keys)).encode(), digest_size=8).digest()
    value = int.from_bytes(raw, "little", signed=True)
    return format(value, "x")


_XLA_VISION = (
    "alexnet", "resnet50", "resnet101", "resnet_v1_50", "resnet_v2_152", "inception_v2", "inception_v3",
    "inception_v4", "mobilenet_v1", "mobilenet_v2", "efficientnet_b0", "efficientnet_b4", "densenet121",
    "vgg16", "vgg19", "mnasnet_a1", "retinanet", "mask_rcnn", "shapemask", "unet_3d", "unet2d",
    "xception", "squeezenet", "nasnet_large", "deeplab_v3", "ssd_mobilenet", "yolo_v3", "amoebanet_d",
)  # fmt: skip
_XLA_SEQ = (
    "bert_pretraining",
    "transformer_tf2",
    "mlperf_bert",
    "mlperf_transformer",
    "gpt2",
    "t5_small",
)
_XLA_DENSE = (
    "ncf",
    "dlrm",
    "magenta_dynamic",
    "brax_es",
    "lstm_lm",
    "wavenet",
    "tacotron",
    "dcgan",
)
_NLP_MODELS = (
    *(f"small_bert_bert_en_uncased_L-{layers}_H-{h}_A-{h // 64}"
      for layers in (2, 4, 6, 8, 10, 12) for h in (128, 256, 512, 768)),
    "bert_en_cased_L-12_H-768_A-12", "bert_en_uncased_L-12_H-768_A-12", "bert_en_uncased_L-24_H-1024_A-16",
    "bert_multi_cased_L-12_H-768_A-12", "albert_en_base", "albert_en_large", "albert_en_xlarge",
    "electra_small", "electra_base", "electra_large", "talking-heads_base", "talking-heads_large",
    "mobilebert_en_uncased_L-24_H-128_B-512_A-4_F-4_OPT", "experts_bert_pubmed", "experts_bert_wiki_books",
    "lambert_en_uncased_L-24_H-1024_A-16", "universal-sentence-encoder-cmlm_en-base",
)  # fmt: skip


def _program_vocabulary(family: str) -> list[str]:
    """Every program name of a family, in a fixed order (unique names)."""
    names: list[str] = []
    if family == "nlp":
        for model in _NLP_MODELS:
            for batch in (8, 16, 32, 64, 128):
                for phase in ("train", "test"):
                    names.append(f"{model}_batch_size_{batch}_{phase}")
        return names
    for model in (*_XLA_VISION, *_XLA_SEQ, *_XLA_DENSE):
        for batch in (1, 8, 16, 32, 64, 128, 256):
            names.append(f"{model}_train_batch_{batch}")
        for batch in (1, 8, 32):
            names.append(f"{model}_inference_batch_{batch}")
            names.append(f"{model}_batch_{batch}_eval")
        for topology in ("2x2", "4x4", "8x8"):
            for precision in ("fp16", "bf16", "fp32"):
                names.append(f"{model}.{topology}.{precision}")
    return names


def _program_kind(family: str, name: str) -> tuple[str, bool]:
    """(model kind, training graph?) of a program name: kind is 'vision', 'transformer' or 'dense'."""
    train = not any(tag in name for tag in ("_inference", "_eval", "_test"))
    if family == "nlp":
        return "transformer", train
    model = name.split("_train")[0].split("_inference")[0].split("_batch")[0].split(".")[0]
    if model in _XLA_SEQ:
        return "transformer", train
    if model in _XLA_DENSE:
        return "dense", train
    return "vision", train


def _layout_family(collection: str) -> tuple[str, str]:
    """'layout:xla:random' -> ('xla', 'random')."""
    _, family, search = collection.split(":")
    return family, search


# ------------------------------------------------------------------------------- the HLO builder


@dataclass(frozen=True)
class _Shape:
    """An HLO shape: element type (node_feat one-hot column), dims, and tuple elements."""

    et: int
    dims: tuple[int, ...] = ()
    elems: tuple[_Shape, ...] = ()

    @property
    def rank(self) -> int:
        return 0 if self.et == TUPLE_T else len(self.dims)

    @property
    def size(self) -> int:
        return math.prod(self.dims)

    @property
    def nbytes(self) -> int:
        if self.et == TUPLE_T:
            return sum(e.nbytes for e in self.elems)
        return self.size * _ET_BYTES.get(self.et, 0)

    def with_dims(self, dims: Sequence[int]) -> _Shape:
        return _Shape(self.et, tuple(int(d) for d in dims))


@dataclass(frozen=True)
class _Window:
    """An HLO window over k dims: per-dim size, stride, low/high padding, dilations, reversal."""

    size: tuple[int, ...]
    stride: tuple[int, ...]
    pad_lo: tuple[int, ...]
    pad_hi: tuple[int, ...]
    wdil: tuple[int, ...]
    bdil: tuple[int, ...]
    rev: tuple[bool, ...]

    def features(self) -> list[float]:
        """The 56 node_feat values of cols 37–92."""
        out: list[float] = []
        for seq in (self.size, self.stride, self.pad_lo, self.pad_hi, self.wdil, self.bdil):
            out += _aggregate(seq, 6)
        flags = [1 if r else 0 for r in self.rev]
        out += [*flags[:6], *[0] * (6 - min(6, len(flags))), sum(flags), len(flags) - sum(flags)]
        return out


def _aggregate(values: Sequence[int], lead: int) -> list[float]:
    """FixedNumericSequenceFeatures: the first ``lead`` values (0-padded), their sum and product."""
    vals = [int(v) for v in values]
    head = vals[:lead] + [0] * (lead - min(lead, len(vals)))
    return [*head, sum(vals), math.prod(vals)]


def _pad4(values: Sequence[int]) -> list[int]:
    return [*values[:4], *[0] * (4 - min(4, len(values)))]


def _vec(out: Sequence[int] = (), in0: Sequence[int] = (), in1: Sequence[int] = ()) -> np.ndarray:
    """One (18,) float32 layout-config vector: blocks for output, operand 0, operand 1; −1 when unset."""
    v = np.full(18, _UNSET, np.float32)
    v[0 : len(out)] = out
    v[6 : 6 + len(in0)] = in0
    v[12 : 12 + len(in1)] = in1
    return v


def _pair_options(a: int, b: int, layout: Sequence[int]) -> list[tuple[int, int]]:
    """The two 2-most-minor orders of dims a and b; first the one this tensor's own layout uses."""
    pos = {d: k for k, d in enumerate(layout)}
    first, second = (a, b) if pos.get(a, 99) <= pos.get(b, 99) else (b, a)
    return [(first, second), (second, first)]


def _minor_pairs(layout: Sequence[int], rank: int) -> list[tuple[int, ...]]:
    """Options for a dot tensor: its two most-minor dims in the tensor's own order, then swapped."""
    if rank >= 2:
        a, b = int(layout[0]), int(layout[1])
        return [(a, b), (b, a)]
    return [(0,)] if rank == 1 else [()]


def _segments(a: Sequence[int], b: Sequence[int]) -> list[tuple[list[int], list[int]]] | None:
    """Aligned groups of non-unit dims of a reshape (input a, output b) with equal products."""
    if 0 in a or 0 in b:
        return None
    ia = [i for i, d in enumerate(a) if d != 1]
    ib = [j for j, d in enumerate(b) if d != 1]
    segs: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(ia) and j < len(ib):
        si, sj = [ia[i]], [ib[j]]
        pa, pb = a[ia[i]], b[ib[j]]
        i += 1
        j += 1
        while pa != pb:
            if pa < pb and i < len(ia):
                si.append(ia[i])
                pa *= a[ia[i]]
                i += 1
            elif pb < pa and j < len(ib):
                sj.append(ib[j])
                pb *= b[ib[j]]
                j += 1
            else:
                return None
        segs.append((si, sj))
    if i != len(ia) or j != len(ib):
        return None
    return segs


def _segment_layout(seg_dims: list[list[int]], order: Sequence[int], rank: int) -> tuple[int, ...]:
    """minor_to_major of one reshape side when its segments are laid out in ``order`` (minor first).

    Inside a segment dims stay row-major (descending), unit dims go most-major.
    """
    perm: list[int] = []
    for s in order:
        perm += sorted(seg_dims[s], reverse=True)
    perm += sorted((d for d in range(rank) if d not in perm), reverse=True)
    return tuple(perm)


@dataclass
class _Cfg:
    """A configurable node: its layout options and its visible work.

    out: (n_out, 18) float32 option vectors for the output block (reshape: output and input blocks),
    row 0 = the modal layout (the node's own layout in node_feat). opnd: (n_opnd, 18) float32 options of
    the operand blocks, row 0 = default. cost: output elements × window size (conv) or contraction
    size (dot) or 1 (reshape) — computable from node_feat and the operands' node_feat.
    """

    node: int
    opcode: int
    out: np.ndarray
    opnd: np.ndarray
    cost: float


class _Hlo:
    """Accumulates HLO instructions computation by computation, in emission (= topological) order.

    Every instruction gets the next node id; operands must come from the current computation, and
    called computations are finished before their callers, so every edge [u, v] has u > v.
    """

    def __init__(self, rng: np.random.Generator, alt_layout_p: float = 0.02) -> None:
        self.rng = rng
        self.alt_layout_p = alt_layout_p
        self.op: list[int] = []
        self.shape: list[_Shape] = []
        self.layout: list[tuple[int, ...]] = []
        self.operands: list[tuple[int, ...]] = []
        self.calls: list[tuple[int, ...]] = []
        self.grad: list[bool] = []
        self.feat_rows: list[int] = []
        self.feat_cols: list[int] = []
        self.feat_vals: list[float] = []
        self.roots: list[int] = []
        self.splits: list[int] = [0]
        self.cfg: list[_Cfg] = []
        self.tape: list[tuple] = []
        self.reducers: dict[tuple[str, int], list[int]] = {}
        self.used_reducers: set[int] = set()
        self.recording = True
        self.comp_start = 0
        self.nparams = 0
        self.cache: dict[tuple, int] = {}

    def __len__(self) -> int:
        return len(self.op)

    # -- core -------------------------------------------------------------------------------------
    def default_layout(self, shape: _Shape, alt_p: float | None = None) -> tuple[int, ...]:
        r = shape.rank
        if r < 2:
            return tuple(range(r))
        descending = tuple(range(r - 1, -1, -1))
        if self.rng.random() >= (self.alt_layout_p if alt_p is None else alt_p):
            return descending
        style = int(self.rng.integers(3))
        if style == 0 or r == 2:  # two most-minor dims swapped, e.g. (0, 1)
            return (r - 2, r - 1, *range(r - 3, -1, -1))
        if style == 1:  # batch most-minor, e.g. (0, 3, 2, 1)
            return (0, *range(r - 1, 0, -1))
        return (r - 1, 0, *range(r - 2, 0, -1))  # TPU-style, e.g. (3, 0, 2, 1)

    def add(
        self,
        op: int,
        shape: _Shape,
        operands: Sequence[int] = (),
        *,
        calls: Sequence[int] = (),
        layout: Sequence[int] | None = None,
        feats: dict[int, Sequence[float]] | None = None,
    ) -> int:
        """Append one instruction; returns its node id. feats: node_feat column -> consecutive values."""
        i = len(self.op)
        if operands and min(operands) < self.comp_start:
            raise AssertionError("operand from another computation")
        self.op.append(op)
        self.shape.append(shape)
        self.operands.append(tuple(operands))
        self.calls.append(tuple(calls))
        self.layout.append(self.default_layout(shape) if layout is None else tuple(layout))
        self.grad.append(any(self.grad[o] for o in operands))
        if feats:
            for col, values in feats.items():
                for k, v in enumerate(values):
                    self.feat_rows.append(i)
                    self.feat_cols.append(col + k)
                    self.feat_vals.append(float(v))
        return i

    def record(self, kind: int, out: int, ins: Sequence[int], info: object = None) -> int:
        if self.recording and self.grad[out]:
            self.tape.append((kind, out, tuple(ins), info))
        return out

    def begin(self) -> None:
        self.comp_start = len(self.op)
        self.nparams = 0
        self.cache = {}

    def end(self, root: int, *, split: bool = False) -> int:
        if root != len(self.op) - 1:
            raise AssertionError("the root must be the last instruction of its computation")
        self.roots.append(root)
        if split:
            self.splits.append(len(self.op))
        return root

    # -- leaves -----------------------------------------------------------------------------------
    def param(self, shape: _Shape, *, grad: bool = False) -> int:
        i = self.add(PARAMETER, shape, feats={COL_PARAM_NUM: [self.nparams]})
        self.nparams += 1
        self.grad[i] = grad
        return i

    def constant(self, et: int, dims: Sequence[int] = ()) -> int:
        """A constant; scalar constants are sometimes shared within a computation (partial CSE)."""
        key = ("constant", et, tuple(dims))
        if not dims and key in self.cache and self.rng.random() < 0.85:
            return self.cache[key]
        i = self.add(CONSTANT, _Shape(et, tuple(dims)))
        self.cache[key] = i
        return i

    def full(self, et: int, dims: Sequence[int], tag: object = 0) -> int:
        """A broadcast scalar constant of shape dims (sometimes shared within the computation)."""
        dims = tuple(dims)
        if not dims:
            return self.constant(et)
        key = ("full", et, dims, tag)
        if key not in self.cache or self.rng.random() < 0.08:
            c = self.constant(et)
            self.cache[key] = self.add(BROADCAST, _Shape(et, dims), (c,))
        return self.cache[key]

    def iota(self, et: int, dims: Sequence[int], axis: int) -> int:
        return self.add(IOTA, _Shape(et, tuple(dims)), feats={COL_DIMENSIONS: [axis]})

    def rng_uniform(self, et: int, dims: Sequence[int]) -> int:
        lo, hi = self.constant(et), self.constant(et)
        return self.add(RNG, _Shape(et, tuple(dims)), (lo, hi))

    # -- elementwise ------------------------------------------------------------------------------
    def unary(self, op: int, x: int, et: int | None = None) -> int:
        s = self.shape[x]
        out = self.add(op, _Shape(s.et if et is None else et, s.dims), (x,))
        return self.record(op, out, (x,))

    def binary(self, op: int, x: int, y: int) -> int:
        out = self.add(op, self.shape[x], (x, y))
        return self.record(op, out, (x, y))

    def compare(self, x: int, y: int) -> int:
        out = self.add(COMPARE, _Shape(PRED, self.shape[x].dims), (x, y))
        self.grad[out] = False
        return out

    def select(self, p: int, x: int, y: int) -> int:
        out = self.add(SELECT, self.shape[x], (p, x, y))
        return self.record(SELECT, out, (p, x, y))

    def convert(self, x: int, et: int) -> int:
        out = self.add(CONVERT, _Shape(et, self.shape[x].dims), (x,))
        return self.record(CONVERT, out, (x,))

    def bcast(self, x: int, dims: Sequence[int], mapping: Sequence[int] = ()) -> int:
        out = self.add(
            BROADCAST, _Shape(self.shape[x].et, tuple(dims)), (x,), feats={COL_DIMENSIONS: mapping}
        )
        return self.record(BROADCAST, out, (x,), tuple(mapping))

    # -- reducers and reductions ------------------------------------------------------------------
    def make_reducers(self, count: int) -> None:
        """Emit ``count`` scalar reducer computations (param, param, root) before everything else."""
        root_op = {"add": ADD, "max": MAXIMUM, "min": MINIMUM, "or": OR, "ge": COMPARE}
        kinds = [("add", F32), ("max", F32), ("ge", F32), ("min", S32)][:count]
        menu = [("add", F32), ("max", F32), ("ge", F32), ("min", S32), ("or", PRED), ("add", S32)]
        weights = np.array([0.72, 0.14, 0.05, 0.03, 0.03, 0.03])
        for k in self.rng.choice(len(menu), size=max(0, count - len(kinds)), p=weights):
            kinds.append(menu[int(k)])
        for kind, et in kinds:
            self.begin()
            a = self.param(_Shape(et))
            b = self.param(_Shape(et))
            out_et = PRED if kind == "ge" else et
            root = self.add(root_op[kind], _Shape(out_et), (a, b))
            self.reducers.setdefault((kind, et), []).append(self.end(root))

    def reducer(self, kind: str, et: int) -> int:
        """A reducer computation's root: an unused one while any is left (XLA gives most reduce-like
        instructions their own region), else a shared one."""
        key = (kind, et) if (kind, et) in self.reducers else (kind, F32)
        if key not in self.reducers:
            key = next((k for k in self.reducers if k[0] == kind), None)
        if key is None:
            raise KeyError(f"no {kind} reducer")
        roots = self.reducers[key]
        fresh = [r for r in roots if r not in self.used_reducers]
        root = fresh[0] if fresh else roots[int(self.rng.integers(len(roots)))]
        self.used_reducers.add(root)
        return root

    def reduce(self, x: int, axes: Sequence[int], kind: str = "add") -> int:
        s = self.shape[x]
        axes = tuple(sorted(axes))
        dims = tuple(d for k, d in enumerate(s.dims) if k not in axes)
        init = self.constant(s.et)
        out = self.add(
            REDUCE,
            _Shape(s.et, dims),
            (x, init),
            calls=(self.reducer(kind, s.et),),
            feats={COL_DIMENSIONS: axes},
        )
        return self.record(REDUCE, out, (x,), (axes, kind))

    def all_reduce(self, x: int) -> int:
        s = self.shape[x]
        return self.add(ALL_REDUCE, s, (x,), calls=(self.reducer("add", s.et),))

    # -- data movement ----------------------------------------------------------------------------
    def reshape(self, x: int, dims: Sequence[int]) -> int:
        s = self.shape[x]
        out = self.add(RESHAPE, s.with_dims(dims), (x,))
        options = self.reshape_options(s.dims, tuple(dims))
        self.cfg.append(_Cfg(out, RESHAPE, options, _vec()[None, :], float(max(s.size, 1))))
        return self.record(RESHAPE, out, (x,))

    def reshape_options(self, in_dims: tuple[int, ...], out_dims: tuple[int, ...]) -> np.ndarray:
        """Reshape layout options (n, 18): modal first; pairs of bitcast-compatible permutations."""
        ro, ri = len(out_dims), len(in_dims)
        default_in = tuple(range(ri - 1, -1, -1))
        if ro == 0:
            opts = [_vec(), _vec(in0=default_in)] if ri >= 1 else [_vec()]
            return np.stack(opts)
        if ro == 1:
            return np.stack([_vec(), _vec(out=(0,), in0=default_in)])
        opts = [_vec(out=tuple(range(ro - 1, -1, -1)), in0=default_in)]
        segs = _segments(in_dims, out_dims)
        if segs is not None and len(segs) >= 2:
            nseg = len(segs)
            default_order = tuple(range(nseg - 1, -1, -1))
            orders = [p for p in _permutations(nseg) if p != default_order]
            k = int(self.rng.integers(1, min(5, len(orders)) + 1))
            for idx in sorted(self.rng.choice(len(orders), size=k, replace=False)):
                order = orders[int(idx)]
                out = _segment_layout([s[1] for s in segs], order, ro)
                inp = _segment_layout([s[0] for s in segs], order, ri)
                opts.append(_vec(out=out, in0=inp))
        if len(opts) == 1 or self.rng.random() < 0.5:
            opts.append(_vec())
        return np.stack(opts)

    def transpose(self, x: int, perm: Sequence[int]) -> int:
        s = self.shape[x]
        perm = tuple(perm)
        dims = tuple(s.dims[p] for p in perm)
        layout = None
        if len(perm) >= 2 and self.rng.random() < 0.2:  # a transpose that is a physical bitcast
            inv = list(np.argsort(perm))
            layout = tuple(int(inv[d]) for d in self.layout[x])
        out = self.add(
            TRANSPOSE, s.with_dims(dims), (x,), layout=layout, feats={COL_DIMENSIONS: perm}
        )
        return self.record(TRANSPOSE, out, (x,), perm)

    def slice(self, x: int, starts: Sequence[int], limits: Sequence[int]) -> int:
        s = self.shape[x]
        dims = [hi - lo for lo, hi in zip(starts, limits, strict=True)]
        strides = [1] * len(dims)
        feats = {COL_SLICE: _aggregate(starts, 2) + _aggregate(strides, 2) + _aggregate(limits, 2)}
        out = self.add(SLICE, s.with_dims(dims), (x,), feats=feats)
        return self.record(SLICE, out, (x,), (tuple(starts), tuple(limits)))

    def pad(self, x: int, lo: Sequence[int], hi: Sequence[int], dims: Sequence[int]) -> int:
        s = self.shape[x]
        value = self.constant(s.et)
        feats = {COL_PAD: _aggregate(lo, 2) + _aggregate(hi, 2)}
        return self.add(PAD, s.with_dims(dims), (x, value), feats=feats)

    def dynamic_slice(self, x: int, sizes: Sequence[int]) -> int:
        s = self.shape[x]
        idx = [self.constant(S32) for _ in range(min(2, len(sizes)))]
        feats = {COL_DYN_SLICE: _aggregate(sizes, 2)}
        return self.add(DYNAMIC_SLICE, s.with_dims(sizes), (x, *idx), feats=feats)

    def concat(self, xs: Sequence[int], axis: int) -> int:
        s = self.shape[xs[0]]
        dims = list(s.dims)
        dims[axis] = sum(self.shape[x].dims[axis] for x in xs)
        out = self.add(CONCATENATE, s.with_dims(dims), tuple(xs), feats={COL_DIMENSIONS: [axis]})
        return self.record(CONCATENATE, out, tuple(xs), axis)

    def gather(self, table: int, ids: int, dims: Sequence[int]) -> int:
        out = self.add(GATHER, self.shape[table].with_dims(dims), (table, ids))
        return self.record(GATHER, out, (table, ids))

    def scatter(self, base: int, ids: int, updates: int) -> int:
        s = self.shape[base]
        return self.add(SCATTER, s, (base, ids, updates), calls=(self.reducer("add", s.et),))

    # -- tuples and control flow ------------------------------------------------------------------
    def tuple(self, items: Sequence[int]) -> int:
        shape = _Shape(TUPLE_T, (), tuple(self.shape[i] for i in items))
        return self.add(TUPLE, shape, tuple(items))

    def gte(self, t: int, index: int, shape: _Shape | None = None) -> int:
        return self.add(GET_TUPLE_ELEMENT, shape or self.shape[t].elems[index], (t,))

    def while_(self, init: int, body_root: int, cond_root: int) -> int:
        return self.add(WHILE, self.shape[init], (init,), calls=(body_root, cond_root))

    def after_all(self) -> int:
        return self.add(AFTER_ALL, _Shape(TOKEN_T))

    def outfeed(self, x: int, token: int) -> int:
        return self.add(OUTFEED, _Shape(TOKEN_T), (x, token))

    # -- configurable compute ---------------------------------------------------------------------
    def dot(self, x: int, y: int, dims: Sequence[int], contraction: float | None = None) -> int:
        """x · y with output dims; contraction: the product of the contracted dims (default: x's
        minor dim, right for every forward dot but the multi-dim einsum)."""
        sx, sy = self.shape[x], self.shape[y]
        out = self.add(DOT, sx.with_dims(dims), (x, y))
        outs = _minor_pairs(self.layout[out], len(dims))
        px, py = _minor_pairs(self.layout[x], sx.rank), _minor_pairs(self.layout[y], sy.rank)
        opnd = [_vec()] + [_vec(in0=a, in1=b) for a in px for b in py]
        if contraction is None:
            contraction = float(sx.dims[-1] if sx.dims else 1)
        cost = float(math.prod(dims)) * float(contraction)  # multiply-adds
        self.cfg.append(_Cfg(out, DOT, np.stack([_vec(out=o) for o in outs]), np.stack(opnd), cost))
        return self.record(DOT, out, (x, y), contraction)

    def conv(self, x: int, w: int, dims: Sequence[int], dn: tuple, window: _Window) -> int:
        """Convolution; dn = (in_b, in_f, in_sp, k_i, k_o, k_sp, out_b, out_f, kind)."""
        in_b, in_f, in_sp, k_i, k_o, k_sp, out_b, out_f, kind = dn
        feats = {
            COL_WINDOW: window.features(),
            COL_CONV: [in_b, in_f, *_pad4(in_sp), k_i, k_o, *_pad4(k_sp), out_b, out_f],
            COL_FGC: [1, 1],
        }
        out = self.add(CONVOLUTION, self.shape[x].with_dims(dims), (x, w), feats=feats)
        outs = _pair_options(out_b, out_f, self.layout[out])
        ins = _pair_options(in_b, in_f, self.layout[x])
        ker = _pair_options(k_i, k_o, self.layout[w])
        opnd = np.stack([_vec(in0=a, in1=b) for a in ins for b in ker])
        cost = float(math.prod(dims)) * float(math.prod(window.size))
        self.cfg.append(_Cfg(out, CONVOLUTION, np.stack([_vec(out=o) for o in outs]), opnd, cost))
        return self.record(CONVOLUTION, out, (x, w), (kind, window))

    def reduce_window(self, x: int, window: _Window, dims: Sequence[int], kind: str = "max") -> int:
        s = self.shape[x]
        init = self.constant(s.et)
        out = self.add(
            REDUCE_WINDOW,
            s.with_dims(dims),
            (x, init),
            calls=(self.reducer(kind, s.et),),
            feats={COL_WINDOW: window.features()},
        )
        return self.record(REDUCE_WINDOW, out, (x,), window)

    def select_and_scatter(self, x: int, source: int, window: _Window) -> int:
        s = self.shape[x]
        init = self.constant(s.et)
        calls = (self.reducer("ge", s.et), self.reducer("add", s.et))
        feats = {COL_WINDOW: window.features()}
        return self.add(SELECT_AND_SCATTER, s, (x, source, init), calls=calls, feats=feats)

    def isolated_configurable(self, et: int) -> int:
        """A reshape with neither operands nor users: a quirk some published loaders crash on."""
        dims = (int(self.rng.choice([2, 4, 8])), int(self.rng.choice([16, 32, 128])))
        out = self.add(RESHAPE, _Shape(et, dims))
        options = np.stack([_vec(out=(1, 0)), _vec(out=(0, 1))])
        self.cfg.append(_Cfg(out, RESHAPE, options, _vec()[None, :], float(math.prod(dims))))
        return out

    # -- output -----------------------------------------------------------------------------------
    def finish(self) -> SynthGraph:
        """Featurize (TpuGraphs node_feat recipe) and collect the edges: a SynthGraph."""
        n = len(self.op)
        feat = np.zeros((n, 140), np.float32)
        feat[:, list(PRODUCT_COLUMNS)] = 1.0
        rows = np.arange(n)
        feat[rows, [s.et for s in self.shape]] = 1.0
        dims = np.zeros((n, 6), np.float64)
        agg = np.zeros((n, 3), np.float64)  # sum, product, tuple size
        lay = np.zeros((n, 6), np.float32)
        rank = np.zeros(n, np.int64)
        for i, s in enumerate(self.shape):
            d = s.dims
            if d:
                dims[i, : len(d)] = d[:6]
            agg[i] = (sum(d), math.prod(d), len(s.elems))
            rank[i] = s.rank
            lo = self.layout[i]
            if lo:
                lay[i, : len(lo)] = lo[:6]
        feat[:, COL_DIMS : COL_DIMS + 6] = dims
        feat[:, COL_DIMS_SUM] = agg[:, 0]
        feat[:, COL_DIMS_PROD] = agg[:, 1]
        feat[:, COL_TUPLE_SIZE] = agg[:, 2]
        feat[:, COL_LAYOUT : COL_LAYOUT + 6] = lay
        if self.feat_rows:
            feat[self.feat_rows, self.feat_cols] = np.asarray(self.feat_vals, np.float64)
        feat[self.roots, COL_IS_ROOT] = 1.0
        pairs = [(u, v) for u in range(n) for v in (*self.operands[u], *self.calls[u])]
        if pairs:
            edges = np.unique(np.asarray(pairs, np.int64), axis=0)
        else:
            edges = np.zeros((0, 2), np.int64)
        splits = list(self.splits)
        if splits[-1] < n:
            splits.append(n)
        return SynthGraph(
            node_feat=feat,
            node_opcode=np.asarray(self.op, np.uint8),
            edge_index=edges,
            node_splits=np.asarray([splits], np.int64),
            rank=rank,
            configurable=list(self.cfg),
            work=float(sum(s.nbytes for s in self.shape)),
        )


def _permutations(k: int) -> list[tuple[int, ...]]:
    return list(itertools.permutations(range(k)))


@dataclass
class SynthGraph:
    """One synthetic HLO graph: the graph members of an npz file.

    node_feat (n, 140) float32; node_opcode (n,) uint8; edge_index (m, 2) int64 rows [u, v] (u uses v,
    u > v), sorted and unique; node_splits (1, s) int64 (layout files; includes 0 and n); rank (n,)
    int64: the true output rank of every node (0 for tuples and scalars), the ground truth for the
    re-padding rule; configurable: the configurable nodes in ascending node order (layout);
    work: total output bytes of all nodes (drives the base runtime); meta: program facts (name, kind).
    """

    node_feat: np.ndarray
    node_opcode: np.ndarray
    edge_index: np.ndarray
    node_splits: np.ndarray
    rank: np.ndarray
    configurable: list[_Cfg]
    work: float
    meta: dict = field(default_factory=dict)

    @property
    def node_config_ids(self) -> np.ndarray:
        """(nc,) int64 ids of the configurable nodes, strictly increasing."""
        return np.asarray([c.node for c in self.configurable], np.int64)


# ------------------------------------------------------------------------------------ model programs


def _conv_dn(rank: int, kind: str) -> tuple:
    """Convolution dimension numbers (in_b, in_f, in_sp, k_i, k_o, k_sp, out_b, out_f, kind).

    'fwd' NHWC/HWIO, 'input_grad' (kernel in/out swapped), 'filter_grad' (in (b=r-1, f=0),
    kernel (i=0, o=r-1), out (b=r-2, f=r-1)), as in STATS.md §2.
    """
    r = rank
    sp_mid, sp_low = tuple(range(1, r - 1)), tuple(range(0, r - 2))
    if kind == "fwd":
        return (0, r - 1, sp_mid, r - 2, r - 1, sp_low, 0, r - 1, kind)
    if kind == "input_grad":
        return (0, r - 1, sp_mid, r - 1, r - 2, sp_low, 0, r - 1, kind)
    return (r - 1, 0, sp_mid, 0, r - 1, sp_mid, r - 2, r - 1, kind)


class _State:
    """Loop-carried (one tuple parameter) or entry-parameter state of a model step."""

    def __init__(self, b: _Hlo, tuple_param: bool) -> None:
        self.b = b
        self.tp = b.param(_Shape(TUPLE_T)) if tuple_param else None
        self.slots: list[list] = []  # [shape, input node, output node]

    def get(self, shape: _Shape, *, grad: bool = False) -> int:
        if self.tp is None:
            node = self.b.param(shape, grad=grad)
        else:
            node = self.b.gte(self.tp, len(self.slots), shape)
            self.b.grad[node] = grad
        self.slots.append([shape, node, node])
        return node

    def set_output(self, node_in: int, node_out: int) -> None:
        for slot in self.slots:
            if slot[1] == node_in:
                slot[2] = node_out
                return
        raise KeyError(node_in)

    @property
    def shapes(self) -> tuple[_Shape, ...]:
        return tuple(slot[0] for slot in self.slots)

    def finish(self, extra: Sequence[int] = ()) -> int:
        """Root tuple: every slot's output (a loop body must return its parameter's shape)."""
        if self.tp is not None:
            self.b.shape[self.tp] = _Shape(TUPLE_T, (), self.shapes)
        return self.b.tuple([slot[2] for slot in self.slots] + list(extra))


class _Model:
    """Layer helpers over one computation: weights, activations, losses.

    Activations and weights are f32; with mm_et = bf16 (mixed precision) the operands of every
    convolution and dot are converted to bf16 and their results back to f32.
    """

    def __init__(
        self, b: _Hlo, st: _State, rng: np.random.Generator, mm_et: int, train: bool
    ) -> None:
        self.b, self.st, self.rng, self.mm_et, self.train = b, st, rng, mm_et, train
        self.et = F32 if train else mm_et  # inference runs end to end in its matmul precision
        self.weights: list[int] = []
        self.keys: list[int] = []

    def weight(self, dims: Sequence[int], *, matrix: bool = False) -> int:
        """A weight: f32 master copy when training; inference stores matmul weights in mm_et."""
        et = F32 if self.train else self.mm_et
        w = self.st.get(_Shape(et, tuple(int(d) for d in dims)), grad=self.train)
        self.weights.append(w)
        return w

    def mm_in(self, x: int) -> int:
        return self.b.convert(x, self.mm_et) if self.mm_et != self.b.shape[x].et else x

    def mm_out(self, y: int) -> int:
        return self.b.convert(y, F32) if self.b.shape[y].et != F32 else y

    def matmul(self, x: int, w: int, dims: Sequence[int], contraction: float | None = None) -> int:
        return self.mm_out(self.b.dot(self.mm_in(x), self.mm_in(w), dims, contraction))

    def input(self, dims: Sequence[int], et: int | None = None) -> int:
        return self.st.get(_Shape(self.et if et is None else et, tuple(int(d) for d in dims)))

    def dims(self, x: int) -> tuple[int, ...]:
        return self.b.shape[x].dims

    def bias(self, y: int) -> int:
        dims = self.dims(y)
        vec = self.weight((dims[-1],))
        return self.b.binary(ADD, y, self.b.bcast(vec, dims, (len(dims) - 1,)))

    def relu(self, y: int) -> int:
        return self.b.binary(MAXIMUM, y, self.b.full(self.et, self.dims(y)))

    def dense(self, x: int, n_out: int, *, bias: bool = True) -> int:
        dims = self.dims(x)
        w = self.weight((dims[-1], n_out), matrix=True)
        y = self.matmul(x, w, (*dims[:-1], n_out))
        return self.bias(y) if bias else y

    def layernorm(self, x: int) -> int:
        b, dims = self.b, self.dims(x)
        r = len(dims)
        keep = tuple(range(r - 1))
        mean = b.binary(MULTIPLY, b.reduce(x, (r - 1,)), b.full(self.et, dims[:-1], "inv"))
        centred = b.binary(SUBTRACT, x, b.bcast(mean, dims, keep))
        var = b.reduce(b.binary(MULTIPLY, centred, centred), (r - 1,))
        var = b.binary(MULTIPLY, var, b.full(self.et, dims[:-1], "inv"))
        rs = b.unary(RSQRT, b.binary(ADD, var, b.full(self.et, dims[:-1], "eps")))
        y = b.binary(MULTIPLY, centred, b.bcast(rs, dims, keep))
        gamma = self.weight((dims[-1],))
        y = b.binary(MULTIPLY, y, b.bcast(gamma, dims, (r - 1,)))
        return self.bias(y)

    def gelu(self, x: int, erf: bool = False) -> int:
        b, dims = self.b, self.dims(x)
        if erf:  # x/2 · (1 + erf(x/√2)), erf expanded into a clamped rational polynomial
            z = b.binary(MULTIPLY, x, b.full(self.et, dims, "rsqrt2"))
            z = b.binary(
                MINIMUM,
                b.binary(MAXIMUM, z, b.full(self.et, dims, "lo")),
                b.full(self.et, dims, "hi"),
            )
            z2 = b.binary(MULTIPLY, z, z)
            num, den = z2, z2
            for k in range(3):
                num = b.binary(ADD, b.binary(MULTIPLY, num, z2), b.full(self.et, dims, ("p", k)))
                den = b.binary(ADD, b.binary(MULTIPLY, den, z2), b.full(self.et, dims, ("q", k)))
            erf_z = b.binary(DIVIDE, b.binary(MULTIPLY, z, num), den)
            half = b.binary(MULTIPLY, x, b.full(self.et, dims, "half"))
            return b.binary(MULTIPLY, half, b.binary(ADD, erf_z, b.full(self.et, dims, "one")))
        cube = b.binary(MULTIPLY, x, b.binary(MULTIPLY, x, x))
        inner = b.binary(ADD, x, b.binary(MULTIPLY, cube, b.full(self.et, dims, "c1")))
        t = b.unary(TANH, b.binary(MULTIPLY, inner, b.full(self.et, dims, "c2")))
        half = b.binary(MULTIPLY, x, b.full(self.et, dims, "half"))
        return b.binary(MULTIPLY, half, b.binary(ADD, t, b.full(self.et, dims, "one")))

    def softmax(self, x: int) -> int:
        b, dims = self.b, self.dims(x)
        r = len(dims)
        keep = tuple(range(r - 1))
        mx = b.reduce(x, (r - 1,), "max")
        e = b.unary(EXPONENTIAL, b.binary(SUBTRACT, x, b.bcast(mx, dims, keep)))
        s = b.reduce(e, (r - 1,))
        return b.binary(DIVIDE, e, b.bcast(s, dims, keep))

    def key_chain(self) -> None:
        """Scalar u32 RNG key derivation (threefry-like add/shift/or rounds) for dropout."""
        b = self.b
        seed = self.st.get(_Shape(U32))
        x = seed
        for _ in range(int(self.rng.integers(3, 9))):
            y = b.add(ADD, _Shape(U32), (x, b.constant(U32)))
            hi = b.add(SHIFT_RIGHT_LOGICAL, _Shape(U32), (y, b.constant(U32)))
            lo = b.add(SHIFT_LEFT, _Shape(U32), (y, b.constant(U32)))  # shift-left
            x = b.add(OR, _Shape(U32), (hi, lo))
            self.keys.append(x)
        self.st.set_output(seed, x)

    def dropout(self, x: int) -> int:
        if not self.train or self.rng.random() < 0.5:
            return x
        b, dims = self.b, self.dims(x)
        if self.keys:
            key = self.keys[int(self.rng.integers(len(self.keys)))]
            bits = b.add(RNG, _Shape(U32, dims), (key, b.constant(U32)))
            noise = b.add(12, _Shape(F32, dims), (bits,))  # bitcast-convert
        else:
            noise = b.rng_uniform(self.et, dims)
        mask = b.compare(noise, b.full(self.et, dims, "keep"))
        scaled = b.binary(MULTIPLY, x, b.full(self.et, dims, "scale"))
        return b.select(mask, scaled, b.full(self.et, dims))

    def xent(self, logits: int, labels: int) -> int:
        """Mean softmax cross-entropy of (B, C) logits against (B,) s32 labels: a scalar."""
        b, dims = self.b, self.dims(logits)
        mx = b.reduce(logits, (1,), "max")
        shifted = b.binary(SUBTRACT, logits, b.bcast(mx, dims, (0,)))
        lse = b.unary(LOG, b.reduce(b.unary(EXPONENTIAL, shifted), (1,)))
        logp = b.binary(SUBTRACT, shifted, b.bcast(lse, dims, (0,)))
        hit = b.compare(b.iota(S32, dims, 1), b.bcast(labels, dims, (0,)))
        onehot = b.convert(hit, self.et)
        total = b.reduce(b.binary(MULTIPLY, onehot, logp), (0, 1))
        return b.binary(MULTIPLY, b.unary(NEGATE, total), b.constant(self.et))


class _Growth:
    """When to stop adding forward blocks: projected final size vs the node / nc targets."""

    def __init__(self, m: _Model, n_end: int, nc_min: int) -> None:
        self.m, self.n_end, self.nc_min = m, n_end, nc_min
        self.start = len(m.b)

    def more(self) -> bool:
        b, m = self.m.b, self.m
        grown = len(b) - self.start
        tail = 1.6 * grown + 15 * len(m.weights) + 60 if m.train else 12
        factor = (
            3.0 if m.train else 1.0
        )  # configurable nodes per forward one, after the backward pass
        first = grown == 0
        return first or len(b) + tail < self.n_end or len(b.cfg) * factor < self.nc_min * 1.03


def _same_window(size_in: Sequence[int], k: int, s: int) -> tuple[list[int], _Window]:
    """Output spatial sizes and window of a SAME-padded k×…×k convolution with stride s."""
    outs, lo, hi = [], [], []
    for n in size_in:
        o = -(-n // s)
        total = max((o - 1) * s + k - n, 0)
        outs.append(o)
        lo.append(total // 2)
        hi.append(total - total // 2)
    nsp = len(size_in)
    ones = (1,) * nsp
    window = _Window((k,) * nsp, (s,) * nsp, tuple(lo), tuple(hi), ones, ones, (False,) * nsp)
    return outs, window


def _conv_block(m: _Model, x: int) -> int:
    b, rng = m.b, m.rng
    dims = m.dims(x)
    r = len(dims)
    spatial, cin = dims[1:-1], dims[-1]
    k = int(rng.choice([1, 3, 3, 3, 5, 7] if min(spatial) >= 7 else [1, 3]))
    k = min(k, min(spatial))
    stride = int(rng.choice([1, 1, 1, 2])) if min(spatial) >= 8 else 1
    if cin <= 4 and min(spatial) >= 100:
        k, stride = int(rng.choice([7, 11])), int(rng.choice([2, 4]))
    cout = int(rng.choice([16, 32, 48, 64, 96, 128, 192, 256, 384, 512]))
    if cin >= 64:
        cout = int(min(2048, max(cout, cin * rng.choice([1, 1, 2]))))
    w = m.weight((*(k,) * (r - 2), cin, cout), matrix=True)
    out_sp, window = _same_window(spatial, k, stride)
    y = m.mm_out(
        b.conv(m.mm_in(x), m.mm_in(w), (dims[0], *out_sp, cout), _conv_dn(r, "fwd"), window)
    )
    if rng.random() < (0.7 if m.train else 0.45):
        y = m.bias(y)
    if not m.train and rng.random() < 0.35:  # folded inference batch norm: scale and shift
        scale = m.weight((cout,))
        y = m.bias(b.binary(MULTIPLY, y, b.bcast(scale, m.dims(y), (r - 1,))))
    elif rng.random() < 0.4:  # batch norm over all but the feature dim
        axes = tuple(range(r - 1))
        ydims = m.dims(y)
        mean = b.binary(MULTIPLY, b.reduce(y, axes), b.full(m.et, (cout,), "inv"))
        centred = b.binary(SUBTRACT, y, b.bcast(mean, ydims, (r - 1,)))
        var = b.reduce(b.binary(MULTIPLY, centred, centred), axes)
        rs = b.unary(RSQRT, b.binary(ADD, var, b.full(m.et, (cout,), "eps")))
        y = b.binary(MULTIPLY, centred, b.bcast(rs, ydims, (r - 1,)))
    if m.dims(y) == dims and rng.random() < 0.5:  # residual connection
        y = b.binary(ADD, y, x)
    act = rng.random()
    if act < 0.15:  # swish
        return b.binary(MULTIPLY, y, b.unary(LOGISTIC, y))  # logistic
    if act < 0.3:  # relu6
        return b.binary(MINIMUM, m.relu(y), b.full(m.et, m.dims(y), "six"))
    return m.relu(y) if act < 0.92 else y


def _inception_block(m: _Model, x: int) -> int:
    """Parallel 1×1 / 1×1→k×k / pool→1×1 branches concatenated along the feature dim."""
    b, rng = m.b, m.rng
    dims = m.dims(x)
    r = len(dims)
    branches = []
    for kind in rng.permutation(["1x1", "kxk", "pool", "kxk"][: int(rng.integers(2, 5))]):
        y = x
        if kind == "pool":
            k = 3 if min(dims[1:-1]) >= 3 else 1
            pads = (0, *((k - 1) // 2,) * (r - 2), 0)
            window = _Window(
                (1, *(k,) * (r - 2), 1), (1,) * r, pads, pads, (1,) * r, (1,) * r, (False,) * r
            )
            y = b.reduce_window(y, window, dims)
        width = int(rng.choice([16, 32, 48, 64, 96, 128]))
        for k in (1, int(rng.choice([3, 5]))) if kind == "kxk" else (1,):
            cin = m.dims(y)[-1]
            w = m.weight((*(min(k, min(dims[1:-1])),) * (r - 2), cin, width), matrix=True)
            _, window = _same_window(dims[1:-1], min(k, min(dims[1:-1])), 1)
            y = b.conv(m.mm_in(y), m.mm_in(w), (*dims[:-1], width), _conv_dn(r, "fwd"), window)
            y = m.relu(m.bias(m.mm_out(y)))
        branches.append(y)
    return b.concat(branches, r - 1)


def _pool(m: _Model, x: int) -> int:
    dims = m.dims(x)
    r = len(dims)
    k = int(m.rng.choice([2, 3]))
    spatial = [(n - k) // 2 + 1 for n in dims[1:-1]]
    size = (1, *(k,) * (r - 2), 1)
    stride = (1, *(2,) * (r - 2), 1)
    zeros, ones = (0,) * r, (1,) * r
    window = _Window(size, stride, zeros, zeros, ones, ones, (False,) * r)
    return m.b.reduce_window(x, window, (dims[0], *spatial, dims[-1]))


def _vision_forward(m: _Model, grow: _Growth) -> tuple[int, int]:
    """Conv net forward pass; returns (logits (B, classes), labels (B,) s32 or -1 when not training)."""
    b, rng = m.b, m.rng
    rank = int(rng.choice([4] * 8 + [5, 3]))
    batch = int(rng.choice([8, 16, 32, 64, 128, 256]))
    side = (
        int(rng.choice([32, 56, 64, 96, 128, 224])) if rank <= 4 else int(rng.choice([16, 32, 64]))
    )
    x = m.input((batch, *(side,) * (rank - 2), int(rng.choice([1, 3, 4]))))
    labels = m.input((batch,), S32) if m.train else -1
    inception = rng.random() < 0.35
    while grow.more():
        r = rng.random()
        if min(m.dims(x)[1:-1]) >= 8 and r < 0.15:
            x = _pool(m, x)
        elif inception and r < 0.45:
            x = _inception_block(m, x)
        else:
            x = _conv_block(m, x)
    dims = m.dims(x)
    x = b.reshape(x, (dims[0], math.prod(dims[1:])))
    for _ in range(int(rng.integers(0, 3)) if grow.n_end > 800 else 0):
        x = m.relu(m.dense(x, int(rng.choice([256, 512, 1024, 4096]))))
    return m.dense(x, int(rng.choice([10, 100, 1000]))), labels


def _attention(m: _Model, x: int, mask: int, heads: int, einsum: bool) -> int:
    b = m.b
    bsz, seq, hidden = m.dims(x)
    d = hidden // heads

    def project() -> int:
        if einsum:  # dense_einsum: (B,S,H) x (H,A,D) -> (B,S,A,D), no reshape
            w = m.weight((hidden, heads, d), matrix=True)
            y = m.bias(m.matmul(x, w, (bsz, seq, heads, d)))
        else:
            y = b.reshape(m.dense(x, hidden), (bsz, seq, heads, d))
        return b.transpose(y, (0, 2, 1, 3))

    q, k, v = project(), project(), project()
    scores = m.matmul(q, k, (bsz, heads, seq, seq))
    scores = b.binary(MULTIPLY, scores, b.full(m.et, (bsz, heads, seq, seq), "scale"))
    if b.shape[mask].et == PRED:  # masked positions get -inf
        hide = b.bcast(mask, (bsz, heads, seq, seq), (0, 3))
        scores = b.select(hide, scores, b.full(m.et, (bsz, heads, seq, seq), "-inf"))
    else:
        scores = b.binary(ADD, scores, b.bcast(mask, (bsz, heads, seq, seq), (0, 3)))
    probs = m.dropout(m.softmax(scores))
    ctx = b.transpose(m.matmul(probs, v, (bsz, heads, seq, d)), (0, 2, 1, 3))
    if einsum:
        w = m.weight((heads, d, hidden), matrix=True)
        out = m.bias(m.matmul(ctx, w, (bsz, seq, hidden), contraction=heads * d))
    else:
        out = m.dense(b.reshape(ctx, (bsz, seq, hidden)), hidden)
    return m.layernorm(b.binary(ADD, x, m.dropout(out)))


def _transformer_forward(m: _Model, grow: _Growth, hidden: int | None) -> tuple[int, int]:
    """Encoder forward pass; returns (logits (B, classes), labels (B,) s32 or -1 when not training)."""
    b, rng = m.b, m.rng
    batch = int(rng.choice([8, 16, 32, 64]))
    seq = int(rng.choice([64, 128, 256, 384, 512]))
    hidden = hidden or int(rng.choice([128, 256, 512, 768, 1024]))
    heads = max(1, hidden // 64)
    vocab = int(rng.choice([8192, 30522, 32000, 50257]))
    ids = m.input((batch, seq), S32)
    x = b.gather(m.weight((vocab, hidden)), ids, (batch, seq, hidden))
    pos = b.slice(m.weight((512 if seq <= 512 else seq, hidden)), (0, 0), (seq, hidden))
    x = m.layernorm(b.binary(ADD, x, b.bcast(pos, (batch, seq, hidden), (1, 2))))
    raw_mask = m.input((batch, seq), S32)
    keep = b.convert(raw_mask, F32)
    mask = b.binary(
        MULTIPLY,
        b.binary(SUBTRACT, b.full(F32, (batch, seq), "one"), keep),
        b.full(F32, (batch, seq), "neg"),
    )
    labels = m.input((batch,), S32) if m.train else -1
    einsum, erf = rng.random() < 0.5, rng.random() < 0.5
    while grow.more():
        x = _attention(m, x, mask, heads, einsum)
        h = m.dropout(m.dense(m.gelu(m.dense(x, 4 * hidden), erf), hidden))
        x = m.layernorm(b.binary(ADD, x, h))
    cls = b.reshape(b.slice(x, (0, 0, 0), (batch, 1, hidden)), (batch, hidden))
    pooled = b.unary(TANH, m.dense(cls, hidden))
    return m.dense(pooled, int(rng.choice([2, 3, 5, 1000]))), labels


def _dense_forward(m: _Model, grow: _Growth) -> tuple[int, int]:
    """Embedding + MLP forward pass; returns (logits (B, classes), labels (B,) s32 or -1 when not training)."""
    b, rng = m.b, m.rng
    batch = int(rng.choice([32, 64, 128, 256, 1024]))
    fields, emb = int(rng.choice([2, 4, 8, 16])), int(rng.choice([16, 32, 64]))
    ids = m.input((batch, fields), S32)
    table = m.weight((int(rng.choice([1000, 10000, 100000])), emb))
    x = b.reshape(b.gather(table, ids, (batch, fields, emb)), (batch, fields * emb))
    labels = m.input((batch,), S32) if m.train else -1
    while grow.more():
        width = int(rng.choice([64, 128, 256, 512, 1024]))
        y = m.dense(x, width)
        if rng.random() < 0.4:
            y = m.layernorm(y)
        if rng.random() < 0.3:
            y = b.unary(TANH, y)
        elif rng.random() < 0.12:
            y = b.reshape(b.reshape(y, (batch, 4, width // 4)), (batch, width))
        else:
            y = m.relu(y)
        x = m.dropout(y)
    return m.dense(x, int(rng.choice([2, 10, 100]))), labels


def _grad_rule(b: _Hlo, entry: tuple, k: int, g: int) -> int | None:
    """Gradient of tape entry (kind, out, ins, info) with respect to its k-th input, given dL/dout = g."""
    kind, out, ins, info = entry
    x = ins[k]
    s = b.shape[x]
    if kind == ADD:
        return g
    if kind == SUBTRACT:
        return g if k == 0 else b.unary(NEGATE, g)
    if kind == MULTIPLY:
        return b.binary(MULTIPLY, g, ins[1 - k])
    if kind == DIVIDE:
        if k == 0:
            return b.binary(DIVIDE, g, ins[1])
        return b.unary(NEGATE, b.binary(DIVIDE, b.binary(MULTIPLY, g, out), ins[1]))
    if kind in (MAXIMUM, MINIMUM):
        mask = b.compare(x, ins[1 - k])
        return b.select(mask, g, b.full(s.et, s.dims))
    if kind == LOGISTIC:
        slope = b.binary(MULTIPLY, out, b.binary(SUBTRACT, b.full(s.et, s.dims, "one"), out))
        return b.binary(MULTIPLY, g, slope)
    if kind == SQRT:
        return b.binary(DIVIDE, g, b.binary(MULTIPLY, out, b.full(s.et, s.dims, "two")))
    if kind == EXPONENTIAL:
        return b.binary(MULTIPLY, g, out)
    if kind == LOG:
        return b.binary(DIVIDE, g, x)
    if kind == TANH:
        sq = b.binary(MULTIPLY, out, out)
        return b.binary(MULTIPLY, g, b.binary(SUBTRACT, b.full(s.et, s.dims, "one"), sq))
    if kind == RSQRT:
        cube = b.binary(MULTIPLY, out, b.binary(MULTIPLY, out, out))
        return b.binary(MULTIPLY, g, b.binary(MULTIPLY, cube, b.full(s.et, s.dims, "half")))
    if kind == NEGATE:
        return b.unary(NEGATE, g)
    if kind == CONVERT:
        return b.convert(g, s.et)
    if kind == BROADCAST:
        axes = tuple(d for d in range(b.shape[out].rank) if d not in info)
        return b.reduce(g, axes) if axes else g
    if kind == REDUCE:
        axes, red = info
        keep = tuple(d for d in range(s.rank) if d not in axes)
        spread = b.bcast(g, s.dims, keep)
        if red == "max":
            hit = b.compare(x, b.bcast(out, s.dims, keep))
            spread = b.select(hit, spread, b.full(s.et, s.dims))
        return spread
    if kind == RESHAPE:
        return b.reshape(g, s.dims)
    if kind == TRANSPOSE:
        return b.transpose(g, tuple(int(i) for i in np.argsort(info)))
    if kind == DOT:
        # either gradient does as many multiply-adds as the forward dot: |out| · its contraction
        grad_k = math.prod(b.shape[out].dims) * float(info) / max(math.prod(s.dims), 1)
        return b.dot(g, ins[1], s.dims, grad_k) if k == 0 else b.dot(ins[0], g, s.dims, grad_k)
    if kind == CONVOLUTION:
        return _conv_grad(b, entry, k, g)
    if kind == REDUCE_WINDOW:
        return b.select_and_scatter(x, g, info)
    if kind == GATHER:
        return b.scatter(b.full(s.et, s.dims), ins[1], g) if k == 0 else None
    if kind == SLICE:
        starts, limits = info
        return b.pad(g, starts, [d - lim for d, lim in zip(s.dims, limits, strict=True)], s.dims)
    if kind == CONCATENATE:
        offset = sum(b.shape[i].dims[info] for i in ins[:k])
        starts = [0] * s.rank
        starts[info] = offset
        limits = list(b.shape[out].dims)
        limits[info] = offset + s.dims[info]
        return b.slice(g, starts, limits)
    if kind == SELECT:
        if k == 0:
            return None
        zero = b.full(s.et, s.dims)
        return b.select(ins[0], g, zero) if k == 1 else b.select(ins[0], zero, g)
    return None


def _conv_grad(b: _Hlo, entry: tuple, k: int, g: int) -> int:
    """Input-grad (k = 0) or filter-grad (k = 1) convolution of a forward convolution."""
    _, _, (x, w), (_, win) = entry
    r = b.shape[x].rank
    nsp = r - 2
    ones = (1,) * nsp
    if k == 0:
        pads_lo = tuple(max(kk - 1 - p, 0) for kk, p in zip(win.size, win.pad_lo, strict=True))
        pads_hi = tuple(max(kk - 1 - p, 0) for kk, p in zip(win.size, win.pad_hi, strict=True))
        window = _Window(win.size, ones, pads_lo, pads_hi, ones, win.stride, (True,) * nsp)
        return b.conv(g, w, b.shape[x].dims, _conv_dn(r, "input_grad"), window)
    gsp = b.shape[g].dims[1:-1]
    window = _Window(tuple(gsp), ones, win.pad_lo, win.pad_hi, win.stride, ones, (False,) * nsp)
    return b.conv(x, g, b.shape[w].dims, _conv_dn(r, "filter_grad"), window)


def _backward(b: _Hlo, loss: int) -> dict[int, int]:
    """Emit the backward pass of every recorded op, last first; returns leaf -> gradient node."""
    b.recording = False
    grads = {loss: b.constant(b.shape[loss].et)}
    for entry in reversed(b.tape):
        g = grads.pop(entry[1], None)
        if g is None:
            continue
        for k, x in enumerate(entry[2]):
            if not b.grad[x]:
                continue
            gx = _grad_rule(b, entry, k, g)
            if gx is not None:
                grads[x] = b.binary(ADD, grads[x], gx) if x in grads else gx
    b.recording = True
    return grads


def _inference_outputs(m: _Model, logits: int) -> int:
    """Post-processing of an inference step: optional argmax; an eval loop accumulates metrics."""
    b, rng, st = m.b, m.rng, m.st
    outs = [logits]
    if rng.random() < 0.6:  # argmax over classes
        dims = b.shape[logits].dims
        best = b.bcast(b.reduce(logits, (1,), "max"), dims, (0,))
        idx = b.select(b.compare(logits, best), b.iota(S32, dims, 1), b.full(S32, dims, "big"))
        outs.append(b.reduce(idx, (1,), "min"))
    if st.tp is not None:
        for out in outs:
            total = b.reduce(
                b.convert(out, F32) if b.shape[out].et != F32 else out,
                tuple(range(b.shape[out].rank)),
            )
            acc = st.get(_Shape(F32))
            st.set_output(acc, b.add(ADD, _Shape(F32), (acc, total)))
        count = st.get(_Shape(S32))
        st.set_output(count, b.add(ADD, _Shape(S32), (count, b.constant(S32))))
    if st.tp is not None or len(outs) == 1:
        return outs[0]
    return b.tuple(outs)


def _lr_schedule(b: _Hlo, rng: np.random.Generator, step: int) -> int:
    """Scalar learning-rate schedule from the s32 step counter (warm-up, decay): an f32 scalar."""
    t = b.convert(step, F32)
    lr = b.add(MULTIPLY, _Shape(F32), (t, b.constant(F32)))
    for _ in range(int(rng.integers(1, 4))):
        op = int(rng.choice([MINIMUM, MAXIMUM, DIVIDE, ADD, MULTIPLY]))
        lr = b.add(op, _Shape(F32), (lr, b.constant(F32)))
        if rng.random() < 0.4:
            lr = b.add(int(rng.choice([RSQRT, SQRT, EXPONENTIAL])), _Shape(F32), (lr,))
    return lr


def _optimizer(m: _Model, grads: dict[int, int], step: int) -> None:
    """SGD updates of every weight: schedule, optional all-reduce, global-norm clipping, momentum."""
    b, rng = m.b, m.rng
    all_reduce, momentum, clip = rng.random() < 0.25, rng.random() < 0.5, rng.random() < 0.6
    lr = _lr_schedule(b, rng, step)
    pairs = [(w, grads[w]) for w in m.weights if w in grads]
    if all_reduce:
        pairs = [(w, b.all_reduce(g)) for w, g in pairs]
    if clip and pairs:
        norm = None
        for _, g in pairs:
            sq = b.reduce(b.binary(MULTIPLY, g, g), tuple(range(b.shape[g].rank)))
            norm = sq if norm is None else b.add(ADD, _Shape(F32), (norm, sq))
        norm = b.add(SQRT, _Shape(F32), (norm,))
        scale = b.add(
            DIVIDE,
            _Shape(F32),
            (b.constant(F32), b.add(MAXIMUM, _Shape(F32), (norm, b.constant(F32)))),
        )
        pairs = [(w, b.binary(MULTIPLY, g, b.bcast(scale, b.shape[g].dims))) for w, g in pairs]
    adam = rng.random() < 0.5
    clamp, guard = rng.random() < 0.5, m.mm_et == BF16 or rng.random() < 0.3
    for w, g in pairs:
        dims = b.shape[w].dims
        if guard:  # mixed precision: drop non-finite gradients
            g = b.add(SELECT, b.shape[g], (b.compare(g, g), g, b.full(F32, dims)))
        if clamp:  # clip by value
            g = b.add(CLAMP, b.shape[g], (b.full(F32, dims, "lo"), g, b.full(F32, dims, "hi")))
        if adam:
            mom, vel = m.st.get(_Shape(F32, dims)), m.st.get(_Shape(F32, dims))
            m1 = b.binary(
                ADD,
                b.binary(MULTIPLY, mom, b.full(F32, dims, "b1")),
                b.binary(MULTIPLY, g, b.full(F32, dims, "1-b1")),
            )
            v1 = b.binary(
                ADD,
                b.binary(MULTIPLY, vel, b.full(F32, dims, "b2")),
                b.binary(MULTIPLY, b.binary(MULTIPLY, g, g), b.full(F32, dims, "1-b2")),
            )
            m.st.set_output(mom, m1)
            m.st.set_output(vel, v1)
            denom = b.binary(ADD, b.unary(SQRT, v1), b.full(F32, dims, "eps"))
            g = b.binary(DIVIDE, m1, denom)
            if rng.random() < 0.5:  # decoupled weight decay
                g = b.binary(ADD, g, b.binary(MULTIPLY, w, b.full(F32, dims, "wd")))
        elif momentum:
            v = m.st.get(_Shape(F32, dims))
            g = b.binary(ADD, b.binary(MULTIPLY, v, b.full(F32, dims, "beta")), g)
            m.st.set_output(v, g)
        update = b.binary(MULTIPLY, g, b.bcast(lr, dims))
        m.st.set_output(w, b.binary(SUBTRACT, w, update))


def _model_step(
    b: _Hlo, rng: np.random.Generator, st: _State, kind: str, train: bool, n_end: int, nc_min: int,
    hidden: int | None,
) -> int:  # fmt: skip
    """Emit one model step into the current computation; returns the node to report (loss/logits)."""
    m = _Model(b, st, rng, BF16 if rng.random() < 0.3 else F32, train)
    step = st.get(_Shape(S32)) if train else None
    if train and rng.random() < 0.7:
        m.key_chain()
    grow = _Growth(m, n_end, nc_min)
    if kind == "vision":
        logits, labels = _vision_forward(m, grow)
    elif kind == "transformer":
        logits, labels = _transformer_forward(m, grow, hidden)
    else:
        logits, labels = _dense_forward(m, grow)
    if not train:
        return _inference_outputs(m, logits)
    loss = m.xent(logits, labels)
    if st.tp is not None:  # a training loop carries a running loss
        total = st.get(_Shape(F32))
        st.set_output(total, b.add(ADD, _Shape(F32), (total, loss)))
    assert step is not None
    _optimizer(m, _backward(b, loss), step)
    st.set_output(step, b.add(ADD, _Shape(S32), (step, b.constant(S32))))
    return loss


def _small_loop(b: _Hlo, rng: np.random.Generator, et: int, configurable: bool) -> tuple:
    """A small while loop (body, cond) emitted before its caller; returns (body, cond, shapes)."""
    rows, cols = int(rng.choice([8, 16, 32, 64, 128])), int(rng.choice([16, 32, 64, 128, 256]))
    shapes = (_Shape(S32), _Shape(et, (rows, cols)), _Shape(et, (cols, cols)))
    b.begin()
    tp = b.param(_Shape(TUPLE_T, (), shapes))
    i, x, w = (b.gte(tp, k) for k in range(3))
    i1 = b.add(ADD, _Shape(S32), (i, b.constant(S32)))
    if configurable:
        y = b.unary(TANH, b.dot(x, w, (rows, cols)))
        if rng.random() < 0.5:
            y = b.reshape(b.reshape(y, (rows, 2, cols // 2)), (rows, cols))
    else:
        y = b.binary(ADD, b.binary(MULTIPLY, x, b.full(et, (rows, cols))), x)
    body = b.end(b.tuple([i1, y, w]), split=rng.random() < 0.6)
    b.begin()
    p = b.param(_Shape(TUPLE_T, (), shapes))
    cond = b.end(b.compare(b.gte(p, 0), b.constant(S32)), split=True)
    return body, cond, shapes


def build_program(
    rng: np.random.Generator, family: str, name: str, n_target: int, *, nc_min: int = 0,
    isolated: bool = False,
) -> SynthGraph:  # fmt: skip
    """Synthesize one layout program of about n_target nodes (at least nc_min configurable ones).

    Computations in emission order: scalar reducers, small while loops (some with configurable
    nodes), the main training loop's body and condition (half of the training programs), the entry.
    """
    kind, train = _program_kind(family, name)
    if kind == "transformer" and n_target < 700:
        train = False  # a transformer training step needs more nodes than a tiny budget
    hidden = None
    if "_H-" in name:
        hidden = int(name.split("_H-")[1].split("_")[0])
    b = _Hlo(rng, alt_layout_p=0.015)
    b.make_reducers(int(np.clip(n_target * 0.045, 8, 600)))
    loops = [
        _small_loop(b, rng, F32, configurable=rng.random() < 0.6)
        for _ in range(int(rng.integers(0, 2 + n_target // 3000)))
    ]
    n_end = n_target - 12 * len(loops) - 6
    in_loop = rng.random() < 0.5
    main = None
    if in_loop:
        b.begin()
        st = _State(b, tuple_param=True)
        _model_step(b, rng, st, kind, train, int(n_end * 0.93), nc_min, hidden)
        body = b.end(st.finish(), split=rng.random() < 0.3)
        b.begin()
        p = b.param(_Shape(TUPLE_T, (), st.shapes))
        step_slot = max(k for k, s in enumerate(st.shapes) if s.et == S32 and not s.dims)
        cond = b.end(b.compare(b.gte(p, step_slot), b.constant(S32)), split=True)
        main = (body, cond, st.shapes)
    b.begin()
    outputs: list[int] = []
    if isolated:
        b.isolated_configurable(F32)
    for body_root, cond_root, shapes in [*loops, *([main] if main else [])]:
        if rng.random() < 0.85:  # the loop state arrives as one tuple argument
            args = b.param(_Shape(TUPLE_T, (), shapes))
            init = b.tuple([b.gte(args, k) for k in range(len(shapes))])
        else:
            init = b.tuple([b.param(s) for s in shapes])
        result = b.while_(init, body_root, cond_root)
        picks = rng.choice(
            len(shapes), size=min(len(shapes), int(rng.integers(1, 7))), replace=False
        )
        outputs += [b.gte(result, int(k)) for k in sorted(picks)]
    if main is None:
        st = _State(b, tuple_param=rng.random() < 0.9)
        report = _model_step(b, rng, st, kind, train, n_end, nc_min, hidden)
        if rng.random() < 0.3:
            b.outfeed(report, b.after_all())
        outputs = [slot[2] for slot in st.slots if slot[2] != slot[1]] + [report, *outputs]
        if st.tp is not None:
            b.shape[st.tp] = _Shape(TUPLE_T, (), st.shapes)
    if rng.random() < 0.3:  # a zero-size tensor: interior/trailing zero dims keep rank > 0
        outputs.append(b.constant(F32, [int(rng.integers(2, 9)), 0][: int(rng.integers(1, 3))]))
    b.end(b.tuple(outputs))
    graph = b.finish()
    graph.meta.update(name=name, kind=kind, train=train)
    return graph


# ------------------------------------------------------------------------------ layout configurations


@dataclass
class LayoutPlan:
    """How the configs of one layout program are drawn and timed (shared by default and random).

    node_config_ids (nc,) int64. group_of (nc,) int64: tie group of every configurable node (members
    of a group carry identical vectors in every row). table (nc, K, 18) float32: option vectors of
    every node (option k of its group; padded with option 0 up to K). n_out, n_opnd (G,) int64: output
    and operand option counts of each group (option k = o · n_opnd + i); major (G,) bool: conv/dot
    groups whose output layout moves the runtime. jump (G, K) float64: relative runtime change of each
    option (0 for the modal/default one). base: runtime of the all-modal config, ns. noise: relative
    standard deviation of measurement noise.
    """

    node_config_ids: np.ndarray
    group_of: np.ndarray
    table: np.ndarray
    n_out: np.ndarray
    n_opnd: np.ndarray
    major: np.ndarray
    jump: np.ndarray
    base: float
    noise: float

    @property
    def n_groups(self) -> int:
        return len(self.n_out)

    def truth(self, choices: np.ndarray) -> np.ndarray:
        """Noise-free runtimes (c,) float64 ns of configs given as (c, G) group choices."""
        extra = np.zeros(choices.shape[0], np.float64)
        for g in range(self.n_groups):
            extra += self.jump[g][choices[:, g]]
        return self.base * (1.0 + extra)

    def feature_chunks(self, choices: np.ndarray, rows_per_chunk: int) -> Iterator[np.ndarray]:
        """node_config_feat in row chunks: (k, nc, 18) float32 each; never the whole array."""
        nodes = np.arange(len(self.group_of))[None, :]
        for a in range(0, choices.shape[0], rows_per_chunk):
            node_choice = choices[a : a + rows_per_chunk][:, self.group_of]
            yield self.table[nodes, node_choice]

    def features(self, choices: np.ndarray) -> np.ndarray:
        """The whole (c, nc, 18) float32 node_config_feat (small files and tests only)."""
        nodes = np.arange(len(self.group_of))[None, :]
        return self.table[nodes, choices[:, self.group_of]]


def _tie_groups(
    configurable: list[_Cfg], rng: np.random.Generator, family: str, c_hint: int
) -> list[list[int]]:
    """Partition configurable nodes into tie groups of nodes with identical option tables."""
    classes: dict[bytes, list[int]] = {}
    for k, cfg in enumerate(configurable):
        key = bytes([cfg.opcode]) + cfg.out.tobytes() + b"|" + cfg.opnd.tobytes()
        classes.setdefault(key, []).append(k)
    split_p = 0.12 if family == "xla" else 0.3
    groups: list[list[int]] = []
    for members in classes.values():
        count = 1 + int(rng.binomial(len(members) - 1, split_p)) if len(members) > 1 else 1
        order = rng.permutation(members)
        parts = [[int(m)] for m in order[:count]]
        if len(order) > count:
            weights = rng.dirichlet(np.full(count, 0.7))
            for m, g in zip(
                order[count:], rng.choice(count, size=len(order) - count, p=weights), strict=True
            ):
                parts[int(g)].append(int(m))
        groups += [sorted(p) for p in parts]

    def entropy(g: list[int]) -> float:  # rough nats per row a group contributes
        cfg = configurable[g[0]]
        if cfg.opcode == RESHAPE:
            return 0.6 if len(cfg.out) > 1 else 0.0
        return 0.3 + math.log(len(cfg.opnd))

    # enough independent choices that natural collisions stay rare (they are redrawn anyway)
    need = (1.2 if family == "xla" else 1.6) * math.log(max(c_hint, 2)) + 1.0
    while sum(entropy(g) for g in groups) < need:
        big = max(range(len(groups)), key=lambda i: len(groups[i]))
        if len(groups[big]) < 2:
            break
        members = groups.pop(big)
        cut = len(members) // 2
        groups += [members[:cut], members[cut:]]
    return sorted(groups, key=lambda g: g[0])


def plan_layout(
    graph: SynthGraph, rng: np.random.Generator, family: str, c_hint: int
) -> LayoutPlan:
    """Tie groups, option tables and the runtime model of one layout program."""
    cfgs = graph.configurable
    groups = _tie_groups(cfgs, rng, family, c_hint)
    nc, ng = len(cfgs), len(groups)
    group_of = np.zeros(nc, np.int64)
    n_out = np.zeros(ng, np.int64)
    n_opnd = np.zeros(ng, np.int64)
    major = np.zeros(ng, bool)
    weight = np.zeros(ng, np.float64)
    vectors: list[np.ndarray] = []
    for g, members in enumerate(groups):
        cfg = cfgs[members[0]]
        group_of[members] = g
        n_out[g], n_opnd[g] = len(cfg.out), len(cfg.opnd)
        major[g] = cfg.opcode != RESHAPE and len(cfg.out) > 1
        # additive over member nodes, each term visible in that node's features
        if major[g]:
            weight[g] = sum(math.sqrt(cfgs[m].cost) for m in members)
        else:
            weight[g] = sum(min(1.0, cfgs[m].cost / 1e6) for m in members)
        out = np.repeat(cfg.out, len(cfg.opnd), axis=0)
        opnd = np.tile(cfg.opnd, (len(cfg.out), 1))
        vectors.append(np.where(out != _UNSET, out, opnd))
    k_max = int((n_out * n_opnd).max()) if ng else 1
    table = np.empty((nc, k_max, 18), np.float32)
    for j in range(nc):
        v = vectors[group_of[j]]
        table[j, : len(v)] = v
        table[j, len(v) :] = v[0]
    scale = _loguniform(rng, 0.03, 6.0)  # the largest group's jump, relative to the base runtime
    w_max = weight[major].max() if major.any() else 1.0
    opnd_scale = 3e-4 * min(1.0, 8.0 / max(1, int(major.sum())))
    jump = np.zeros((ng, k_max), np.float64)
    for g in range(ng):
        rel = weight[g] / w_max
        o = np.arange(n_out[g] * n_opnd[g]) // n_opnd[g]
        i = np.arange(n_out[g] * n_opnd[g]) % n_opnd[g]
        if major[g]:
            out_term = scale * rel * (1.0 + 0.35 * (o - 1))
            opnd_term = opnd_scale * rel * (1.0 + 0.25 * (i - 1))
        else:  # reshapes: small
            out_term = 2e-4 * weight[g] * (1.0 + 0.5 * (o - 1))
            opnd_term = np.zeros_like(out_term)
        jump[g, : len(o)] = np.where(o > 0, out_term, 0.0) + np.where(i > 0, opnd_term, 0.0)
    return LayoutPlan(
        node_config_ids=graph.node_config_ids,
        group_of=group_of,
        table=table,
        n_out=n_out,
        n_opnd=n_opnd,
        major=major,
        jump=jump,
        base=2e7 + 0.05 * graph.work,
        noise=_loguniform(rng, 1e-4, 6e-4),
    )


class _Sampler:
    """Draws group choices for one collection ('default': few non-modal outputs per row, genetic
    search around the best; 'random': independent non-modal outputs)."""

    def __init__(self, plan: LayoutPlan, rng: np.random.Generator, search: str) -> None:
        self.plan, self.search = plan, search
        ng = plan.n_groups
        self.p_opnd = [rng.dirichlet(np.full(int(k), 6.0)) for k in plan.n_opnd]
        self.p_reshape = rng.uniform(0.1, 0.5, size=ng)
        self.p_random = rng.uniform(*_NONMODAL_P_RANDOM, size=ng)
        self.majors = np.flatnonzero(plan.major)
        w = rng.dirichlet(np.full(len(self.majors), 1.0)) if len(self.majors) else np.zeros(0)
        self.major_cdf = np.cumsum(w)

    def draw(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """(count, G) uint8 choices."""
        plan = self.plan
        ng = plan.n_groups
        out = np.zeros((count, ng), np.int64)
        opnd = np.zeros((count, ng), np.int64)
        for g in range(ng):
            if plan.n_opnd[g] > 1:
                opnd[:, g] = rng.choice(int(plan.n_opnd[g]), size=count, p=self.p_opnd[g])
            if plan.n_out[g] > 1 and not plan.major[g]:
                flip = rng.random(count) < self.p_reshape[g]
                out[:, g] = np.where(flip, 1 + rng.integers(0, plan.n_out[g] - 1, size=count), 0)
        if len(self.majors):
            if self.search == "random":
                for g in self.majors:
                    flip = rng.random(count) < self.p_random[g]
                    out[:, g] = np.where(
                        flip, 1 + rng.integers(0, plan.n_out[g] - 1, size=count), 0
                    )
            else:
                flips = rng.choice(
                    len(_NONMODAL_ROWS_DEFAULT), size=count, p=_NONMODAL_ROWS_DEFAULT
                )
                for j in range(1, len(_NONMODAL_ROWS_DEFAULT)):
                    rows = np.flatnonzero(flips >= j)
                    pick = np.searchsorted(
                        self.major_cdf, rng.random(len(rows)) * self.major_cdf[-1]
                    )
                    g = self.majors[np.minimum(pick, len(self.majors) - 1)]
                    out[rows, g] = 1 + rng.integers(0, plan.n_out[g] - 1)
        return (out * plan.n_opnd[None, :] + opnd).astype(np.uint8)


def _first_occurrence(choices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(is_first (c,) bool, group size of each row's value (c,) int64) of identical rows."""
    c = choices.shape[0]
    if choices.shape[1] == 0:
        first = np.zeros(c, bool)
        first[:1] = True
        return first, np.full(c, c, np.int64)
    view = np.ascontiguousarray(choices).view(np.dtype((np.void, choices.shape[1])))[:, 0]
    _, first_idx, inverse, counts = np.unique(
        view, return_index=True, return_inverse=True, return_counts=True
    )
    first = np.zeros(c, bool)
    first[first_idx] = True
    return first, counts[inverse]


def draw_choices(
    plan: LayoutPlan, rng: np.random.Generator, search: str, count: int, dup_share: float
) -> np.ndarray:
    """(count, G) uint8 group choices with about ``dup_share`` duplicate rows.

    Natural collisions are redrawn (a few rounds), then whole rows are re-sampled from earlier rows
    (mostly original rows; a quarter of them follow earlier copies, giving a heavy tail) until the duplicate count reaches round(dup_share · count).
    """
    sampler = _Sampler(plan, rng, search)
    choices = sampler.draw(rng, count)
    for _ in range(8):
        first, _ = _first_occurrence(choices)
        again = np.flatnonzero(~first)
        if len(again) == 0:
            break
        choices[again] = sampler.draw(rng, len(again))
    first, sizes = _first_occurrence(choices)
    need = round(dup_share * count) - int((~first).sum())
    singles = np.flatnonzero(sizes == 1)
    singles = singles[singles > 0]
    if need > 0 and len(singles):
        rows = np.sort(rng.choice(singles, size=min(need, len(singles)), replace=False))
        copied = np.zeros(count, bool)
        copied[rows] = True
        # a source: mostly a uniformly drawn earlier original row; sometimes any earlier row, whose
        # value is then itself re-drawn (popular configs get more popular: a heavier tail)
        originals = np.flatnonzero(~copied)
        below = np.searchsorted(originals, rows)
        source = np.arange(count)
        source[rows] = originals[np.floor(below * rng.random(len(rows))).astype(np.int64)]
        anywhere = rng.random(len(rows)) < 0.25
        source[rows[anywhere]] = np.floor(rows[anywhere] * rng.random(int(anywhere.sum()))).astype(
            np.int64
        )
        while True:  # follow copy chains to a row that is not itself a copy
            nxt = source[source]
            if np.array_equal(nxt, source):
                break
            source = nxt
        choices = choices[source]
    return choices


# ------------------------------------------------------------------------------------------ tile


def _tile_shape(rng: np.random.Generator, rank: int) -> tuple[int, ...]:
    menu = [
        1,
        2,
        3,
        5,
        7,
        8,
        12,
        14,
        16,
        26,
        28,
        32,
        56,
        64,
        96,
        128,
        192,
        256,
        384,
        512,
        1024,
        4096,
    ]
    while True:
        dims = [int(rng.choice(menu)) for _ in range(rank)]
        dims[0] = int(rng.choice([8, 16, 32, 64, 128]))
        if math.prod(dims) <= 1 << 23:
            return tuple(dims)


def _fused_body(
    b: _Hlo,
    rng: np.random.Generator,
    et: int,
    dims: tuple[int, ...],
    size: int,
    start: Sequence[int] = (),
) -> tuple[int, list[_Shape]]:
    """An elementwise/broadcast/reduce DAG over ``dims`` of about ``size`` nodes, fed by ``start``
    (else by 1–2 new parameters); returns (root, shapes of the parameters it added)."""
    params: list[_Shape] = []
    pool = list(start)
    if not pool:
        pool = [b.param(_Shape(et, dims)) for _ in range(int(rng.integers(1, 3)))]
        params = [b.shape[p] for p in pool]
    reduced = False
    while len(b) - b.comp_start < size:
        r = rng.random()
        x = pool[int(rng.integers(len(pool)))]
        if r < 0.35:
            y = pool[int(rng.integers(len(pool)))] if rng.random() < 0.6 else b.full(et, dims)
            op = int(rng.choice([ADD, MULTIPLY, SUBTRACT, MAXIMUM, DIVIDE]))
            pool.append(b.add(op, b.shape[x], (x, y)))
        elif r < 0.55:
            op = int(rng.choice([EXPONENTIAL, TANH, RSQRT, NEGATE, LOG, CONVERT]))
            shape = _Shape(F32 if et == BF16 else BF16, dims) if op == CONVERT else b.shape[x]
            pool.append(b.add(op, shape, (x,)))
        elif r < 0.7:
            y = pool[int(rng.integers(len(pool)))]
            p = b.add(COMPARE, _Shape(PRED, dims), (x, y))
            pool.append(b.add(SELECT, b.shape[x], (p, x, y)))
        elif r < 0.85 or reduced or not b.reducers:
            vec = b.param(_Shape(et, dims[-1:]))
            params.append(b.shape[vec])
            pool.append(
                b.add(BROADCAST, _Shape(et, dims), (vec,), feats={COL_DIMENSIONS: [len(dims) - 1]})
            )
        else:
            axis = len(dims) - 1
            red = b.add(
                REDUCE, _Shape(b.shape[x].et, dims[:-1]), (x, b.constant(b.shape[x].et)),
                calls=(b.reducer("add", F32),), feats={COL_DIMENSIONS: [axis]},
            )  # fmt: skip
            reduced = True
            pool.append(
                b.add(
                    BROADCAST,
                    _Shape(b.shape[x].et, dims),
                    (red,),
                    feats={COL_DIMENSIONS: list(range(len(dims) - 1))},
                )
            )
    used = {o for i in range(b.comp_start, len(b)) for o in b.operands[i]}
    live = [v for v in pool if v not in used]  # every value must reach the root
    if len(live) > 1 and rng.random() < 0.3:
        return b.tuple(live[-2:]) if len(live) == 2 else _combine(b, live, et), params
    return _combine(b, live, et), params


def _combine(b: _Hlo, values: list[int], et: int) -> int:
    """Fold unused values into one output (convert first where element types differ)."""
    out = values[-1]
    for v in values[-2::-1]:
        if b.shape[v].et != b.shape[out].et:
            v = b.add(CONVERT, b.shape[out], (v,))
        out = b.add(ADD, b.shape[out], (out, v))
    return out


_TILE_KINDS = ("fusion", "conv", "copy", "reshape")
_TILE_KIND_P = (0.72, 0.1, 0.1, 0.08)


def build_tile_graph(
    rng: np.random.Generator, n_range: tuple[int, int], kind: str | None = None
) -> SynthGraph:
    """One tile kernel graph: a fusion or convolution fusion of n (log-uniform in n_range) nodes, or
    a 2-node copy or reshape kernel.

    meta: 'kind', 'iter_dims' (output iteration space the tile sizes bound, logical order),
    'iter_layout' (its minor_to_major: the output bounds run over the dims major to minor, as in the
    real files), 'kernel_dims' (conv fusions) and 'et'.
    """
    if kind is None:
        kind = str(rng.choice(_TILE_KINDS, p=_TILE_KIND_P))
    n_target = int(_loguniform(rng, max(n_range[0], 5), max(n_range[1], 6)))
    if n_range[1] < 8 and kind in ("fusion", "conv"):
        kind = "copy"
    b = _Hlo(rng, alt_layout_p=0.35)
    et = BF16 if rng.random() < 0.3 else F32
    rank = int(rng.choice([1, 2, 2, 3, 4, 4]))
    dims = _tile_shape(rng, rank)
    kernel_dims = None
    if kind in ("copy", "reshape"):
        b.begin()
        x = b.param(_Shape(et, dims))
        if kind == "copy":
            layout = b.default_layout(_Shape(et, dims), alt_p=0.5)
            b.end(b.add(COPY, _Shape(et, dims), (x,), layout=layout))
        else:
            out = (
                (dims[0], math.prod(dims[1:]))
                if rank > 1
                else (dims[0] // 2, 2)
                if dims[0] % 2 == 0
                else (dims[0], 1)
            )
            b.end(b.add(RESHAPE, _Shape(et, out), (x,)))
    else:
        if rng.random() < 0.6:
            b.make_reducers(int(rng.integers(1, 3)))
        b.begin()
        inner: list[_Shape] = []
        start: list[int]
        if kind == "conv":
            dims = (int(rng.choice([8, 16, 32])), *(int(rng.choice([7, 12, 14, 28, 56])),) * 2,
                    int(rng.choice([64, 128, 192, 384])))  # fmt: skip
            k, cin = int(rng.choice([1, 3])), int(rng.choice([32, 64, 192, 256]))
            kernel_dims = (k, k, cin, dims[-1])
            x = b.param(_Shape(et, (dims[0], dims[1], dims[2], cin)))
            w = b.param(_Shape(et, kernel_dims))
            _, window = _same_window(dims[1:3], k, 1)
            dn = _conv_dn(4, "fwd")
            feats = {
                COL_WINDOW: window.features(),
                COL_CONV: [dn[0], dn[1], *_pad4(dn[2]), dn[3], dn[4], *_pad4(dn[5]), dn[6], dn[7]],
                COL_FGC: [1, 1],
            }
            start = [b.add(CONVOLUTION, _Shape(et, dims), (x, w), feats=feats)]
            inner = [b.shape[x], b.shape[w]]
        else:
            start = []
        body, params = _fused_body(b, rng, et, dims, max(3, n_target // 2 - 2), start)
        fused_root = b.end(body)
        b.begin()
        args = [b.param(s) for s in (*inner, *params)]
        b.end(b.add(FUSION, b.shape[fused_root], args, calls=(fused_root,)))
    out = len(b) - 1
    if b.shape[out].et == TUPLE_T:  # a 2-output fusion tiles its (equal-shape) outputs: the later one's layout
        out = b.operands[fused_root][-1]
    layout = b.layout[out] if kind != "reshape" else ()
    graph = b.finish()
    graph.meta.update(kind=kind, iter_dims=tuple(dims), iter_layout=tuple(layout),
                      kernel_dims=kernel_dims, et=et)
    return graph


def _bound_candidates(extent: int, unit: int) -> np.ndarray:
    """Tile-size bound values for one dim: powers of two and divisors up to ceil(extent / unit)."""
    top = max(1, min(128, -(-extent // unit)))
    if top <= 32:
        return np.arange(1, top + 1, dtype=np.int64)
    values = {
        top,
        *(v for v in range(1, top + 1) if top % v == 0),
        *(1 << k for k in range(8) if 1 << k <= top),
    }
    return np.array(sorted(values), np.int64)


def _tile_units(dims: Sequence[int]) -> list[int]:
    """Elements per bound step along each dim of a physical (major-to-minor) shape: 128 lanes on the
    minor-most dim, 8 sublanes on the next, single elements elsewhere — what the real files show
    (every output bound ≤ ceil(extent / unit) in that order; e.g. (32, 26, 26, 192) laid out
    {3,0,2,1} has bounds up to (26, 26, 4, 2))."""
    units = [1] * len(dims)
    if dims:
        units[-1] = 128
    if len(dims) >= 2:
        units[-2] = 8
    return units


def _tile_bounds(rng: np.random.Generator, dims: Sequence[int], count: int) -> np.ndarray:
    """(count', ≤count) distinct bound vectors (rows) over dims; fewer when the space is small."""
    cands = [_bound_candidates(d, u) for d, u in zip(dims, _tile_units(dims), strict=True)]
    space = math.prod(len(c) for c in cands)
    count = min(count, space)
    rows = np.zeros((0, len(dims)), np.int64)
    for _ in range(20):
        draw = np.stack([c[rng.integers(0, len(c), size=2 * count + 8)] for c in cands], axis=1)
        rows = np.concatenate([rows, draw])
        _, idx = np.unique(rows, axis=0, return_index=True)
        rows = rows[np.sort(idx)]
        if len(rows) >= count:
            break
    return rows[:count]


def _bounds_feat(bounds: np.ndarray | None, count: int) -> np.ndarray:
    """(count, 8) float32: 6 leading bounds, sum, product (empty list: product 0)."""
    out = np.zeros((count, 8), np.float32)
    if bounds is not None and bounds.shape[1]:
        k = min(6, bounds.shape[1])
        out[:, :k] = bounds[:, :k]
        out[:, 6] = bounds.sum(1)
        out[:, 7] = bounds.prod(1)
    return out


def _tile_time(
    dims: Sequence[int], bounds: np.ndarray, bytes_per: int, operands: int
) -> np.ndarray:
    """Noise-free kernel time (ns) per bound row: padded traffic, per-tile overhead (saturating at
    20× the traffic) and a VMEM spill penalty for tiles over 2 MiB."""
    units = _tile_units(dims)
    tiles = np.ones(len(bounds))
    padded = np.ones(len(bounds))
    tile_elems = np.ones(len(bounds))
    for d, (extent, unit) in enumerate(zip(dims, units, strict=True)):
        span = np.minimum(bounds[:, d] * unit, max(extent, 1))
        n = np.ceil(extent / span)
        tiles *= n
        padded *= n * span
        tile_elems *= span
    traffic = padded * bytes_per * operands / 220.0
    overhead = 20.0 * traffic * (1.0 - np.exp(-tiles * 140.0 / (20.0 * traffic)))
    usage = tile_elems * bytes_per * operands
    spill = 1.0 + 1.5 * np.log2(np.maximum(usage / (2.0 * 2**20), 1.0))
    return 400.0 + (traffic + overhead) * spill


def tile_configs(
    graph: SynthGraph, rng: np.random.Generator, count: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """Tile configs of one kernel: (config_feat (c, 24) float32, truth (c,) float64 ns, default row)."""
    meta = graph.meta
    layout, kdims = meta["iter_layout"], meta["kernel_dims"]
    dims = tuple(meta["iter_dims"][a] for a in reversed(layout)) if layout else meta["iter_dims"]
    bytes_per = _ET_BYTES[meta["et"]]
    operands = 1 + int(graph.node_opcode.size > 2)
    if meta["kind"] == "reshape":
        c = int(rng.integers(2, 4))
        size = math.prod(dims) * bytes_per
        return np.zeros((c, 24), np.float32), np.full(c, 300.0 + size / 200.0), 0
    out_b = _tile_bounds(rng, dims, max(count, 2))
    if len(out_b) == 1:  # a one-point space: the single config is measured twice
        out_b = np.repeat(out_b, 2, axis=0)
    c = len(out_b)
    truth = _tile_time(dims, out_b, bytes_per, operands)
    kern_b = None
    if kdims is not None:
        kern_b = _tile_bounds(rng, kdims, c)
        kern_b = kern_b[rng.integers(0, len(kern_b), size=c)]
        truth = truth + 0.5 * _tile_time(kdims, kern_b, bytes_per, 1)
    feat = np.concatenate(
        [_bounds_feat(kern_b, c), _bounds_feat(out_b, c), _bounds_feat(None, c)], axis=1
    )
    if c >= 3 and rng.random() < 0.2:  # a rare duplicate config, measured twice
        i, j = sorted(int(v) for v in rng.choice(c, size=2, replace=False))
        feat[j], truth[j] = feat[i], truth[i]
    order = np.argsort(truth, kind="stable")
    default = (
        int(order[0]) if rng.random() < 0.6 else int(order[int(rng.integers(0, max(1, c // 4)))])
    )
    return feat, truth, default


# ------------------------------------------------------------------------------------ the file tree


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


@dataclass
class CollectionCount:
    """Files and configs (rows) written for one collection."""

    files: int = 0
    configs: int = 0


@dataclass
class SynthSummary:
    """What ``synthesize`` wrote: npz files (relative paths, in order), their truth side files,
    per-collection counts, and bytes on disk (npz files; truth files separately)."""

    root: Path
    profile: str
    seed: int
    files: list[str] = field(default_factory=list)
    truth_files: list[str] = field(default_factory=list)
    counts: dict[str, CollectionCount] = field(default_factory=dict)
    total_bytes: int = 0
    truth_bytes: int = 0


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
    vocab = _program_vocabulary(family)
    if sum(need) > len(vocab):
        raise ValueError(
            f"profile {profile.name!r} needs {sum(need)} {family} programs; {len(vocab)} known"
        )
    order = _rng(seed, "names", family).permutation(len(vocab))
    names = [vocab[int(i)] for i in order]
    out, at = {}, 0
    for split, k in zip(SPLITS, need, strict=True):
        out[split] = names[at : at + k]
        at += k
    return out


def file_plan(profile: Profile | str, seed: int = 0) -> list[FileSpec]:
    """Every file of a profile, in generation order (collections, splits, index)."""
    prof = PROFILES[profile] if isinstance(profile, str) else profile
    specs: list[FileSpec] = []
    names = {fam: _family_names(prof, seed, fam) for fam in ("xla", "nlp")}
    for collection in COLLECTIONS:
        counts = prof.counts.get(collection, (0, 0, 0))
        cdir = _collection_dir(collection)
        for split, count in zip(SPLITS, counts, strict=True):
            for index in range(count):
                if collection == "tile:xla":
                    krng = _rng(seed, "tile-kind", split, index)
                    kind = str(krng.choice(_TILE_KINDS, p=_TILE_KIND_P))
                    prefix = "fusion" if kind in ("fusion", "conv") else kind
                    number = int(krng.integers(1, 400))
                    stem = f"{prefix}.{number}_{_signed_hex64(seed, 'tile', split, index)}"
                    program = ""
                else:
                    family, _ = _layout_family(collection)
                    kind = ""
                    program = names[family][split][index]
                    stem = _hex32(seed, "test", family, index) if split == "test" else program
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
    prof = PROFILES[profile] if isinstance(profile, str) else profile
    family, _ = _layout_family(spec.collection)
    grng = _rng(seed, "graph", family, spec.split, spec.index)
    lo, hi = prof.xla_nodes if family == "xla" else prof.nlp_nodes
    n_target = int(_loguniform(grng, lo, hi))
    nc_min = 0
    big_slot = False
    if prof.big is not None:
        bcoll, bsplit, bindex, bnc = prof.big
        big_slot = _layout_family(bcoll)[0] == family and (bsplit, bindex) == (
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
        retry = _rng(seed, "graph", family, spec.split, spec.index, attempt)
        graph = build_program(
            retry, family, spec.program, min(n_target, 1500), nc_min=target, isolated=isolated
        )
    if spec.split == "test":
        c_hint = prof.test_configs + 1
    elif big_slot or prof.max_config_share > 0:
        c_hint = MAX_CONFIGS
    else:
        c_hint = prof.layout_configs[1]
    plan = plan_layout(graph, _rng(seed, "plan", family, spec.split, spec.index), family, c_hint)
    return graph, plan, n_target


def _layout_config_count(spec: FileSpec, prof: Profile, rng: np.random.Generator) -> int:
    """c of a layout file; the first draw of the file's config generator."""
    if spec.split == "test":
        extra = 1 if (spec.collection, spec.index) in prof.test_configs_1001 else 0
        return prof.test_configs + extra
    if prof.big is not None and prof.big[:3] == (spec.collection, spec.split, spec.index):
        return MAX_CONFIGS
    if rng.random() < prof.max_config_share:
        return MAX_CONFIGS
    return int(_loguniform(rng, *prof.layout_configs))


def _write_layout(spec: FileSpec, prof: Profile, seed: int, root: Path) -> tuple[int, int, int]:
    """Write one layout file and its truth; returns (npz bytes, truth bytes, configs)."""
    family, search = _layout_family(spec.collection)
    graph, plan, _ = layout_graph_for(spec, prof, seed)
    crng = _rng(seed, "configs", spec.collection, spec.split, spec.index)
    c = _layout_config_count(spec, prof, crng)
    share = float(
        np.clip(_DUP_TARGET[spec.collection] + crng.normal(0.0, _DUP_SPREAD[family]), 0.0, 0.95)
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
        (c, nc, 18), np.dtype(np.float32), _prefetched(chunks) if c > rows else chunks
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
    tbytes = _write_npy(root / spec.truth_relpath, truth)
    return nbytes, tbytes, c


def layout_config_count(spec: FileSpec, profile: Profile | str, seed: int = 0) -> int:
    """The number of configs c a layout file of the plan gets (without writing it)."""
    prof = PROFILES[profile] if isinstance(profile, str) else profile
    return _layout_config_count(
        spec, prof, _rng(seed, "configs", spec.collection, spec.split, spec.index)
    )


def tile_graph_for(spec: FileSpec, profile: Profile | str, seed: int = 0) -> SynthGraph:
    """The kernel graph of a tile file of the plan."""
    prof = PROFILES[profile] if isinstance(profile, str) else profile
    return build_tile_graph(_rng(seed, "tile", spec.split, spec.index), prof.tile_nodes, spec.kind)


def _write_tile(spec: FileSpec, prof: Profile, seed: int, root: Path) -> tuple[int, int, int]:
    """Write one tile file and its truth; returns (npz bytes, truth bytes, configs)."""
    rng = _rng(seed, "tile", spec.split, spec.index)
    graph = build_tile_graph(rng, prof.tile_nodes, spec.kind)
    feat, truth, default = tile_configs(graph, rng, int(_loguniform(rng, *prof.tile_configs)))
    c = len(truth)
    sigma = _loguniform(rng, 0.002, 0.3) if spec.kind == "reshape" else _loguniform(rng, 5e-4, 0.02)
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
    tbytes = _write_npy(root / spec.truth_relpath, truth)
    return nbytes, tbytes, c


def synthesize(
    dst: str | Path,
    profile: str = "tiny",
    seed: int = 0,
    *,
    collections: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> SynthSummary:
    """Write a synthetic TpuGraphs tree under dst: ``npz/...`` exactly like the dataset, plus the
    noise-free runtime of every config under ``truth/<same path>.npy`` (float64 ns, shape (c,)).

    profile: one of PROFILES; seed: any int (same (profile, seed) -> byte-identical files);
    collections: restrict to these collection ids (each file's bytes do not depend on it);
    progress: called with the npz path (relative to dst) after each file.
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose one of {sorted(PROFILES)}")
    wanted = set(COLLECTIONS if collections is None else collections)
    unknown = wanted - set(COLLECTIONS)
    if unknown:
        raise ValueError(f"unknown collection(s) {sorted(unknown)}; known: {list(COLLECTIONS)}")
    prof = PROFILES[profile]
    root = Path(dst)
    summary = SynthSummary(root=root, profile=profile, seed=int(seed))
    for spec in file_plan(prof, seed):
        if spec.collection not in wanted:
            continue
        writer = _write_tile if spec.collection == "tile:xla" else _write_layout
        nbytes, tbytes, configs = writer(spec, prof, seed, root)
        count = summary.counts.setdefault(spec.collection, CollectionCount())
        count.files += 1
        count.configs += configs
        summary.files.append(spec.relpath)
        summary.truth_files.append(spec.truth_relpath)
        summary.total_bytes += nbytes
        summary.truth_bytes += tbytes
        if progress is not None:
            progress(spec.relpath)
    return summary
