"""Hand-checked examples for the reference implementations and the kernels (docs/spec.md §2).

Every expected value below was worked out by hand from docs/spec.md §2; each test runs both the
reference (tests/reference.py) and the kernel against the same hand-written answer.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from reference import (
    ref_decode_base7,
    ref_dedup,
    ref_encode_base7,
    ref_encode_row,
    ref_first_bad_value,
    ref_hop_distance,
    ref_output_rank,
    ref_prune,
    ref_remap_node_splits,
    ref_repad,
)

from tpuprep.kernels import (
    ConfigValueError,
    Deduplicator,
    decode_base7,
    dedup_rows,
    encode_base7,
    float_keys,
    keep_all,
    pack_chunk,
    prune_graph,
    remap_node_splits,
    repad_node_feat,
)
from tpuprep.kernels.prune import hop_distance
from tpuprep.tpugraphs import REPADDED_COLUMNS

# --------------------------------------------------------------------------------------------------
# Pruning (§2.1)
# --------------------------------------------------------------------------------------------------

# A chain 0-1-2-3-4-5-6 with a chord 4-2 (two non-configurable neighbours of node 3) and an
# isolated configurable node 7. Configurable: 3 and 7. Rows [u, v] with u > v, lexicographic.
CHAIN_EDGES = np.array([[1, 0], [2, 1], [3, 2], [4, 2], [4, 3], [5, 4], [6, 5]], dtype=np.int64)
CHAIN_N = 8
CHAIN_CONFIG = np.array([3, 7], dtype=np.int64)
CHAIN_SPLITS = np.array([[0, 3, 8]], dtype=np.int64)

# hops -> (node_index, edge_index, node_config_ids, node_splits), all by hand
CHAIN_EXPECTED = {
    # only the configurable nodes; no edge joins two of them
    0: ([3, 7], [], [0, 1], [0, 0, 2]),
    # 2, 4 join; edges with a configurable endpoint: (3,2), (4,3); the chord (4,2) is dropped
    1: ([2, 3, 4, 7], [[1, 0], [2, 1]], [1, 3], [0, 1, 4]),
    # 1, 5 join; edges with an endpoint within 1 hop, both ends kept: (2,1) (3,2) (4,2) (4,3) (5,4)
    2: ([1, 2, 3, 4, 5, 7], [[1, 0], [2, 1], [3, 1], [3, 2], [4, 3]], [2, 5], [0, 2, 6]),
    # everything within 3 hops; every edge has an endpoint within 2 hops
    3: (
        [0, 1, 2, 3, 4, 5, 6, 7],
        CHAIN_EDGES.tolist(),
        [3, 7],
        [0, 3, 8],
    ),
}


@pytest.mark.parametrize("hops", sorted(CHAIN_EXPECTED))
@pytest.mark.parametrize("impl", ["reference", "kernel"])
def test_prune_chain_by_hand(hops, impl):
    node_index, edges, config, splits = CHAIN_EXPECTED[hops]
    fn = ref_prune if impl == "reference" else prune_graph
    got = fn(CHAIN_EDGES, CHAIN_N, CHAIN_CONFIG, hops)
    np.testing.assert_array_equal(got.node_index, node_index)
    np.testing.assert_array_equal(got.edge_index, np.array(edges, dtype=np.int32).reshape(-1, 2))
    np.testing.assert_array_equal(got.node_config_ids, config)
    assert got.node_index.dtype == np.int32
    assert got.edge_index.dtype == np.int32
    assert got.edge_index.shape[1] == 2
    assert got.node_config_ids.dtype == np.int32
    remap = ref_remap_node_splits if impl == "reference" else remap_node_splits
    got_splits = remap(CHAIN_SPLITS, got.node_index)
    np.testing.assert_array_equal(got_splits, splits)
    assert got_splits.dtype == np.int32


@pytest.mark.parametrize("impl", ["reference", "kernel"])
def test_hop_distance_chain(impl):
    # distances from {3, 7}, capped at 2: 0 and 6 are 3 hops away
    expected = [-1, 2, 1, 0, 1, 2, -1, 0]
    if impl == "reference":
        got = ref_hop_distance(CHAIN_EDGES, CHAIN_N, CHAIN_CONFIG, 2)
    else:
        got = hop_distance(CHAIN_EDGES, CHAIN_N, CHAIN_CONFIG, 2).tolist()
    assert list(got) == expected


@pytest.mark.parametrize("fn", [ref_prune, prune_graph])
def test_prune_k0_keeps_edges_between_configurable_nodes(fn):
    edges = np.array([[1, 0], [2, 1], [3, 2]])
    got = fn(edges, 4, np.array([1, 2]), 0)
    np.testing.assert_array_equal(got.node_index, [1, 2])
    np.testing.assert_array_equal(got.edge_index, [[1, 0]])
    np.testing.assert_array_equal(got.node_config_ids, [0, 1])


@pytest.mark.parametrize("fn", [ref_prune, prune_graph])
@pytest.mark.parametrize("hops", [0, 1, 2])
def test_prune_graph_without_edges(fn, hops):
    # every configurable node is isolated: they are all kept, nothing else is
    got = fn(np.zeros((0, 2), np.int64), 5, np.array([0, 2, 4]), hops)
    np.testing.assert_array_equal(got.node_index, [0, 2, 4])
    assert got.edge_index.shape == (0, 2)
    np.testing.assert_array_equal(got.node_config_ids, [0, 1, 2])


@pytest.mark.parametrize("fn", [ref_prune, prune_graph])
def test_prune_keeps_edge_order_not_sorted(fn):
    # edges in non-lexicographic original order stay in that order
    edges = np.array([[3, 2], [2, 0], [3, 1], [1, 0]])
    got = fn(edges, 4, np.array([0]), 1)
    # kept nodes 0, 1, 2 (neighbours of 0); edges with endpoint 0: (2,0), (1,0) in that order
    np.testing.assert_array_equal(got.node_index, [0, 1, 2])
    np.testing.assert_array_equal(got.edge_index, [[2, 0], [1, 0]])


def test_prune_rejects_negative_hops():
    with pytest.raises(ValueError):
        prune_graph(CHAIN_EDGES, CHAIN_N, CHAIN_CONFIG, -1)


def test_keep_all_is_identity():
    got = keep_all(CHAIN_EDGES, CHAIN_N, CHAIN_CONFIG)
    np.testing.assert_array_equal(got.node_index, np.arange(8))
    np.testing.assert_array_equal(got.edge_index, CHAIN_EDGES)
    np.testing.assert_array_equal(got.node_config_ids, [3, 7])
    assert got.node_index.dtype == got.edge_index.dtype == got.node_config_ids.dtype == np.int32
    np.testing.assert_array_equal(remap_node_splits(CHAIN_SPLITS, got.node_index), [0, 3, 8])


@pytest.mark.parametrize("remap", [ref_remap_node_splits, remap_node_splits])
def test_remap_node_splits_by_hand(remap):
    kept = np.array([1, 4, 5, 9])
    # b=0 -> 0; b=1 -> 0 (1 is not < 1); b=2 -> 1; b=5 -> 2; b=6 -> 3; b=10 -> 4
    np.testing.assert_array_equal(remap(np.array([[0, 1, 2, 5, 6, 10]]), kept), [0, 0, 1, 2, 3, 4])
    np.testing.assert_array_equal(remap(np.array([0, 10]), kept), [0, 4])


# --------------------------------------------------------------------------------------------------
# Re-padding (§2.2)
# --------------------------------------------------------------------------------------------------

F32 = 13  # element type one-hot column for f32


def make_row(dims=(), layout=(), *, tuple_=False, product=None, opcode_cols=None):
    """A (140,) node_feat row: element type, shape dims/sum/product, layout; 0-padded like npz."""
    row = np.zeros(140, np.float32)
    if tuple_:
        row[18] = 1
    else:
        row[F32] = 1
    for d, v in enumerate(dims):
        row[21 + d] = v
    row[27] = sum(dims)
    row[28] = math.prod(dims) if product is None else product
    for d, v in enumerate(layout):
        row[134 + d] = v
    for col, v in (opcode_cols or {}).items():
        row[col] = v
    # some unrelated content that must survive untouched
    row[0] = 1
    row[44] = 1
    row[30] = 3
    return row


M1 = -1.0
# fmt: off
REPAD_CASES = {
    # name: (row, opcode, rank, anomaly, expected layout 134..139, expected 95..98, expected 101..104)
    "tuple": (make_row(tuple_=True, product=1), 100, 0, False, [M1] * 6, [M1] * 4, [M1] * 4),
    "scalar": (make_row(), 2, 0, False, [M1] * 6, [M1] * 4, [M1] * 4),
    "rank1": (make_row((7,)), 2, 1, False, [0, M1, M1, M1, M1, M1], [M1] * 4, [M1] * 4),
    "rank1-zero-size": (make_row((0,)), 2, 1, False, [0, M1, M1, M1, M1, M1], [M1] * 4, [M1] * 4),
    # trailing zero-size dim: r_dims = 1 but the layout (1, 0) says rank 2
    "shape-5-0": (make_row((5, 0), (1, 0)), 2, 2, False, [1, 0, M1, M1, M1, M1], [M1] * 4, [M1] * 4),
    # interior zero-size dim: r_dims = 3 from the last non-zero entry
    "shape-2-0-3": (make_row((2, 0, 3), (2, 1, 0)), 2, 3, False, [2, 1, 0, M1, M1, M1], [M1] * 4, [M1] * 4),
    "rank2-default": (make_row((3, 4), (1, 0)), 2, 2, False, [1, 0, M1, M1, M1, M1], [M1] * 4, [M1] * 4),
    "rank2-transposed": (make_row((3, 4), (0, 1)), 2, 2, False, [0, 1, M1, M1, M1, M1], [M1] * 4, [M1] * 4),
    "rank3-permuted": (make_row((2, 3, 4), (0, 2, 1)), 2, 3, False, [0, 2, 1, M1, M1, M1], [M1] * 4, [M1] * 4),
    "rank6": (make_row((2, 2, 2, 2, 2, 2), (5, 4, 3, 2, 1, 0)), 2, 6, False, [5, 4, 3, 2, 1, 0], [M1] * 4, [M1] * 4),
    # not a permutation: (0, 0) for a rank-2 shape -> anomaly, values left, padding still −1
    "rank2-not-permutation": (make_row((3, 4), (0, 0)), 2, 2, True, [0, 0, M1, M1, M1, M1], [M1] * 4, [M1] * 4),
    # repeated axis (1, 1, 0) of a rank-3 shape -> anomaly
    "rank3-repeated-axis": (make_row((2, 3, 4), (1, 1, 0)), 2, 3, True, [1, 1, 0, M1, M1, M1], [M1] * 4, [M1] * 4),
    # 2-D conv NHWC: spatial input dims (1, 2), kernel spatial (0, 1): s = 2
    "conv2d": (
        make_row((8, 32, 32, 16), (3, 2, 1, 0), opcode_cols={95: 1, 96: 2, 101: 0, 102: 1}),
        26, 4, False, [3, 2, 1, 0, M1, M1], [1, 2, M1, M1], [0, 1, M1, M1],
    ),
    # 3-D conv (rank 5): s = 3, kernel spatial (0, 1, 2)
    "conv3d": (
        make_row((2, 8, 8, 8, 4), (4, 3, 2, 1, 0), opcode_cols={95: 1, 96: 2, 97: 3, 101: 0, 102: 1, 103: 2}),
        26, 5, False, [4, 3, 2, 1, 0, M1], [1, 2, 3, M1], [0, 1, 2, M1],
    ),
    # rank-6 conv: s = 4, nothing of 95..104 is padding
    "conv-rank6": (
        make_row((2, 3, 3, 3, 3, 4), (5, 4, 3, 2, 1, 0), opcode_cols={95: 1, 96: 2, 97: 3, 98: 4, 101: 0, 102: 1, 103: 2, 104: 3}),
        26, 6, False, [5, 4, 3, 2, 1, 0], [1, 2, 3, 4], [0, 1, 2, 3],
    ),
    # a rank-2 conv (no spatial dims) and a tuple-typed conv: s = 0
    "conv-rank2": (make_row((4, 4), (1, 0)), 26, 2, False, [1, 0, M1, M1, M1, M1], [M1] * 4, [M1] * 4),
    "conv-tuple": (make_row(tuple_=True, product=1), 26, 0, False, [M1] * 6, [M1] * 4, [M1] * 4),
}
# fmt: on


@pytest.mark.parametrize("name", sorted(REPAD_CASES))
def test_output_rank_by_hand(name):
    row, _, rank, *_ = REPAD_CASES[name]
    assert ref_output_rank(row) == rank


NO_EDGES = np.zeros((0, 2), np.int64)


def repad_impl(impl):
    """The reference or the kernel, both returning (re-padded rows, anomaly mask, undecided mask)."""
    return ref_repad if impl == "reference" else lambda *args: tuple(repad_node_feat(*args))


@pytest.mark.parametrize("impl", ["reference", "kernel"])
def test_repad_by_hand(impl):
    names = sorted(REPAD_CASES)
    feat = np.stack([REPAD_CASES[k][0] for k in names])
    opcode = np.array([REPAD_CASES[k][1] for k in names], dtype=np.uint8)
    before = feat.copy()
    out, anomalous, undecided = repad_impl(impl)(feat, opcode, NO_EDGES)
    np.testing.assert_array_equal(feat, before)  # the input is not modified
    assert out.dtype == np.float32 and out.shape == feat.shape
    assert anomalous.dtype == undecided.dtype == np.bool_
    for i, name in enumerate(names):
        _, _, _, anomaly, layout, spatial_in, spatial_kernel = REPAD_CASES[name]
        np.testing.assert_array_equal(out[i, 134:140], layout, err_msg=name)
        np.testing.assert_array_equal(out[i, 95:99], spatial_in, err_msg=name)
        np.testing.assert_array_equal(out[i, 101:105], spatial_kernel, err_msg=name)
        np.testing.assert_array_equal(out[i, 31:37], [M1] * 6, err_msg=name)  # tuple, add, conv: no dimensions
        assert bool(anomalous[i]) == anomaly, name
    assert not undecided.any()
    others = np.setdiff1d(np.arange(140), REPADDED_COLUMNS)
    np.testing.assert_array_equal(out[:, others], feat[:, others])


def test_repadded_columns_constant():
    expected = [*range(31, 37), *range(95, 99), *range(101, 105), *range(134, 140)]
    assert sorted(REPADDED_COLUMNS.tolist()) == expected


@pytest.mark.parametrize("impl", ["reference", "kernel"])
def test_repad_empty_graph(impl):
    out, anomalous, undecided = repad_impl(impl)(np.zeros((0, 140), np.float32), np.zeros(0, np.uint8), NO_EDGES)
    assert out.shape == (0, 140) and anomalous.shape == undecided.shape == (0,)


# The HLO ``dimensions`` attribute (cols 31–36), by hand on one graph. Nodes in topological order;
# operands by name. Opcode ids: TPUGRAPHS.md §6.
def dims_row(dims=(), layout=None, dimensions=(), *, tuple_=False):
    """A node_feat row with output ``dims`` (default descending layout) and ``dimensions`` in cols 31–36."""
    if layout is None:
        layout = tuple(range(len(dims) - 1, -1, -1))
    row = make_row(dims, layout, tuple_=tuple_, product=1 if tuple_ else None)
    row[31 : 31 + len(dimensions)] = dimensions
    return row


U = None  # undecided: cols 31–36 stay as given
# name: (opcode, output dims, dimensions as the npz gives them, operands, expected cols 31–36 or U, anomaly)
# fmt: off
DIMENSION_GRAPH = {
    "x": (63, (2, 3, 4), (), [], [M1] * 6, False),                       # parameter: none
    "s": (24, (), (), [], [M1] * 6, False),                              # scalar constant: none
    "red.p0": (63, (), (), [], [M1] * 6, False),                         # the reducer's computation
    "red.p1": (63, (), (), [], [M1] * 6, False),
    "red.add": (2, (), (), ["red.p0", "red.p1"], [M1] * 6, False),
    "bcast.scalar": (13, (2, 3, 4), (), ["s"], [M1] * 6, False),         # a scalar's broadcast: 0 entries
    "bcast.x": (13, (5, 2, 3, 4), (1, 2, 3), ["x"], [1, 2, 3, M1, M1, M1], False),  # rank of x: 3 entries
    "bcast.axis0": (13, (2, 7), (0,), ["vec"], [0, M1, M1, M1, M1, M1], False),  # axis 0 is a value, kept
    "vec": (63, (2,), (), [], [M1] * 6, False),
    # reduce x (rank 3) to rank 1 over (0, 2); operands x, the init s and the reducer's root: 3 − 1 = 2
    "reduce": (70, (3,), (0, 2), ["x", "s", "red.add"], [0, 2, M1, M1, M1, M1], False),
    "reduce.all": (70, (), (0, 1, 2), ["x", "s", "red.add"], [0, 1, 2, M1, M1, M1], False),  # to a scalar
    "reduce.none": (70, (2, 3, 4), (), ["x", "s", "red.add"], [M1] * 6, False),  # no dimension reduced
    "transpose": (98, (4, 2, 3), (2, 0, 1), ["x"], [2, 0, 1, M1, M1, M1], False),  # its own rank
    "map": (56, (2, 3, 4), (0, 1, 2), ["x", "x2"], [0, 1, 2, M1, M1, M1], False),
    "x2": (63, (2, 3, 4), (), [], [M1] * 6, False),
    "concat": (22, (4, 3, 4), (0,), ["x", "x2"], [0, M1, M1, M1, M1, M1], False),  # one entry, here 0
    "iota": (48, (2, 8), (1,), [], [1, M1, M1, M1, M1, M1], False),
    "sort": (93, (2, 3, 4), (2,), ["x"], [2, M1, M1, M1, M1, M1], False),
    "sort.pair": (93, (), (0,), ["vec", "vec2"], [0, M1, M1, M1, M1, M1], False),  # a tuple: still one entry
    "vec2": (63, (2,), (), [], [M1] * 6, False),
    "get-dimension-size": (43, (), (1,), ["x"], [1, M1, M1, M1, M1, M1], False),
    "set-dimension-size": (44, (2, 3, 4), (2,), ["x", "s"], [2, M1, M1, M1, M1, M1], False),
    "all-gather": (104, (4, 3, 4), (0,), ["x"], [0, M1, M1, M1, M1, M1], False),
    "all-gather-start": (112, (), (0,), ["x"], [0, M1, M1, M1, M1, M1], False),
    "reduce-scatter": (111, (1, 3, 4), (0,), ["x", "red.add"], [0, M1, M1, M1, M1, M1], False),
    "already -1": (13, (5, 2, 3, 4), (1, 2, 3, M1, M1, M1), ["x"], [1, 2, 3, M1, M1, M1], False),
    # undecided: left as they are, counted
    "reverse": (76, (2, 3, 4), (0, 2), ["x"], U, False),
    "all-to-all": (6, (2, 3, 4), (1,), ["x"], U, False),
    "reduce.variadic": (70, (), (1,), ["x", "x2", "s", "red.add"], U, False),  # a tuple result
    "bcast.two-operands": (13, (2, 3, 4), (0,), ["x", "s"], U, False),
    "bcast.no-operand": (13, (2, 3, 4), (0,), [], U, False),
    "reduce.no-operand": (70, (3,), (0,), [], U, False),
    "reduce.grows": (70, (2, 3, 4, 5), (), ["x", "s"], U, False),          # result rank 4 > 3
    "unknown-opcode": (0, (2,), (0,), [], U, False),
    "unused-id-97": (97, (2,), (0,), [], U, False),
    "not-an-opcode": (121, (2,), (0,), [], U, False),
    # contradictions: left as they are, counted as anomalies
    "add with dimensions": (2, (2, 3, 4), (1,), ["x", "x2"], [1, 0, 0, 0, 0, 0], True),
    "bcast.too-long": (13, (2, 7), (0, 0, 5), ["vec"], [0, 0, 5, 0, 0, 0], True),
    "concat.-1 first": (22, (4, 3, 4), (M1,), ["x", "x2"], [M1, 0, 0, 0, 0, 0], True),
    "transpose.half padded": (98, (4, 2, 3), (2, 0, M1, M1, M1, M1), ["x"], [2, 0, M1, M1, M1, M1], True),
}
# fmt: on


def dimension_graph():
    names = list(DIMENSION_GRAPH)
    order = {name: i for i, name in enumerate(names)}
    feat = np.stack([dims_row(dims, dimensions=given, tuple_=name in ("sort.pair", "reduce.variadic",
                                                                         "all-gather-start"))
                     for name, (_, dims, given, *_) in DIMENSION_GRAPH.items()])
    opcode = np.array([DIMENSION_GRAPH[k][0] for k in names], np.uint8)
    edges = np.array([[order[name], order[v]] for name in names for v in DIMENSION_GRAPH[name][3]], np.int64)
    return names, feat, opcode, edges


@pytest.mark.parametrize("impl", ["reference", "kernel"])
def test_dimensions_by_hand(impl):
    names, feat, opcode, edges = dimension_graph()
    out, anomalous, undecided = repad_impl(impl)(feat, opcode, edges)
    for i, name in enumerate(names):
        _, _, _, _, expected, anomaly = DIMENSION_GRAPH[name]
        want = feat[i, 31:37] if expected is U else expected
        np.testing.assert_array_equal(out[i, 31:37], want, err_msg=name)
        assert bool(undecided[i]) == (expected is U), name
        assert bool(anomalous[i]) == anomaly, name
    assert undecided.sum() == 10 and anomalous.sum() == 4


@pytest.mark.parametrize("impl", ["reference", "kernel"])
def test_dimensions_use_the_ranks_of_nodes_not_kept(impl):
    """Pruning comes first: a kept broadcast or reduce whose operand was not kept still gets its length
    from that operand's rank (the rows selected, in the order given)."""
    names, feat, opcode, edges = dimension_graph()
    picked = [names.index(n) for n in ("reduce", "bcast.x", "reverse")]  # x is not among them
    out, anomalous, undecided = repad_impl(impl)(feat, opcode, edges, np.array(picked))
    whole, *_ = repad_impl(impl)(feat, opcode, edges)
    np.testing.assert_array_equal(out, whole[picked])
    np.testing.assert_array_equal(out[0, 31:37], [0, 2, M1, M1, M1, M1])
    np.testing.assert_array_equal(out[1, 31:37], [1, 2, 3, M1, M1, M1])
    assert undecided.tolist() == [False, False, True] and not anomalous.any()


