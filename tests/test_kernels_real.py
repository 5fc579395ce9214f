"""The kernels on the real TpuGraphs-format files of ../shared/real (skipped when absent).

Known numbers come from shared/real/README.md and shared/real/STATS.md; the −1 ground truth for
re-padding is shared/real/repadded/main__.10904.pad-1.npz and, for layout and tile alike, the raw
protobufs of shared/real/pb read by tests/hlo_proto.py; everything else is compared with the
references of tests/reference.py.
"""

from __future__ import annotations

from pathlib import Path

import hlo_proto
import numpy as np
import pytest
from realdata import real_path
from reference import (
    group_size_histogram,
    ref_dedup,
    ref_encode_base7,
    ref_prune,
    ref_remap_node_splits,
    ref_repad,
)

from tpuprep.kernels import (
    Deduplicator,
    decode_base7,
    dedup_rows,
    encode_base7,
    float_keys,
    pack_chunk,
    prune_graph,
    remap_node_splits,
    repad_node_feat,
)
from tpuprep.tpugraphs import REPADDED_COLUMNS

REAL = (Path(__file__).resolve().parent.parent / ".." / "shared" / "real").resolve()
MAIN = "npz/layout/xla/default/train/main__.10904.npz"
MAIN_TRUTH = "repadded/main__.10904.pad-1.npz"
ALEXNET = "reconstructed/alexnet_train_batch_32.npz"
TILE_DIR = "npz/tile/xla/train"
LAYOUT_FILES = [MAIN, ALEXNET]

# real/README.md tile table: stem -> (c, unique configs, min runtime/normalizer to 3 decimals)
TILE_TABLE = {
    "copy.24_715d6c5d784f9262": (10, 10, 0.976),
    "copy.25_4d1e36cc29e3e6d8": (11, 10, 1.000),
    "fusion.181_-d35a43855de59c9": (5, 5, 1.000),
    "fusion.191_4ae805e53b8d2b8a": (579, 579, 0.906),
    "fusion.205_11d55dfd21d1a19c": (16, 16, 1.000),
    "fusion.206_-3006cd0d02fa72c4": (3, 3, 1.000),
    "fusion.207_4f37352569503a80": (3, 3, 1.000),
    "fusion.209_6506960125603509": (16, 16, 1.000),
    "fusion.232_579e7b2c540f0929": (61, 60, 1.000),
    "fusion.245_-3545610a073feea6": (23, 22, 0.981),
    "fusion.250_-426e30b3297100f1": (2, 2, 1.000),
    "fusion.261_-8a7557b856e7b3b": (16, 16, 1.000),
    "reshape.37_24aa8731e7561309": (3, 1, 0.880),
    "reshape.38_-69259acddcd0d88": (2, 1, 1.000),
    "reshape.39_-741297d2a8031207": (2, 1, 1.000),
}

_CACHE: dict[str, dict[str, np.ndarray]] = {}


def load(rel: str) -> dict[str, np.ndarray]:
    """All arrays of a real file (cached); skips the test when ../shared/real is absent."""
    path = REAL / rel
    if not path.is_file():
        pytest.skip(f"real file {path} is absent")
    if rel not in _CACHE:
        with np.load(path, allow_pickle=False) as z:
            _CACHE[rel] = {k: z[k] for k in z.files}
    return _CACHE[rel]


# --------------------------------------------------------------------------------------------------
# Re-padding
# --------------------------------------------------------------------------------------------------


def repad_both(g: dict[str, np.ndarray]):
    """The kernel's re-padding of a whole real graph, checked equal to the reference's; returns it."""
    got = repad_node_feat(g["node_feat"], g["node_opcode"], g["edge_index"])
    ref = ref_repad(g["node_feat"], g["node_opcode"], g["edge_index"])
    np.testing.assert_array_equal(got.node_feat, ref[0])
    np.testing.assert_array_equal(got.anomalous, ref[1])
    np.testing.assert_array_equal(got.undecided, ref[2])
    return got


# the two variadic reduces of main__.10904 (tuple results, argmax-like): their dimensions length is not
# in the npz (docs/spec.md §2.2), so cols 31–36 stay 0-padded there; the truth has one entry, then −1
MAIN_UNDECIDED = 2


