"""``ConfigBatchDataset`` under torchdata's ``StatefulDataLoader`` (issue #38 item 1), with real worker
processes: stopped after any number of batches, ``state_dict()`` → a new loader → ``load_state_dict()``
yields exactly the batches the uninterrupted run had left, in order; in the loop users run (persistent
workers, ``set_epoch`` between epochs, a resume in the next epoch); a mix of collections; and the
states a loader with another number of workers cannot resume are refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tpuprep
from tpuprep.sampling.batches import ConfigBatches

torch = pytest.importorskip("torch")
stateful = pytest.importorskip("torchdata.stateful_dataloader")
LAYOUT = "layout:xla:random"
MIX = {"layout:xla:random": 3, "layout:nlp:random": 1}

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated", "ignore:This DataLoader will create")


@pytest.fixture(scope="module")
def ds(synth_shards):
    return tpuprep.open_dataset(synth_shards)


def _dataset(ds, collection=LAYOUT, **kwargs):
    from tpuprep.torch import ConfigBatchDataset

    args = {"k": 4, "seed": 1, "batches_per_graph": 5, "strategy": "pairs", **kwargs}
    return ConfigBatchDataset(ConfigBatches(ds, collection, **args))


def _key(item) -> tuple:
    return (item["graph_id"], item["collection"], int(item["epoch"]), tuple(np.asarray(item["rows"]).tolist()))


def _loader(dataset, workers: int, **kwargs):
    return stateful.StatefulDataLoader(dataset, batch_size=None, num_workers=workers, **kwargs)


def _epoch(ds, epoch: int, collection=LAYOUT) -> list[tuple]:
    """The reference: one epoch read in this process by a plain ConfigBatches."""
    batches = ConfigBatches(ds, collection, k=4, seed=1, batches_per_graph=5, strategy="pairs")
    batches.set_epoch(epoch)
    return [(b.graph_id, b.collection, b.epoch, tuple(b.sample.rows.tolist())) for b in batches]


def _stop_and_resume(ds, workers: int, stop: int, collection=LAYOUT, **loader_args) -> tuple[list, list]:
    """Consume ``stop`` batches of epoch 0, save the loader's state (through JSON, as a checkpoint
    would), and resume it in a new loader over a new dataset: (consumed, resumed)."""
    loader = _loader(_dataset(ds, collection), workers, **loader_args)
    it = iter(loader)
    seen = [_key(next(it)) for _ in range(stop)]
    state = loader.state_dict()
    del it, loader
    resumed = _loader(_dataset(ds, collection), workers, **loader_args)
    resumed.load_state_dict(state)
    return seen, [_key(x) for x in resumed]


@pytest.mark.parametrize("workers, stops", [(0, None), (2, None), (3, [0, 1, 2, 3, 4, 5, 8, 9, 10])])
def test_a_resume_after_any_number_of_batches_yields_exactly_the_rest(ds, workers, stops):
    """Before the fix, 2 workers stopped after an odd number of batches resumed with one batch twice
    and the order changed (issue #38): every stop point, odd and even, the first and the last."""
    whole = _epoch(ds, 0)
    assert len(whole) == 10
    for stop in stops or range(len(whole) + 1):
        seen, rest = _stop_and_resume(ds, workers, stop)
        assert seen == whole[:stop] and rest == whole[stop:], (workers, stop)


def test_a_resume_from_a_state_saved_every_third_step(ds):
    """snapshot_every_n_steps=3: the loader replays from its last snapshot; still exactly the rest."""
    whole = _epoch(ds, 0)
    for stop in (4, 7):
        seen, rest = _stop_and_resume(ds, 2, stop, snapshot_every_n_steps=3)
        assert seen + rest == whole, stop


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_the_training_loop_resumes_mid_epoch_and_goes_on_to_the_next(ds, context):
    """Persistent workers, set_epoch before every epoch; the run stopped in epoch 1 after 5 batches
    and resumed by a new loader yields the rest of epoch 1 and then a whole epoch 2, as the
    uninterrupted run did; a state saved after a whole epoch resumes with the next epoch."""
    want = {e: _epoch(ds, e) for e in range(3)}
    args = {"persistent_workers": True, "multiprocessing_context": context}
    dataset = _dataset(ds)
    loader = _loader(dataset, 2, **args)
    got, state, after_epoch0 = [], None, None
    for epoch in range(3):
        dataset.set_epoch(epoch)
        for i, item in enumerate(loader):
            got.append(_key(item))
            if epoch == 1 and i == 4:
                state = json.loads(json.dumps(loader.state_dict()))
        if epoch == 0:
            after_epoch0 = loader.state_dict()
    assert got == want[0] + want[1] + want[2]

    dataset = _dataset(ds)
    loader = _loader(dataset, 2, **args)
    loader.load_state_dict(state)
    resumed = []
    for epoch in (1, 2):
        dataset.set_epoch(epoch)
        resumed += [_key(x) for x in loader]
    assert resumed == want[1][5:] + want[2]

    dataset = _dataset(ds)
    loader = _loader(dataset, 2, **args)
    loader.load_state_dict(after_epoch0)
    dataset.set_epoch(1)
    assert [_key(x) for x in loader] == want[1]


def test_a_mix_resumes_exactly_under_a_stateful_loader(ds):
    whole = _epoch(ds, 0, MIX)
    assert {c for _, c, _, _ in whole} == set(MIX)
    for stop in (3, 8, 14):
        seen, rest = _stop_and_resume(ds, 2, stop, MIX)
        assert seen + rest == whole, stop


def test_another_number_of_workers_is_refused_in_one_line(ds):
    """A worker's state says nothing of the other workers' progress: a loader with another number of
    workers is refused (it would repeat or lose batches); a rank state resumes any number."""
    loader = _loader(_dataset(ds), 2)
    it = iter(loader)
    for _ in range(3):
        item = next(it)
    state = loader.state_dict()
    rank_state = loader.dataset.state_dict(item["position"])
    del it, loader
    with pytest.raises(ValueError, match="saved by DataLoader worker 0 of 2: resume it with num_workers=2"):
        again = _loader(_dataset(ds), 1)  # 1, not 3: torchdata waits 5 s per worker to stop a failed start
        again.load_state_dict(state)
        list(again)
    whole = _epoch(ds, 0)
    for workers in (0, 3):
        dataset = _dataset(ds)
        dataset.load_state_dict(rank_state)
        assert [_key(x) for x in _loader(dataset, workers)] == whole[3:], workers


def test_a_plain_loaders_dataset_state_resumes_in_a_stateful_loader(ds):
    """Today's API, ds.state_dict(batch['position']), keeps working beside the loader's own state."""
    from torch.utils.data import DataLoader

    dataset = _dataset(ds)
    seen = []
    for item in DataLoader(dataset, batch_size=None, num_workers=2):
        seen.append(item)
        if len(seen) == 7:
            break
    state = json.loads(json.dumps(dataset.state_dict(seen[-1]["position"])))
    resumed = _dataset(ds)
    resumed.load_state_dict(state)
    assert [_key(x) for x in _loader(resumed, 2)] == _epoch(ds, 0)[7:]


def test_the_stateful_example_of_readers_md_runs(synth_shards):
    """docs/examples/batches_stateful.py: a loop interrupted in epoch 1 and resumed by a new loader
    takes the uninterrupted run's steps."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, str(root / "docs" / "examples" / "batches_stateful.py"), str(synth_shards),
                          LAYOUT, "3"], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == ["uninterrupted 18 steps", "interrupted after 9 steps, resumed for 9 more",
                                       "same steps: True"]