@pytest.mark.parametrize("impl", ["reference", "kernel"])
def test_dimensions_count_each_operand_once(impl):
    """edge_index may repeat a row: a broadcast with its one operand listed twice is still decided."""
    names, feat, opcode, edges = dimension_graph()
    i = names.index("bcast.x")
    twice = np.concatenate([edges, edges[edges[:, 0] == i]])
    out, _, undecided = repad_impl(impl)(feat, opcode, twice)
    np.testing.assert_array_equal(out[i, 31:37], [1, 2, 3, M1, M1, M1])
    assert not undecided[i]


# --------------------------------------------------------------------------------------------------
# Base-7 (§2.4)
# --------------------------------------------------------------------------------------------------

CONV_ROW = [1, 0, -1, -1, -1, -1, 0, 1, -1, -1, -1, -1, 1, 0, -1, -1, -1, -1]
RESHAPE_ROW = [2, 1, 0, -1, -1, -1, 3, 2, 1, 0, -1, -1, -1, -1, -1, -1, -1, -1]
B7_CASES = [
    ([-1] * 18, (0, 0, 0)),
    ([5] * 18, (117648, 117648, 117648)),  # 6 · (7^6 − 1) / 6
    ([0] * 18, (19608, 19608, 19608)),  # (7^6 − 1) / 6
    ([0, 1, -1, -1, -1, -1] * 3, (15, 15, 15)),  # 1 + 2·7
    (CONV_ROW, (2 + 1 * 7, 1 + 2 * 7, 2 + 1 * 7)),
    (RESHAPE_ROW, (3 + 2 * 7 + 1 * 49, 4 + 3 * 7 + 2 * 49 + 1 * 343, 0)),
    ([-1, -1, -1, -1, -1, 4] + [-1] * 12, (5 * 7**5, 0, 0)),  # last slot is most significant
]


