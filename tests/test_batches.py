"""The batch sampler (issue #14): ``Dataset.read_configs`` / ``config_runtimes``, the row strategies,
``ConfigBatches`` (epoch plan, rank and worker sharding, determinism, resume, the structures LRU)."""

from __future__ import annotations

import json
from collections import Counter
from itertools import zip_longest
from types import SimpleNamespace

import numpy as np
import pytest

import tpuprep
from tpuprep.sampling import strategies
from tpuprep.sampling.batches import ConfigBatches, epoch_plan, share_indices
from tpuprep.sampling.sharding import share_length
from tpuprep.shards.reader import sample_rows, unique_config_columns

LAYOUT = "layout:xla:random"


@pytest.fixture(scope="module")
def ds(synth_shards):
    return tpuprep.open_dataset(synth_shards)


def _key(b) -> tuple:
    """What identifies a yielded batch: graph, epoch and the rows drawn."""
    return (b.graph_id, b.epoch, tuple(b.sample.rows.tolist()))


# -- reader additions -------------------------------------------------------------------------------

@pytest.mark.parametrize("collection", [LAYOUT, "tile:xla"])
def test_read_configs_equals_load_graph_rows_in_the_order_given(ds, collection):
    for gid in ds.graph_ids(collection):
        g = ds.load_graph(gid)
        c_u = g.num_unique_configs
        rows = np.random.default_rng(1).integers(0, c_u, 2 * c_u + 3)  # repeats, any order
        s = ds.read_configs(gid, rows)
        assert s.rows.dtype == np.int64 and np.array_equal(s.rows, rows)
        assert np.array_equal(s.group_size, g.group_size[rows])
        assert np.array_equal(s.first_index, g.first_index[rows])
        if g.config_runtime is None:
            assert s.config_runtime is None
        else:
            assert np.array_equal(s.config_runtime, g.config_runtime[rows])
        if g.kind == "layout":
            assert np.array_equal(s.node_config_feat, g.node_config_feat(rows))
        else:
            assert np.array_equal(s.config_feat, g.config_feat[rows])


@pytest.mark.parametrize("collection", [LAYOUT, "tile:xla"])
def test_sample_configs_is_read_configs_of_sample_rows(ds, collection):
    for gid in ds.graph_ids(collection):
        c_u = ds.num_unique_configs(gid)
        assert c_u == ds.load_graph(gid).num_unique_configs
        a = ds.sample_configs(gid, 5, seed=7)
        b = ds.read_configs(gid, sample_rows(c_u, 5, 7))
        for field in vars(a):
            x, y = getattr(a, field), getattr(b, field)
            assert (x is None and y is None) or np.array_equal(x, y), field


def test_read_configs_refuses_rows_out_of_range(ds):
    gid = ds.graph_ids(LAYOUT, "train")[0]
    c_u = ds.num_unique_configs(gid)
    with pytest.raises(IndexError, match=f"row {c_u} of"):
        ds.read_configs(gid, [0, c_u])
    with pytest.raises(IndexError, match="row -1 of"):
        ds.read_configs(gid, [-1])
    with pytest.raises(ValueError, match="1-D array of integers"):
        ds.read_configs(gid, [[0]])
    with pytest.raises(KeyError):
        ds.read_configs("layout:xla:random:nope", [0])


@pytest.mark.parametrize("collection", [LAYOUT, "tile:xla"])
def test_config_runtimes_equal_load_graph_and_none_on_test(ds, collection):
    for gid in ds.graph_ids(collection):
        g = ds.load_graph(gid)
        r = ds.config_runtimes(gid)
        if g.split == "test":
            assert r is None
        else:
            assert r.dtype == np.int64 and np.array_equal(r, g.config_runtime)


def _spy_columns(monkeypatch) -> list:
    """Record the ``columns`` of every ``read_row_groups`` call of the reader (the list returned), and
    ``["codes"]`` for every direct read of codes pages (``shards/pages.py``: that column chunk only)."""
    from tpuprep.shards import pages, parquet

    seen = []
    real, direct = parquet.read_row_groups, pages.sampled_codes

    def spy(pf, path, rgs, columns=None, use_threads=True):
        seen.append(columns)
        return real(pf, path, rgs, columns, use_threads)

    def spy_direct(*args):
        out = direct(*args)
        if out is not None:
            seen.append(["codes"])
        return out

    monkeypatch.setattr(parquet, "read_row_groups", spy)
    monkeypatch.setattr(pages, "sampled_codes", spy_direct)
    return seen


def test_config_runtimes_read_no_codes(ds, monkeypatch):
    """Layout: the runtimes derived from the structure (the dataset's derived cache), no configs row group
    read; tile: only the runtime column (with graph_id and config_id) of its configs rows."""
    seen = _spy_columns(monkeypatch)
    fresh = tpuprep.open_dataset(ds.root)
    fresh.config_runtimes(fresh.graph_ids(LAYOUT, "train")[0])
    assert seen == [] and len(fresh.configs.derived) == 1
    r = fresh.config_runtimes(fresh.graph_ids(LAYOUT, "train")[0])
    r[0] += 1  # a fresh array of the caller's, not the cache's
    assert r[0] == fresh.config_runtimes(fresh.graph_ids(LAYOUT, "train")[0])[0] + 1
    fresh.config_runtimes(fresh.graph_ids("tile:xla", "train")[0])
    assert seen == [["graph_id", "config_id", "runtime"]]


