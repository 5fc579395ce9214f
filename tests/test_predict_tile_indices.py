"""Tile TopConfigs are ORIGINAL config indices even when deduplication merges configs (issue #27, the
suite's blind spots): the other tests' fakes have ``first_index = arange(c_u)``, where unique ids and
original indices coincide, so listing unique ids passed them. Here real shards are built from a tile file
whose duplicates sit early, so ``first_index`` is not ``arange``, and the submission written by
``tpuprep predict`` is checked against the model's own scores."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from click.testing import CliRunner
from npzfactory import tile_arrays, write

from tpuprep import open_dataset
from tpuprep.build import build
from tpuprep.cli import main
from tpuprep.train import Ranker
from tpuprep.train.metrics import fastest_first
from tpuprep.train.model import ModelConfig

TILE = "tile:xla"


def _tile_with_early_duplicates(seed: int) -> dict[str, np.ndarray]:
    arrays = tile_arrays(seed=seed, c=10)
    cfg = arrays["config_feat"]
    cfg[:, 8] = np.arange(10) + 1  # ten distinct configs ...
    cfg[:, 14] = cfg[:, 8] + cfg[:, 9]
    cfg[:, 15] = cfg[:, 8] * cfg[:, 9]
    cfg[1] = cfg[0]  # ... of which 1 repeats 0 and 3 repeats 2: 8 unique, first_index [0 2 4 5 6 7 8 9]
    cfg[3] = cfg[2]
    return arrays


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("tile-dedup")
    for i in range(2):
        write(root / "npz", f"tile/xla/test/t{i}.npz", _tile_with_early_duplicates(i))
        write(root / "npz", f"tile/xla/train/r{i}.npz", _tile_with_early_duplicates(10 + i))
    build(root / "npz", root / "shards")
    return root / "shards"


def test_predicted_tile_top_configs_are_original_indices(shards, tmp_path):
    ds = open_dataset(shards)
    model = tmp_path / "tile-model"
    ranker = Ranker.create(TILE, ds.stats(TILE), ModelConfig("tile", 8, 8, 1), 3)
    ranker.save(model)
    out = tmp_path / "sub.csv"
    result = CliRunner().invoke(main, ["predict", "--shards", str(shards), "--model", str(model), "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = dict(list(csv.reader(out.read_text().splitlines()))[1:])
    assert set(rows) == set(ds.graph_ids(TILE, "test"))
    for gid, top in rows.items():
        g = ds.load_graph(gid)
        inv = np.asarray(g.config_inverse)
        first = np.asarray(g.first_index)
        assert not np.array_equal(first, np.arange(len(first))), "the dedup must shift first_index"
        listed = np.array([int(t) for t in top.split(";")])
        pred = ranker.predict_unique(g)
        best = fastest_first(pred)[:5]
        # each listed index is an original config: the first of the unique config ranked at its place
        np.testing.assert_array_equal(inv[listed], best)
        np.testing.assert_array_equal(listed, first[best])
