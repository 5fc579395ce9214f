"""`tpuprep evaluate --out` plots through matplotlib (the ``plot`` extra) and nothing else (issue #37 item 4).

With matplotlib the PNGs are real images (read back by matplotlib, not just a PNG signature); without it
(its import made to fail in a subprocess) the command says so in one line, exits 0 and writes every other
output byte for byte as the run with matplotlib does.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tpuprep.train import plot

pytest.importorskip("matplotlib")
REPO = Path(__file__).resolve().parents[1]
COLLECTIONS = ("layout:xla:random", "tile:xla")
TABLES = ("per_graph.csv", "summary.json", "summary.txt")

# The tpuprep command, in a process where importing matplotlib fails as it does where it is not installed.
NO_MATPLOTLIB = r"""
import importlib.abc, sys

class NoMatplotlib(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, NoMatplotlib())
from tpuprep.cli import main
main()
assert "matplotlib" not in sys.modules
"""
WITH_MATPLOTLIB = "from tpuprep.cli import main; main()"


def tpuprep(boot: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(cwd), "OMP_NUM_THREADS": "1",
           "MPLCONFIGDIR": str(cwd / "mpl")}
    return subprocess.run([sys.executable, "-c", boot, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def models(synth_shards, tmp_path_factory) -> list[Path]:
    """One small model per collection, trained by the command line on the tiny synthetic build."""
    root = tmp_path_factory.mktemp("plot-models")
    out = []
    for c in COLLECTIONS:
        model = root / c.replace(":", "_")
        proc = tpuprep(WITH_MATPLOTLIB, "train", "--shards", str(synth_shards), "--collection", c, "--out",
                       str(model), "--epochs", "2", "--hidden", "8", "-q", cwd=root)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out.append(model)
    return out


def evaluate(boot: str, shards: Path, models: list[Path], out: Path) -> subprocess.CompletedProcess:
    args = ["evaluate", "--shards", str(shards), "--split", "valid", "--out", str(out), "-q"]
    for m in models:
        args += ["--model", str(m)]
    return tpuprep(boot, *args, cwd=out.parent)


def test_evaluate_draws_real_pngs_with_matplotlib(synth_shards, models, tmp_path):
    import matplotlib.image

    proc = evaluate(WITH_MATPLOTLIB, synth_shards, models, tmp_path / "ev")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert plot.NO_PLOTS not in proc.stderr
    pngs = sorted(p.name for p in (tmp_path / "ev").glob("*.png"))
    assert pngs == sorted(f"{kind}_{c.replace(':', '_')}.png" for c in COLLECTIONS for kind in ("hist", "rank"))
    for name in pngs:
        assert f"wrote {tmp_path / 'ev' / name}" in proc.stderr
        image = matplotlib.image.imread(tmp_path / "ev" / name)  # decodes the whole image
        assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 300, (name, image.shape)
        rgb = image[..., :3]
        drawn = (rgb < 0.9).any(axis=2)  # anything darker than the white background: axes, text, points
        assert 0.005 < drawn.mean() < 0.6, (name, drawn.mean())
        assert len(np.unique(rgb.reshape(-1, 3), axis=0)) > 10, f"{name} holds too few colours to be a plot"


def test_without_matplotlib_evaluate_says_how_to_get_plots_and_writes_the_rest(synth_shards, models, tmp_path):
    with_plots = evaluate(WITH_MATPLOTLIB, synth_shards, models, tmp_path / "with")
    assert with_plots.returncode == 0, with_plots.stderr[-3000:]
    proc = evaluate(NO_MATPLOTLIB, synth_shards, models, tmp_path / "without")
    assert proc.returncode == 0, proc.stderr[-3000:]
    wrote = [f"wrote {tmp_path / 'without' / name}" for name in TABLES]
    assert proc.stderr.splitlines() == [plot.NO_PLOTS, *wrote]  # one line about the plots, nothing else
    assert "pip install 'tpuprep[plot]'" in plot.NO_PLOTS
    assert sorted(p.name for p in (tmp_path / "without").iterdir()) == sorted(TABLES)
    for name in TABLES:
        got, want = ((tmp_path / d / name).read_text() for d in ("without", "with"))
        if name == "per_graph.csv":  # every column but the last, the seconds each graph took
            got, want = ([line.rsplit(",", 1)[0] for line in t.splitlines()] for t in (got, want))
        assert got == want, name
    assert proc.stdout == with_plots.stdout  # the printed table


def test_missing_is_none_when_matplotlib_imports():
    assert plot.missing() is None
