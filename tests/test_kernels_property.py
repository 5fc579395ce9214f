"""Property tests: every kernel equals its slow reference (tests/reference.py) on random inputs."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from reference import (
    ref_byte_planes,
    ref_decode_base7,
    ref_dedup,
    ref_encode_base7,
    ref_first_bad_value,
    ref_hop_distance,
    ref_output_rank,
    ref_prune,
    ref_remap_node_splits,
    ref_repad,
    ref_stored_columns,
    ref_tie,
)

from tpuprep.kernels import (
    ConfigValueError,
    Deduplicator,
    LayoutCollector,
    decode_base7,
    dedup_rows,
    encode_base7,
    float_keys,
    join_planes,
    pack_chunk,
    prune_graph,
    remap_node_splits,
    repad_node_feat,
    split_planes,
    tied,
)
from tpuprep.kernels import planes as planes_module
from tpuprep.kernels.prune import hop_distance
from tpuprep.kernels.repad import output_rank
from tpuprep.verify.reference import repad_reference

SETTINGS = settings(
    max_examples=200,
    deadline=None,  # the first call of a kernel may compile it
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --------------------------------------------------------------------------------------------------
# Pruning
# --------------------------------------------------------------------------------------------------


@st.composite
def layout_graphs(draw):
    """A topologically ordered graph: edges [u, v] with u > v (possibly none, possibly repeated),
    a set of configurable nodes (often isolated ones), node_splits and K in 0..3."""
    n = draw(st.integers(1, 30))
    # edges only among the first `wired` nodes, so the others are isolated
    wired = draw(st.integers(1, n))
    pairs = draw(
        st.lists(
            st.tuples(st.integers(0, wired - 1), st.integers(0, wired - 1)).filter(
                lambda p: p[0] != p[1]
            ),
            max_size=3 * wired,
        )
    )
    edges = [(max(p), min(p)) for p in pairs]
    order = draw(st.sampled_from(["unique-sorted", "unique-drawn", "with-repeats"]))
    if order == "unique-sorted":
        edges = sorted(set(edges))
    elif order == "unique-drawn":
        edges = list(dict.fromkeys(edges))
    edge_index = np.array(edges, dtype=np.int64).reshape(-1, 2)
    config = sorted(draw(st.sets(st.integers(0, n - 1), max_size=n)))
    interior = sorted(draw(st.sets(st.integers(1, max(n - 1, 1)), max_size=5)) - {n})
    splits = np.array([[0, *interior, n]], dtype=np.int64)
    hops = draw(st.integers(0, 3))
    dtype = draw(st.sampled_from([np.int64, np.int32]))
    return edge_index.astype(dtype), n, np.array(config, dtype=dtype), splits, hops


@SETTINGS
@given(layout_graphs())
def test_prune_equals_reference(graph):
    edge_index, n, config, splits, hops = graph
    ref = ref_prune(edge_index, n, config, hops)
    got = prune_graph(edge_index, n, config, hops)
    np.testing.assert_array_equal(got.node_index, ref.node_index)
    np.testing.assert_array_equal(got.edge_index.reshape(-1, 2), ref.edge_index)
    np.testing.assert_array_equal(got.node_config_ids, ref.node_config_ids)
    assert got.node_index.dtype == got.edge_index.dtype == got.node_config_ids.dtype == np.int32
    # topological order survives the remapping
    assert (got.edge_index[:, 0] > got.edge_index[:, 1]).all()
    got_splits = remap_node_splits(splits, got.node_index)
    np.testing.assert_array_equal(got_splits, ref_remap_node_splits(splits, ref.node_index))
    assert got_splits.dtype == np.int32


@SETTINGS
@given(layout_graphs())
def test_hop_distance_equals_reference(graph):
    edge_index, n, config, _, hops = graph
    got = hop_distance(edge_index.astype(np.int64), n, config.astype(np.int64), hops)
    assert got.tolist() == ref_hop_distance(edge_index, n, config, hops)


# --------------------------------------------------------------------------------------------------
# Re-padding
# --------------------------------------------------------------------------------------------------

OTHER_OPCODES = [2, 11, 13, 34, 41, 45, 63, 75, 98, 100]
# every class of the dimensions rule (docs/spec.md §2.2): none, one entry, own rank, operand rank,
# reduce, undecided (all-to-all, reverse, "unknown" 0, the unused 97, 121 beyond the ids)
DIMENSION_OPCODES = [2, 63, 22, 43, 48, 93, 104, 111, 56, 98, 13, 70, 6, 76, 0, 97, 121]


@st.composite
def node_rows(draw):
    """One realistic (140,) node_feat row and its opcode: tuple, scalar or rank 1..6 with default,
    permuted or broken layouts, zero-size dims, convolutions with spatial dims."""
    filler = draw(
        st.lists(st.sampled_from([0.0, 1.0, 2.0, 5.0, 0.5, 128.0]), min_size=140, max_size=140)
    )
    row = np.array(filler, dtype=np.float32)
    row[2:21] = 0
    row[21:29] = 0
    row[95:99] = 0
    row[101:105] = 0
    row[134:140] = 0
    conv = draw(st.booleans())
    opcode = 26 if conv else draw(st.sampled_from(OTHER_OPCODES + DIMENSION_OPCODES))
    dimensions = draw(st.sampled_from(["zeros", "zeros", "list", "list -1", "junk"]))
    if dimensions != "junk":  # else the filler stays: values a rule must refuse as contradictions
        row[31:37] = 0
        if dimensions != "zeros":
            given = draw(st.lists(st.integers(0, 5), min_size=0, max_size=6))
            row[31 : 31 + len(given)] = given
            if dimensions == "list -1":
                row[31 + len(given) : 37] = -1
    kind = draw(st.sampled_from(["tuple", "scalar", "ranked", "ranked", "ranked"]))
    if kind == "tuple":
        row[18] = 1
        row[28] = draw(st.sampled_from([1.0, 0.0]))
        return row, opcode
    row[draw(st.sampled_from([3, 6, 7, 10, 12, 13, 15]))] = 1
    if kind == "scalar":
        row[28] = 1
        return row, opcode
    r = draw(st.integers(1, 6))
    dims = draw(st.lists(st.sampled_from([0, 1, 2, 3, 5, 8, 128]), min_size=r, max_size=r))
    row[21 : 21 + r] = dims
    row[27] = sum(dims)
    row[28] = math.prod(dims)
    layout_kind = draw(st.sampled_from(["default", "default", "permutation", "broken", "zeros"]))
    if layout_kind == "default":
        layout = list(range(r - 1, -1, -1))
    elif layout_kind == "permutation":
        layout = draw(st.permutations(list(range(r))))
    elif layout_kind == "broken":
        layout = draw(st.lists(st.integers(0, r - 1), min_size=r, max_size=r))
    else:
        layout = [0] * r
    row[134 : 134 + r] = layout
    if conv:
        s = max(r - 2, 0)
        row[95 : 95 + s] = draw(st.lists(st.integers(0, r - 1), min_size=s, max_size=s))[:4]
        row[101 : 101 + s] = draw(st.lists(st.integers(0, r - 1), min_size=s, max_size=s))[:4]
    elif draw(st.booleans()):
        # junk where a non-convolution has no spatial dims: still padding by docs/spec.md §2.2
        row[95] = 1
        row[101] = 2
    return row, opcode


@st.composite
def repad_graphs(draw, rows=None, max_nodes=25):
    """Nodes of ``rows`` (default ``node_rows()``), random edges [u, v] among them (repeats and any
    order allowed) and the rows to re-pad: all (None) or a sorted subset, as pruning leaves them."""
    nodes = draw(st.lists(node_rows() if rows is None else rows, max_size=max_nodes))
    feat = np.stack([r for r, _ in nodes]) if nodes else np.zeros((0, 140), np.float32)
    opcode = np.array([o for _, o in nodes], dtype=np.uint8)
    n = len(nodes)
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=2 * n)) if n else []
    edges = np.array(pairs, np.int64).reshape(-1, 2)
    subset = draw(st.one_of(st.none(), st.sets(st.integers(0, n - 1), max_size=n) if n else st.none()))
    return feat, opcode, edges, None if subset is None else np.array(sorted(subset), np.int64)


@SETTINGS
@given(repad_graphs())
def test_repad_equals_reference(graph):
    feat, opcode, edges, rows = graph
    before = feat.copy()
    ref_out, ref_anomalous, ref_undecided = ref_repad(feat, opcode, edges, rows)
    out, anomalous, undecided = repad_node_feat(feat, opcode, edges, rows)
    np.testing.assert_array_equal(feat, before)
    assert out.dtype == np.float32 and out.shape == (len(feat) if rows is None else len(rows), 140)
    np.testing.assert_array_equal(out, ref_out)  # every column, -1s included
    np.testing.assert_array_equal(anomalous, ref_anomalous)
    np.testing.assert_array_equal(undecided, ref_undecided)


@SETTINGS
@given(repad_graphs())
def test_verify_repad_copy_equals_reference(graph):
    """``tpuprep verify``'s own NumPy copy of the rule (verify/reference.py) against the same oracle."""
    feat, opcode, edges, rows = graph
    nodes = np.arange(len(feat)) if rows is None else rows
    ref_out, ref_anomalous, ref_undecided = ref_repad(feat, opcode, edges, rows)
    out, anomalous, undecided = repad_reference(feat, opcode, edges, nodes)
    np.testing.assert_array_equal(out, ref_out)
    np.testing.assert_array_equal(anomalous, ref_anomalous)
    np.testing.assert_array_equal(undecided, ref_undecided)
    # rule 1 (shards of schema <= 3.2): cols 31-36 as given, nothing undecided
    old, _, none = repad_reference(feat, opcode, edges, nodes, rule=1)
    np.testing.assert_array_equal(old[:, 31:37], feat[nodes, 31:37])
    np.testing.assert_array_equal(np.delete(old, np.s_[31:37], 1), np.delete(ref_out, np.s_[31:37], 1))
    assert not none.any()