@pytest.mark.parametrize(("row", "codes"), B7_CASES)
def test_base7_by_hand(row, codes):
    assert ref_encode_row(row) == codes
    np.testing.assert_array_equal(ref_encode_base7(np.array(row)), codes)
    got = encode_base7(np.array(row, dtype=np.float32))
    assert got.dtype == np.int32 and got.shape == (3,)
    np.testing.assert_array_equal(got, codes)
    np.testing.assert_array_equal(ref_decode_base7(np.array(codes)), row)
    back = decode_base7(np.array(codes, dtype=np.int32))
    assert back.dtype == np.int8 and back.shape == (18,)
    np.testing.assert_array_equal(back, row)


def test_base7_shapes():
    x = np.array([[CONV_ROW, RESHAPE_ROW]] * 3, dtype=np.float32)  # (3, 2, 18)
    codes = encode_base7(x)
    assert codes.shape == (3, 2, 3) and codes.dtype == np.int32
    np.testing.assert_array_equal(codes, ref_encode_base7(x))
    np.testing.assert_array_equal(decode_base7(codes), x)
    packed = pack_chunk(x)
    assert packed.shape == (3, 2, 3) and packed.dtype == np.int32
    np.testing.assert_array_equal(packed, ref_encode_base7(x))
    # integer input, and -0.0, are fine
    np.testing.assert_array_equal(encode_base7(x.astype(np.int64)), codes)
    np.testing.assert_array_equal(encode_base7(np.full(18, -0.0)), np.full(3, 19608))


