"""Start-up cost of the command line (#16): ``tpuprep --help``, ``tpuprep info`` and ``import tpuprep``
load neither Numba, pyarrow nor Dask (nor NumPy, for ``info``); the public API still loads on use.

Each check runs in a fresh interpreter (``sys.modules`` of this test process is full of everything)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("numba", "pyarrow", "dask", "distributed")
ROOT = Path(__file__).resolve().parents[1]


def _loaded_after(code: str, *heavy: str) -> list[str]:
    """Run ``code`` in a new interpreter (this worktree first on the path) and return which top-level
    packages of ``heavy`` it imported."""
    probe = (f"import sys\n{code}\n"
             f"print('@@', sorted({{m.split('.')[0] for m in sys.modules}} & {set(heavy)!r}))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    line = [x for x in out.stdout.splitlines() if x.startswith("@@")]
    assert line, out.stdout + out.stderr
    return eval(line[-1][2:])  # a printed list of str


def _run_cli(*args: str) -> str:
    return ("from tpuprep.cli import main\n"
            f"try:\n    main({list(args)!r})\nexcept SystemExit as e:\n    assert not e.code, e.code\n")


def test_help_imports_nothing_heavy() -> None:
    assert _loaded_after(_run_cli("--help"), *HEAVY) == []


@pytest.mark.parametrize("as_json", [False, True])
def test_info_imports_nothing_heavy(synth_shards: Path, as_json: bool) -> None:
    args = ["info", str(synth_shards), *(["--json"] if as_json else [])]
    assert _loaded_after(_run_cli(*args), *HEAVY, "numpy") == []


def test_import_tpuprep_is_light_and_the_api_loads_on_use() -> None:
    assert _loaded_after("import tpuprep", *HEAVY, "numpy") == []
    code = ("from tpuprep import open_dataset, Dataset, GraphRecord, encode_base7, decode_base7\n"
            "import tpuprep\nassert tpuprep.open_dataset is open_dataset\n"
            "assert set(tpuprep.__all__) <= set(dir(tpuprep))")
    assert _loaded_after(code, "numba", "pyarrow") == ["numba", "pyarrow"]


def test_unknown_attribute_is_still_an_attribute_error() -> None:
    import tpuprep

    with pytest.raises(AttributeError, match="no_such_name"):
        tpuprep.no_such_name  # noqa: B018


def test_train_help_still_lists_the_losses() -> None:
    from click.testing import CliRunner

    from tpuprep.cli import main
    from tpuprep.train.losses import LOSSES

    out = CliRunner().invoke(main, ["train", "--help"])
    assert out.exit_code == 0 and f"[{'|'.join(LOSSES)}]" in out.output
    bad = CliRunner().invoke(main, ["train", "--shards", ".", "--collection", "tile:xla", "--out", "m",
                                    "--loss", "nope"])
    assert bad.exit_code == 2 and "nope" in bad.output


def test_repadded_columns_still_importable() -> None:
    from tpuprep.tpugraphs import REPADDED_COLUMNS

    assert REPADDED_COLUMNS.dtype.name == "int64" and len(REPADDED_COLUMNS) == 20
    assert json.dumps(REPADDED_COLUMNS.tolist())