# The rank rule (docs/spec.md §2.2) where it is easy to get wrong: r_dims = 1 + index of the LAST non-zero of
# cols 21–26 (interior zeros are zero-size dims, a trailing zero of a rank-6 shape is invisible to
# r_dims), r_perm = 1 + floor(max) of ALL six layout cols 134–139, r = max of the two. Expected values are
# worked out by hand here, not taken from the reference.


def _shaped_row(dims, layout, opcode=2, product=None, spatial=False):
    """A (140,) row with ``dims`` in cols 21–26, ``layout`` in 134–139 (rest 0), and col 28 = product
    (default: the product of dims); ``spatial`` fills the convolution spatial cols 95–98 / 101–104."""
    row = np.zeros(140, np.float32)
    row[13] = 1  # f32 element type
    row[21 : 21 + len(dims)] = dims
    row[28] = math.prod(dims) if product is None else product
    row[134 : 134 + len(layout)] = layout
    if spatial:
        row[95:99] = [1, 2, 3, 0]
        row[101:105] = [0, 3, 2, 1]
    return row, opcode


RANK_CASES = {
    # name: (dims, layout, opcode, product, expected r, expected anomaly)
    "rank 6, trailing zero dim, default layout": ([2, 3, 4, 5, 6, 0], [5, 4, 3, 2, 1, 0], 2, None, 6, False),
    "rank 6, trailing zero dim, 5 in the last layout col": ([2, 3, 4, 5, 6, 0], [0, 1, 2, 3, 4, 5], 2, None, 6, False),
    "rank 6, trailing zero dim, 5 in col 138": ([2, 3, 4, 5, 6, 0], [1, 0, 2, 3, 5, 4], 2, None, 6, False),
    "rank 6, trailing zero dim, broken layout": ([2, 3, 4, 5, 6, 0], [0, 0, 0, 0, 0, 0], 2, None, 5, True),
    "rank 6, trailing zero dim, convolution": ([2, 3, 4, 5, 6, 0], [0, 1, 2, 3, 4, 5], 26, None, 6, False),
    "rank 6, trailing zero dim, broken conv": ([2, 3, 4, 5, 6, 0], [0, 0, 0, 0, 0, 0], 26, None, 5, True),
    "rank 6, only the last dim non-zero": ([0, 0, 0, 0, 0, 7], [0, 0, 0, 0, 0, 0], 2, None, 6, True),
    "rank 6, all dims 0 but the first": ([9, 0, 0, 0, 0, 0], [5, 4, 3, 2, 1, 0], 2, None, 6, False),
    "interior zero": ([2, 0, 3], [0, 0, 0], 2, None, 3, True),
    "interior zero, default layout": ([2, 0, 3], [2, 1, 0], 2, None, 3, False),
    "zero-size vector (not a scalar)": ([0], [0], 2, 0, 1, False),
    "scalar": ([], [], 2, 1, 0, False),
    "all dims zero, product 0, layout says 2": ([0, 0], [1, 0], 2, 0, 2, False),
    "negative dim counts as non-zero": ([3, -1], [0, 0], 2, None, 2, True),
    # layout values the reader lets through (finite, not integers): r_perm = 1 + floor(max), so an
    # all-negative layout names no axis whether its largest entry is -1, -3 or -0.5
    "fractional negative layout, no dims": ([0, 0], [-0.5] * 6, 2, 0, 0, False),
    "fractional negative layout, below -1 too": ([0], [-0.25, -3, -1, -1, -1, -1], 2, 0, 0, False),
    "fractional negative layout, rank from dims": ([4], [-0.5] * 6, 2, None, 1, True),
    "fractional positive layout": ([4, 4], [0, 1.5], 2, None, 2, True),
    "fractional layout above rank of dims": ([4], [2.5, 0], 2, None, 3, True),
}


