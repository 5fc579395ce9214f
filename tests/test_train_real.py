"""The trainer on the real TpuGraphs-format files in ../shared/real (skipped when they are absent)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from train_fakes import FakeDataset, record_from_npz

from tpuprep.train import TrainConfig, evaluate, train, validate_submission, write_submission

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "real"
LAYOUT_FILE = REAL / "repadded" / "main__.10904.pad-1.npz"
TILE_DIR = REAL / "npz" / "tile" / "xla" / "train"

pytestmark = pytest.mark.skipif(not LAYOUT_FILE.is_file() or not TILE_DIR.is_dir(),
                                reason="../shared/real is not available")


@pytest.fixture(scope="module")
def real_ds():
    coll = "layout:xla:default"
    graphs = [record_from_npz(LAYOUT_FILE, coll, "train")]
    valid = record_from_npz(LAYOUT_FILE, coll, "valid")
    valid.graph_id = f"{coll}:main_valid_copy"
    graphs.append(valid)
    for i, p in enumerate(sorted(TILE_DIR.glob("*.npz"))):
        graphs.append(record_from_npz(p, "tile:xla", "train" if i % 3 else "valid"))
    return FakeDataset(graphs)


def test_real_layout_and_tile_train_evaluate_predict(real_ds, tmp_path):
    lay = train(real_ds, "layout:xla:default",
                TrainConfig(epochs=3, hidden=16, head_hidden=16, batch_configs=64), log=None)
    tile = train(real_ds, "tile:xla", TrainConfig(epochs=3, hidden=16, head_hidden=16), log=None)
    for r in (lay, tile):
        assert all(np.isfinite(v).all() for v in r.params.values())
        assert all(math.isfinite(h["loss"]) for h in r.history)
    res = evaluate(real_ds, [lay, tile], split="valid", log=None)
    row = next(r for r in res.rows if r["collection"] == "layout:xla:default")
    assert row["configs"] == 112 and -1 <= row["tau"] <= 1 and -1 <= row["tau_violation"] <= 1
    assert all(r["tile_score"] <= 1 for r in res.rows if r["collection"] == "tile:xla")
    out = tmp_path / "valid_submission.csv"
    write_submission(real_ds, [lay, tile], out, split="valid")
    assert validate_submission(out, real_ds, "valid", ["layout:xla:default", "tile:xla"]) == []