@pytest.mark.parametrize(
    ("bad", "row", "node", "slot"),
    [
        (6.0, 1, 2, 7),
        (0.5, 0, 0, 0),
        (math.nan, 2, 1, 17),
        (-2.0, 1, 0, 12),
        (math.inf, 2, 2, 5),
        (-math.inf, 0, 1, 3),
        (-0.5, 1, 1, 6),
        (5.0000005, 0, 2, 11),  # the next float32 after 5
        (1e10, 2, 0, 9),
    ],
)
@pytest.mark.parametrize("first_row", [0, 1000])
def test_pack_chunk_names_row_node_slot(bad, row, node, slot, first_row):
    x = np.full((3, 3, 18), -1.0, dtype=np.float32)
    x[:, :, 0] = 0
    x[row, node, slot] = bad
    assert ref_first_bad_value(x) == (row, node, slot)
    with pytest.raises(ConfigValueError) as info:
        pack_chunk(x, first_row=first_row)
    err = info.value
    assert (err.row, err.node, err.slot) == (first_row + row, node, slot)
    if math.isnan(bad):
        assert math.isnan(err.value)
    else:
        assert err.value == float(np.float32(bad))
    assert str(first_row + row) in str(err) and str(slot) in str(err)
    assert isinstance(err, ValueError)