@pytest.mark.parametrize("case", sorted(RANK_CASES))
def test_repad_rank_rule_explicit_cases(case):
    dims, layout, opcode, product, r, anomaly = RANK_CASES[case]
    row, opcode = _shaped_row(dims, layout, opcode, product, spatial=opcode == 26)
    expected = row.copy()
    expected[134 + r : 140] = -1
    s = max(r - 2, 0) if opcode == 26 else 0
    expected[95 + s : 99] = -1
    expected[101 + s : 105] = -1
    expected[31:37] = -1  # an add or a convolution has no dimensions
    assert output_rank(row) == ref_output_rank(row) == r
    no_edges = np.zeros((0, 2), np.int64)
    out, anomalous, _ = repad_node_feat(row[None], np.array([opcode], np.uint8), no_edges)
    np.testing.assert_array_equal(out[0], expected)
    assert bool(anomalous[0]) is anomaly
    ref_out, ref_anomalous, _ = ref_repad(row[None], np.array([opcode]), no_edges)
    np.testing.assert_array_equal(ref_out[0], expected)
    assert bool(ref_anomalous[0]) is anomaly


@st.composite
def zero_dim_rows(draw):
    """Rank 1..6 shapes with zero-size dims at any set of positions (the last one included), odd
    non-zero values now and then, and layouts that put their largest entry in any column."""
    r = draw(st.sampled_from([6, 6, 5, 4, 3, 2, 1]))
    dims = draw(st.lists(st.sampled_from([1, 2, 3, 8, 128]), min_size=r, max_size=r))
    for pos in draw(st.sets(st.integers(0, r - 1))):
        dims[pos] = 0
    if draw(st.booleans()):
        dims[-1] = 0  # a trailing zero-size dim: r_dims alone would say r − 1
    if draw(st.integers(0, 9)) == 0:
        dims[draw(st.integers(0, r - 1))] = draw(st.sampled_from([-1.0, 0.5]))
    kind = draw(st.sampled_from(["default", "permutation", "largest-last", "zeros", "broken", "short"]))
    if kind == "default":
        layout = list(range(r - 1, -1, -1))
    elif kind == "permutation":
        layout = draw(st.permutations(list(range(r))))
    elif kind == "largest-last":  # r − 1 in the last of the r columns: only a full scan sees it
        layout = [*draw(st.permutations(list(range(r - 1)))), r - 1]
    elif kind == "zeros":
        layout = [0] * r
    elif kind == "broken":
        layout = draw(st.lists(st.integers(0, 5), min_size=r, max_size=r))
    else:
        layout = draw(st.lists(st.integers(0, 5), min_size=0, max_size=r - 1))
    product = draw(st.sampled_from([None, None, 0, 1]))
    opcode = draw(st.sampled_from([26, 26, *OTHER_OPCODES[:3], 70, 98]))  # 13, 70, 98: lengths from ranks
    return _shaped_row(dims, layout, opcode, product, spatial=opcode == 26)