def test_repad_main_equals_ground_truth():
    g = load(MAIN)
    truth = load(MAIN_TRUTH)["node_feat"]
    feat = g["node_feat"]
    assert feat.shape == truth.shape == (3163, 140)
    got = repad_both(g)
    out = got.node_feat
    assert not got.anomalous.any()
    # every column but 31–36 equals the regenerated −1 padding on every node
    cols = np.setdiff1d(np.arange(140), np.arange(31, 37))
    np.testing.assert_array_equal(out[:, cols], truth[:, cols])
    # cols 31–36 on every decided node; the undecided ones are the variadic reduces, left as they are
    decided = ~got.undecided
    np.testing.assert_array_equal(out[decided, 31:37], truth[decided, 31:37])
    assert got.undecided.sum() == MAIN_UNDECIDED
    assert (g["node_opcode"][got.undecided] == 70).all() and (feat[got.undecided, 18] == 1).all()
    np.testing.assert_array_equal(out[got.undecided, 31:37], feat[got.undecided, 31:37])
    exact = (out == truth).all(axis=1)
    assert exact.sum() == 3161 and exact.mean() >= 0.99  # 99.94 % of the nodes, all 140 columns
    # every column outside the re-padded ones is unchanged
    others = np.setdiff1d(np.arange(140), REPADDED_COLUMNS)
    np.testing.assert_array_equal(out[:, others], feat[:, others])
    assert (out[:, REPADDED_COLUMNS] == -1).sum() == (truth[:, REPADDED_COLUMNS] == -1).sum() - 10


def test_repad_ground_truth_is_a_fixed_point():
    """Feeding the already −1-padded file back in changes nothing (kernel and reference agree)."""
    truth = load(MAIN_TRUTH)
    got = repad_both(truth)
    np.testing.assert_array_equal(got.node_feat, truth["node_feat"])
    assert not got.anomalous.any() and got.undecided.sum() == MAIN_UNDECIDED


def test_protobuf_truth_equals_the_regenerated_file():
    """The proto reader of tests/hlo_proto.py rebuilds real/repadded/ exactly from the raw protobuf:
    an independent second truth for layout, and the way to one for tile."""
    name, instructions = hlo_proto.layout_module(real_path("pb", "module_tuning_data_layout.pb"))
    g = load(MAIN)
    assert name == "main__.10904"
    np.testing.assert_array_equal(hlo_proto.truth(g["node_feat"], g["node_opcode"], instructions),
                                  load(MAIN_TRUTH)["node_feat"])


def tile_truths():
    path = REAL / "pb" / "op_tuning_data.pb"
    if not path.is_file():
        pytest.skip(f"real file {path} is absent")
    for name, instructions in hlo_proto.tile_modules(path):
        (stem,) = [s for s in TILE_TABLE if s.startswith(name + "_")]
        g = load(f"{TILE_DIR}/{stem}.npz")
        yield stem, g, hlo_proto.truth(g["node_feat"], g["node_opcode"], instructions)


def test_repad_tile_equals_protobuf_truth():
    """All 15 real tile kernels: every node equal on all 140 columns to the −1-padded truth read from
    op_tuning_data.pb (node i = instruction i, checked by hlo_proto.truth)."""
    stems, nodes = [], 0
    for stem, g, truth in tile_truths():
        got = repad_both(g)
        np.testing.assert_array_equal(got.node_feat, truth, err_msg=stem)
        assert not got.anomalous.any() and not got.undecided.any()
        stems.append(stem)
        nodes += len(truth)
    assert sorted(stems) == sorted(TILE_TABLE) and nodes == 294


# STATS.md §1: output rank 0 / 1 / 2 / 3 / 4 / 5 (none of rank 6)
RANK_HISTOGRAM = {
    MAIN: [674, 1287, 0, 4, 36, 1162, 0],
    ALEXNET: [157, 59, 75, 0, 81, 0, 0],
}


@pytest.mark.parametrize("rel", LAYOUT_FILES)
def test_repad_real_ranks_match_stats(rel):
    g = load(rel)
    got = repad_both(g)
    out = got.node_feat
    # minor_to_major is a permutation on every real node (README: checks that passed), and the
    # dimensions are never longer than their rule allows
    assert not got.anomalous.any()
    # the rank each node was given = number of layout entries left un-padded
    rank = (out[:, 134:140] != -1).sum(axis=1)
    assert np.bincount(rank, minlength=7).tolist() == RANK_HISTOGRAM[rel]
    # TPUGRAPHS §3: on real data the rank is the number of non-zero dims (0 for a tuple)
    feat = g["node_feat"]
    nonzero_dims = np.where(feat[:, 18] == 1, 0, (feat[:, 21:27] != 0).sum(axis=1))
    np.testing.assert_array_equal(rank, nonzero_dims)