def test_pack_chunk_reports_first_bad_value():
    x = np.zeros((4, 2, 18), np.float32)
    x[3, 0, 0] = 7  # later row
    x[1, 1, 4] = 0.25  # first in row-major order
    x[1, 1, 9] = -3
    assert ref_first_bad_value(x) == (1, 1, 4)
    with pytest.raises(ConfigValueError) as info:
        pack_chunk(x, first_row=10)
    assert (info.value.row, info.value.node, info.value.slot) == (11, 1, 4)


def test_encode_base7_names_row_and_node_of_3d_input():
    """KNOWN BUG (kept failing on purpose): encode_base7 flattens (c, nc, 18) to (c·nc, 1, 18)
    before packing, so its ConfigValueError names row = r·nc + j and node 0 instead of (r, j)."""
    x = np.full((4, 3, 18), -1.0, np.float32)
    x[2, 1, 5] = 9
    assert ref_first_bad_value(x) == (2, 1, 5)
    with pytest.raises(ConfigValueError) as info:
        encode_base7(x)
    assert (info.value.row, info.value.node, info.value.slot) == (2, 1, 5)


def test_encode_rejects_bad_values_and_shapes():
    with pytest.raises(ValueError):
        encode_base7(np.full(18, 6))
    with pytest.raises(ValueError):
        encode_base7(np.zeros(17))
    with pytest.raises(ValueError):
        decode_base7(np.array([0, 0, 7**6]))
    with pytest.raises(ValueError):
        decode_base7(np.array([0, -1, 0]))
    with pytest.raises(ValueError):
        decode_base7(np.zeros(4, np.int32))