@pytest.mark.parametrize("collection", ["layout:xla:random", "layout:nlp:default"])
def test_unique_config_columns_equal_the_stored_ones(ds, collection):
    for gid in ds.graph_ids(collection):
        g = ds.load_graph(gid)
        cols = unique_config_columns(ds.load_graph(gid, configs=False))
        assert np.array_equal(cols["group_size"], g.group_size) and cols["group_size"].dtype == np.int32
        assert np.array_equal(cols["first_index"], g.first_index) and cols["first_index"].dtype == np.int32
        for key, field in (("runtime", "config_runtime"), ("runtime_spread", "config_runtime_spread")):
            stored = getattr(g, field)
            assert (cols[key] is None) == (stored is None), (gid, key)
            assert stored is None or (np.array_equal(cols[key], stored) and cols[key].dtype == np.int64)


def test_unique_config_columns_refuse_a_misnumbered_inverse(ds):
    from dataclasses import replace

    s = ds.load_graph(ds.graph_ids(LAYOUT, "train")[0], configs=False)
    swapped = s.config_inverse.copy()
    swapped[swapped == 0], swapped[swapped == 1] = -1, 0
    swapped[swapped == -1] = 1
    with pytest.raises(ValueError, match="order of first occurrence"):
        unique_config_columns(replace(s, config_inverse=swapped))


def test_unique_config_columns_are_read_only_for_an_empty_graph_too(ds):
    from dataclasses import replace

    s = ds.load_graph(ds.graph_ids(LAYOUT, "train")[0], configs=False)
    for runtimes in (np.zeros(0, np.int64), None):  # a split with runtimes, and test
        cols = unique_config_columns(replace(s, config_inverse=np.zeros(0, np.int64),
                                             config_runtime_original=runtimes))
        arrays = [v for v in cols.values() if v is not None]
        assert len(arrays) == (4 if runtimes is not None else 2)
        assert all(len(v) == 0 and not v.flags.writeable for v in arrays)
        assert len({id(v) for v in arrays}) == len(arrays)  # no array shared between two columns


def test_read_configs_reads_codes_only_and_columns_is_deprecated(ds, monkeypatch):
    """read_configs reads only the config_id and codes chunks of a layout graph's row groups: its other
    fields are the derived columns' rows, equal to the stored ones (and of their dtypes). The columns a
    caller once passed (issue #37) are refused when wrong, warned about and not used."""
    seen = _spy_columns(monkeypatch)
    for gid in ds.graph_ids(LAYOUT):
        rows = np.random.default_rng(2).permutation(ds.num_unique_configs(gid))[:9]
        seen.clear()
        plain = ds.read_configs(gid, rows)
        assert seen and all(c in (["config_id", "codes"], ["codes"]) for c in seen)  # pyarrow's read, or pages
        g = ds.load_graph(gid)
        for field, stored in (("group_size", g.group_size), ("first_index", g.first_index),
                              ("config_runtime", g.config_runtime), ("config_runtime_spread", g.config_runtime_spread)):
            got = getattr(plain, field)
            assert (got is None and stored is None) or (np.array_equal(got, stored[rows]) and got.dtype == stored.dtype)
            assert got is None or got.flags.writeable
        cols = unique_config_columns(ds.load_graph(gid, configs=False))
        wrong = {k: None if v is None else np.zeros_like(v) for k, v in cols.items()}  # well formed, not used
        with pytest.warns(DeprecationWarning, match=r"columns=\) is deprecated and ignored"):
            fast = ds.read_configs(gid, rows, wrong)
        for field in vars(plain):
            x, y = getattr(plain, field), getattr(fast, field)
            assert (x is None and y is None) or (np.array_equal(x, y) and np.asarray(x).dtype == np.asarray(y).dtype), field


def test_batches_hold_the_stored_configs(ds):
    for strategy in ("uniform", "stratified"):
        for b in ConfigBatches(ds, LAYOUT, k=12, strategy=strategy, batches_per_graph=2):
            ref = ds.read_configs(b.graph_id, b.sample.rows)
            for field in vars(ref):
                x, y = getattr(ref, field), getattr(b.sample, field)
                assert (x is None and y is None) or np.array_equal(x, y), field


# -- strategies -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["uniform", "stratified", "pairs"])
@pytest.mark.parametrize("c, k", [(1000, 64), (50, 64), (7, 7), (9, 3), (2, 1), (0, 4), (5, 0)])
def test_strategies_give_distinct_rows_clipped_to_the_count(name, c, k):
    runtimes = np.random.default_rng(c).integers(1, 10**12, c)
    arg = c if name == "uniform" else runtimes
    fn = strategies.STRATEGIES[name][1]
    rows = fn(arg, k, np.random.default_rng(3))
    assert rows.dtype == np.int64 and len(rows) == min(k, c)
    assert len(set(rows.tolist())) == len(rows) and ((rows >= 0) & (rows < max(c, 1))).all()
    assert np.array_equal(rows, fn(arg, k, np.random.default_rng(3)))


