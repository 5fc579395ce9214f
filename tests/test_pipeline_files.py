"""The run files under pipelines/ (``tpuprep run FILE.toml``): every shipped file parses, the demo runs
end to end, relative paths and overrides resolve as documented, and mistakes are one clear error."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from trees import tree_bytes

from tpuprep.build import build
from tpuprep.cli import main
from tpuprep.options import BuildOptions
from tpuprep.pipeline import (
    ClusterSpec,
    PipelineError,
    load_pipeline,
    override,
    parse_pipeline,
    run_pipeline,
)

REPO = Path(__file__).resolve().parent.parent
PIPELINES = REPO / "pipelines"
RUN_FILES = sorted(PIPELINES.glob("*.toml"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A synthetic 'tiny' tree, restricted to two collections to keep the builds short."""
    from tpuprep.synth import synthesize

    root = tmp_path_factory.mktemp("pipeline-src")
    synthesize(root, "tiny", 0, collections=["tile:xla", "layout:xla:random"])
    return root / "npz"


# ------------------------------------------------------------------------------ shipped files


def test_the_shipped_run_files_exist():
    names = {p.name for p in PIPELINES.iterdir()}
    assert {"demo-local.toml", "full-tpugraphs-cluster.toml", "README.md"} <= names


@pytest.mark.parametrize("path", RUN_FILES, ids=lambda p: p.name)
def test_every_run_file_parses(path):
    p = load_pipeline(path)
    for where in (p.src, p.dst):  # an absolute path, or an object-store URL kept as written
        assert where.is_absolute() if isinstance(where, Path) else "://" in where
    assert p.name and p.src != p.dst
    if isinstance(p.src, Path) and isinstance(p.dst, Path):
        assert p.src not in p.dst.parents
    assert p.describe().startswith(f"pipeline     {p.name}")


def test_every_toml_snippet_in_the_readme_parses():
    text = (PIPELINES / "README.md").read_text()
    snippets = re.findall(r"```toml\n(.*?)```", text, flags=re.S)
    assert snippets, "the README shows the run-file format"
    for snippet in snippets:
        parse_pipeline(snippet, PIPELINES / "snippet.toml")


def test_the_shipped_files_say_what_they_promise():
    demo = load_pipeline(PIPELINES / "demo-local.toml")
    assert demo.cluster == ClusterSpec("local", workers=2, engine="processes")
    assert demo.src == (REPO / "demo-data" / "npz") and demo.synth is not None and demo.overwrite
    assert demo.options == BuildOptions()
    full = load_pipeline(PIPELINES / "full-tpugraphs-cluster.toml")
    assert full.cluster.type == "dask" and full.cluster.scheduler_file is not None and full.resume
    assert full.src.startswith("s3://") and full.src.endswith("/npz_all.tar")  # the official archive
    assert full.dst.startswith("s3://")  # no shared filesystem needed
    assert full.collections is not None and len(full.collections) == 5


# ----------------------------------------------------------------------------------- running


def test_demo_local_runs_end_to_end_on_a_tiny_tree(tmp_path, tiny):
    reference = tmp_path / "reference"
    build(tiny, reference, load_pipeline(PIPELINES / "demo-local.toml").options)
    dst = tmp_path / "shards"
    result = CliRunner().invoke(main, ["run", str(PIPELINES / "demo-local.toml"), "--src", str(tiny),
                                          "--dst", str(dst)])
    assert result.exit_code == 0, result.output
    assert "cluster      local, 2 worker(s), engine processes" in result.output
    assert "converted, 0 reused, 0 quarantined" in result.output
    assert tree_bytes(dst) == tree_bytes(reference)
    # overwrite = true in the file: a second run replaces the first
    again = CliRunner().invoke(main, ["run", str(PIPELINES / "demo-local.toml"), "--src", str(tiny),
                                         "--dst", str(dst), "--workers", "1", "-q"])
    assert again.exit_code == 0, again.output
    assert tree_bytes(dst) == tree_bytes(reference)