# --------------------------------------------------------------------------------------------------
# Pruning
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rel", LAYOUT_FILES)
@pytest.mark.parametrize("hops", [0, 1, 2])
def test_prune_real_equals_reference(rel, hops):
    g = load(rel)
    n = g["node_feat"].shape[0]
    ref = ref_prune(g["edge_index"], n, g["node_config_ids"], hops)
    got = prune_graph(g["edge_index"], n, g["node_config_ids"], hops)
    np.testing.assert_array_equal(got.node_index, ref.node_index)
    np.testing.assert_array_equal(got.edge_index, ref.edge_index)
    np.testing.assert_array_equal(got.node_config_ids, ref.node_config_ids)
    np.testing.assert_array_equal(
        remap_node_splits(g["node_splits"], got.node_index),
        ref_remap_node_splits(g["node_splits"], ref.node_index),
    )
    # the configurable nodes survive and map back to themselves
    np.testing.assert_array_equal(got.node_index[got.node_config_ids], g["node_config_ids"])
    if hops == 1:
        # TGraph rule: every kept edge has a configurable endpoint
        config = set(g["node_config_ids"].tolist())
        original = got.node_index[got.edge_index]
        assert all(u in config or v in config for u, v in original.tolist())
        assert 0 < len(got.edge_index) < len(g["edge_index"])


# --------------------------------------------------------------------------------------------------
# Base-7
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rel", LAYOUT_FILES)
def test_base7_roundtrip_real(rel):
    x = load(rel)["node_config_feat"]
    codes = encode_base7(x)
    assert codes.dtype == np.int32 and codes.shape == (*x.shape[:2], 3)
    np.testing.assert_array_equal(codes, ref_encode_base7(x))
    np.testing.assert_array_equal(decode_base7(codes), x)
    np.testing.assert_array_equal(pack_chunk(x), codes)


# --------------------------------------------------------------------------------------------------
# Deduplication
# --------------------------------------------------------------------------------------------------

# STATS.md §3: group sizes {size: count}; alexnet's 11..28 are checked as a total of 20
DEDUP_KNOWN = {
    ALEXNET: (
        47712,
        29905,
        {1: 19927, 2: 5925, 3: 2196, 4: 936, 5: 463, 6: 245, 7: 97, 8: 56, 9: 26, 10: 13, 58: 1},
    ),
    MAIN: (112, 91, {1: 71, 2: 19, 3: 1}),
}
MIN_RUNTIME = {ALEXNET: 79_542_164, MAIN: 910_876_401}


def check_against_reference(got, ref):
    np.testing.assert_array_equal(got.inverse, ref.inverse)
    np.testing.assert_array_equal(got.group_size, ref.group_size)
    np.testing.assert_array_equal(got.first_index, ref.first_index)
    np.testing.assert_array_equal(got.best_index, ref.best_index)
    np.testing.assert_array_equal(got.runtime, ref.runtime)
    if ref.normalizer is not None:
        np.testing.assert_array_equal(got.normalizer, ref.normalizer)


@pytest.mark.parametrize("rel", LAYOUT_FILES)
def test_dedup_layout_real(rel):
    g = load(rel)
    x, runtime = g["node_config_feat"], g["config_runtime"]
    c, nc, _ = x.shape
    expected_c, expected_unique, hist = DEDUP_KNOWN[rel]
    assert c == expected_c
    got = dedup_rows(pack_chunk(x).reshape(c, nc * 3), runtime)
    assert len(got.group_size) == expected_unique
    got_hist = group_size_histogram(got.group_size)
    for size, count in hist.items():
        assert got_hist.get(size, 0) == count, size
    if rel == ALEXNET:
        assert sum(v for k, v in got_hist.items() if 11 <= k <= 28) == 20
        assert max(got_hist) == 58
    assert sum(k * v for k, v in got_hist.items()) == c
    assert got.runtime.min() == MIN_RUNTIME[rel] == runtime.min()
    ref = ref_dedup(x, runtime)
    check_against_reference(got, ref)
    np.testing.assert_array_equal(decode_base7(got.keys.reshape(-1, nc, 3)), ref.unique_rows)
    # streamed as the pipeline does: pack and add in chunks
    d = Deduplicator(c, nc * 3, with_runtime=True)
    step = 4999
    for lo in range(0, c, step):
        part = pack_chunk(x[lo : lo + step], first_row=lo)
        d.add(part.reshape(part.shape[0], -1), runtime[lo : lo + step])
    check_against_reference(d.finish(), ref)


@pytest.mark.parametrize("stem", sorted(TILE_TABLE))
def test_dedup_tile_real(stem):
    g = load(f"{TILE_DIR}/{stem}.npz")
    feat, runtime, norm = g["config_feat"], g["config_runtime"], g["config_runtime_normalizers"]
    c, unique, min_ratio = TILE_TABLE[stem]
    assert feat.shape == (c, 24)
    got = dedup_rows(float_keys(feat), runtime, norm)
    assert len(got.group_size) == unique
    check_against_reference(got, ref_dedup(feat, runtime, norm))
    assert round(float((got.runtime / got.normalizer).min()), 3) == min_ratio
    # test split: same grouping, no runtimes
    test = dedup_rows(float_keys(feat))
    assert test.runtime is None and test.normalizer is None
    np.testing.assert_array_equal(test.inverse, got.inverse)
