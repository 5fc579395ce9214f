"""Reading shards from other training stacks, without tpuprep (the reader examples of docs/readers.md).

Each ``docs/examples/read_<stack>.py`` is executed as is, in a subprocess that cannot import tpuprep,
on graphs of every kind and split; the arrays it writes must equal ``tpuprep.load_graph`` exactly (values,
dtypes and shapes). The optional stacks (torch, jax, datasets) are skipped only outside CI: with ``CI`` set,
a missing one fails.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

import tpuprep
from tpuprep.build import build
from tpuprep.options import BuildOptions

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "docs" / "examples"
REAL = REPO.parent / "shared" / "real"
STACKS = {  # example name -> modules it needs beyond numpy
    "pyarrow": ["pyarrow"],
    "polars": ["polars"],
    "duckdb": ["duckdb"],
    "hf_datasets": ["datasets"],
    "torch": ["torch", "pyarrow"],
    "jax": ["jax", "pyarrow"],
}
SAMPLERS = {"pyarrow": ["pyarrow"], "polars": ["polars"], "duckdb": ["duckdb"]}  # sample_<stack>.py
SAMPLE_ARRAYS = ("rows", "config_runtime", "node_config_feat", "config_feat", "config_runtime_normalizers")
RECORD_ARRAYS = (
    "node_feat", "node_opcode", "edge_index", "node_index", "node_config_ids", "node_splits", "config_inverse",
    "config_runtime_original", "config_runtime_normalizers_original", "config_runtime",
    "config_runtime_normalizers", "group_size", "first_index", "config_codes", "config_feat",
)

# Runs example scripts as __main__ in one interpreter (one import of the stack), with tpuprep made
# unimportable, then proves it was never imported.
RUNNER = r"""
import importlib.abc, json, runpy, sys

