"""docs/spec.md §7 / issue 6: a build SIGKILLed anywhere leaves nothing a reader could mistake for output, and
``--resume`` finishes it byte-identically to a clean build; verify catches tampering."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from npzfactory import layout_arrays, tile_arrays, write
from trees import reference_build, run_tpuprep, tree_bytes

from tpuprep.cli import main


def _tree(root: Path) -> Path:
    for i in range(4):
        write(root, f"layout/xla/random/train/g{i}.npz", layout_arrays(i, n=40, c=400))
        write(root, f"layout/nlp/default/valid/h{i}.npz", layout_arrays(10 + i, n=30, c=50))
        write(root, f"tile/xla/train/t{i}.npz", tile_arrays(i))
    write(root, "layout/xla/random/test/0123456789abcdef0123456789abcdef.npz", layout_arrays(99))
    return root


@pytest.fixture(scope="module")
def src_and_clean(tmp_path_factory):
    """(src tree, the files of a clean full build of it)."""
    src = _tree(tmp_path_factory.mktemp("crash") / "npz")
    return src, tree_bytes(reference_build(tmp_path_factory, src, "crash-clean"))


# SIGKILL points: while inflating (the first files' config chunks), after some parts, after some shards,
# with the manifest written but not yet renamed into place
@pytest.mark.parametrize("crash", ["inflate:1", "inflate:5", "part:3", "part:9", "shard:1", "shard:6", "manifest:1"])
def test_sigkill_then_resume_is_byte_identical(tmp_path, src_and_clean, crash):
    src, clean = src_and_clean
    dst = tmp_path / "out"
    killed = run_tpuprep("build", "--src", str(src), "--dst", str(dst), "-q", crash=crash)
    assert killed.returncode == -9, killed.stderr
    assert not (dst / "manifest.json").exists()
    for shard in dst.glob("*/**/*.parquet"):  # anything under a public name is complete
        if not shard.name.startswith("."):
            pq.read_table(shard)
    refused = run_tpuprep("build", "--src", str(src), "--dst", str(dst), "-q")
    assert refused.returncode == 2 and "--resume" in refused.stderr
    resumed = run_tpuprep("build", "--src", str(src), "--dst", str(dst), "--resume", "-q")
    assert resumed.returncode == 0, resumed.stderr
    assert tree_bytes(dst) == clean


def test_resume_and_overwrite_exclude_each_other(tmp_path, src_and_clean):
    src, _ = src_and_clean
    result = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(tmp_path), "--resume", "--overwrite"])
    assert result.exit_code == 2 and "exclude each other" in result.stderr


def test_overwrite_refuses_a_folder_tpuprep_did_not_write(tmp_path, src_and_clean):
    src, _ = src_and_clean
    (tmp_path / "thesis.tex").write_text("precious")
    result = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(tmp_path), "--overwrite", "-q"])
    assert result.exit_code == 2 and "did not write" in result.stderr
    assert (tmp_path / "thesis.tex").read_text() == "precious"


def test_repeat_and_parallel_builds_are_byte_identical(tmp_path, src_and_clean):
    src, clean = src_and_clean
    for workers in ("1", "2"):
        dst = tmp_path / f"w{workers}"
        result = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(dst), "--workers", workers, "-q"])
        assert result.exit_code == 0, result.output
        assert tree_bytes(dst) == clean


@pytest.fixture
def built(tmp_path, src_and_clean):
    src, _ = src_and_clean
    dst = tmp_path / "shards"
    assert CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(dst), "-q"]).exit_code == 0
    return src, dst


def _verify(src, dst):
    return CliRunner().invoke(main, ["verify", "--src", str(src), "--dst", str(dst), "-q"])


def test_verify_passes_then_catches_changed_bytes(built):
    src, dst = built
    assert _verify(src, dst).exit_code == 0
    shard = next(dst.glob("layout/xla/random/configs/*.parquet"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    result = _verify(src, dst)
    assert result.exit_code == 1 and "shard bytes changed" in result.output


def test_verify_catches_a_missing_shard(built):
    src, dst = built
    next(dst.glob("tile/xla/graphs/*.parquet")).unlink()
    result = _verify(src, dst)
    assert result.exit_code == 1 and "shard is missing" in result.output


def test_verify_catches_content_that_no_longer_matches_the_source(built):
    """A shard rewritten with one wrong runtime and a manifest hash to match: only the content check sees it."""
    import pyarrow as pa

    from tpuprep.io.files import sha256_file

    src, dst = built
    shard = next(dst.glob("layout/xla/random/configs/*.parquet"))
    table = pq.read_table(shard)
    runtime = table.column("runtime").to_numpy().copy()
    runtime[3] += 1
    table = table.set_column(table.schema.get_field_index("runtime"), "runtime", pa.array(runtime))
    pq.write_table(table, shard)
    manifest = json.loads((dst / "manifest.json").read_text())
    for s in manifest["shards"]:
        if dst / s["path"] == shard:
            s["sha256"], s["bytes"] = sha256_file(shard), shard.stat().st_size
    (dst / "manifest.json").write_text(json.dumps(manifest))
    result = _verify(src, dst)
    assert result.exit_code == 1 and "config_runtime is not the group minimum" in result.output


# --resume after changing the build options (issue #11 item 14a): parts made with the old options must
# not be reused. A build is SIGKILLed after all its parts are staged (the first shard placed), then
# resumed with one option changed; the result must be byte-identical to a clean build with the new
# options — which differs from the old options' build, so reusing stale parts cannot pass.
OPTION_CHANGES = {
    "hops": ["--hops", "2"],
    "no-prune": ["--no-prune"],
    "no-dedup": ["--no-dedup"],
    "no-repad": ["--no-repad"],
    "compression-level": ["--compression-level", "9"],
    "folds": ["--folds", "3"],
}


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory, src_and_clean):
    """A default-options build killed after every part was written (only the merge was left)."""
    src, _ = src_and_clean
    dst = tmp_path_factory.mktemp("interrupted") / "out"
    killed = run_tpuprep("build", "--src", str(src), "--dst", str(dst), "-q", crash="shard:1")
    assert killed.returncode == -9, killed.stderr
    assert not (dst / "manifest.json").exists() and list((dst / ".tpuprep" / "parts").rglob("*.json"))
    return dst


@pytest.mark.parametrize("change", sorted(OPTION_CHANGES))
def test_resume_with_changed_options_equals_a_clean_build_with_them(tmp_path, src_and_clean,
                                                                   interrupted, change):
    import shutil

    src, clean_default = src_and_clean
    flags = OPTION_CHANGES[change]
    dst = tmp_path / "resumed"
    shutil.copytree(interrupted, dst)
    runner = CliRunner()
    resumed = runner.invoke(main, ["build", "--src", str(src), "--dst", str(dst), "--resume", "-q", *flags])
    assert resumed.exit_code == 0, resumed.output
    clean = tmp_path / "clean"
    built = runner.invoke(main, ["build", "--src", str(src), "--dst", str(clean), "-q", *flags])
    assert built.exit_code == 0, built.output
    clean_new = tree_bytes(clean)
    # the option really changes the shards themselves (not just the manifest's record of options)
    assert {k: v for k, v in clean_new.items() if k.endswith(".parquet")} != \
        {k: v for k, v in clean_default.items() if k.endswith(".parquet")}
    assert tree_bytes(dst) == clean_new
