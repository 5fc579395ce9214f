"""``train/trainer.py``'s own parts, beside the code: the interleaving of several samplers
(``Interleaved``, issue #36: seeded without the epoch, every epoch had the same order and nothing
noticed), the validation rows, ``TrainConfig``'s checks and the divergence check."""

from __future__ import annotations

import math
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

from tpuprep.train.trainer import (
    Interleaved,
    TrainConfig,
    TrainingDiverged,
    check_finite_weights,
    validation_rows,
)


class _Sampler:
    """A sampler with the ``ConfigBatches`` contract the trainer uses: ``set_epoch``, ``len``, and an
    epoch's batches (here labels ``(name, epoch, i)``) in order."""

    def __init__(self, name: str, n: int):
        self.name, self.n, self.epoch = name, n, None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        return iter([(self.name, self.epoch, i) for i in range(self.n)])


def _epoch(seed: int, epoch: int, sizes=(7, 5, 3)) -> list[tuple]:
    mixed = Interleaved([_Sampler(n, k) for n, k in zip("abc", sizes, strict=False)], seed)
    mixed.set_epoch(epoch)
    return list(mixed)


def test_an_epoch_yields_every_batch_of_every_sampler_once_in_each_samplers_order():
    got = _epoch(0, 3)
    assert len(got) == len(Interleaved([_Sampler("a", 7), _Sampler("b", 5), _Sampler("c", 3)], 0)) == 15
    assert Counter(name for name, _, _ in got) == {"a": 7, "b": 5, "c": 3}
    for name in "abc":
        assert [i for n, _, i in got if n == name] == sorted(i for n, _, i in got if n == name)
    assert {e for _, e, _ in got} == {3}  # set_epoch reached every sampler


def test_the_order_is_a_function_of_seed_and_epoch_and_changes_with_each():
    """The same (seed, epoch) gives the same order; another epoch (or seed) another one — epochs that
    repeated one order would bias every run the same way."""
    orders = {e: [n for n, _, _ in _epoch(0, e)] for e in range(1, 9)}
    assert orders[1] == [n for n, _, _ in _epoch(0, 1)]
    assert len({tuple(o) for o in orders.values()}) >= 6, orders
    assert [n for n, _, _ in _epoch(1, 1)] != orders[1] or [n for n, _, _ in _epoch(1, 2)] != orders[2]


def test_the_next_batch_is_drawn_in_proportion_to_the_batches_left():
    """A sampler of 9 batches against one of 1: the lone batch lands anywhere, on average in the middle,
    never always first or last (what an unweighted draw or a fixed order would do)."""
    where = [next(i for i, (n, _, _) in enumerate(_epoch(s, 1, (9, 1))) if n == "b") for s in range(200)]
    assert set(where) == set(range(10))
    assert 3.5 < float(np.mean(where)) < 5.5


def test_an_empty_sampler_takes_no_turn():
    got = _epoch(4, 1, (3, 0, 2))
    assert Counter(n for n, _, _ in got) == {"a": 3, "c": 2}


@pytest.mark.parametrize(("c_u", "k"), [(10, 20), (10, 10), (5000, 100)])
def test_validation_rows_are_all_rows_or_a_sorted_sample_seeded_by_seed_and_graph(c_u, k):
    rows = validation_rows("layout:xla:random:g", c_u, k, 3)
    if c_u <= k:
        assert np.array_equal(rows, np.arange(c_u))
        return
    assert len(rows) == k and len(set(rows.tolist())) == k and np.array_equal(rows, np.sort(rows))
    assert rows.min() >= 0 and rows.max() < c_u
    assert np.array_equal(rows, validation_rows("layout:xla:random:g", c_u, k, 3))
    assert not np.array_equal(rows, validation_rows("layout:xla:random:h", c_u, k, 3))
    assert not np.array_equal(rows, validation_rows("layout:xla:random:g", c_u, k, 4))


@pytest.mark.parametrize(("field", "value", "message"), [
    ("seed", -1, "seed must be an integer ≥ 0"), ("seed", 2.0, "seed must be"), ("seed", False, "seed must be"),
    ("batch_configs", 1, "batch_configs must be ≥ 2"), ("epochs", -1, "epochs must be ≥ 0"),
    ("batches_per_graph", 0, "batches_per_graph and valid_every ≥ 1"), ("valid_every", 0, "valid_every ≥ 1"),
    ("loss", "mse", "loss must be one of"), ("pair_weight", "x", "pair_weight must be one of"),
])
def test_train_config_refuses_what_would_fail_later(field, value, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**{field: value})
    TrainConfig(seed=0, batch_configs=2, epochs=0, batches_per_graph=1, valid_every=1)