# --------------------------------------------------------------------------------------------------
# Deduplication (§2.3)
# --------------------------------------------------------------------------------------------------


def layout_keys(values):
    """The kernel-side layout key: the (c, nc·3) base-7 codes."""
    values = np.asarray(values, dtype=np.float32)
    return pack_chunk(values).reshape(values.shape[0], -1)


A = [[0, 1] + [-1] * 16]
B = [[1, 0] + [-1] * 16]
C = [[-1] * 18]


def check_dedup(got, *, inverse, group_size, first_index, best_index, runtime, normalizer=None):
    np.testing.assert_array_equal(got.inverse, inverse)
    np.testing.assert_array_equal(got.group_size, group_size)
    np.testing.assert_array_equal(got.first_index, first_index)
    np.testing.assert_array_equal(got.best_index, best_index)
    if runtime is None:
        assert got.runtime is None
    else:
        np.testing.assert_array_equal(got.runtime, runtime)
        assert got.runtime.dtype == np.int64
    if normalizer is None:
        assert got.normalizer is None
    else:
        np.testing.assert_array_equal(got.normalizer, normalizer)
        assert got.normalizer.dtype == np.int64


def test_dedup_layout_by_hand():
    values = np.array([A, B, A, C, B], dtype=np.float32)  # (5, 1, 18)
    runtime = np.array([5, 3, 4, 9, 3], dtype=np.int64)
    expected = dict(
        inverse=[0, 1, 0, 2, 1],
        group_size=[2, 2, 1],
        first_index=[0, 1, 3],
        best_index=[2, 1, 3],  # A: min 4 at row 2; B: tie 3/3 -> first row 1
        runtime=[4, 3, 9],
    )
    check_dedup(ref_dedup(values, runtime), **expected)
    got = dedup_rows(layout_keys(values), runtime)
    check_dedup(got, **expected)
    np.testing.assert_array_equal(decode_base7(got.keys.reshape(-1, 1, 3)), values[[0, 1, 3]])
    assert got.inverse.dtype == got.group_size.dtype == got.first_index.dtype == np.int32