@SETTINGS
@given(repad_graphs(zero_dim_rows(), max_nodes=12))
def test_repad_zero_size_dims_equal_reference(graph):
    feat, opcode, edges, rows = graph
    for row in feat:
        assert output_rank(row) == ref_output_rank(row)
    ref_out, ref_anomalous, ref_undecided = ref_repad(feat, opcode, edges, rows)
    out, anomalous, undecided = repad_node_feat(feat, opcode, edges, rows)
    np.testing.assert_array_equal(out, ref_out)
    np.testing.assert_array_equal(anomalous, ref_anomalous)
    np.testing.assert_array_equal(undecided, ref_undecided)


FRACTIONAL_LAYOUT = [-3.0, -1.0, -0.75, -0.5, -0.25, -0.001]
"""Negative layout values, fractional ones (strictly between −1 and 0) among them."""


@st.composite
def fractional_layout_rows(draw):
    """Rows whose layout cols 134–139 hold values the reader accepts (finite) but no featurizer writes:
    fractional and negative, all six negative now and then (the largest strictly between −1 and 0),
    with shapes of rank 0..6 (all dims zero, product 0 or 1, is the case where the rounding shows)."""
    r = draw(st.sampled_from([0, 0, 0, 1, 2, 6]))
    dims = draw(st.lists(st.sampled_from([1, 3, 8]), min_size=r, max_size=r))
    if draw(st.booleans()):
        layout = draw(st.lists(st.sampled_from(FRACTIONAL_LAYOUT), min_size=6, max_size=6))
    else:
        layout = draw(st.lists(st.sampled_from([*FRACTIONAL_LAYOUT, 0.0, 0.5, 1.0, 2.5, 4.999, 5.0, 5.5, 7.0]),
                               min_size=6, max_size=6))
    product = draw(st.sampled_from([None, 0, 1])) if r == 0 else None
    opcode = draw(st.sampled_from([26, 2, 98, 13, 70]))
    return _shaped_row(dims, layout, opcode, product, spatial=opcode == 26)


@SETTINGS
@given(repad_graphs(fractional_layout_rows(), max_nodes=8))
def test_repad_fractional_layouts_equal_reference(graph):
    """The kernel, verify's copy and the oracle round a non-integer largest layout entry the same way
    (docs/spec.md §2.2: r_perm = 1 + floor(max), within 0..6)."""
    feat, opcode, edges, rows = graph
    for row in feat:
        assert output_rank(row) == ref_output_rank(row)
    nodes = np.arange(len(feat)) if rows is None else rows
    ref_out, ref_anomalous, ref_undecided = ref_repad(feat, opcode, edges, rows)
    for out, anomalous, undecided in (repad_node_feat(feat, opcode, edges, rows),
                                      repad_reference(feat, opcode, edges, nodes)):
        np.testing.assert_array_equal(out, ref_out)
        np.testing.assert_array_equal(anomalous, ref_anomalous)
        np.testing.assert_array_equal(undecided, ref_undecided)


# --------------------------------------------------------------------------------------------------
# Base-7
# --------------------------------------------------------------------------------------------------


@st.composite
def config_values(draw, max_rows=6, max_nodes=5):
    k = draw(st.integers(0, max_rows))
    nc = draw(st.integers(1, max_nodes))
    flat = draw(st.lists(st.integers(-1, 5), min_size=k * nc * 18, max_size=k * nc * 18))
    return np.array(flat, dtype=np.int64).reshape(k, nc, 18)