class NoTpuprep(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "tpuprep" or name.startswith("tpuprep."):
            raise ImportError("a reader example must not import tpuprep")

sys.meta_path.insert(0, NoTpuprep())
example, jobs = sys.argv[1], json.loads(sys.argv[2])
for shards, graph_id, out, *args in jobs:
    sys.argv = [example, shards, graph_id, out, *args]
    runpy.run_path(example, run_name="__main__")
leaked = sorted(m for m in sys.modules if m == "tpuprep" or m.startswith("tpuprep."))
assert not leaked, leaked
print("NO-TPUPREP-OK")
"""


def require(*modules: str) -> None:
    """Skip when an optional stack is missing — but fail in CI, where the test extra must provide it."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        message = f"optional reader stack not installed: {', '.join(missing)} (pip install -e '.[test]')"
        if os.environ.get("CI"):
            pytest.fail(message + " — CI must run every reader test")
        pytest.skip(message)


def hf_env(tmp: Path) -> dict[str, str]:
    """An environment for a subprocess: HF caches in ``tmp``, offline, no inherited PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HF_HOME", "HF_DATASETS_CACHE")}
    env |= {"HF_HOME": str(tmp / "hf-home"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "TQDM_DISABLE": "1"}
    return env


# --------------------------------------------------------------------------- shard folders


def mixed_real_tree(root: Path) -> Path:
    """The real files spread over every split: main__.10904 as layout valid, a 1,000-config copy of
    alexnet with zero runtimes as layout test, tile files in train/valid/test (test: runtimes 0,
    normalizers 1, as in the real test files)."""
    npz = root / "npz"
    lay, tile = npz / "layout" / "xla" / "default", npz / "tile" / "xla"
    for d in (lay / "train", lay / "valid", lay / "test", tile / "train", tile / "valid", tile / "test"):
        d.mkdir(parents=True)
    alexnet = REAL / "reconstructed" / "alexnet_train_batch_32.npz"
    if not alexnet.exists():
        pytest.skip(f"{REAL} is absent (a clone without ../shared)")
    shutil.copy(alexnet, lay / "train" / alexnet.name)
    shutil.copy(REAL / "npz" / "layout" / "xla" / "default" / "train" / "main__.10904.npz", lay / "valid")
    with np.load(alexnet) as z:
        d = {k: z[k] for k in z.files}
    d["node_config_feat"] = d["node_config_feat"][:1000]
    d["config_runtime"] = np.zeros(1000, np.int64)
    np.savez_compressed(lay / "test" / "5d0c1a0e1f2a3b4c5d6e7f8091a2b3c4.npz", **d)
    for i, f in enumerate(sorted((REAL / "npz" / "tile" / "xla" / "train").glob("*.npz"))):
        if i % 3 == 2:
            with np.load(f) as z:
                d = {k: z[k] for k in z.files}
            d["config_runtime"] = np.zeros_like(d["config_runtime"])
            d["config_runtime_normalizers"] = np.ones_like(d["config_runtime_normalizers"])
            np.savez_compressed(tile / "test" / f.name, **d)
        else:
            shutil.copy(f, tile / ("valid" if i % 3 == 1 else "train") / f.name)
    return npz


@pytest.fixture(scope="session")
def mixed_shards(tmp_path_factory) -> Path:
    """Real data in every split, built with small row groups (64 KB) so that large layout graphs span
    several configs row groups and tile row groups hold several graphs."""
    root = tmp_path_factory.mktemp("mixed")
    dst = root / "shards"
    report = build(mixed_real_tree(root), dst, BuildOptions(row_group_bytes=64 << 10))
    assert not report.quarantined, report.quarantined
    return dst


def pick_graphs(shards: Path) -> list[str]:
    """A few graphs covering each kind and split: for every split, the first graph of a layout and of a
    tile collection (rotating over the layout collections)."""
    ds = tpuprep.open_dataset(shards)
    picked = []
    layouts = [c for c in ds.collections if c.startswith("layout:")]
    for i, split in enumerate(("train", "valid", "test")):
        for colls in (layouts[i:] + layouts[:i], [c for c in ds.collections if c.startswith("tile:")]):
            for coll in colls:
                ids = ds.graph_ids(coll, split)
                if ids:
                    picked.append(ids[0])
                    break
    return picked


def one_per_layout_collection(shards: Path) -> list[str]:
    """One graph of every layout collection, the splits taken in turn."""
    ds = tpuprep.open_dataset(shards)
    layouts = [c for c in ds.collections if c.startswith("layout:")]
    return [ds.graph_ids(c, ("train", "valid", "test")[j % 3])[0] for j, c in enumerate(layouts)]


@pytest.fixture(scope="session")
def reader_cases(mixed_shards, synth_shards) -> list[tuple[Path, str]]:
    """(shard folder, graph id) pairs: real data (layout and tile) in every split, plus a synthetic graph
    of every layout collection (nlp and xla, default and random)."""
    cases = [(mixed_shards, g) for g in pick_graphs(mixed_shards)]
    cases += [(synth_shards, g) for g in one_per_layout_collection(synth_shards)]
    kinds = {(tpuprep.open_dataset(s).load_graph(g).kind, tpuprep.open_dataset(s).load_graph(g).split)
             for s, g in cases}
    assert kinds >= {(k, s) for k in ("layout", "tile") for s in ("train", "valid", "test")}, kinds
    return cases


# --------------------------------------------------------------------------- expected arrays


def expected_arrays(g: tpuprep.GraphRecord, got: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What an example must have written for ``g``: every non-None array of the record, plus the decoded
    layouts — all of them, or (torch) those of the configs the DataLoader sampled."""
    exp = {k: getattr(g, k) for k in RECORD_ARRAYS if getattr(g, k) is not None}
    if "sample_config_ids" in got:
        ids = got["sample_config_ids"]
        assert len(ids) == min(8, g.num_unique_configs) and len(set(ids.tolist())) == len(ids)
        exp["sample_config_ids"] = ids
        if g.kind == "layout":
            exp["sample_node_config_feat"] = g.node_config_feat(ids)
        else:
            exp["sample_config_feat"] = g.config_feat[ids]
        if g.config_runtime is not None:
            exp["sample_config_runtime"] = g.config_runtime[ids]
    elif g.kind == "layout":
        exp["node_config_feat"] = g.node_config_feat()
    return exp


def assert_same_arrays(got: dict[str, np.ndarray], exp: dict[str, np.ndarray], where: str) -> None:
    assert sorted(got) == sorted(exp), f"{where}: written {sorted(got)}, expected {sorted(exp)}"
    for name, want in exp.items():
        have = got[name]
        assert have.dtype == want.dtype, f"{where}: {name} is {have.dtype}, load_graph gives {want.dtype}"
        assert have.shape == want.shape, f"{where}: {name} has shape {have.shape}, load_graph gives {want.shape}"
        assert np.array_equal(have, want), f"{where}: {name} differs from load_graph"


def run_example(stack: str, cases: list[tuple[Path, str]], tmp: Path, prefix: str = "read",
                args: tuple[str, ...] = ()) -> dict[tuple[str, str], Path]:
    """Run docs/examples/<prefix>_<stack>.py on every case (``args`` after SHARDS GRAPH_ID OUT) in one
    subprocess without tpuprep."""
    jobs, outs = [], {}
    for i, (shards, gid) in enumerate(cases):
        out = tmp / f"{stack}-{i}"
        jobs.append((str(shards), gid, str(out), *args))
        outs[(str(shards), gid)] = out
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(EXAMPLES / f"{prefix}_{stack}.py"), json.dumps(jobs)],
                          cwd=tmp, env=hf_env(tmp), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{prefix}_{stack}.py failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    assert "NO-TPUPREP-OK" in proc.stdout
    return outs


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("stack", list(STACKS))
def test_reader_example_reproduces_load_graph(stack, reader_cases, tmp_path):
    require(*STACKS[stack])
    outs = run_example(stack, reader_cases, tmp_path)
    for shards, gid in reader_cases:
        g = tpuprep.open_dataset(shards).load_graph(gid)
        got = {p.stem: np.load(p, allow_pickle=False) for p in outs[(str(shards), gid)].glob("*.npy")}
        assert_same_arrays(got, expected_arrays(g, got), f"read_{stack}.py on {gid}")