def test_paths_are_relative_to_the_run_file_and_missing_src_is_synthesised(tmp_path):
    run_file = tmp_path / "runs" / "mine.toml"
    run_file.parent.mkdir()
    run_file.write_text('src = "../data/npz"\ndst = "../out"\ncollections = ["tile"]\nsplits = "train,valid"\n'
                        '[synth]\nprofile = "tiny"\nseed = 3\ncollections = ["tile:xla"]\n'
                        '[options]\ncompression_level = 5\n[cluster]\ntype = "serial"\n')
    p = load_pipeline(run_file)
    assert (p.src, p.dst) == (tmp_path / "data" / "npz", tmp_path / "out")
    report = run_pipeline(run_file)
    assert (tmp_path / "data" / "npz" / "tile" / "xla" / "train").is_dir()
    assert (tmp_path / "out" / "manifest.json").exists()
    assert report.manifest["options"]["compression_level"] == 5
    assert {r["split"] for r in report.records} == {"train", "valid"}


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path, tiny):
    dst = tmp_path / "never"
    result = CliRunner().invoke(main, ["run", str(PIPELINES / "full-tpugraphs-cluster.toml"), "--src", str(tiny),
                                          "--dst", str(dst), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "cluster      dask at scheduler file /shared/tpugraphs/dask/scheduler.json" in result.output
    files = len(list(tiny.rglob("*.npz")))
    assert f"would convert {files} files; 0 refused" in result.output
    assert "tile/xla/train/" in result.output
    assert not dst.exists()


def test_a_quiet_dry_run_still_prints_the_plan(tmp_path, tiny):
    run_file = tmp_path / "r.toml"
    run_file.write_text(f'src = "{tiny}"\ndst = "out"\n')
    result = CliRunner().invoke(main, ["run", str(run_file), "--dry-run", "-q"])
    assert result.exit_code == 0 and result.output.startswith(f"pipeline     r ({run_file})"), result.output
    assert not (tmp_path / "out").exists()


def test_dry_run_of_a_missing_synthesised_src_says_so(tmp_path):
    run_file = tmp_path / "r.toml"
    run_file.write_text('src = "d/npz"\ndst = "out"\n[synth]\nprofile = "tiny"\n')
    result = CliRunner().invoke(main, ["run", str(run_file), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "would be synthesised first" in result.output
    assert not (tmp_path / "d").exists()


def test_local_dask_engine_matches_local_build(tmp_path, tiny):
    run_file = tmp_path / "r.toml"
    run_file.write_text(f'src = "{tiny}"\ndst = "out"\ncollections = ["tile:xla"]\n'
                        '[cluster]\ntype = "local"\nworkers = 2\nengine = "dask"\n')
    run_pipeline(run_file)
    build(tiny, tmp_path / "ref", collections=["tile:xla"])
    assert tree_bytes(tmp_path / "out") == tree_bytes(tmp_path / "ref")


# ----------------------------------------------------------------------------------- overrides


def test_command_line_overrides(tmp_path):
    p = load_pipeline(PIPELINES / "full-tpugraphs-cluster.toml")
    q = override(p, src="a/npz", dst="b", workers=3)
    assert q.src == Path("a/npz").resolve() and q.dst == Path("b").resolve()
    assert q.cluster.type == "local" and q.cluster.workers == 3
    r = override(p, scheduler="tcp://10.0.0.1:8786", resume=True)
    assert r.cluster.type == "dask" and r.cluster.scheduler == "tcp://10.0.0.1:8786"
    assert r.cluster.scheduler_file is None and r.cluster.min_workers == p.cluster.min_workers
    demo = load_pipeline(PIPELINES / "demo-local.toml")
    resumed = override(demo, resume=True)
    assert resumed.resume and not resumed.overwrite
    assert override(demo) is demo


def test_environment_variables_expand_in_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("TPUPREP_TEST_ROOT", str(tmp_path))
    p = parse_pipeline('src = "$TPUPREP_TEST_ROOT/npz"\ndst = "${TPUPREP_TEST_ROOT}/out"\n', tmp_path / "x.toml")
    assert (p.src, p.dst) == (tmp_path / "npz", tmp_path / "out")
    with pytest.raises(PipelineError, match=r"\[cluster.scheduler\] environment variable TPUPREP_NOPE_HOST"):
        parse_pipeline('src = "a"\ndst = "b"\n[cluster]\nscheduler = "tcp://${TPUPREP_NOPE_HOST}:1"\n',
                       tmp_path / "x.toml")


# ------------------------------------------------------------------------------------ mistakes


@pytest.mark.parametrize(("text", "message"), [
    ('dst = "b"\n', r"\[src\] is required"),
    ('src = "a"\ndst = "b"\nsource = "c"\n', r"\[source\] unknown key"),
    ('src = "a"\ndst = "b"\n[options]\nhops = "2"\n', r"\[options.hops\] must be int, not str"),
    ('src = "a"\ndst = "b"\n[options]\nprune = 1\n', r"\[options.prune\] must be bool"),
    ('src = "a"\ndst = "b"\n[options]\nhop = 2\n', r"\[options.hop\] unknown key"),
    ('src = "a"\ndst = "b"\n[options]\ncompression_level = 30\n', r"must lie in 1..22"),
    ('src = "a"\ndst = "b"\nresume = true\noverwrite = true\n', r"exclude each other"),
    ('src = "a"\ndst = "b"\nsplits = ["training"]\n', r"\[splits\] 'training' is not a split"),
    ('src = "a"\ndst = "b"\n[cluster]\ntype = "k8s"\n', r"\[cluster.type\] must be one of"),
    ('src = "a"\ndst = "b"\n[cluster]\ntype = "local"\nscheduler = "tcp://x:1"\n', r"does not apply"),
    ('src = "a"\ndst = "b"\n[cluster]\nscheduler = "tcp://x:1"\nscheduler_file = "f"\n', r"not both"),
    ('src = "a"\ndst = "b"\n[cluster]\nworkers = 0\n', r"\[cluster.workers\] must lie in 1..1024"),
    ('src = "a"\ndst = "b"\n[synth]\nprofile = "huge"\n', r"\[synth.profile\] must be one of"),
    ('src = "a"\ndst = "b"\n[synth]\nprofile = "tiny"\n', r"folder named npz"),
    ('src = "a"\ndst = "b"\ncluster = 3\n', r"\[cluster\] must be dict"),
    ('src = "a"\n dst = \n', r"not valid TOML"),
    ('src = "a"\ndst = "b"\n[options]\nhops = 2.0\n', r"\[options.hops\] must be int, not float 2.0"),
    ('src = "a"\ndst = "b"\n[options]\nfolds = true\n', r"\[options.folds\] must be int, not bool"),
    ('src = "a"\ndst = "b"\n[cluster]\ntype = "serial"\ntimeout = 5\n',
     r"\[cluster.timeout\] does not apply to cluster type 'serial'"),
    ('src = "a"\ndst = "b"\n[cluster]\nscheduler = "tcp://x:1"\nworkers = 2\n',
     r"\[cluster.workers\] does not apply to cluster type 'dask'"),
    ('src = "a"\ndst = "b"\n[cluster]\nmin_workers = 2\n', r"\[cluster.min_workers\] does not apply"),
    ('src = "a"\ndst = "b"\n[cluster]\ntimeout = nan\n', r"\[cluster.timeout\] must be > 0"),
    ('src = "a"\ndst = "b"\n[cluster]\ntimeout = 0\n', r"\[cluster.timeout\] must be > 0"),
    ('src = "a"\ndst = "b"\n[cluster]\ntype = "dask"\nretries = -1\n', r"\[cluster.retries\] must be at least 0"),
    ('src = "a"\ndst = "b"\nsplits = "train,validation"\n', r"\[splits\] 'validation' is not a split"),
    ('src = "a"\ndst = "b"\n[synth]\nseed = "0"\n', r"\[synth.seed\] must be int, not str"),
    ('src = "a"\ndst = "b"\n[synth]\nseed = -1\n', r"\[synth.seed\] must be at least 0, not -1"),
    ('src = ""\ndst = "b"\n', r"\[src\] must not be empty"),
])
def test_mistakes_are_one_clear_error(tmp_path, text, message):
    with pytest.raises(PipelineError, match=message) as info:
        parse_pipeline(text, tmp_path / "bad.toml")
    assert str(info.value).startswith(str(tmp_path / "bad.toml")) and "\n" not in str(info.value)


def test_run_files_are_validated_by_the_json_schema(tmp_path, monkeypatch):
    """schemas/run.schema.json is the source of truth: every shipped run file is valid under it, its
    choices are the code's, and a change to it changes what parse_pipeline accepts."""
    import dataclasses
    import json
    import tomllib

    import jsonschema

    from tpuprep.shards import schema as shard_schema
    from tpuprep.synth import PROFILES
    from tpuprep.tpugraphs import SPLITS

    schema = json.loads((REPO / "schemas" / "run.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    for run_file in RUN_FILES:
        jsonschema.Draft202012Validator(schema).validate(tomllib.loads(run_file.read_text()))
    defs = schema["$defs"]
    assert defs["splits"]["items"]["enum"] == list(SPLITS)
    assert defs["synth"]["properties"]["profile"]["enum"] == list(PROFILES)
    json_type = {bool: "boolean", int: "integer"}
    options = {f.name: json_type[type(getattr(BuildOptions(), f.name))] for f in dataclasses.fields(BuildOptions)}
    assert {k: v["type"] for k, v in defs["options"]["properties"].items()} == options
    parse_pipeline('src = "a"\ndst = "b"\n[options]\nhops = 4\n', tmp_path / "ok.toml")
    schema["$defs"]["options"]["properties"]["hops"]["maximum"] = 3
    monkeypatch.setattr(shard_schema, "run_schema", lambda: schema)
    with pytest.raises(PipelineError, match=r"\[options.hops\] must lie in 0..3, not 4"):
        parse_pipeline('src = "a"\ndst = "b"\n[options]\nhops = 4\n', tmp_path / "bad.toml")


def test_cli_reports_a_bad_run_file_as_usage_error(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('src = "a"\ndst = "b"\n[options]\nhops = -1\n')
    result = CliRunner().invoke(main, ["run", str(bad)])
    assert result.exit_code == 2
    assert "[options.hops] must lie in 0..64" in result.output


def test_missing_src_without_synth_is_a_usage_error(tmp_path):
    run_file = tmp_path / "r.toml"
    run_file.write_text('src = "nowhere/npz"\ndst = "out"\n')
    result = CliRunner().invoke(main, ["run", str(run_file), "-q"])
    assert result.exit_code == 2 and "does not exist" in result.output


def test_a_copied_demo_file_keeps_working(tmp_path, tiny):
    """Run files are self-contained: copy one elsewhere, its relative paths follow it."""
    shutil.copy(PIPELINES / "demo-local.toml", tmp_path / "demo.toml")
    p = load_pipeline(tmp_path / "demo.toml")
    assert p.src == tmp_path.parent / "demo-data" / "npz"


@pytest.mark.parametrize("option", ['endpoint_url = "$1"', 'endpoint_url = "${…}"', 'endpoint_url = "${1}"',
                                    "bogus_option = 3", 'client_kwargs = "zz"'])
def test_storage_options_the_store_refuses_are_one_line_not_a_traceback(tmp_path, tiny, monkeypatch, option):
    """Issue #36 item 14: ``$1`` or ``${…}`` (kept as written: no variable) in a dst storage option
    reached the store library, whose ValueError (and TypeError, AttributeError for a bad option)
    ended the run in a traceback. One line naming --dst, exit 1, nothing written."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    run_file = tmp_path / "job.toml"
    run_file.write_text(f'src = "{tiny}"\ndst = "s3://tpuprep-test-bucket/out"\n[cluster]\ntype = "serial"\n'
                        f"[dst_storage_options]\n{option}\n")
    result = CliRunner().invoke(main, ["run", str(run_file), "-q"])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # not an escaped ValueError / TypeError
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --dst s3://tpuprep-test-bucket/out: cannot be reached "
                                                   "with its storage options ("), lines


def test_a_negative_seed_is_refused_on_every_command_line(tmp_path):
    """A seed is an integer ≥ 0 everywhere (NumPy's seeds): synth and train refused -1 only inside, with
    NumPy's words, or not at all; the run file's [synth] seed is bounded the same way (above)."""
    from tpuprep.train.trainer import TrainConfig

    for args in (["synth", "--dst", str(tmp_path / "new"), "--seed", "-1"],
                 ["train", "--shards", str(tmp_path), "--collection", "tile:xla", "--out", str(tmp_path / "m"),
                  "--seed", "-1"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2 and "--seed" in result.output and "-1 is not in the range x>=0" in result.output
    for bad in (-1, 1.5, True, "0"):
        with pytest.raises(ValueError, match="seed must be an integer ≥ 0"):
            TrainConfig(seed=bad)


def test_storage_options_of_a_local_location_are_refused(tmp_path):
    with pytest.raises(PipelineError, match=r"\[src_storage_options\] applies only when src is an object-store URL"):
        parse_pipeline('src = "a"\ndst = "s3://b/p"\n[src_storage_options]\nanon = true\n', tmp_path / "x.toml")


def test_a_local_override_drops_the_run_files_storage_options(tmp_path):
    p = parse_pipeline('src = "a"\ndst = "s3://b/p"\n[dst_storage_options]\nkey = "k"\n', tmp_path / "x.toml")
    assert p.dst_storage_options == {"key": "k"}
    assert override(p, dst=tmp_path / "local").dst_storage_options == {}
    assert override(p, dst="s3://b/other").dst_storage_options == {"key": "k"}


def test_variables_expand_inside_lists_and_tables_of_storage_options(tmp_path, monkeypatch):
    monkeypatch.setenv("TPUPREP_T_HOST", "h1")
    text = ('src = "a"\ndst = "s3://b/p"\n[dst_storage_options]\nhosts = ["$TPUPREP_T_HOST", "x$$y"]\n'
            '[dst_storage_options.client_kwargs]\nendpoint_url = "http://${TPUPREP_T_HOST}:9000"\n')
    p = parse_pipeline(text, tmp_path / "x.toml")
    assert p.dst_storage_options == {"hosts": ["h1", "x$y"], "client_kwargs": {"endpoint_url": "http://h1:9000"}}


def test_an_unknown_key_is_named_before_a_wrong_value_elsewhere(tmp_path):
    with pytest.raises(PipelineError, match=r"\[bogus\] unknown key"):
        parse_pipeline('src = "a"\ndst = "b"\nbogus = 1\n[options]\nhops = "x"\n', tmp_path / "x.toml")
    with pytest.raises(PipelineError, match=r"\[options.hop\] unknown key \(allowed:"):  # before hops = "x"
        parse_pipeline('src = "a"\ndst = "b"\n[options]\nhops = "x"\nhop = 1\n', tmp_path / "x.toml")