@SETTINGS
@given(config_values(), st.sampled_from([np.float32, np.float64, np.int8, np.int64]))
def test_encode_equals_reference(values, dtype):
    x = values.astype(dtype)
    codes = encode_base7(x)
    assert codes.dtype == np.int32 and codes.shape == (*x.shape[:-1], 3)
    np.testing.assert_array_equal(codes, ref_encode_base7(values))
    packed = pack_chunk(values.astype(np.float32))
    np.testing.assert_array_equal(packed, ref_encode_base7(values))
    back = decode_base7(codes)
    assert back.dtype == np.int8
    np.testing.assert_array_equal(back, values)


@SETTINGS
@given(
    st.lists(st.integers(0, 7**6 - 1), min_size=3, max_size=60).map(lambda v: v[: len(v) // 3 * 3])
)
def test_decode_equals_reference(flat):
    codes = np.array(flat, dtype=np.int32).reshape(-1, 3)
    got = decode_base7(codes)
    np.testing.assert_array_equal(got, ref_decode_base7(codes))
    np.testing.assert_array_equal(encode_base7(got), codes)


BAD_VALUES = [
    6.0,
    -2.0,
    0.5,
    -0.5,
    4.999,
    5.0000005,
    math.nan,
    math.inf,
    -math.inf,
    1e9,
    -1e9,
    2.0**31,
]


@SETTINGS
@given(
    config_values(max_rows=5, max_nodes=4),
    st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(BAD_VALUES)), min_size=1, max_size=4),
    st.integers(0, 10**6),
)
def test_pack_chunk_rejects_like_reference(values, bad, first_row):
    assume(values.shape[0] > 0)
    x = values.astype(np.float32)
    for pos, v in bad:
        x.reshape(-1)[pos % x.size] = v
    expected = ref_first_bad_value(x)
    assert expected is not None
    with pytest.raises(ConfigValueError) as info:
        pack_chunk(x, first_row=first_row)
    row, node, slot = expected
    assert (info.value.row, info.value.node, info.value.slot) == (first_row + row, node, slot)
    v = float(x[row, node, slot])
    assert (math.isnan(v) and math.isnan(info.value.value)) or info.value.value == v


@SETTINGS
@given(
    config_values(max_rows=5, max_nodes=4),
    st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from([6, -2, 127, -128, 7, -3])), min_size=1, max_size=4),
)
def test_encode_int8_rejects_like_reference(values, bad):
    """int8 input is packed without a float64 copy; out-of-range values are still refused, first one named."""
    assume(values.shape[0] > 0)
    x = values.astype(np.int8)
    for pos, v in bad:
        x.reshape(-1)[pos % x.size] = v
    row, node, slot = ref_first_bad_value(x.astype(np.float64))
    with pytest.raises(ConfigValueError) as info:
        encode_base7(x)
    assert (info.value.row, info.value.node, info.value.slot, info.value.value) == (row, node, slot, x[row, node, slot])


# --------------------------------------------------------------------------------------------------
# Deduplication
# --------------------------------------------------------------------------------------------------


def check_same(got, ref):
    np.testing.assert_array_equal(got.inverse, ref.inverse)
    np.testing.assert_array_equal(got.group_size, ref.group_size)
    np.testing.assert_array_equal(got.first_index, ref.first_index)
    np.testing.assert_array_equal(got.best_index, ref.best_index)
    for name in ("runtime", "normalizer"):
        g, r = getattr(got, name, None), getattr(ref, name)  # a layout result has no normalizer
        if r is None:
            assert g is None, name
        else:
            assert g.dtype == np.int64, name
            np.testing.assert_array_equal(g, r, err_msg=name)


RUNTIME_MODES = ["none", "ties", "wide", "huge"]


def draw_runtimes(draw, c, mode):
    if mode == "none":
        return None
    hi = {"ties": 3, "wide": 10**12, "huge": 2**63 - 1}[mode]
    return np.array(draw(st.lists(st.integers(0, hi), min_size=c, max_size=c)), dtype=np.int64)


@st.composite
def layout_dedup_inputs(draw):
    """(c, nc, 18) configs drawn from a small pool (heavy duplication), −0.0 sprinkled in, runtimes."""
    nc = draw(st.integers(1, 3))
    pool_size = draw(st.integers(1, 6))
    pool = np.array(
        draw(
            st.lists(st.integers(-1, 1), min_size=pool_size * nc * 18, max_size=pool_size * nc * 18)
        ),
        dtype=np.float32,
    ).reshape(pool_size, nc, 18)
    c = draw(st.integers(1, 80))
    idx = draw(st.lists(st.integers(0, pool_size - 1), min_size=c, max_size=c))
    values = pool[idx]
    signs = draw(st.lists(st.booleans(), min_size=c, max_size=c))
    for i, flip in enumerate(signs):
        if flip:
            values[i][values[i] == 0] = -0.0
    runtime = draw_runtimes(draw, c, draw(st.sampled_from(RUNTIME_MODES)))
    return values, runtime


def chunked(draw_cuts, c):
    cuts = sorted({0, c, *(x % (c + 1) for x in draw_cuts)})
    return list(itertools.pairwise(cuts))


