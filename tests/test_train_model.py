"""Hand-written backward passes of tpuprep.train checked against finite differences (float64)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from train_fakes import make_fake_dataset, make_layout_graph, make_tile_graph

from tpuprep.train.baseline import violation_ratio
from tpuprep.train.features import (
    COMPUTE_SHARE,
    Csr,
    clean_stats,
    config_summary,
    derived_config_features,
    grow_regions,
    prepare_graph,
    tile_config_features,
    tile_iteration_dims,
)
from tpuprep.train.kernels import config_embed
from tpuprep.train.losses import TIE_FLOOR, pairwise_loss
from tpuprep.train.model import (
    ModelConfig,
    backward,
    forward,
    gelu_grad,
    gelu_pair,
    gelu_ref,
    init_params,
    reference_layout_scores,
)
from tpuprep.train.optim import AdamW, lr_at

EPS = 1e-6


def stats_of(graphs):
    f = np.concatenate([g.node_feat[:, :134].astype(np.float64) for g in graphs])
    return clean_stats(f.mean(axis=0), f.std(axis=0))


@pytest.fixture(scope="module")
def layout_graph():
    rng = np.random.default_rng(11)
    return make_layout_graph(rng, "layout:xla:random", "g", "train", n_nodes=18, n_cfg=4, n_unique=12)


@pytest.fixture(scope="module")
def tile_graph():
    return make_tile_graph(np.random.default_rng(12), "t", "train", n_nodes=7, n_configs=10)


def numeric_check(params, fn, grads, rng, per_param=6, tol=2e-5):
    """Compare analytic grads with central differences on random entries of every parameter."""
    for name, p in params.items():
        flat = p.reshape(-1)
        for idx in rng.choice(flat.size, size=min(per_param, flat.size), replace=False):
            old = flat[idx]
            flat[idx] = old + EPS
            up = fn()
            flat[idx] = old - EPS
            down = fn()
            flat[idx] = old
            num = (up - down) / (2 * EPS)
            ana = grads[name].reshape(-1)[idx]
            assert abs(num - ana) <= tol * max(1.0, abs(num), abs(ana)), (name, idx, num, ana)


@pytest.mark.parametrize(("layers", "derived", "chunk"), [(1, False, None), (2, True, 3), (3, True, None)])
def test_layout_backward_matches_finite_differences(layout_graph, layers, derived, chunk):
    mean, std = stats_of([layout_graph])
    cfg = ModelConfig("layout", hidden=6, head_hidden=5, layers=layers, dtype="float64", derived=derived)
    pg = prepare_graph(layout_graph, "layout", mean, std, layers, np.float64)
    params = init_params(cfg, 3)
    vals = layout_graph.node_config_feat(np.arange(7))
    w = np.random.default_rng(1).standard_normal(7)
    _, cache = forward(params, pg, vals, cfg, chunk=chunk)
    assert len(cache.chunks) == (1 if chunk is None else 3)
    grads = backward(params, pg, cache, w, cfg)
    assert set(grads) == set(params)
    numeric_check(params, lambda: float(forward(params, pg, vals, cfg, keep=False)[0] @ w), grads,
                  np.random.default_rng(2))


@pytest.mark.parametrize("kept_chunks", [0, 1, 3])
def test_chunks_past_the_keep_budget_are_recomputed_to_the_same_gradients(layout_graph, kept_chunks):
    """backward recomputes the chunks forward did not keep: gradients equal the all-kept ones bit for bit."""
    mean, std = stats_of([layout_graph])
    cfg = ModelConfig("layout", hidden=6, head_hidden=5, layers=2, dtype="float32", derived=True)
    pg = prepare_graph(layout_graph, "layout", mean, std, 2, np.float32)
    params = init_params(cfg, 3)
    vals = layout_graph.node_config_feat(np.arange(8))
    w = np.random.default_rng(1).standard_normal(8)
    s_all, kept = forward(params, pg, vals, cfg, chunk=2)
    sizes = [cc.nbytes() for *_, cc in kept.chunks]
    assert len(sizes) == 4 and min(sizes) > 0
    s_few, few = forward(params, pg, vals, cfg, chunk=2, keep_bytes=sum(sizes[:kept_chunks]))
    assert [cc is not None for *_, cc in few.chunks] == [i < kept_chunks for i in range(4)]
    np.testing.assert_array_equal(s_few, s_all)
    g_all, g_few = backward(params, pg, kept, w, cfg), backward(params, pg, few, w, cfg)
    for name in params:
        np.testing.assert_array_equal(g_few[name], g_all[name], err_msg=name)


def test_tile_backward_matches_finite_differences(tile_graph):
    mean, std = stats_of([tile_graph])
    cfg = ModelConfig("tile", hidden=6, head_hidden=5, layers=2, dtype="float64")
    pg = prepare_graph(tile_graph, "tile", mean, std, 2, np.float64)
    params = init_params(cfg, 4)
    feats = tile_config_features(tile_graph.config_feat, np.float64, pg.tile_extents)
    np.testing.assert_array_equal(pg.tile_extents, tile_iteration_dims(tile_graph.node_feat, tile_graph.config_feat,
                                                                       tile_graph.edge_index))
    assert np.abs(feats[:, 24:]).sum() > 0  # the shape inputs take part in the check
    w = np.random.default_rng(1).standard_normal(len(feats))
    _, cache = forward(params, pg, feats, cfg)
    grads = backward(params, pg, cache, w, cfg)
    numeric_check(params, lambda: float(forward(params, pg, feats, cfg, keep=False)[0] @ w), grads,
                  np.random.default_rng(5))


@pytest.mark.parametrize(("kind", "weight"), [("ranknet", "none"), ("listmle", "none"), ("ranknet", "floor")])
def test_full_chain_with_a_loss(layout_graph, kind, weight):
    mean, std = stats_of([layout_graph])
    cfg = ModelConfig("layout", hidden=4, head_hidden=4, layers=2, dtype="float64")
    pg = prepare_graph(layout_graph, "layout", mean, std, 2, np.float64)
    params = init_params(cfg, 9)
    rows = np.arange(8)
    vals = layout_graph.node_config_feat(rows)
    target = layout_graph.config_runtime[rows].astype(np.float64)
    if weight != "none":  # gaps around the floor, so the weights differ from pair to pair
        target = target + 100 * target.max()
        w = np.minimum(np.abs(np.log(target)[:, None] - np.log(target)[None, :]) / TIE_FLOOR, 1.0)
        assert 0 < w[w > 0].min() < 0.5 and w.max() == 1.0

    def loss_fn():
        return pairwise_loss(forward(params, pg, vals, cfg, keep=False)[0], target, kind, weight=weight)[0]

    scores, cache = forward(params, pg, vals, cfg)
    _, ds = pairwise_loss(scores, target, kind, weight=weight)
    numeric_check(params, loss_fn, backward(params, pg, cache, ds, cfg), np.random.default_rng(3))


@pytest.mark.parametrize("kind", ["hinge", "ranknet", "listmle"])
def test_pairwise_loss_gradient(kind):
    rng = np.random.default_rng(0)
    s = rng.standard_normal(12) * 0.7
    t = rng.integers(0, 5, 12)  # ties in the target are not pairs
    loss, g = pairwise_loss(s, t, kind)
    for i in range(12):
        e = np.zeros(12)
        e[i] = EPS
        num = (pairwise_loss(s + e, t, kind)[0] - pairwise_loss(s - e, t, kind)[0]) / (2 * EPS)
        assert g[i] == pytest.approx(num, abs=1e-6)
    # definition check for the hinge
    if kind == "hinge":
        i, j = np.nonzero(t[:, None] > t[None, :])
        assert loss == pytest.approx(np.maximum(0, 1 - (s[i] - s[j])).mean())
    if kind == "listmle":  # Plackett–Luce NLL of the slowest-first order (ties by position), per config
        a = s[np.argsort(-t, kind="stable")]
        assert loss == pytest.approx(np.mean([np.log(np.exp(a[k:]).sum()) - a[k] for k in range(12)]))
    assert pairwise_loss(np.zeros(3), np.ones(3), kind) == (0.0, pytest.approx(np.zeros(3)))


@pytest.mark.parametrize("weight", ["logdiff", "floor"])
@pytest.mark.parametrize("kind", ["hinge", "ranknet"])
def test_pair_weights_gradient_and_definition(kind, weight):
    rng = np.random.default_rng(1)
    s = rng.standard_normal(10) * 0.7
    # runtimes (ns) with ties, gaps from 2e-4 (under the floor) to ×5 (over it)
    t = rng.choice([1.0, 1.0002, 1.0006, 1.5, 5.0], 10) * 1e6
    loss, g = pairwise_loss(s, t, kind, weight=weight)
    for i in range(10):
        e = np.zeros(10)
        e[i] = EPS
        num = (pairwise_loss(s + e, t, kind, weight=weight)[0]
               - pairwise_loss(s - e, t, kind, weight=weight)[0]) / (2 * EPS)
        assert g[i] == pytest.approx(num, abs=1e-6)
    i, j = np.nonzero(t[:, None] > t[None, :])
    w = np.log(t[i]) - np.log(t[j])
    if weight == "floor":
        w = np.minimum(w / TIE_FLOOR, 1.0)
        assert 0 < w.min() < 0.5 and w.max() == 1.0
    per = np.maximum(0, 1 - (s[i] - s[j])) if kind == "hinge" else np.log1p(np.exp(-(s[i] - s[j])))
    assert loss == pytest.approx((w * per).sum() / w.sum())
    assert loss != pytest.approx(per.mean())  # the weights change the loss
    # a near-tie (1e-5 relative) next to a clear pair barely pulls its scores, unweighted it pulls alike
    s3, t3 = np.zeros(3), np.array([1.0, 1.00001, 2.0])
    gw = pairwise_loss(s3, t3, kind, weight=weight)[1]
    assert abs(gw[1] - gw[0]) < 0.05 * abs(gw[2] - gw[0])
    gu = pairwise_loss(s3, t3, kind)[1]
    assert abs(gu[1] - gu[0]) > 0.1 * abs(gu[2] - gu[0])
    assert pairwise_loss(np.zeros(3), np.ones(3), kind, weight=weight) == (0.0, pytest.approx(np.zeros(3)))
    with pytest.raises(ValueError, match="pair weight"):
        pairwise_loss(s, t, kind, weight="square")


def test_gelu_kernel_matches_reference():
    x = np.linspace(-6, 6, 1001)
    y, dy = gelu_pair(x)
    np.testing.assert_allclose(y, gelu_ref(x), rtol=1e-12, atol=1e-14)
    num = (gelu_ref(x + EPS) - gelu_ref(x - EPS)) / (2 * EPS)
    np.testing.assert_allclose(dy, num, atol=1e-8)
    np.testing.assert_allclose(gelu_grad(x.astype(np.float32)), dy, atol=1e-5)


def test_prior_term_starts_as_the_compute_share_ranking(layout_graph):
    """With the head silenced, a fresh layout model scores K × the compute share (summary column
    COMPUTE_SHARE); prior 0 (or no derived features) has no prior weight; bad priors are refused."""
    mean, std = stats_of([layout_graph])
    cfg = ModelConfig("layout", hidden=6, head_hidden=5, layers=1, dtype="float64")
    assert cfg.prior == 1000.0 and cfg.has_prior
    pg = prepare_graph(layout_graph, "layout", mean, std, 1, np.float64)
    params = init_params(cfg, 3)
    assert params["w_prior"].tolist() == [1.0]
    params["w_o"][:] = 0.0
    vals = layout_graph.node_config_feat()
    feats, viol = derived_config_features(pg, vals, np.float64)
    share = config_summary(pg, feats, viol)[:, COMPUTE_SHARE]
    assert share.std() > 0  # the fake graph's configs differ in it
    np.testing.assert_allclose(forward(params, pg, vals, cfg, keep=False)[0], 1000.0 * share, atol=1e-9)
    for off in (ModelConfig("layout", prior=0.0), ModelConfig("layout", derived=False), ModelConfig("tile")):
        assert not off.has_prior and "w_prior" not in init_params(off, 0)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="prior"):
            ModelConfig("layout", prior=bad)


def test_region_shortcut_equals_full_forward(layout_graph):
    mean, std = stats_of([layout_graph])
    for layers in (1, 2):
        cfg = ModelConfig("layout", hidden=8, head_hidden=6, layers=layers, dtype="float64")
        pg = prepare_graph(layout_graph, "layout", mean, std, layers, np.float64)
        params = init_params(cfg, 1)
        vals = layout_graph.node_config_feat()
        fast = forward(params, pg, vals, cfg, keep=False)[0]
        np.testing.assert_allclose(fast, reference_layout_scores(params, pg, vals, cfg), rtol=1e-10,
                                   atol=1e-12)


def test_regions_and_operators(layout_graph):
    g = layout_graph
    n = g.node_feat.shape[0]
    regions = grow_regions(g.edge_index, n, g.node_config_ids, 2)
    assert np.array_equal(regions[0], g.node_config_ids)
    for a, b in itertools.pairwise(regions):
        assert np.array_equal(b[: len(a)], a) and len(set(b.tolist())) == len(b)
    pg = prepare_graph(g, "layout", *stats_of([g]), 2, np.float64)
    dense_in = pg.p_in.dense()
    for u, v in g.edge_index:
        assert dense_in[u, v] > 0
    rows_with_edges = dense_in.sum(axis=1) > 0
    np.testing.assert_allclose(dense_in.sum(axis=1)[rows_with_edges], 1.0)
    np.testing.assert_allclose(pg.p_in_t.dense(), dense_in.T)
    sub = pg.sub_in[2].dense()
    np.testing.assert_allclose(sub, dense_in[np.ix_(pg.regions[2], pg.regions[1])])
    x = np.random.default_rng(0).standard_normal((3, n, 4))
    np.testing.assert_allclose(pg.p_out.apply(x), np.einsum("ij,bjh->bih", pg.p_out.dense(), x))
    empty = Csr.from_coo(np.zeros(0), np.zeros(0), np.zeros(0), 0, 3)
    assert empty.apply(np.ones((2, 3, 4))).shape == (2, 0, 4)


def test_config_embedding_kernels():
    rng = np.random.default_rng(0)
    vals = rng.integers(-1, 6, (4, 3, 18)).astype(np.int8)
    table = rng.standard_normal((18, 7, 5))
    out = np.empty((4, 3, 5))
    config_embed(vals, table, out, False)
    expect = table[np.arange(18)[None, None], vals.astype(np.int64) + 1].sum(axis=2)
    np.testing.assert_allclose(out, expect)
    gout = rng.standard_normal((4, 3, 5))
    gtab = np.zeros_like(table)
    config_embed(vals, gtab, gout, True)
    # adjoint identity: <embed(T), G> == <T, adjoint(G)>
    assert np.sum(out * gout) == pytest.approx(np.sum(table * gtab))


def test_derived_features_and_violation_ratio(layout_graph):
    g = layout_graph
    pg = prepare_graph(g, "layout", *stats_of([g]), 1, np.float64)
    vals = g.node_config_feat()
    feats, viol = derived_config_features(pg, vals, np.float64)
    assert feats.shape == (len(vals), len(g.node_config_ids), 9)
    np.testing.assert_allclose(viol, violation_ratio(g))
    # hand-computed violation of config 0
    nf = g.node_feat[g.node_config_ids]
    v0 = vals[0].astype(np.int64)
    minor = np.where(v0[:, 0] >= 0, v0[:, 0], nf[:, 134].astype(np.int64))
    assert violation_ratio(g, np.array([0]))[0] == pytest.approx(np.mean(minor != nf[:, 21:27].argmax(1)))
    # feats 6, 7, 8 by brute force: each node's most frequent block (output; each operand) over every
    # ORIGINAL config (ties: the smallest base-7 code), then "differs from it" and that times
    # √(elements × window) / max (8: either operand block differs)
    everything = vals[g.config_inverse].astype(np.int64)  # (c, nc, 18)
    elements = lambda node: max(float(g.node_feat[node, 28]), 1.0)  # noqa: E731
    work = []
    for node in g.node_config_ids:  # multiply-adds: conv × window size, dot × contraction size
        w = elements(node)
        if g.node_opcode[node] == 26:
            w *= max(float(g.node_feat[node, 44]), 1.0)
        operands = [v for u, v in g.edge_index.tolist() if u == node]
        if g.node_opcode[node] == 34 and len(operands) == 2:
            w *= max(1.0, (elements(operands[0]) * elements(operands[1]) / elements(node)) ** 0.5)
        work.append(w)
    cost = np.sqrt(np.array(work))
    code = lambda block: sum((int(x) + 1) * 7**i for i, x in enumerate(block))  # noqa: E731

    def differs_from_modal(j: int, slots: slice) -> np.ndarray:
        counts: dict[tuple, int] = {}
        for row in everything[:, j, slots]:
            counts[tuple(row)] = counts.get(tuple(row), 0) + 1
        best = max(counts.values())
        modal = min((b for b, k in counts.items() if k == best), key=code)
        return np.array([tuple(r) != modal for r in vals[:, j, slots].astype(np.int64)], float)

    for j in range(everything.shape[1]):
        differs = differs_from_modal(j, slice(0, 6))
        np.testing.assert_array_equal(feats[:, j, 6], differs)
        np.testing.assert_allclose(feats[:, j, 7], differs * cost[j] / cost.max())
        operand = np.maximum(differs_from_modal(j, slice(6, 12)), differs_from_modal(j, slice(12, 18)))
        np.testing.assert_allclose(feats[:, j, 8], operand * cost[j] / cost.max())
    assert feats[:, :, 6].any() and not feats[:, :, 6].all()  # the fake graph exercises both cases
    assert feats[:, :, 8].any() and not feats[:, :, 8].all()
    # the summaries: shares of work off the modal blocks, all configurable nodes and compute ops only
    summary = config_summary(pg, feats, viol)
    compute = np.isin(g.node_opcode[g.node_config_ids], [26, 34])  # convolution, dot
    assert compute.any() and not compute.all()  # both kinds in the fake graph
    rel = cost / cost.max()
    np.testing.assert_allclose(summary[:, 0], viol)
    np.testing.assert_allclose(summary[:, 1], feats[:, :, 6].mean(axis=1))
    np.testing.assert_allclose(summary[:, 2], (feats[:, :, 6] * rel).sum(axis=1) / rel.sum())
    np.testing.assert_allclose(summary[:, 3], (feats[:, :, 6] * rel)[:, compute].sum(axis=1) / rel[compute].sum())
    np.testing.assert_allclose(summary[:, 4], feats[:, compute, 8].sum(axis=1) / rel[compute].sum())


def test_violation_ratio_correlates_on_fake_data():
    from tpuprep.train.metrics import expand_to_original, kendall_tau

    ds = make_fake_dataset(1, n_train=2, n_valid=0, n_test=0, tile=False)
    for gid in ds.graph_ids("layout:xla:random"):
        g = ds.load_graph(gid)
        vr = expand_to_original(violation_ratio(g), g.config_inverse)
        assert kendall_tau(vr, g.config_runtime_original) > 0.2


def test_init_is_seeded_and_adam_moves_downhill():
    cfg = ModelConfig("layout", hidden=8, head_hidden=8)
    a, b, c = init_params(cfg, 1), init_params(cfg, 1), init_params(cfg, 2)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not all(np.array_equal(a[k], c[k]) for k in a)
    p = {"w": np.array([[3.0, -2.0]])}
    opt = AdamW(p, weight_decay=0.0, clip_norm=None)
    for _ in range(300):
        opt.step(p, {"w": 2 * p["w"]}, 0.05)
    assert np.abs(p["w"]).max() < 0.1
    assert lr_at(0, 100, 1.0) < lr_at(5, 100, 1.0) == pytest.approx(1.0)
    assert lr_at(99, 100, 1.0) < 0.1
    # a time budget: the schedule follows whichever of steps and time is further along
    many = 1_000_000
    assert lr_at(0, many, 1.0) < 1e-4  # by steps alone, a long run is still warming up
    assert lr_at(0, many, 1.0, progress=0.05) == pytest.approx(1.0, rel=1e-4)
    assert lr_at(10, many, 1.0, progress=0.5) == pytest.approx(lr_at(many // 2, many, 1.0))
    assert lr_at(10, many, 1.0, progress=1.0) == pytest.approx(0.05, rel=1e-3)
    assert lr_at(99, 100, 1.0, progress=0.0) == lr_at(99, 100, 1.0)  # steps further along: steps win


def _shaped(shapes: list[tuple[int, ...]]) -> np.ndarray:
    """node_feat (n, 140) with output dims (cols 21–26) and element counts (col 28) of ``shapes``."""
    nf = np.zeros((len(shapes), 140), np.float32)
    for i, dims in enumerate(shapes):
        nf[i, 21:21 + len(dims)] = dims
        nf[i, 28] = np.prod(dims)
    nf[:, 44] = 1  # window size product: 1 where there is no window
    return nf


def test_node_work_counts_multiply_adds():
    from tpuprep.train.features import node_work

    # 0 A (4×8), 1 B (8×2), 2 dot C = A·B (4×2), 3 conv (10×10 outputs, 3×3 window), 4 reshape (2×3),
    # 5 A·Aᵀ (4×4; one edge, edges being deduplicated), 6 a dot with no kept operand
    nf = _shaped([(4, 8), (8, 2), (4, 2), (10, 10), (2, 3), (4, 4), (3, 5)])
    nf[3, 44] = 9
    opcode = np.array([63, 63, 34, 26, 75, 34, 34])
    edges = np.array([[2, 0], [2, 1], [3, 0], [4, 3], [5, 0]])
    work = node_work(nf, opcode, edges, np.array([2, 3, 4, 5, 6]))
    np.testing.assert_allclose(work, [8 * 8, 100 * 9, 6, 16 * 8, 15])


@pytest.mark.parametrize(("lhs", "rhs", "out", "k"), [
    ((8, 4, 16, 32), (8, 4, 32, 16), (8, 4, 16, 16), 32),  # attention scores: batch 8×4 heads
    ((8, 4, 16, 16), (8, 4, 16, 32), (8, 4, 16, 32), 16),  # probs · values
    ((8, 16, 4, 32), (4, 32, 64), (8, 16, 64), 4 * 32),  # einsum output projection: 2 contracted dims
    ((64, 1024), (64, 1000), (1024, 1000), 64),  # weight gradient: contracts the leading dim
    ((16, 16), (16, 16), (16, 16), 16),  # square: equal leading dims are not batch dims
    ((8, 16, 32), (32,), (8, 16), 32),  # matrix · vector
])
def test_dot_contraction_ignores_batch_dims(lhs, rhs, out, k):
    from tpuprep.train.features import dot_contraction, output_rank

    nf = _shaped([lhs, rhs, out])
    elements = nf[:, 28].astype(np.float64)
    assert dot_contraction(elements, nf[:, 21:27].astype(np.float64), output_rank(nf[:, 21:27]), 2, 0, 1) == \
        pytest.approx(k)


def test_tile_iteration_dims_follow_the_output_layout():
    # nodes: 0 input (32, 7, 7, 256) (the largest rank-4 tensor), 1 weights, 2 the output (32, 7, 7, 64)
    nf = _shaped([(32, 7, 7, 256), (3, 3, 256, 64), (32, 7, 7, 64)])
    cf = np.zeros((3, 24), np.float32)
    cf[:, 8:12] = [[1, 7, 4, 1], [2, 1, 1, 1], [7, 7, 1, 1]]
    # no usable layout (0-padded columns): logical order
    np.testing.assert_array_equal(tile_iteration_dims(nf, cf), [32, 7, 7, 64, 0, 0])
    nf[2, 134:138] = [3, 0, 2, 1]  # minor_to_major: bounds run over dims 1, 2, 0, 3 (major to minor)
    np.testing.assert_array_equal(tile_iteration_dims(nf, cf), [7, 7, 32, 64, 0, 0])


def test_tile_iteration_dims_of_a_tuple_output():
    # 0 (16, 128); 1, 2 the fused computation's two outputs (16, 256); 3 its root tuple; 4 an entry
    # parameter (16, 512); 5 the fusion (tuple-shaped, last). Edges [u, v]: u uses v; caller → called root.
    nf = _shaped([(16, 128), (16, 256), (16, 256), (), (16, 512), ()])
    nf[[3, 5], 18] = 1  # tuples
    nf[[3, 5], 0] = 1  # roots of their computations
    nf[2, 134:136] = [0, 1]
    edges = np.array([[1, 0], [2, 0], [3, 1], [3, 2], [5, 3], [5, 4]])
    cf = np.zeros((2, 24), np.float32)
    cf[:, 8:10] = [[1, 2], [4, 1]]
    np.testing.assert_array_equal(tile_iteration_dims(nf, cf, edges), [256, 16, 0, 0, 0, 0])  # node 2
    np.testing.assert_array_equal(tile_iteration_dims(nf, cf), [16, 512, 0, 0, 0, 0])  # no edges: largest
    assert not tile_iteration_dims(nf, np.zeros((2, 24), np.float32), edges).any()  # no output bounds
    cf[:, 8:14] = 1
    assert not tile_iteration_dims(nf, cf, edges).any()  # no tensor of rank 6


def test_tile_config_features_relate_bounds_to_extents():
    cf = np.zeros((2, 24), np.float32)
    cf[:, 8:10] = [[4, 3], [16, 1]]
    cf[:, 14:16] = [[7, 12], [17, 16]]  # sum and product of the bounds
    plain = tile_config_features(cf, np.float64)
    assert plain.shape == (2, 42)
    np.testing.assert_allclose(plain[:, :24], np.log1p(cf))
    assert not plain[:, 24:].any()
    # extents (40, 300): spans min(b·8, 40) and min(b·128, 300)
    f = tile_config_features(cf, np.float64, np.array([40, 300, 0, 0, 0, 0]))
    np.testing.assert_allclose(f[:, 24:26], [[np.log2(40) / 10, np.log2(300) / 10]] * 2)
    np.testing.assert_allclose(f[:, 30:32], [[np.log2(40 / 32) / 10, 0.0], [0.0, np.log2(300 / 128) / 10]])
    np.testing.assert_allclose(f[:, 36:38], [[64 / 40 - 1, 0.0], [0.0, 384 / 300 - 1]])
    assert not f[:, 26:30].any() and not f[:, 32:36].any() and not f[:, 38:].any()
    one = np.zeros((1, 24), np.float32)
    one[0, 8] = 4
    g = tile_config_features(one, np.float64, np.array([4096, 0, 0, 0, 0, 0]))  # rank 1: lanes
    np.testing.assert_allclose(g[0, [24, 30, 36]], [1.2, 0.3, 0.0])  # span 512: 8 tiles, no padding


def test_real_tile_bounds_run_major_to_minor_in_lane_and_sublane_units(real_npz):
    """Ground truth for tile_iteration_dims and the units: in every real tile file, each output bound
    is ≤ ceil(extent / unit) over the iteration space's dims major to minor by its layout, and most
    files reach that ceiling (the rule is tight, not just an upper bound)."""
    files = sorted(real_npz.glob("tile/**/*.npz"))
    assert len(files) == 15
    bounded = tight = 0
    for path in files:
        with np.load(path) as z:
            cf, nf, edges = z["config_feat"], z["node_feat"], z["edge_index"]
        ext = tile_iteration_dims(nf, cf, edges)
        if not (cf[:, 8:14] > 0).any():
            continue
        bounded += 1
        r = int(np.count_nonzero(ext))
        unit = np.ones(r)
        unit[max(r - 2, 0):] = [8, 128][2 - min(r, 2):]
        top = np.ceil(ext[:r] / unit)
        most = cf[:, 8:8 + r].max(axis=0)
        assert (most <= top).all(), (path.name, ext, most)
        tight += bool((most == top).all())
    assert bounded == 12 and tight == 8


def test_modal_work_share_is_the_share_of_work_off_its_modal_block(layout_graph):
    from tpuprep.train.baseline import modal_work_share

    share = modal_work_share(layout_graph, chunk=7)  # several chunks
    pg = prepare_graph(layout_graph, "layout", np.zeros(134), np.ones(134), 1, np.float64)
    c_u = len(layout_graph.group_size)
    vals = np.asarray(layout_graph.node_config_feat(np.arange(c_u)), np.int64)
    code = ((vals[:, :, :6] + 1) * 7 ** np.arange(6)).sum(axis=2)  # (c_u, nc) output block codes
    off = code != pg.cfg_modal[None, :, 0]
    np.testing.assert_allclose(share, (off * pg.cfg_cost[None]).sum(axis=1) / pg.cfg_cost.sum())
    assert share.shape == (c_u,) and 0 < share.max() <= 1 and share.min() >= 0


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 5), st.integers(0, 12), st.integers(1, 40), st.randoms(use_true_random=False))
def test_modal_blocks_equal_a_plain_count(nc, k, chunk, rnd):
    """modal_of (any column slicing, ``chunk``) against a per-node, per-block dictionary count: largest
    total group size, ties → smallest code, 0 when nothing is counted."""
    from tpuprep.train.features import modal_of

    codes = np.array([[[rnd.choice([0, 1, 2, 7 ** 6 - 1]) for _ in range(3)] for _ in range(nc)]
                      for _ in range(k)], np.int64).reshape(k, nc, 3)
    sizes = np.array([rnd.randint(1, 3) for _ in range(k)], np.int64)
    expect = np.zeros((nc, 3), np.int64)
    for j in range(nc):
        for b in range(3):
            total: dict[int, int] = {}
            for row in range(k):
                total[int(codes[row, j, b])] = total.get(int(codes[row, j, b]), 0) + int(sizes[row])
            if total:
                best = max(total.values())
                expect[j, b] = min(c for c, t in total.items() if t == best)
    got = modal_of(codes.astype(np.int32), sizes, chunk=chunk)
    assert got.shape == (nc, 3) and got.dtype == np.int64
    np.testing.assert_array_equal(got, expect)