def test_stratified_takes_a_quarter_from_each_extreme():
    runtimes = np.random.default_rng(0).permutation(1000).astype(np.int64) * 10
    for seed in range(5):
        rows = strategies.stratified(runtimes, 64, np.random.default_rng(seed))
        rank = np.argsort(np.argsort(runtimes))[rows]  # 0 = fastest
        assert (rank[:16] < 100).all() and (rank[16:32] >= 900).all()


def test_pairs_are_neighbours_in_runtime_order():
    runtimes = np.random.default_rng(0).permutation(500).astype(np.int64) * 3
    rank = np.argsort(np.argsort(runtimes))
    rows = strategies.pairs(runtimes, 64, np.random.default_rng(1))
    first, second = rank[rows[0::2]], rank[rows[1::2]]
    assert np.array_equal(second, first + 1)


def test_sqrt_quotas_follow_the_square_root():
    q = strategies.sqrt_quotas(np.array([100, 400, 10000, 0, 1]))
    assert q.tolist() == [1, 1, 4, 0, 1]  # round(5 * [10, 20, 100, 0, 1] / 131)
    assert strategies.sqrt_quotas(np.array([1, 4, 16, 64])).tolist() == [1, 1, 1, 2]  # round(4 * [1, 2, 4, 8] / 15)


# -- the plan and its sharding ----------------------------------------------------------------------

def test_epoch_plan_holds_every_item_once_and_is_pure():
    quotas = np.array([3, 1, 0, 2])
    plan = epoch_plan(4, quotas, seed=5, epoch=2)
    assert sorted(map(tuple, plan.tolist())) == [(0, 0), (0, 1), (0, 2), (1, 0), (3, 0), (3, 1)]
    assert np.array_equal(plan, epoch_plan(4, quotas, seed=5, epoch=2))
    assert any(not np.array_equal(plan, epoch_plan(4, quotas, 5, e)) for e in range(3, 8))


@pytest.mark.parametrize("n, w, workers, start, drop_last, base", [
    (23, 3, 2, 0, False, 0), (7, 2, 3, 0, False, 0), (10, 1, 4, 3, False, 0), (5, 4, 2, 1, False, 0),
    (23, 3, 2, 0, True, 0), (5, 4, 2, 0, True, 0), (2, 3, 1, 0, False, 0), (2, 3, 2, 0, True, 0),
    (23, 3, 2, 1, False, 7), (23, 4, 3, 0, True, 9), (0, 3, 2, 0, False, 0), (9, 3, 2, 0, False, 9)])