@SETTINGS
@given(layout_dedup_inputs(), st.lists(st.integers(0, 10**6), max_size=6))
def test_layout_dedup_equals_reference(inputs, cuts):
    values, runtime = inputs
    c, nc, _ = values.shape
    ref = ref_dedup(values, runtime)
    keys = pack_chunk(values).reshape(c, nc * 3)
    got = dedup_rows(keys, runtime)
    check_same(got, ref)
    np.testing.assert_array_equal(decode_base7(got.keys.reshape(-1, nc, 3)), ref.unique_rows)
    # streamed: pack and add chunk by chunk
    d = Deduplicator(c, nc * 3, with_runtime=runtime is not None)
    for lo, hi in chunked(cuts, c):
        part = pack_chunk(values[lo:hi], first_row=lo).reshape(hi - lo, nc * 3)
        d.add(part, None if runtime is None else runtime[lo:hi])
    streamed = d.finish()
    check_same(streamed, ref)
    np.testing.assert_array_equal(streamed.keys, got.keys)


@st.composite
def tied_layout_inputs(draw):
    """(c, nc, 18) configs whose nodes share tie groups (a node copies its group's values), some ties
    broken in one late row only, drawn from a small pool of rows (duplicates), with runtimes."""
    nc = draw(st.integers(1, 7))
    groups = draw(st.lists(st.integers(0, 2), min_size=nc, max_size=nc))
    pool_size = draw(st.integers(1, 5))
    pool = np.array(draw(st.lists(st.integers(-1, 1), min_size=pool_size * 3 * 18, max_size=pool_size * 3 * 18)),
                    dtype=np.float32).reshape(pool_size, 3, 18)
    c = draw(st.integers(1, 70))
    idx = draw(st.lists(st.integers(0, pool_size - 1), min_size=c, max_size=c))
    values = np.ascontiguousarray(pool[idx][:, groups])
    for _ in range(draw(st.integers(0, 2))):  # break a tie in one row (often late)
        row, node, slot = draw(st.integers(0, c - 1)), draw(st.integers(0, nc - 1)), draw(st.integers(0, 17))
        values[row, node, slot] = 5.0
    runtime = draw_runtimes(draw, c, draw(st.sampled_from(RUNTIME_MODES)))
    return values, runtime


def collect(values, runtime, cuts, dedup=True):
    c, nc, _ = values.shape
    collector = LayoutCollector(c, nc, with_runtime=runtime is not None, dedup=dedup)
    for lo, hi in chunked(cuts, c):
        collector.add(values[lo:hi], None if runtime is None else runtime[lo:hi])
    return collector.finish()


