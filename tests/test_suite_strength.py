"""The test suite's own strength (issue #11 item 14): the property tests explore the same examples on
every run, and the checks that guard against planted bugs keep their teeth — each is run here against
an in-process mutant (a monkeypatched function) and must reject it."""

from __future__ import annotations

import dataclasses
import importlib
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import CI_EXAMPLES, PROFILE
from hypothesis import given, settings
from hypothesis import strategies as st
from npzfactory import layout_arrays, tile_arrays, write

import tpuprep.build
import tpuprep.kernels
from tpuprep.cli import main

TESTS = Path(__file__).parent
ci_only = pytest.mark.skipif(PROFILE != "ci", reason="a campaign profile randomizes on purpose")

# ---------------------------------------------------------------------------- (d) hypothesis profile


@ci_only
def test_the_default_profile_is_derandomized():
    s = settings.default
    assert s.derandomize is True and s.database is None and s.deadline is None
    assert s.max_examples == CI_EXAMPLES


def _property_tests():
    """Every @given test of the suite: (module name, test name, its hypothesis settings)."""
    found = []
    for path in sorted(TESTS.glob("test_*.py")):
        if "from hypothesis" not in path.read_text():
            continue
        module = importlib.import_module(path.stem)
        for name in dir(module):
            fn = getattr(module, name)
            inner = getattr(fn, "_hypothesis_internal_use_settings", None)
            if name.startswith("test_") and inner is not None:
                found.append((path.stem, name, inner))
    return found


@ci_only
def test_every_property_test_is_derandomized():
    found = _property_tests()
    modules = {m for m, _, _ in found}
    assert {"test_fuzz", "test_kernels_property", "test_train_metrics"} <= modules, modules
    loose = [f"{m}::{n}" for m, n, s in found if not s.derandomize or s.database is not None]
    assert not loose, loose
    assert all(s.deadline is None for _, _, s in found)


@ci_only
def test_two_runs_draw_the_same_examples():
    def draw_examples() -> list[tuple[int, ...]]:
        seen: list[tuple[int, ...]] = []

        @settings(max_examples=30)
        @given(st.lists(st.integers(), min_size=1, max_size=5))
        def probe(xs):
            seen.append(tuple(xs))

        probe()
        return seen

    first, second = draw_examples(), draw_examples()
    assert first == second and len(set(first)) > 10


def test_fuzz_examples_follow_the_environment(monkeypatch):
    """TPUPREP_FUZZ_EXAMPLES still sets the fuzz tests' count (a longer campaign)."""
    import test_fuzz

    monkeypatch.setenv("TPUPREP_FUZZ_EXAMPLES", "7")
    try:
        again = importlib.reload(test_fuzz)
        assert again.FUZZ.max_examples == 7 and again.FUZZ.derandomize == (PROFILE == "ci")
    finally:
        monkeypatch.delenv("TPUPREP_FUZZ_EXAMPLES")
        importlib.reload(test_fuzz)
    assert test_fuzz.FUZZ.max_examples == int(os.environ.get("TPUPREP_FUZZ_EXAMPLES", "150"))


# ---------------------------------------------------------------------------- (c) fuzz vs reference


def _skip_last_layout_col(node_feat, node_opcode, edge_index, node_index):
    got = ORIGINAL_REPAD(node_feat, node_opcode, edge_index, node_index)
    got.node_feat[:, 139] = node_feat[node_index, 139]  # mutant: column 139 is never re-padded
    return got


ORIGINAL_REPAD = tpuprep.kernels.repad_node_feat


@pytest.mark.parametrize("kind", ["layout", "tile"])
def test_the_fuzz_checker_rejects_a_wrong_repad(monkeypatch, kind):
    from test_fuzz import _convert, _savez

    data = _savez(layout_arrays(2) if kind == "layout" else tile_arrays(2))
    assert _convert(data, kind) is not None  # the real pipeline passes
    monkeypatch.setattr(tpuprep.kernels, "repad_node_feat", _skip_last_layout_col)
    with pytest.raises(AssertionError):
        _convert(data, kind)


@pytest.mark.parametrize("kind, collector", [("layout", "LayoutCollector")])
def test_the_fuzz_checker_rejects_a_wrong_dedup(monkeypatch, kind, collector):
    from test_fuzz import _convert, _savez

    arrays = layout_arrays(3) if kind == "layout" else tile_arrays(3)
    data = _savez(arrays)
    real = getattr(tpuprep.kernels, collector)
    runtimes = np.asarray(arrays["config_runtime"])

    class FirstNotMinimum(real):
        def finish(self):  # mutant: keeps the first runtime of each group, not the minimum
            r = super().finish()
            first = None if r.runtime is None else runtimes[r.first_index]
            return dataclasses.replace(r, runtime=first) if dataclasses.is_dataclass(r) else r._replace(runtime=first)

    assert _convert(data, kind) is not None
    monkeypatch.setattr(tpuprep.kernels, collector, FirstNotMinimum)
    with pytest.raises(AssertionError):
        _convert(data, kind)


# ---------------------------------------------------------------------------- (a) resume fingerprint


def _interrupted_then_resumed(root: Path, monkeypatch, flags: list[str]) -> dict[str, bytes]:
    """Build ``root/npz`` with default options, interrupted after every part was staged (the merge
    raises), then resume it with ``flags``; returns the output files."""
    dst = root / "out"

    def crash(*args, **kwargs):
        raise KeyboardInterrupt  # like Ctrl-C between the conversion and the merge

    with monkeypatch.context() as m:
        m.setattr(tpuprep.build, "merge_task", crash)
        with pytest.raises(KeyboardInterrupt):
            tpuprep.build.build(root / "npz", dst)
    r = CliRunner().invoke(main, ["build", "--src", str(root / "npz"), "--dst", str(dst), "--resume",
                                  "-q", *flags])
    assert r.exit_code == 0, r.output
    return {p.relative_to(dst).as_posix(): p.read_bytes() for p in sorted(dst.rglob("*")) if p.is_file()}


@pytest.fixture
def small_tree(tmp_path):
    for i in range(2):
        write(tmp_path / "npz", f"layout/xla/random/train/g{i}.npz", layout_arrays(i, n=30, c=60))
    write(tmp_path / "npz", "tile/xla/train/t0.npz", tile_arrays(0))
    return tmp_path


def test_resume_check_rejects_a_fingerprint_that_ignores_options(small_tree, tmp_path, monkeypatch):
    """The resume-with-changed-options comparison (test_crash_resume.py) against the mutant that
    leaves the options out of a finished part's fingerprint: the resumed build reuses stale parts."""
    flags = ["--no-repad"]
    clean = tmp_path / "clean"
    assert CliRunner().invoke(main, ["build", "--src", str(small_tree / "npz"), "--dst", str(clean),
                                     "-q", *flags]).exit_code == 0
    expected = {p.relative_to(clean).as_posix(): p.read_bytes() for p in sorted(clean.rglob("*"))
                if p.is_file()}
    good = tmp_path / "good"
    good.mkdir()
    (good / "npz").symlink_to(small_tree / "npz", target_is_directory=True)
    assert _interrupted_then_resumed(good, monkeypatch, flags) == expected
    real = tpuprep.build._fingerprint
    monkeypatch.setattr(tpuprep.build, "_fingerprint",
                        lambda batch, opts, *rest: {**real(batch, opts, *rest), "options": None})
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "npz").symlink_to(small_tree / "npz", target_is_directory=True)
    assert _interrupted_then_resumed(bad, monkeypatch, flags) != expected
