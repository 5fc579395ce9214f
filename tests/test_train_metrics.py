"""Metrics of tpuprep.train against scipy and brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpuprep.train.metrics import (
    collection_means,
    expand_to_original,
    kendall_tau,
    ordered_pair_accuracy,
    pair_counts,
    slowdown_at_k,
    tile_score,
    tile_score_of_listed,
)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def scipy_tau(x, y) -> float:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(scipy.stats.kendalltau(x, y).statistic)


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


floats = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, width=64)


@SETTINGS
@given(st.lists(st.tuples(floats, floats), min_size=0, max_size=80))
def test_tau_matches_scipy_random(pairs):
    x = np.array([p[0] for p in pairs])
    y = np.array([p[1] for p in pairs])
    assert same(kendall_tau(x, y), scipy_tau(x, y))


@SETTINGS
@given(st.integers(0, 120), st.integers(1, 5), st.integers(1, 5), st.integers(0, 2**32 - 1))
def test_tau_matches_scipy_heavy_ties(n, kx, ky, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, kx, n).astype(np.float64)
    y = rng.integers(0, ky, n)  # int64 runtimes-like
    assert same(kendall_tau(x, y), scipy_tau(x, y))


def test_tau_large_tied_matches_scipy_exactly():
    rng = np.random.default_rng(7)
    n = 100_040
    x = np.round(rng.normal(size=n), 2)  # many ties in predictions
    y = rng.integers(79_500_000, 80_000_000, n).astype(np.int64)
    y[rng.integers(0, n, 5000)] = y[0]  # a big tie group in truth
    assert kendall_tau(x, y) == scipy_tau(x, y)


def test_tau_special_cases():
    assert kendall_tau([1, 2, 3], [1, 2, 3]) == 1.0
    assert kendall_tau([1, 2, 3], [3, 2, 1]) == -1.0
    assert math.isnan(kendall_tau([1, 1, 1], [1, 2, 3]))  # constant input
    assert math.isnan(kendall_tau([1.0], [2.0]))
    assert math.isnan(kendall_tau([], []))
    assert math.isnan(kendall_tau([1.0, np.nan, 3.0], [1, 2, 3]))
    assert kendall_tau([-0.0, 0.0, 1.0], [1, 2, 3]) == scipy_tau([-0.0, 0.0, 1.0], [1, 2, 3])
    with pytest.raises(ValueError):
        kendall_tau([1, 2], [1, 2, 3])


def brute_opa(pred, truth, half=False):
    good = total = 0.0
    for i in range(len(pred)):
        for j in range(len(pred)):
            if truth[i] > truth[j]:
                total += 1
                if pred[i] > pred[j]:
                    good += 1
                elif half and pred[i] == pred[j]:
                    good += 0.5
    return good / total if total else math.nan


@SETTINGS
@given(st.integers(0, 40), st.integers(1, 6), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_opa_matches_brute_force(n, kx, ky, seed):
    rng = np.random.default_rng(seed)
    pred = rng.integers(0, kx, n).astype(np.float64)
    truth = rng.integers(0, ky, n)
    assert same(ordered_pair_accuracy(pred, truth), brute_opa(pred, truth))
    a, b = ordered_pair_accuracy(pred, truth, ties="half"), brute_opa(pred, truth, half=True)
    assert (math.isnan(a) and math.isnan(b)) or abs(a - b) < 1e-12


def test_opa_without_ties_is_tau_plus_one_over_two():
    rng = np.random.default_rng(3)
    pred, truth = rng.normal(size=300), rng.normal(size=300)
    assert ordered_pair_accuracy(pred, truth) == pytest.approx((kendall_tau(pred, truth) + 1) / 2)


def test_pair_counts_consistent():
    rng = np.random.default_rng(5)
    x, y = rng.integers(0, 4, 50), rng.integers(0, 4, 50)
    pc = pair_counts(x, y)
    i, j = np.triu_indices(50, 1)
    sx, sy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
    assert pc.dis == int(((sx * sy) < 0).sum())
    assert pc.con == int(((sx * sy) > 0).sum())
    assert pc.xtie == int((sx == 0).sum()) and pc.ytie == int((sy == 0).sum())
    assert pc.ntie == int(((sx == 0) & (sy == 0)).sum())


def test_slowdown_and_tile_score():
    runtime = np.array([10.0, 5.0, 8.0, 20.0, 6.0, 7.0])
    pred = np.array([0.0, 9.0, 1.0, 2.0, 3.0, 8.0])  # predicted order: 0, 2, 3, 4, 5, 1
    assert slowdown_at_k(pred, runtime, 1) == 10.0 / 5.0
    assert slowdown_at_k(pred, runtime, 4) == 6.0 / 5.0
    assert slowdown_at_k(pred, runtime, 6) == 1.0
    assert slowdown_at_k(pred, runtime, 100) == 1.0
    assert tile_score(pred, runtime, np.ones(6)) == 2.0 - 6.0 / 5.0
    # ties in the prediction go to the lower index
    assert slowdown_at_k(np.zeros(6), runtime, 1) == 2.0


def test_tile_score_uses_runtime_over_normalizer():
    runtime = np.array([100, 90, 300], np.int64)
    norm = np.array([100, 50, 400], np.int64)  # ratios 1.0, 1.8, 0.75 → best is index 2
    pred = np.array([2.0, 0.0, 1.0])  # lists 1 first (the fastest raw runtime)
    assert tile_score(pred, runtime, norm, k=1) == pytest.approx(2 - 1.8 / 0.75)
    assert tile_score(pred, runtime, norm, k=2) == pytest.approx(2 - 1.0)
    assert tile_score_of_listed(np.array([0, 1]), runtime / norm) == pytest.approx(2 - 1.0 / 0.75)


def test_expand_to_original():
    pred_u = np.array([0.5, -1.0, 2.0])
    inv = np.array([0, 1, 0, 2, 1], np.int32)
    np.testing.assert_array_equal(expand_to_original(pred_u, inv), [0.5, -1.0, 0.5, 2.0, -1.0])
    with pytest.raises(ValueError):
        expand_to_original(pred_u, np.array([3]))


def test_collection_means_ignores_nan():
    rows = [{"collection": "a", "tau": 0.5}, {"collection": "a", "tau": math.nan},
            {"collection": "b", "tau": 0.1}, {"collection": "a", "tau": 0.3}]
    m = collection_means(rows, ["tau", "opa"])
    assert m["a"]["tau"] == pytest.approx(0.4) and m["a"]["graphs"] == 3
    assert math.isnan(m["b"]["opa"])


def _reference_means(rows, keys, by="collection"):
    """The per-collection means written out in plain Python (the oracle of collection_means)."""
    out = {}
    for coll in sorted({str(r[by]) for r in rows}):
        mine = [r for r in rows if str(r[by]) == coll]
        out[coll] = {}
        for k in keys:
            vals = [float(r[k]) for r in mine if r.get(k) is not None and math.isfinite(float(r[k]))]
            out[coll][k] = float(np.mean(vals)) if vals else math.nan
        out[coll]["graphs"] = float(len(mine))
    return out


def test_collection_means_equals_the_plain_python_reference():
    rng = np.random.default_rng(7)
    choices = [None, math.nan, math.inf, -math.inf, 0.25, -0.5, 1.0]
    rows = []
    for _ in range(200):
        row = {"collection": f"c{rng.integers(4)}"}
        for k in ("tau", "opa", "slowdown"):
            if rng.random() < 0.8:
                row[k] = choices[rng.integers(len(choices))] if rng.random() < 0.3 else float(rng.normal())
        rows.append(row)
    got = collection_means(iter(rows), ["tau", "opa", "slowdown", "absent"])
    want = _reference_means(rows, ["tau", "opa", "slowdown", "absent"])
    assert list(got) == list(want)
    for coll in want:
        for k, v in want[coll].items():
            assert (math.isnan(v) and math.isnan(got[coll][k])) or got[coll][k] == pytest.approx(v, rel=1e-12), (coll, k)