def test_dedup_test_split_has_no_runtime():
    values = np.array([A, B, A, C, B], dtype=np.float32)
    expected = dict(
        inverse=[0, 1, 0, 2, 1],
        group_size=[2, 2, 1],
        first_index=[0, 1, 3],
        best_index=[0, 1, 3],
        runtime=None,
    )
    check_dedup(ref_dedup(values), **expected)
    check_dedup(dedup_rows(layout_keys(values)), **expected)


def test_dedup_all_duplicates():
    values = np.array([B] * 6, dtype=np.float32)
    runtime = np.array([7, 7, 2, 9, 2, 3], dtype=np.int64)
    expected = dict(inverse=[0] * 6, group_size=[6], first_index=[0], best_index=[2], runtime=[2])
    check_dedup(ref_dedup(values, runtime), **expected)
    check_dedup(dedup_rows(layout_keys(values), runtime), **expected)


def test_dedup_single_config():
    values = np.array([C], dtype=np.float32)
    expected = dict(inverse=[0], group_size=[1], first_index=[0], best_index=[0], runtime=[123])
    check_dedup(ref_dedup(values, [123]), **expected)
    check_dedup(dedup_rows(layout_keys(values), np.array([123])), **expected)


def test_dedup_runtime_ties_go_to_first_occurrence():
    values = np.array([A, B, B, A, A, B], dtype=np.float32)
    runtime = np.array([10, 8, 8, 10, 10, 8], dtype=np.int64)
    expected = dict(
        inverse=[0, 1, 1, 0, 0, 1],
        group_size=[3, 3],
        first_index=[0, 1],
        best_index=[0, 1],
        runtime=[10, 8],
    )
    check_dedup(ref_dedup(values, runtime), **expected)
    check_dedup(dedup_rows(layout_keys(values), runtime), **expected)


def test_dedup_keeps_int64_runtimes_beyond_float_precision():
    values = np.array([A, A], dtype=np.float32)
    runtime = np.array([2**53 + 1, 2**53], dtype=np.int64)  # equal as float64
    expected = dict(
        inverse=[0, 0], group_size=[2], first_index=[0], best_index=[1], runtime=[2**53]
    )
    check_dedup(ref_dedup(values, runtime), **expected)
    check_dedup(dedup_rows(layout_keys(values), runtime), **expected)


def test_dedup_tile_negative_zero_equals_zero():
    feat = np.zeros((3, 24), np.float32)
    feat[0, 3] = -0.0
    feat[1, 3] = 0.0
    feat[2, 3] = 1.0
    feat[:, 8] = 16.0
    runtime = np.array([5, 4, 1], np.int64)
    norm = np.array([1, 1, 1], np.int64)
    expected = dict(
        inverse=[0, 0, 1],
        group_size=[2, 1],
        first_index=[0, 2],
        best_index=[1, 2],
        runtime=[4, 1],
        normalizer=[1, 1],
    )
    check_dedup(ref_dedup(feat, runtime, norm), **expected)
    keys = float_keys(feat)
    assert keys.dtype == np.int32 and keys.shape == (3, 24)
    check_dedup(dedup_rows(keys, runtime, norm), **expected)