@pytest.mark.parametrize("k", [64, 0])
@pytest.mark.parametrize("stack", list(SAMPLERS))
def test_sampled_read_example_reproduces_sample_configs(stack, k, reader_cases, tmp_path):
    """docs/examples/sample_<stack>.py (k = 64, the default, and k = 0; seed 0) writes what
    Dataset.sample_configs gives: the same rows in the same order, the same arrays, dtypes and shapes
    (empty ones for k = 0); runtimes absent on test."""
    require(*SAMPLERS[stack])
    outs = run_example(stack, reader_cases, tmp_path, prefix="sample", args=() if k == 64 else (str(k),))
    for shards, gid in reader_cases:
        s = tpuprep.open_dataset(shards).sample_configs(gid, k, seed=0)
        got = {p.stem: np.load(p, allow_pickle=False) for p in outs[(str(shards), gid)].glob("*.npy")}
        exp = {name: getattr(s, name) for name in SAMPLE_ARRAYS if getattr(s, name) is not None}
        assert_same_arrays(got, exp, f"sample_{stack}.py on {gid}")


def test_sampled_cases_cover_shards_of_one_graph_and_of_several(reader_cases):
    """sample_duckdb.py drops the graph_id filter when one configs shard holds the graph alone (manifest
    range first_graph == last_graph) and keeps it otherwise: the cases above must exercise both."""
    branches = set()
    for shards, gid in reader_cases:
        table = "layout_configs" if gid.startswith("layout:") else "tile_configs"
        ranges = [(s["first_graph"], s["last_graph"]) for s in json.loads((shards / "manifest.json").read_text())
                  ["shards"] if s["table"] == table and s["first_graph"] <= gid <= s["last_graph"]]
        assert ranges, gid
        branches.add("alone" if len(ranges) == 1 and ranges[0][0] == ranges[0][1] else "graph_id filter")
    assert branches == {"alone", "graph_id filter"}, branches


def test_sample_polars_slices_a_graph_after_others_in_its_shard(tmp_path):
    """sample_polars.py reads layout config r at row first + r of the graph's shard. tpuprep writes one
    layout graph per configs shard (first = 0), so a shard holding two graphs is made here by hand: the
    second graph's sample is read after the first graph's rows, equal to what was written."""
    example = _load_example("polars", prefix="sample")
    rng = np.random.default_rng(7)
    tie = np.array([0, 1, 1, 0, 2])  # nc = 5 nodes, nt = 3 stored columns
    codes = {"g1": rng.integers(0, 7**6, (3, 3, 3)), "g2": rng.integers(0, 7**6, (9, 3, 3))}
    ids = [f"layout:x:a:{g}" for g in codes]
    pq.write_table(pa.table({
        "graph_id": ids, "split": ["train"] * 2, "num_unique_configs": [len(c) for c in codes.values()],
        "num_config_columns": [3, 3],
        "config_node_tie": [tie.tolist()] * 2}), tmp_path / "graphs.parquet")
    pq.write_table(pa.table({
        "graph_id": [i for i, c in zip(ids, codes.values(), strict=True) for _ in c],
        "config_id": np.concatenate([np.arange(len(c)) for c in codes.values()]).astype(np.int32),
        "runtime": np.arange(12, dtype=np.int64) * 10,
        # byte planes (schema 3): byte p of every int32 code, then byte p + 1
        "codes": [row.astype("<i4").reshape(-1).view("u1").reshape(-1, 4).T.tobytes()
                  for c in codes.values() for row in c]}),
        tmp_path / "configs.parquet", row_group_size=2)
    (tmp_path / "manifest.json").write_text(json.dumps({"shards": [
        {"table": f"layout_{t}", "first_graph": ids[0], "last_graph": ids[1], "path": f"{t}.parquet"}
        for t in ("graphs", "configs")]}))
    assert example.configs_start(str(tmp_path), ids[1]) == (tmp_path / "configs.parquet", 3)
    got = example.sample_configs(str(tmp_path), ids[1], 4, seed=1)
    rows = np.random.default_rng(1).choice(9, 4, replace=False)
    assert np.array_equal(got["rows"], rows)
    assert np.array_equal(got["config_runtime"], (3 + rows) * 10)
    digits = codes["g2"][rows][:, tie, :, None] // 7 ** np.arange(6) % 7 - 1  # (4, nc, 3, 6)
    assert np.array_equal(got["node_config_feat"], digits.reshape(4, 5, 18).astype(np.int8))
    with pytest.raises(KeyError):
        example.configs_start(str(tmp_path), "layout:x:a:g15")  # in the shard's range, not in the shard


