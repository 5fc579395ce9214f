"""The epoch plan (``sampling/plan.py``) and weighted mixes of collections (``sampling/mixing.py``,
issue #38 item 2) against a slow plain-Python reference of the documented rule; the bounds of issue #36
items 6 and 7 (epochs in the int64 range, at most 2**24 batches per epoch, refused before anything is
materialised); and a mix through ``ConfigBatches``, its resume, its ranks and its adapters."""

from __future__ import annotations

import json
import time
import zlib
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tpuprep
from tpuprep.sampling.batches import ConfigBatches
from tpuprep.sampling.plan import (
    MAX_EPOCH,
    MAX_EPOCH_ITEMS,
    EpochPlan,
    PlanLayout,
    apportion,
    epoch_plan,
)

XLA, NLP = "layout:xla:random", "layout:nlp:random"
MIX = {XLA: 3, NLP: 1}


# -- the reference ----------------------------------------------------------------------------------

def ref_shares(total: int, weights: list[float]) -> list[int]:
    """Largest remainder, in exact rationals, written out plainly."""
    w = [Fraction(x) for x in weights]
    exact = [Fraction(total) * x / sum(w) for x in w]
    shares = [q.numerator // q.denominator for q in exact]
    left = total - sum(shares)
    by_remainder = sorted(range(len(w)), key=lambda c: (exact[c] - shares[c], -c), reverse=True)
    for c in by_remainder[:left]:
        shares[c] += 1
    return shares


def ref_plan(names, weights, graphs, quotas, seed, epoch) -> list[tuple[int, int]]:
    """The plan as sampling/plan.py's docstring defines it, one Python tuple at a time."""
    first = np.concatenate([[0], np.cumsum(graphs)]).tolist()
    rounds = [[(g, b) for g in range(first[c], first[c + 1]) for b in range(int(quotas[g]))]
              for c in range(len(names))]
    total = sum(len(r) for r in rounds)
    shares = ref_shares(total, weights) if len(names) > 1 else [total]
    draws = []
    for c, name in enumerate(names):
        whole, left = divmod(shares[c], len(rounds[c])) if rounds[c] else (0, 0)
        for r in range(whole):
            draws += [(g, b + r * int(quotas[g])) for g, b in rounds[c]]
        if left:
            pick = np.random.default_rng([seed, epoch, zlib.crc32(name.encode())]).permutation(len(rounds[c]))
            draws += [(g, b + whole * int(quotas[g])) for g, b in (rounds[c][i] for i in pick[:left])]
    order = np.random.default_rng([seed, epoch]).permutation(total)
    return [draws[i] for i in order]


def _layout(names, weights, graphs, quotas) -> PlanLayout:
    return PlanLayout.mix(names, weights, graphs, np.asarray(quotas, np.int64))


@st.composite
def mixes(draw):
    c = draw(st.integers(1, 3))
    names = [f"layout:c{i}" for i in range(c)]
    graphs = [draw(st.integers(1, 4)) for _ in range(c)]
    quotas = []
    for n in graphs:
        q = [draw(st.integers(0, 4)) for _ in range(n)]
        if c > 1 and not any(q):
            q[0] = draw(st.integers(1, 3))  # a collection of a mix has something to draw
        quotas += q
    weights = [draw(st.sampled_from([1, 2, 3, 0.5, 1.7, 10])) for _ in range(c)]
    return names, weights, graphs, quotas


@given(mixes(), st.integers(0, 2**32), st.integers(0, MAX_EPOCH))
def test_the_plan_is_the_documented_rule(mix, seed, epoch):
    names, weights, graphs, quotas = mix
    plan = EpochPlan(_layout(names, weights, graphs, quotas), seed, epoch)
    got = [tuple(x) for x in plan.items(np.arange(len(plan))).tolist()]
    assert got == ref_plan(names, weights, graphs, quotas, seed, epoch)
    positions = np.random.default_rng(seed).permutation(len(plan))[:7]  # any positions, any order
    assert [tuple(x) for x in plan.items(positions).tolist()] == [got[p] for p in positions.tolist()]


@given(mixes(), st.integers(0, 1000))
def test_each_collections_share_follows_its_weight_within_one_batch(mix, seed):
    names, weights, graphs, quotas = mix
    layout = _layout(names, weights, graphs, quotas)
    items = EpochPlan(layout, seed, 3).items(np.arange(len(layout)))
    first = np.concatenate([[0], np.cumsum(graphs)])
    per = np.searchsorted(first, items[:, 0], side="right") - 1 if len(items) else np.zeros(0, int)
    counts = np.bincount(per, minlength=len(names))
    total = sum(quotas)
    assert len(items) == total  # an epoch has as many batches as one round of every collection
    for c, w in enumerate(weights):
        assert abs(counts[c] - Fraction(total) * Fraction(w) / sum(Fraction(x) for x in weights)) < 1
    for c in range(len(names)):  # up-sampled: every item ⌊n/R⌋ or ⌈n/R⌉ times; down-sampled: distinct
        mine = Counter(zip(*[items[per == c, 0].tolist(), (items[per == c, 1] % np.maximum(
            np.asarray(quotas)[items[per == c, 0]], 1)).tolist()], strict=True))
        rounds = sum(quotas[first[c]:first[c + 1]])
        if rounds:
            assert max(mine.values(), default=0) - min(mine.values(), default=0) <= 1
            assert len(mine) == min(rounds, counts[c])
    assert len({tuple(x) for x in items.tolist()}) == len(items)  # each draw its own batch index


@given(st.integers(0, 10**6), st.lists(st.sampled_from([1, 2, 3, 0.25, 7.5]), min_size=1, max_size=5))
def test_apportion_is_the_largest_remainder(total, weights):
    assert apportion(total, weights).tolist() == ref_shares(total, weights)


def test_one_collection_keeps_the_plan_of_every_earlier_version():
    quotas = np.array([3, 1, 0, 2])
    items = np.array([(g, b) for g in range(4) for b in range(quotas[g])], np.int64)
    for seed, epoch in ((5, 2), (0, 0), (9, 2**63 - 1)):
        want = items[np.random.default_rng([seed, epoch]).permutation(len(items))]
        assert np.array_equal(epoch_plan(4, quotas, seed, epoch), want)


@pytest.mark.parametrize("weights", [[1, 3], [3, 1], [1, 1.001]])
def test_a_plan_holds_at_most_8_bytes_per_item(weights):
    """The order (N int32) and the partial rounds' picks (≤ N int32, each its own array: a view of the
    permutation it was drawn from would keep all R_c items of it alive, int64: 192 MiB at the bound)."""
    layout = PlanLayout.mix(["a", "b"], weights, [300, 500], np.full(800, 25))
    plan = EpochPlan(layout, 3, 1)
    picks = [p for p in plan._picks if len(p)]
    assert picks and all(p.base is None and p.dtype == np.int32 for p in picks)
    assert plan.order.nbytes + sum(p.nbytes for p in picks) <= 8 * len(plan)


def test_an_epoch_over_the_bound_is_refused_before_anything_is_allocated(ds):
    layout = PlanLayout.single(np.array([MAX_EPOCH_ITEMS, 1]))
    with pytest.raises(ValueError, match="more than 16,777,216"):
        EpochPlan(layout, 0, 0)
    for huge in (10**12, 10**7):  # 21.8 TiB, and 5.9 GB with minutes before the first batch (issue #36)
        started = time.perf_counter()
        with pytest.raises(ValueError, match="give fewer batches_per_graph"):
            ConfigBatches(ds, XLA, batches_per_graph=huge)
        assert time.perf_counter() - started < 5
    ok = ConfigBatches(ds, XLA, batches_per_graph=MAX_EPOCH_ITEMS // 2)  # 2 graphs: exactly the bound
    assert len(ok) == MAX_EPOCH_ITEMS


@pytest.mark.parametrize("epoch", [2**63, np.uint64(2**64 - 1), -1, 1.0, True])
def test_an_epoch_outside_int64_is_refused_in_one_line(ds, epoch):
    b = ConfigBatches(ds, XLA, k=4)
    with pytest.raises(ValueError, match=r"epoch must be an int in 0\.\.9223372036854775807"):
        b.set_epoch(epoch)
    state = b.state_dict()
    if isinstance(epoch, int) and not isinstance(epoch, bool):
        with pytest.raises(ValueError, match="bad epoch"):
            b.load_state_dict({**state, "epoch": epoch})
    assert b.epoch == 0


def test_the_last_epoch_is_read_exactly(ds):
    b = ConfigBatches(ds, XLA, k=4, batches_per_graph=2)
    b.set_epoch(np.int64(MAX_EPOCH))
    first = [(x.graph_id, x.epoch, x.sample.rows.tolist()) for x in b]
    assert len(first) == 4 and all(e == MAX_EPOCH for _, e, _ in first)
    state = json.loads(json.dumps(b.state_dict()))
    again = ConfigBatches(ds, XLA, k=4, batches_per_graph=2)
    again.load_state_dict(state)
    assert again.epoch == MAX_EPOCH and list(again) == []


# -- a mix through ConfigBatches ------------------------------------------------------------------

@pytest.fixture(scope="module")
def ds(synth_shards):
    return tpuprep.open_dataset(synth_shards)


def _mix(ds, **kwargs) -> ConfigBatches:
    return ConfigBatches(ds, MIX, **{"k": 4, "seed": 3, "batches_per_graph": 5, **kwargs})


def _key(b) -> tuple:
    return (b.graph_id, b.collection, b.epoch, tuple(b.sample.rows.tolist()))


def test_a_mix_up_samples_one_collection_and_down_samples_the_other(ds):
    """2 + 2 graphs, 5 batches each: an epoch of 20 batches, 15 of xla (its 10 items drawn 1.5 times:
    a second round re-shuffled, with fresh rows) and 5 of nlp (half of its items)."""
    b = _mix(ds)
    assert b.collection is None and b.collections == (NLP, XLA) and b.weights == (1, 3)
    assert len(b) == 20
    for epoch in (0, 1):
        b.set_epoch(epoch)
        got = list(b)
        by = Counter(x.collection for x in got)
        assert by == {XLA: 15, NLP: 5}
        assert all(x.collection == x.graph_id.rsplit(":", 1)[0] for x in got)
        xla = Counter(x.graph_id for x in got if x.collection == XLA)
        assert sorted(xla.values()) == [7, 8]  # 5 + 5 items, then 5 more of a second round
        assert len({_key(x) for x in got}) == 20  # every draw its own rows
        ref = ds.read_configs(got[0].graph_id, got[0].sample.rows)
        assert np.array_equal(ref.node_config_feat, got[0].sample.node_config_feat)
    assert [_key(x) for x in _mix(ds)] == [_key(x) for x in _mix(ds)]  # deterministic per seed
    assert [_key(x) for x in _mix(ds)] != [_key(x) for x in _mix(ds, seed=4)]


def test_a_mix_is_refused_in_one_line_when_malformed(ds):
    for bad, match in [({}, "non-empty mapping"), ({XLA: 0}, "finite number > 0"), ({XLA: float("nan")}, "finite"),
                       ({XLA: True}, "finite number"), ({XLA: 1, "tile:xla": 1}, "one kind"),
                       ({XLA: 1, "layout:nope": 1}, "no collection 'layout:nope'"), ({1: 2}, "are names")]:
        with pytest.raises((ValueError, KeyError), match=match):
            ConfigBatches(ds, bad)
    with pytest.raises(ValueError, match="leaves no graph of layout:nlp:random"):
        ConfigBatches(ds, MIX, graph_ids=ds.graph_ids(XLA, "train"))
    one = ConfigBatches(ds, {XLA: 2.5}, k=4, seed=3)  # a one-entry mapping is that collection
    assert one.collection == XLA and one.fingerprint() == ConfigBatches(ds, XLA, k=4, seed=3).fingerprint()


def test_a_mix_resumes_mid_epoch_exactly_and_refuses_another_mix(ds):
    whole = [_key(x) for x in _mix(ds)]
    a = _mix(ds)
    it = iter(a)
    seen = [_key(next(it)) for _ in range(7)]
    state = json.loads(json.dumps(a.state_dict()))
    b = _mix(ds)
    b.load_state_dict(state)
    assert seen + [_key(x) for x in b] == whole
    other = ConfigBatches(ds, {XLA: 1, NLP: 1}, k=4, seed=3, batches_per_graph=5)
    with pytest.raises(ValueError, match="other settings or seed"):
        other.load_state_dict(state)
    assert _mix(ds).fingerprint() == ConfigBatches(ds, {NLP: 1.0, XLA: 3.0}, k=4, seed=3,
                                                   batches_per_graph=5).fingerprint()


@pytest.mark.parametrize("old, new, steps", [(2, 3, 3), (3, 2, 2), (1, 3, 5)])
def test_a_mix_deals_equal_shares_and_resumes_across_world_sizes(ds, old, new, steps):
    single = Counter(_key(x) for x in _mix(ds))
    ranks = [_mix(ds, rank=r, world_size=old) for r in range(old)]
    assert len({len(r) for r in ranks}) == 1
    its = [iter(r) for r in ranks]
    consumed = Counter(_key(next(it)) for it in its for _ in range(steps))
    state = ranks[0].state_dict()
    after = Counter()
    lengths = set()
    for r in range(new):
        b = _mix(ds, rank=r, world_size=new)
        b.load_state_dict(state)
        got = [_key(x) for x in b]
        lengths.add(len(got))
        after.update(got)
    assert len(lengths) == 1 and not set(consumed) & set(after)
    assert set(consumed) | set(after) == set(single) and sum(after.values()) - len(after) < new


def test_the_adapters_take_a_mix_unchanged(ds, synth_shards):
    """torch: DataLoader with 2 workers gives the single-process stream and names each batch's
    collection; JAX: the ladder covers both collections' graphs, padding keeps the rows."""
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    from torch.utils.data import DataLoader

    from tpuprep.jax import JaxBatches
    from tpuprep.torch import ConfigBatchDataset

    want = [(x.graph_id, x.collection, tuple(x.sample.rows.tolist())) for x in _mix(ds)]
    items = list(DataLoader(ConfigBatchDataset(_mix(ds)), batch_size=None, num_workers=2))
    assert [(i["graph_id"], i["collection"], tuple(i["rows"].tolist())) for i in items] == want
    jax_items = list(JaxBatches(_mix(ds)))
    assert [(i["graph_id"], i["collection"], tuple(i["rows"].tolist())) for i in jax_items] == want
    assert len({i["rung"] for i in jax_items}) <= 8


def test_the_mix_example_of_readers_md_runs(synth_shards):
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("torch")
    root = Path(__file__).resolve().parents[1]
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, str(root / "docs" / "examples" / "batches_mix.py"), str(synth_shards),
                          f"{XLA}=3", f"{NLP}=1"], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == [f"epoch 0: 8 batches, {NLP} 2, {XLA} 6", f"epoch 1: 8 batches, {NLP} 2, {XLA} 6",
                                       "DataLoader with 2 workers gives the same stream: True",
                                       "resumed after 5 batches: True"]