def test_non_finite_weights_are_named_and_nothing_else_is():
    def ranker(**params):
        return SimpleNamespace(collection="tile:xla", params=params)

    with pytest.raises(TrainingDiverged, match=r"diverged in epoch 4: weights 'w2' hold NaN or inf; .*than 0\.5"):
        check_finite_weights(ranker(w1=np.ones(3), w2=np.array([1.0, math.nan]), w3=np.array([math.inf])), 4, 0.5)
    with pytest.raises(TrainingDiverged, match="weights 'w3'"):
        check_finite_weights(ranker(w1=np.ones(3), w3=np.array([-math.inf])), 1, 0.5)
    check_finite_weights(ranker(w1=np.ones(3)), 4, 0.5)


# --------------------------------------------------------------------- on a fake dataset (train_fakes)


@pytest.fixture(scope="module")
def fake():
    from train_fakes import make_fake_dataset

    return make_fake_dataset(seed=3, n_train=5, n_valid=4, n_test=1, n_unique=20, n_nodes=12)


LAYOUT = "layout:xla:random"


@pytest.mark.parametrize("fold", [None, 0, 1])
def test_split_graph_ids_are_the_splits_or_the_folds_of_train_and_valid(fake, fold):
    from tpuprep.train.trainer import split_graph_ids

    train_ids, valid_ids = split_graph_ids(fake, LAYOUT, fold)
    if fold is None:
        assert (train_ids, valid_ids) == (fake.graph_ids(LAYOUT, "train"), fake.graph_ids(LAYOUT, "valid"))
        return
    pool = fake.graph_ids(LAYOUT, "train") + fake.graph_ids(LAYOUT, "valid")
    assert sorted(train_ids + valid_ids) == sorted(pool) and not set(train_ids) & set(valid_ids)
    assert all(fake.fold(g) == fold for g in valid_ids) and all(fake.fold(g) != fold for g in train_ids)


@pytest.mark.parametrize(("kind", "runtimes", "normalizers", "unique", "usable"), [
    ("layout", True, False, 2, True), ("layout", True, False, 1, False), ("layout", False, False, 9, False),
    ("tile", True, True, 2, True), ("tile", True, False, 5, False), ("tile", True, True, 1, False),
])
def test_a_graph_is_usable_for_training_with_labels_and_two_unique_configs(kind, runtimes, normalizers, unique,
                                                                          usable):
    from tpuprep.train.trainer import usable_for_training

    structure = SimpleNamespace(config_runtime_original=np.ones(3) if runtimes else None,
                                config_runtime_normalizers_original=np.ones(3) if normalizers else None,
                                num_unique_configs=unique)
    assert usable_for_training(structure, kind) is usable


def test_a_pool_of_train_and_valid_graphs_is_sampled_from_both_splits(fake):
    """holdout_fold pools two splits: one sampler each, interleaved; an epoch has every graph's batch."""
    from tpuprep.train.trainer import config_batches

    ids = fake.graph_ids(LAYOUT, "train")[:3] + fake.graph_ids(LAYOUT, "valid")[:2]
    sampler = config_batches(fake, LAYOUT, ids, TrainConfig(batch_configs=4, batches_per_graph=2))
    assert isinstance(sampler, Interleaved) and len(sampler) == 10
    sampler.set_epoch(1)
    assert Counter(b.graph_id for b in sampler) == dict.fromkeys(ids, 2)
    alone = config_batches(fake, LAYOUT, ids[:3], TrainConfig(batch_configs=4))
    assert not isinstance(alone, Interleaved) and len(alone) == 3


def test_a_run_saves_a_checkpoint_after_every_epoch_but_the_last_and_then_the_model(fake, tmp_path, monkeypatch):
    from tpuprep.train import Ranker, train

    saved = []
    real = Ranker.save
    monkeypatch.setattr(Ranker, "save", lambda self, out: saved.append(len(self.history)) or real(self, out))
    train(fake, LAYOUT, TrainConfig(epochs=3, hidden=8, head_hidden=8, batch_configs=8, validate=False),
          out=tmp_path / "m", log=None)
    assert saved == [1, 2, 3] and (tmp_path / "m.npz").is_file()