def test_every_stack_has_an_example():
    assert sorted(p.stem.removeprefix("read_") for p in EXAMPLES.glob("read_*.py")) == sorted(STACKS)
    assert sorted(p.stem.removeprefix("sample_") for p in EXAMPLES.glob("sample_*.py")) == sorted(SAMPLERS)


def test_examples_fail_loudly_on_an_unknown_graph(mixed_shards, tmp_path):
    """A graph id that is not there is an error (a non-zero exit), never an empty result."""
    for stack in ("pyarrow", "polars", "duckdb"):
        proc = subprocess.run([sys.executable, str(EXAMPLES / f"read_{stack}.py"), str(mixed_shards),
                               "tile:xla:no-such-graph", str(tmp_path / stack)],
                              cwd=tmp_path, env=hf_env(tmp_path), capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0 and "KeyError" in proc.stderr, (stack, proc.stderr[-2000:])


def _load_example(name: str, prefix: str = "read"):
    spec = importlib.util.spec_from_file_location(f"example_{prefix}_{name}", EXAMPLES / f"{prefix}_{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row_groups(folder: Path, graph_id: str) -> tuple[set, set, dict]:
    """Independently of pyarrow.dataset: the (file name, row group) pairs that hold rows of ``graph_id``
    (reading the graph_id column of every row group), those whose graph_id statistics cannot exclude it
    (min <= id <= max), and the graph ids of every row group."""
    holding, admitted, ids_of = set(), set(), {}
    for path in sorted(folder.glob("*.parquet")):
        pf = pq.ParquetFile(path)
        col = pf.metadata.schema.names.index("graph_id")
        for rg in range(pf.metadata.num_row_groups):
            ids = set(pf.read_row_group(rg, columns=["graph_id"]).column(0).to_pylist())
            ids_of[(path.name, rg)] = ids
            stats = pf.metadata.row_group(rg).column(col).statistics
            assert stats is not None and stats.has_min_max, f"{path.name} row group {rg}: no graph_id statistics"
            if stats.min <= graph_id <= stats.max:
                admitted.add((path.name, rg))
            if graph_id in ids:
                holding.add((path.name, rg))
    return holding, admitted, ids_of


def test_pyarrow_filter_reads_only_the_graphs_row_groups(mixed_shards):
    """read_pyarrow.py's graph_id filter reads, through the row-group statistics, only row groups that may
    hold the graph. For layout graphs that is exactly the graph's own row groups: layout configs row groups
    never span two graphs (a large graph spans several). Tile row groups batch many graphs, so there a
    row group whose id range covers the graph is read too — but never one that the statistics exclude."""
    example = _load_example("pyarrow")
    ds = tpuprep.open_dataset(mixed_shards)
    spans = []
    for gid in ds.graph_ids():
        coll = gid.rsplit(":", 1)[0]
        for table in ("graphs", "configs"):
            folder = mixed_shards.joinpath(*coll.split(":"), table)
            read = {(Path(f.path).name, f.row_groups[0].id) for f in example.graph_row_groups(folder, gid)}
            holding, admitted, ids_of = _row_groups(folder, gid)
            assert holding and holding <= read == admitted, (gid, table, sorted(read), sorted(holding))
            if coll.startswith("layout:"):
                assert len(read) < len(ids_of), f"{gid} {table}: the filter pruned nothing"
                assert read == holding, f"{gid} {table}: reads {sorted(read)}, the graph is in {sorted(holding)}"
                assert all(ids_of[rg] == {gid} for rg in holding), f"{gid} {table}: a row group spans two graphs"
                if table == "configs":
                    spans.append(len(holding))
    assert max(spans) > 1, "the fixture should make a layout graph span several configs row groups"
    # pyarrow's own filtered scan returns exactly that graph's configs, in config_id order
    gid = ds.graph_ids("layout:xla:default", "train")[0]
    folder = mixed_shards / "layout" / "xla" / "default" / "configs"
    table = pads.dataset(folder).to_table(filter=pads.field("graph_id") == gid)
    assert table.column("config_id").to_pylist() == list(range(ds.load_graph(gid).num_unique_configs))


def test_torch_loader_workers_and_epochs(synth_shards):
    """read_torch.py's Dataset works with DataLoader worker processes; its draws are reproducible for an
    (epoch, graph) whatever the workers, and change with set_epoch."""
    require("torch", "pyarrow")
    from torch.utils.data import DataLoader

    example = _load_example("torch")
    ds = tpuprep.open_dataset(synth_shards)
    ids = [g for g in ds.graph_ids() if ds.load_graph(g).num_unique_configs > 8][:6]
    dataset = example.SampledConfigs(str(synth_shards), ids, num_samples=4, seed=7)

    def draws(epoch: int, workers: int) -> list[list[int]]:
        dataset.set_epoch(epoch)
        loader = DataLoader(dataset, batch_size=None, shuffle=False, num_workers=workers)
        return [item["sample_config_ids"].tolist() for item in loader]

    first = draws(0, 2)
    assert first == draws(0, 0), "the draws depend on the number of workers"
    assert draws(1, 2) != first, "set_epoch does not change the draws"
    for gid, picked in zip(ids, first, strict=True):
        assert len(set(picked)) == 4 and max(picked) < ds.load_graph(gid).num_unique_configs


# --------------------------------------------------------------------------- with tpuprep, in a bucket


@pytest.mark.parametrize("collection", ["layout:xla:random", "tile:xla"])
def test_tpuprep_api_example_runs_and_says_what_the_api_gives(synth_shards, collection, tmp_path):
    """docs/examples/tpuprep_api.py (the tour of the reader API in docs/readers.md) runs on a tiny build; what
    it prints is what the dataset holds."""
    env = hf_env(tmp_path) | {"PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(EXAMPLES / "tpuprep_api.py"), str(synth_shards), collection],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ds = tpuprep.open_dataset(synth_shards)
    g = ds.load_graph(ds.graph_ids(collection, "train")[0])
    lines = proc.stdout.splitlines()
    assert lines[0] == f"collections {ds.collections}"
    assert f"streamed {g.num_unique_configs} of {g.num_unique_configs} unique configs; originals {len(g.config_inverse)}" in lines
    assert f"standardised {g.node_feat.shape} finite True" in lines
    train = ds.counts(collection)["train"]
    assert lines[-1] == f"counts: train {train['graphs']} graphs, {train['unique_configs']} unique configs"


def test_object_storage_example_reads_one_sample_with_every_reader(synth_shards, bucket, tmp_path):
    """docs/examples/object_storage.py on a real S3-compatible server (moto on 127.0.0.1), endpoint and
    credentials only in the standard variables: tpuprep, pyarrow + s3fs, polars and DuckDB read the same
    sampled configs (the example asserts it), for a layout and a tile graph."""
    require("s3fs", "polars", "duckdb")
    from s3server import upload_folder

    url = upload_folder(synth_shards, f"{bucket}/shards")
    ds = tpuprep.open_dataset(synth_shards)
    for collection in ("layout:nlp:default", "tile:xla"):
        gid = ds.graph_ids(collection, "train")[0]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(REPO)}
        proc = subprocess.run([sys.executable, str(EXAMPLES / "object_storage.py"), url, gid], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        lines = proc.stdout.splitlines()
        assert [line.split()[0] for line in lines] == ["tpuprep", "pyarrow", "polars", "duckdb"]
        rows = sorted(ds.sample_configs(gid, 8, seed=0).rows.tolist())
        runtimes = ds.read_configs(gid, rows).config_runtime.tolist()
        assert lines[0] == f"tpuprep {rows} {runtimes}"
        assert all(line.split(" ", 1)[1] == str(runtimes) for line in lines[1:])