@pytest.mark.parametrize(
    ("pairs", "best"),
    [
        ([(2, 4), (1, 2)], 0),  # 2/4 == 1/2: tie -> first
        ([(1, 2), (2, 4)], 0),
        ([(3, 4), (1, 2)], 1),  # 1/2 < 3/4
        # 0.1 < 0.5 although 5 < 10: the fraction decides, not the runtime
        ([(10, 100), (5, 10)], 0),
        ([(6, 9), (4, 6), (2, 3)], 0),  # three equal fractions
        ([(7, 3), (5, 2), (9, 4)], 2),  # 2.33, 2.5, 2.25
        # x/(x−1) decreases in x; float64 sees all of these as 1.0
        ([(2**62 - 1, 2**62 - 2), (2**62, 2**62 - 1)], 1),
        ([(2**62, 2**62 - 1), (2**62 - 1, 2**62 - 2)], 0),
        # equal fractions 3/5 with products near 2^123, then one a hair smaller
        ([(3 * (2**59 + 1), 5 * (2**59 + 1)), (3 * (2**59 + 12345), 5 * (2**59 + 12345))], 0),
        ([(3 * (2**59 + 1), 5 * (2**59 + 1)), (3 * (2**59 + 12345) - 1, 5 * (2**59 + 12345))], 1),
        ([(3 * (2**59 + 1) + 1, 5 * (2**59 + 1)), (3 * (2**59 + 12345), 5 * (2**59 + 12345))], 1),
        ([(2**62, 2**62), (2**62 - 1, 2**62 - 1), (1, 1)], 0),
        ([(0, 5), (0, 1)], 0),  # runtime 0: 0/5 == 0/1
        ([(2**32 + 1, 2**32), (2**32, 2**32 - 1)], 0),  # 1 + 2^-32 < 1 + 1/(2^32 − 1)
    ],
)
def test_dedup_tile_fraction_compare(pairs, best):
    runtime = np.array([p[0] for p in pairs], np.int64)
    norm = np.array([p[1] for p in pairs], np.int64)
    feat = np.ones((len(pairs), 24), np.float32)
    ref = ref_dedup(feat, runtime, norm)
    assert ref.best_index.tolist() == [best]
    got = dedup_rows(float_keys(feat), runtime, norm)
    check_dedup(
        got,
        inverse=[0] * len(pairs),
        group_size=[len(pairs)],
        first_index=[0],
        best_index=[best],
        runtime=[pairs[best][0]],
        normalizer=[pairs[best][1]],
    )


def test_deduplicator_in_chunks_by_hand():
    values = np.array([A, B, A, C, B, C, C], dtype=np.float32)
    runtime = np.array([5, 3, 4, 9, 3, 1, 1], dtype=np.int64)
    keys = layout_keys(values)
    d = Deduplicator(7, keys.shape[1], with_runtime=True)
    for lo, hi in [(0, 1), (1, 1), (1, 4), (4, 7)]:
        d.add(keys[lo:hi], runtime[lo:hi])
    check_dedup(
        d.finish(),
        inverse=[0, 1, 0, 2, 1, 2, 2],
        group_size=[2, 2, 3],
        first_index=[0, 1, 3],
        best_index=[2, 1, 5],
        runtime=[4, 3, 1],
    )


def test_deduplicator_counts_rows():
    d = Deduplicator(2, 3, with_runtime=False)
    d.add(np.zeros((1, 3), np.int32))
    with pytest.raises(ValueError):
        d.finish()  # one row short
    with pytest.raises(ValueError):
        d.add(np.zeros((2, 3), np.int32))  # one row too many


def test_deduplicator_zero_configs():
    d = Deduplicator(0, 6, with_runtime=True)
    d.add(np.zeros((0, 6), np.int32), np.zeros(0, np.int64))
    check_dedup(d.finish(), inverse=[], group_size=[], first_index=[], best_index=[], runtime=[])


@pytest.mark.parametrize(
    ("c", "width", "expected_unique"),
    [
        (0, 6, 0),  # a graph with no configs: nothing to deduplicate
        (3, 0, 1),  # empty keys: every row is the same (empty) config
    ],
)
def test_dedup_rows_empty_keys(c, width, expected_unique):
    """KNOWN BUG (kept failing on purpose): size-0 keys crash with ValueError instead of giving an
    empty result (c = 0) or one unique config (width 0). dedup_rows calls keys.reshape(c, -1) and
    Deduplicator.add calls keys.reshape(-1, width); NumPy refuses both for a size-0 array. A
    Deduplicator with c = 0 and width > 0 works (test above)."""
    runtime = np.arange(c, dtype=np.int64)
    ref = ref_dedup(np.zeros((c, width), np.float32), runtime)
    assert len(ref.group_size) == expected_unique
    got = dedup_rows(np.zeros((c, width), np.int32), runtime)
    check_dedup(
        got,
        inverse=ref.inverse,
        group_size=ref.group_size,
        first_index=ref.first_index,
        best_index=ref.best_index,
        runtime=ref.runtime,
    )
    assert got.keys.shape == (expected_unique, width)