@SETTINGS
@given(tied_layout_inputs(), st.lists(st.integers(0, 10**6), max_size=6), st.sampled_from([np.float32, np.float64, np.int64]))
def test_layout_collector_equals_reference(inputs, cuts, dtype):
    """Packing, dedup and the tie columns found while streaming, against the dict references, for any
    chunking; every slice of the stored and expanded codes."""
    values, runtime = inputs
    c, nc, _ = values.shape
    ref = ref_dedup(values, runtime)
    got = collect(values.astype(dtype), runtime, cuts)
    u = len(ref.first_index)
    check_same(got, ref)
    full = got.codes.full()
    assert full.dtype == np.int32 and full.shape == (len(ref.first_index), nc, 3)
    np.testing.assert_array_equal(full, ref_encode_base7(ref.unique_rows))
    np.testing.assert_array_equal(got.codes.tie, ref_tie(full))
    stored = got.codes.stored()
    np.testing.assert_array_equal(stored, full[:, ref_stored_columns(got.codes.tie)])
    assert got.codes.num_columns == stored.shape[1] == len(set(got.codes.tie.tolist()))
    planes = got.codes.stored_planes()  # as the shards store them (schema 3)
    assert planes.dtype == np.uint8
    np.testing.assert_array_equal(planes, ref_byte_planes(stored.reshape(u, -1)))
    for a, b in [(0, 1), (1, u), (u // 2, u // 2 + 3), (u, u + 5)]:
        np.testing.assert_array_equal(got.codes.stored(a, b), stored[a:b])
        np.testing.assert_array_equal(got.codes.stored_planes(a, b), planes[a:b])
        np.testing.assert_array_equal(got.codes.full(a, b), full[a:b])
    # --no-dedup: every row its own config, still in tie columns
    keep = collect(values, runtime, cuts, dedup=False)
    np.testing.assert_array_equal(keep.inverse, np.arange(c))
    np.testing.assert_array_equal(keep.codes.full(), ref_encode_base7(values))
    np.testing.assert_array_equal(keep.codes.tie, ref_tie(ref_encode_base7(values)))
    if runtime is not None:
        np.testing.assert_array_equal(keep.runtime, runtime)


@SETTINGS
@given(st.integers(0, 6), st.integers(0, 9), st.data())
def test_byte_planes_equal_reference_and_round_trip(k, n, data):
    """split_planes against the byte-by-byte reference, for any int32 (negative and ≥ 2^24 included, not
    only base-7 codes); join_planes inverts it, also on a read-only view (as read from a shard)."""
    codes = np.array(data.draw(st.lists(st.integers(-2**31, 2**31 - 1), min_size=k * n, max_size=k * n)),
                     np.int64).astype(np.int32).reshape(k, n)
    planes = split_planes(codes)
    assert planes.dtype == np.uint8 and planes.shape == (k, 4 * n)
    np.testing.assert_array_equal(planes, ref_byte_planes(codes))
    np.testing.assert_array_equal(join_planes(planes), codes)
    read_only = np.frombuffer(planes.tobytes(), np.uint8).reshape(planes.shape)
    np.testing.assert_array_equal(join_planes(read_only), codes)
    if n % 3 == 0:  # whole columns of 3 codes: any columns gathered while joined (ties expanded)
        columns = np.array(data.draw(st.lists(st.integers(0, n // 3 - 1), max_size=8) if n else st.just([])), np.int64)
        want = codes.reshape(k, n // 3, 3)[:, columns]
        for source in (planes, read_only):
            got = planes_module.join_columns(source, columns)
            assert got.dtype == np.int32
            np.testing.assert_array_equal(got, want)
        with pytest.raises(IndexError, match="config_node_tie names column"):
            planes_module.join_columns(planes, np.array([n // 3], np.int64))
    else:
        with pytest.raises(ValueError, match="not 12 bytes per column"):
            planes_module.join_columns(planes, np.zeros(1, np.int64))


@pytest.mark.parametrize("shape", [(2, 6), (1, 3), (4,)])
def test_join_planes_refuses_rows_of_partial_codes(shape):
    with pytest.raises(ValueError, match="not 4 bytes per code"):
        join_planes(np.zeros(shape, np.uint8))


def test_spare_store_serves_the_next_graph_only_once_its_codes_are_gone():
    """keep_spare_store (build workers): a finished graph's store buffer is reused by the next collector,
    never while anything holds the codes written in it; stale contents never leak into the next graph."""
    rng = np.random.default_rng(5)
    a = rng.integers(-1, 2, (40, 6, 18)).astype(np.float32)
    b = rng.integers(-1, 2, (30, 5, 18)).astype(np.float32)
    b[::3] = b[0]  # duplicates, so the dedup comparison reads the store
    want = ref_encode_base7(ref_dedup(b, None).unique_rows)
    tied.keep_spare_store(True)
    try:
        first = collect(a, None, [])
        buf = first.codes._store
        alive = collect(b, None, [])  # first's codes still held: a new buffer
        assert not np.shares_memory(alive.codes._store, buf)
        del first
        again = collect(b, None, [])  # now the spare (big enough): the same pages, old contents in them
        assert np.shares_memory(again.codes._store, buf)
        np.testing.assert_array_equal(again.codes.full(), want)
        np.testing.assert_array_equal(alive.codes.full(), want)
        del again
    finally:
        tied.keep_spare_store(False)
    assert tied._spare is None  # switching off drops the spare
    other = collect(b, None, [])
    del other
    assert tied._spare is None  # off: nothing is kept


@SETTINGS
@given(st.integers(1, 40), st.integers(1, 5), st.data())
def test_layout_collector_names_the_first_bad_value(c, nc, data):
    values = np.zeros((c, nc, 18), np.float32)
    row, node, slot = data.draw(st.integers(0, c - 1)), data.draw(st.integers(0, nc - 1)), data.draw(st.integers(0, 17))
    bad = data.draw(st.sampled_from([6.0, -2.0, 0.5, np.nan, np.inf]))
    values[row, node, slot] = bad
    collector = LayoutCollector(c, nc, with_runtime=False)
    with pytest.raises(ConfigValueError) as err:
        for lo in range(0, c, 7):
            collector.add(values[lo : lo + 7])
    assert (err.value.row, err.value.node, err.value.slot) == (row, node, slot)
    assert ref_first_bad_value(values) == (row, node, slot)


@SETTINGS
@given(tied_layout_inputs(), st.lists(st.integers(0, 10**6), max_size=6))
def test_layout_collector_is_exact_when_every_hash_collides(inputs, cuts):
    """All row hashes made equal: every candidate is decided by the code comparison alone (done in the
    tie columns of the current chunk against configs stored under older, coarser columns)."""
    values, runtime = inputs
    real = tied._pack_rows

    def colliding(values, codes, hashes, rep, differs):
        ok = real(values, codes, hashes, rep, differs)
        hashes[:] = 7
        return ok

    with pytest.MonkeyPatch.context() as m:
        m.setattr(tied, "_pack_rows", colliding)
        got = collect(values, runtime, cuts)
    ref = ref_dedup(values, runtime)
    check_same(got, ref)
    np.testing.assert_array_equal(got.codes.full(), ref_encode_base7(ref.unique_rows))


def test_layout_collector_memory_follows_the_tie_columns():
    """50 tied copies of 4 nodes: the unique configs are held in 4 columns, not 200."""
    rng = np.random.default_rng(0)
    base = rng.integers(-1, 6, size=(3000, 4, 18)).astype(np.float32)
    values = np.ascontiguousarray(np.tile(base, (1, 50, 1)))
    got = collect(values, None, [500, 1700])
    assert got.codes.num_columns == 4
    assert got.codes.nbytes < 3000 * (4 * 12 + 12) * 1.1  # 4 columns of codes + offset and snapshot per config
    np.testing.assert_array_equal(got.codes.full(), ref_encode_base7(values))


TILE_VALUES = [0.0, -0.0, 1.0, 2.0, 16.0, 3.5, -1.0, 1e30, 1e-30]


def draw_fractions(draw, c, mode):
    """runtimes and normalizers: small (many exact ties), huge (up to 2^62), or exact/near ties of
    one fraction scaled by huge factors (cross products near 2^124)."""
    if mode == "small":
        rt = draw(st.lists(st.integers(0, 8), min_size=c, max_size=c))
        nz = draw(st.lists(st.integers(1, 8), min_size=c, max_size=c))
    elif mode == "huge":
        rt = draw(st.lists(st.integers(0, 2**62), min_size=c, max_size=c))
        nz = draw(st.lists(st.integers(1, 2**62), min_size=c, max_size=c))
    else:
        p = draw(st.integers(1, 2**10))
        q = draw(st.integers(1, 2**10))
        top = 2**62 // max(p, q)
        rt, nz = [], []
        for _ in range(c):
            k = draw(st.integers(max(top // 4, 1), top))
            delta = draw(st.sampled_from([0, 0, 0, -1, 1]))
            rt.append(max(p * k + delta, 0))
            nz.append(q * k)
    return np.array(rt, dtype=np.int64), np.array(nz, dtype=np.int64)


@st.composite
def tile_dedup_inputs(draw):
    pool_size = draw(st.integers(1, 5))
    pool = np.array(
        draw(
            st.lists(st.sampled_from(TILE_VALUES), min_size=pool_size * 24, max_size=pool_size * 24)
        ),
        dtype=np.float32,
    ).reshape(pool_size, 24)
    c = draw(st.integers(1, 60))
    idx = draw(st.lists(st.integers(0, pool_size - 1), min_size=c, max_size=c))
    feat = pool[idx]
    for i, flip in enumerate(draw(st.lists(st.booleans(), min_size=c, max_size=c))):
        if flip:
            feat[i][feat[i] == 0] = -0.0
    mode = draw(st.sampled_from(["none", "small", "huge", "scaled", "scaled"]))
    if mode == "none":
        return feat, None, None
    runtime, normalizer = draw_fractions(draw, c, mode)
    return feat, runtime, normalizer


@SETTINGS
@given(tile_dedup_inputs(), st.lists(st.integers(0, 10**6), max_size=6))
def test_tile_dedup_equals_reference(inputs, cuts):
    feat, runtime, normalizer = inputs
    c = feat.shape[0]
    ref = ref_dedup(feat, runtime, normalizer)
    keys = float_keys(feat)
    got = dedup_rows(keys, runtime, normalizer)
    check_same(got, ref)
    # the unique keys are the keys of the first occurrences (compared by value)
    np.testing.assert_array_equal(got.keys, float_keys(ref.unique_rows))
    d = Deduplicator(
        c, 24, with_runtime=runtime is not None, with_normalizer=normalizer is not None
    )
    for lo, hi in chunked(cuts, c):
        d.add(
            keys[lo:hi],
            None if runtime is None else runtime[lo:hi],
            None if normalizer is None else normalizer[lo:hi],
        )
    check_same(d.finish(), ref)


# values around 32-bit carry boundaries of the 128-bit product
_POWERS = sorted(
    {
        max(0, min(2**62, b + d))
        for b in (0, 1, 2**31, 2**32, 2**33, 2**61, 2**62, 3 << 60)
        for d in (-1, 0, 1)
    }
)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_tile_fraction_compare_hammer(data):
    """Three rows with one key: the kept row is the exact minimum of runtime / normalizer."""
    mode = data.draw(st.sampled_from(["huge", "scaled", "powers"]))
    if mode == "powers":
        rt = np.array(
            data.draw(st.lists(st.sampled_from(_POWERS), min_size=3, max_size=3)), np.int64
        )
        nz = np.array(
            data.draw(st.lists(st.sampled_from(_POWERS[1:]), min_size=3, max_size=3)), np.int64
        )
    else:
        rt, nz = draw_fractions(data.draw, 3, mode)
    feat = np.zeros((3, 24), np.float32)
    got = dedup_rows(float_keys(feat), rt, nz)
    ref = ref_dedup(feat, rt, nz)
    check_same(got, ref)


@given(st.lists(st.integers(0, 2**63 - 1), min_size=4, max_size=4))
def test_exact_product_comparison_matches_python_integers(values):
    """The tile tie-break compares runtime/normalizer fractions as a·b < c·d in 128 bits: exact for
    every non-negative int64 (Python's unbounded integers are the oracle)."""
    from tpuprep.kernels.dedup import _product128, _product_less

    a, b, c, d = values
    hi, lo = _product128(a, b)
    assert (int(hi) << 64) | int(lo) == a * b
    assert _product_less(a, b, c, d) == (a * b < c * d)
    assert _product_less(a, b, a, b) is False