def test_shares_of_ranks_and_workers_are_equal_and_cover_the_epoch(n, w, workers, start, drop_last, base):
    """Every rank's share has the same length; the union over ranks is the layout's items (plan
    positions base..n-1) plus < w padding items of the layout (or minus < w dropped ones)."""
    left = n - base
    length = share_length(n, w, drop_last, base)
    assert length == (left // w if drop_last else -(-left // w))
    seen = []
    for rank in range(w):
        slots = np.arange(rank, length * w, w)
        share = base + slots % left if left else slots
        mine = [share_indices(n, rank, w, i, workers, start, drop_last, base) for i in range(workers)]
        got = np.concatenate([p for p, _ in mine])
        assert sorted(got.tolist()) == sorted(share[start:].tolist())  # the rank's share from start, once
        seen += got.tolist()
        # round-robin over the workers gives the share in order (the DataLoader's order)
        order = [x for t in zip_longest(*[p.tolist() for p, _ in mine]) for x in t]
        assert [x for x in order if x is not None] == share[start:].tolist()
        assert [len(p) for p, _ in mine] == [len(range(i, length - start, workers)) for i in range(workers)]
    if start == 0:
        counts = Counter(seen)
        assert all(base <= x < n for x in counts)
        if drop_last:
            assert sorted(seen) == list(range(base, base + length * w)) and left - len(seen) < w
        else:
            assert set(counts) == set(range(base, n)) and 0 <= len(seen) - left < w
            assert all(c <= 2 for c in counts.values()) or left < w


def test_ranks_and_workers_together_yield_exactly_the_plan(ds):
    def make(rank, world):
        return ConfigBatches(ds, LAYOUT, k=8, seed=3, rank=rank, world_size=world, batches_per_graph=5)

    single = [_key(b) for b in make(0, 1)]
    assert len(single) == 5 * len(ds.graph_ids(LAYOUT, "train"))
    union = []
    for rank in range(2):
        for worker in range(3):
            b = make(rank, 2)
            b.set_worker(worker, 3)
            keys = [_key(x) for x in b]
            assert len(keys) == len(b)
            union += keys
    assert Counter(union) == Counter(single)
    plan = make(0, 1).plan()
    assert Counter((g, e) for g, e, _ in single) == Counter((make(0, 1).graph_ids[g], 0) for g, _ in plan)


def test_batches_are_deterministic_and_change_with_the_epoch(ds):
    a = ConfigBatches(ds, LAYOUT, k=16, seed=1, batches_per_graph=2)
    b = ConfigBatches(ds, LAYOUT, k=16, seed=1, batches_per_graph=2)
    first = [_key(x) for x in a]
    assert first == [_key(x) for x in b] == [_key(x) for x in a]
    a.set_epoch(1)
    assert [_key(x) for x in a] != first
    for x in a:
        assert x.collection == LAYOUT and x.split == "train" and len(x.sample.rows) == 16
        assert x.structure.graph_id == x.graph_id and x.structure.config_codes is None
        assert x.sample.node_config_feat.shape == (16, len(x.structure.node_config_ids), 18)


def test_len_counts_what_a_rank_yields(ds):
    for drop_last, want in ((False, 3), (True, 2)):  # 8 items over 3 ranks: 3 each (padded) or 2
        for rank in range(3):
            b = ConfigBatches(ds, LAYOUT, k=4, rank=rank, world_size=3, batches_per_graph=4, drop_last=drop_last)
            assert len(b) == len(list(b)) == want


@pytest.mark.parametrize("world", [2, 3, 4, 7, 12])
@pytest.mark.parametrize("drop_last", [False, True])
def test_every_rank_yields_as_many_batches_and_together_the_epoch(ds, world, drop_last):
    """Equal shares (no DDP rank waits forever): padded with items of the same epoch, or the last
    items dropped; the union over ranks is the one-rank epoch up to < world_size items."""
    def make(rank, w):
        return ConfigBatches(ds, LAYOUT, k=4, seed=2, rank=rank, world_size=w, batches_per_graph=5,
                             drop_last=drop_last)

    single = Counter(_key(b) for b in make(0, 1))
    assert sum(single.values()) == 10 and len(single) == 10
    per_rank = [[_key(b) for b in make(rank, world)] for rank in range(world)]
    assert len({len(keys) for keys in per_rank}) == 1 and len(per_rank[0]) == len(make(0, world))
    union = Counter(k for keys in per_rank for k in keys)
    if drop_last:
        assert union <= single and sum((single - union).values()) < world
    else:
        assert set(union) == set(single) and 0 <= sum((union - single).values()) < world
        assert all(single[k] == 1 for k in single)



# -- resume -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("strategy", ["uniform", "stratified", "pairs"])
def test_resume_mid_epoch_gives_the_same_remaining_stream(ds, strategy):
    args = {"k": 8, "strategy": strategy, "seed": 9, "batches_per_graph": 3}
    a = ConfigBatches(ds, LAYOUT, **args)
    a.set_epoch(2)
    whole = [_key(x) for x in a]
    it = iter(a)
    for _ in range(4):
        next(it)
    state = json.loads(json.dumps(a.state_dict()))
    assert state["epoch"] == 2 and state["position"] == 4
    b = ConfigBatches(ds, LAYOUT, **args)
    b.load_state_dict(state)
    b.set_epoch(2)  # the resumed epoch: the resume point stays
    assert [_key(x) for x in b] == whole[4:]
    assert [_key(x) for x in b] == whole  # the next iteration is the whole epoch again


@pytest.mark.parametrize("strategy", ["uniform", "stratified", "pairs"])
def test_batches_of_one_graph_in_one_epoch_draw_different_rows(ds, strategy):
    """batches_per_graph ≥ 2: each batch of a graph draws its own rows (seeded by its batch index)."""
    b = ConfigBatches(ds, LAYOUT, k=8, strategy=strategy, seed=3, batches_per_graph=4)
    for epoch in (0, 1):
        b.set_epoch(epoch)
        rows: dict[str, list] = {}
        for x in b:
            rows.setdefault(x.graph_id, []).append(tuple(x.sample.rows.tolist()))
        assert sorted(rows) == sorted(b.graph_ids)
        for gid, drawn in rows.items():
            assert len(drawn) == 4 and len(set(drawn)) == 4, (gid, drawn)


def _lockstep(make, world: int, steps: int) -> list[list]:
    """Each rank of ``world`` consumes ``steps`` batches (as DDP ranks do, in lockstep); returns the
    iterators' objects (ConfigBatches) after those steps and what each rank consumed."""
    ranks = [make(rank, world) for rank in range(world)]
    its = [iter(r) for r in ranks]
    consumed = [[_key(next(it)) for _ in range(steps)] for it in its]
    return ranks, consumed


@pytest.mark.parametrize("world, steps", [(2, 2), (3, 1), (3, 3)])
def test_a_state_of_one_rank_resumes_every_rank_of_the_same_world(ds, world, steps):
    """Ranks move in lockstep: a state saved on any rank (rank 0, say) resumes each rank's own share."""
    def make(rank, w):
        return ConfigBatches(ds, LAYOUT, k=4, seed=6, rank=rank, world_size=w, batches_per_graph=5)

    whole = [[_key(b) for b in make(rank, world)] for rank in range(world)]
    ranks, consumed = _lockstep(make, world, steps)
    for saved in range(world):
        state = json.loads(json.dumps(ranks[saved].state_dict()))
        assert state["position"] == steps and state["rank"] == saved
        for rank in range(world):
            resumed = make(rank, world)
            resumed.load_state_dict(state)
            assert consumed[rank] + [_key(b) for b in resumed] == whole[rank], (saved, rank)


@pytest.mark.parametrize("old, new, steps, drop_last", [(3, 2, 2, False), (2, 3, 1, False), (3, 1, 1, False),
                                                         (1, 4, 3, False), (3, 2, 2, True), (4, 3, 1, True)])
def test_a_resume_in_another_world_size_yields_exactly_the_rest(ds, old, new, steps, drop_last):
    """What the old world consumed plus what the new world yields after the resume is the epoch, every
    item once, up to the new world's padding (< new) or the drops of both worlds."""
    def make(rank, w):
        return ConfigBatches(ds, LAYOUT, k=4, seed=8, rank=rank, world_size=w, batches_per_graph=5,
                             drop_last=drop_last)

    single = Counter(_key(b) for b in make(0, 1))
    assert len(single) == 10
    ranks, consumed = _lockstep(make, old, steps)
    state = ranks[0].state_dict()
    resumed = []
    for rank in range(new):
        b = make(rank, new)
        b.load_state_dict(state)
        resumed.append([_key(x) for x in b])
    assert len({len(r) for r in resumed}) == 1  # equal shares after the resume too
    before = Counter(k for keys in consumed for k in keys)
    after = Counter(k for keys in resumed for k in keys)
    assert not (set(before) & set(after))  # nothing consumed is yielded again
    assert set(before) | set(after) <= set(single)
    if drop_last:
        assert all(c == 1 for c in (before + after).values())
        assert len(single) - len(before + after) < old + new
    else:
        assert set(before) | set(after) == set(single)
        assert sum(after.values()) - len(after) < new  # padding only


def test_a_state_past_the_share_or_of_an_old_version_is_refused(ds):
    b = ConfigBatches(ds, LAYOUT, k=4, batches_per_graph=5, world_size=2)
    state = b.state_dict()
    with pytest.raises(ValueError, match="bad epoch, base, position"):
        b.load_state_dict({**state, "position": 6})
    with pytest.raises(ValueError, match="not a ConfigBatches state"):
        b.load_state_dict({**state, "version": 1})
    with pytest.raises(ValueError, match="past the end"):
        b.state_dict(6)


def test_a_state_of_other_settings_is_refused(ds):
    state = ConfigBatches(ds, LAYOUT, k=8).state_dict()
    with pytest.raises(ValueError, match="other settings or seed"):
        ConfigBatches(ds, LAYOUT, k=9).load_state_dict(state)
    with pytest.raises(ValueError, match="other settings or seed"):
        ConfigBatches(ds, LAYOUT, k=8, seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="not a ConfigBatches state"):
        ConfigBatches(ds, LAYOUT, k=8).load_state_dict({"epoch": 0})


# -- bounded memory, quotas, the test split ---------------------------------------------------------

def test_structures_lru_is_bounded(ds, monkeypatch):
    loads = []
    real = ds.load_graph

    def counting(graph_id, configs=True):
        assert not configs, "the sampler must never load a graph's configs"
        loads.append(graph_id)
        return real(graph_id, configs=configs)

    monkeypatch.setattr(ds, "load_graph", counting)
    ids = ds.graph_ids(LAYOUT, "train")
    b = ConfigBatches(ds, LAYOUT, k=4, batches_per_graph=6, structures=1, strategy="stratified")
    sizes = []
    for _ in b:
        sizes.append(len(b.cache))
    assert max(sizes) == 1
    assert len(loads) > len(ids)  # structures were evicted and read again
    b = ConfigBatches(ds, LAYOUT, k=4, batches_per_graph=6, structures=8)
    loads.clear()
    list(b)
    assert sorted(set(loads)) == sorted(loads)  # all fit: each structure read once


@pytest.mark.parametrize("collection", [LAYOUT, "tile:xla"])
def test_the_lru_is_bounded_in_bytes_too(ds, collection):
    """cache_bytes caps the arrays the LRU holds together (the newest entry always stays)."""
    roomy = ConfigBatches(ds, collection, k=4, batches_per_graph=2, structures=10_000)
    list(roomy)
    sizes = sorted(e.nbytes for e in roomy.cache.entries.values())
    assert len(sizes) == len(roomy.graph_ids) and sizes[0] > 0
    assert roomy.cache.nbytes == sum(sizes)
    probe = ConfigBatches(ds, collection, k=4, batches_per_graph=2, structures=10_000, cache_bytes=1)
    lean = {next(reversed(probe.cache.entries.values())).nbytes for _ in probe}  # each entry as a tight LRU holds it
    assert min(lean) > 0 and (collection != LAYOUT or max(lean) < sizes[-1])  # layout: no configs decoded
    cap = min(sizes[0], min(lean) + 1)  # less than two entries can hold
    tight = ConfigBatches(ds, collection, k=4, batches_per_graph=2, structures=10_000, cache_bytes=cap)
    held = []
    for _ in tight:
        held.append((len(tight.cache), tight.cache.nbytes))
        assert tight.cache.nbytes == sum(e.nbytes for e in tight.cache.entries.values())
        assert tight.cache.nbytes <= cap or len(tight.cache) == 1
    assert max(n for n, _ in held) < len(roomy.graph_ids)
    with pytest.raises(ValueError, match="cache_bytes must be"):
        ConfigBatches(ds, collection, cache_bytes=-1)


def test_sqrt_batches_per_graph(ds):
    b = ConfigBatches(ds, LAYOUT, k=4, batches_per_graph="sqrt")
    counts = [ds.num_unique_configs(g) for g in b.graph_ids]
    assert b.quotas().tolist() == strategies.sqrt_quotas(np.array(counts)).tolist()
    assert Counter(x.graph_id for x in b) == dict(zip(b.graph_ids, b.quotas().tolist(), strict=True))


def test_test_split_supports_only_uniform(ds):
    with pytest.raises(ValueError, match="needs runtimes"):
        ConfigBatches(ds, LAYOUT, split="test", strategy="pairs")
    batches = list(ConfigBatches(ds, "tile:xla", split="test", k=3))
    assert batches and all(x.sample.config_runtime is None for x in batches)
    assert all(len(x.sample.rows) == min(3, ds.num_unique_configs(x.graph_id)) for x in batches)


@pytest.mark.parametrize("kwargs, match", [
    ({"strategy": "best"}, "strategy must be"), ({"k": 0}, "k must be"),
    ({"rank": 2, "world_size": 2}, "rank must be"), ({"batches_per_graph": 0}, "batches_per_graph"),
    ({"structures": 0}, "structures must be"), ({"seed": -1}, "seed must be"), ({"graph_ids": ["layout:xla:random:x"]}, "is not in"),
])
def test_bad_settings_are_refused(ds, kwargs, match):
    with pytest.raises((ValueError, KeyError), match=match):
        ConfigBatches(ds, LAYOUT, **kwargs)


def test_unique_config_columns_equal_the_stored_ones_on_real_graphs(real_shards):
    ds = tpuprep.open_dataset(real_shards)
    layout = [g for c in ds.collections if c.startswith("layout") for g in ds.graph_ids(c)]
    assert layout
    for gid in layout:
        g = ds.load_graph(gid)
        cols = unique_config_columns(ds.load_graph(gid, configs=False))
        assert np.array_equal(cols["group_size"], g.group_size) and np.array_equal(cols["first_index"], g.first_index)
        for key, field in (("runtime", "config_runtime"), ("runtime_spread", "config_runtime_spread")):
            stored = getattr(g, field)
            assert (cols[key] is None and stored is None) or np.array_equal(cols[key], stored), (gid, key)


@pytest.mark.parametrize("split", ["train", "test"])
def test_tile_batches_read_each_graph_once_and_equal_read_configs(ds, split, monkeypatch):
    """Tile graphs share configs row groups: ConfigBatches reads a graph's configs once (into its LRU
    entry) and slices them per batch; every batch equals read_configs of its rows."""
    calls = []
    real = ds.read_configs

    def counting(graph_id, rows, columns=None):
        calls.append(graph_id)
        return real(graph_id, rows, columns)

    monkeypatch.setattr(ds, "read_configs", counting)
    batches = ConfigBatches(ds, "tile:xla", split=split, k=4, batches_per_graph=3, seed=5)
    got = list(batches)
    assert got and sorted(calls) == sorted(set(calls)) == sorted({b.graph_id for b in got})
    monkeypatch.setattr(ds, "read_configs", real)
    for b in got:
        want = ds.read_configs(b.graph_id, b.sample.rows)
        for field in vars(want):
            x, y = getattr(b.sample, field), getattr(want, field)
            assert (x is None and y is None) or np.array_equal(x, y), field
        assert b.sample.config_feat.flags.writeable


def test_small_layout_graphs_are_decoded_once_large_ones_read_per_batch(ds, monkeypatch):
    """A layout graph whose decoded configs fit in cache_bytes / 8 is read once and sliced; with a cache
    too small for that, every batch reads its own rows. Both give the same batches."""
    calls = []
    real = ds.read_configs

    def counting(graph_id, rows, columns=None):
        calls.append((graph_id, len(rows)))
        return real(graph_id, rows, columns)

    monkeypatch.setattr(ds, "read_configs", counting)
    cached = list(ConfigBatches(ds, LAYOUT, k=4, batches_per_graph=3, seed=2))
    counts = {gid: ds.num_unique_configs(gid) for gid in {b.graph_id for b in cached}}
    assert sorted(calls) == sorted(counts.items())  # one whole-graph read per graph
    calls.clear()
    streamed = list(ConfigBatches(ds, LAYOUT, k=4, batches_per_graph=3, seed=2, cache_bytes=1))
    assert len(calls) == len(streamed) and all(n == 4 for _, n in calls)  # one 4-row read per batch
    assert [_key(b) for b in cached] == [_key(b) for b in streamed]
    for a, b in zip(cached, streamed, strict=True):
        for field in vars(a.sample):
            x, y = getattr(a.sample, field), getattr(b.sample, field)
            assert (x is None and y is None) or np.array_equal(x, y), field
        assert a.sample.node_config_feat.flags.writeable


@pytest.fixture(scope="module")
def many_tile_graphs(tmp_path_factory):
    """Shards of 60 small tile graphs (more than the 32 structures the cache used to be limited to)."""
    from npzfactory import tile_arrays, write

    from tpuprep.build import build

    root = tmp_path_factory.mktemp("many-tiles")
    for i in range(60):
        write(root / "npz", f"tile/xla/train/fusion.{i}_{i:016x}.npz", tile_arrays(seed=i, c=6 + i % 5))
    build(root / "npz", root / "shards")
    return tpuprep.open_dataset(root / "shards")


def test_the_default_cache_is_sized_in_bytes_and_keeps_many_small_graphs(many_tile_graphs, monkeypatch):
    """By default only cache_bytes bounds the cache: 60 small tile graphs stay in it, so from the second
    epoch on their batches read nothing."""
    ds = many_tile_graphs
    reads = []
    real_load, real_read = ds.load_graph, ds.read_configs
    monkeypatch.setattr(ds, "load_graph", lambda g, configs=True: reads.append(g) or real_load(g, configs=configs))
    monkeypatch.setattr(ds, "read_configs", lambda g, rows, columns=None: reads.append(g) or real_read(g, rows, columns))
    b = ConfigBatches(ds, "tile:xla", k=4, batches_per_graph=2)
    assert len(b.graph_ids) == 60 and b.structures is None
    list(b)
    assert len(b.cache) == 60 and b.cache.nbytes <= b.cache_bytes and reads
    reads.clear()
    b.set_epoch(1)
    assert len(list(b)) == 120 and reads == []
    with pytest.raises(ValueError, match="structures must be"):
        ConfigBatches(ds, "tile:xla", structures=0)


# -- resume edges a planted bug would slip through (issue #36) -------------------------------------

def _make(ds, rank=0, world=1, **kwargs):
    return ConfigBatches(ds, LAYOUT, **{"k": 4, "seed": 8, "batches_per_graph": 11, "rank": rank,
                                        "world_size": world, **kwargs})


@pytest.mark.parametrize("drop_last", [False, True])
def test_two_world_size_changes_in_one_epoch_deal_every_item_once(ds, drop_last):
    """2 ranks consume 2 batches each, resume in 3 ranks that consume 2 each, save, resume in 4: what
    the three worlds yield together is the epoch, nothing twice (a second resume must count from the
    first one's base, not from the start of the plan), up to the last world's padding or the drops."""
    single = Counter(_key(b) for b in _make(ds, drop_last=drop_last))
    assert len(single) == 22
    yielded: Counter = Counter()
    state = None
    for world, steps in ((2, 2), (3, 2), (4, None)):
        ranks = [_make(ds, r, world, drop_last=drop_last) for r in range(world)]
        for r in ranks:
            if state is not None:
                r.load_state_dict(state)
        its = [iter(r) for r in ranks]
        if steps is None:
            got = [[_key(x) for x in it] for it in its]
            assert len({len(g) for g in got}) == 1
            last = Counter(k for g in got for k in g)
        else:
            got = [[_key(next(it)) for _ in range(steps)] for it in its]
            yielded.update(k for g in got for k in g)
            state = json.loads(json.dumps(ranks[0].state_dict()))
    assert not set(yielded) & set(last)
    everything = yielded + last
    if drop_last:
        assert all(c == 1 for c in everything.values()) and len(single) - len(everything) < 2 + 3 + 4
    else:
        assert set(everything) == set(single) and sum(last.values()) - len(last) < 4
        assert all(c == 1 for c in yielded.values())


def test_drop_last_is_part_of_the_fingerprint(ds):
    """A state of a padded epoch resumed by a drop_last sampler (or back) would deal other items."""
    padded, dropped = _make(ds, 0, 3), _make(ds, 0, 3, drop_last=True)
    assert padded.fingerprint() != dropped.fingerprint()
    with pytest.raises(ValueError, match="other settings or seed"):
        dropped.load_state_dict(padded.state_dict())
    with pytest.raises(ValueError, match="other settings or seed"):
        padded.load_state_dict(dropped.state_dict())


def test_state_dict_after_set_epoch_and_before_any_batch_is_the_new_epochs_start(ds):
    b = _make(ds)
    it = iter(b)
    for _ in range(5):
        next(it)
    assert (b.state_dict()["epoch"], b.state_dict()["position"]) == (0, 5)
    b.set_epoch(1)
    assert (b.state_dict()["epoch"], b.state_dict()["position"]) == (1, 0)
    list(b)
    b.set_epoch(2)
    assert (b.state_dict()["epoch"], b.state_dict()["position"]) == (2, 0)


def test_state_dict_after_a_complete_epoch_resumes_with_nothing_then_the_next_pass_is_whole(ds):
    b = _make(ds)
    whole = [_key(x) for x in b]
    state = json.loads(json.dumps(b.state_dict()))
    assert (state["epoch"], state["position"]) == (0, len(b)) == (0, 22)
    again = _make(ds)
    again.load_state_dict(state)
    assert list(again) == []  # the epoch is done
    assert [_key(x) for x in again] == whole  # the point is spent: a whole pass


def test_a_pass_begins_when_iter_is_called(ds):
    """iter() takes the epoch and the resume point at once: a later set_epoch or load_state_dict
    concerns the next pass, and state_dict() right after iter() is where the pass starts."""
    b = _make(ds)
    state = b.state_dict(3)
    b.load_state_dict(state)
    it = iter(b)
    b.set_epoch(1)
    assert [_key(x) for x in it] == [_key(x) for x in _make(ds)][3:]


def test_the_cache_evicts_the_least_recently_used_entry(ds, monkeypatch):
    """Two entries fit: reading a, b, a, c keeps a and c (b is the oldest use), never the newest."""
    from tpuprep.sampling.cache import StructureCache

    ids = ds.graph_ids(LAYOUT) + ds.graph_ids("layout:nlp:random")
    a, b, c = ids[:3]
    cache = StructureCache(1 << 30, max_entries=2)
    for gid in (a, b, a, c):
        cache.get(ds, gid, needs_runtimes=False)
    assert list(cache.entries) == [a, c]
    by_bytes = StructureCache(250)  # entries of 100 bytes: two fit
    monkeypatch.setattr(by_bytes, "read", lambda ds, gid, needs_runtimes: SimpleNamespace(nbytes=100))
    for gid in (a, b, a, c):
        by_bytes.get(ds, gid, needs_runtimes=False)
    assert list(by_bytes.entries) == [a, c] and by_bytes.nbytes == 200


# -- a DataLoader worker's own state (StatefulDataLoader's protocol), without torch -----------------

def _workers(ds, n, **kwargs):
    out = []
    for i in range(n):
        b = _make(ds, **kwargs)
        b.set_worker(i, n)
        out.append(b)
    return out


@pytest.mark.parametrize("n, stop", [(2, 7), (3, 5), (3, 0), (2, 22), (1, 9)])
def test_worker_states_resume_each_workers_own_batches(ds, n, stop):
    """n readers as a DataLoader's workers, the round-robin stopped after ``stop`` batches; each
    worker's state resumes that worker: the round-robin of the new readers is the rest, in order."""
    whole = [_key(x) for x in _make(ds)]
    readers = _workers(ds, n)
    its = [iter(r) for r in readers]
    states = [json.loads(json.dumps(r.worker_state())) for r in readers]  # before any batch: the start
    assert [s["next"] for s in states] == list(range(n))
    seen = []
    for j in range(stop):
        seen.append(_key(next(its[j % n])))
    states = [json.loads(json.dumps(r.worker_state())) for r in readers]
    assert seen == whole[:stop]
    resumed = _workers(ds, n)
    for r, s in zip(resumed, states, strict=True):
        r.load_worker_state(s)
        assert r.worker_state() == s  # loaded, not begun: the same point
    rest = [[_key(x) for x in r] for r in resumed]
    first = stop % n  # the round-robin goes on with the worker after the last one that yielded
    order = [x for t in zip_longest(*(rest[first:] + rest[:first])) for x in t if x is not None]
    assert seen + order == whole


def test_a_rank_state_resumes_every_worker(ds):
    whole = [_key(x) for x in _make(ds)]
    state = _make(ds).state_dict(6)
    readers = _workers(ds, 3)
    for r in readers:
        r.load_worker_state(state)
    rest = [[_key(x) for x in r] for r in readers]
    assert [x for t in zip_longest(*rest) for x in t if x is not None] == whole[6:]


def test_worker_states_refused_in_one_line(ds):
    readers = _workers(ds, 2)
    it = iter(readers[1])
    next(it)
    state = readers[1].worker_state()
    assert state["worker"] == 1 and state["num_workers"] == 2 and state["next"] == 3
    fresh = _workers(ds, 3)[1]
    with pytest.raises(ValueError, match="saved by DataLoader worker 1 of 2: resume it with num_workers=2"):
        fresh.load_worker_state(state)
    other_world = _make(ds, 0, 2)
    other_world.set_worker(1, 2)
    with pytest.raises(ValueError, match="saved in a world of 1 ranks, not 2"):
        other_world.load_worker_state(state)
    same = _workers(ds, 2)[1]
    for bad in ({"next": 2}, {"next": 0}, {"next": 25}, {"next": "3"}, {"worker": 2}, {"num_workers": True}):
        with pytest.raises(ValueError, match=r"bad (next|worker)"):
            same.load_worker_state({**state, **bad})
    with pytest.raises(ValueError, match="the state of DataLoader worker 1 of 2"):
        _make(ds).load_state_dict(state)
    same.load_worker_state({**state, "next": 23})  # the worker's share is done: a valid point
    assert list(same) == []
