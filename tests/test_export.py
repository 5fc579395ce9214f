"""``tpuprep export``: the shards written back as per-graph TpuGraphs .npz files, round-trip tested.

Every key of every exported file is compared with ``load_graph``; the files load with
``np.load(allow_pickle=False)``, are exactly what ``np.savez_compressed`` writes, are deterministic, feed
a TpuGraphs-style loader (modelled on the official baseline's) unchanged, are valid tpuprep inputs again, and
``config_inverse`` maps them back onto every config of the original files.
"""

from __future__ import annotations

import io
import zipfile
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import tpuprep
from tpuprep.build import build
from tpuprep.cli import main
from tpuprep.errors import UsageError
from tpuprep.export import (
    LAYOUT_KEY_ORDER,
    TILE_KEY_ORDER,
    export,
    graph_members,
    npz_relpath,
)
from tpuprep.io.npz_writer import write_npz
from tpuprep.options import BuildOptions

LAYOUT_DTYPES = {"edge_index": np.int64, "node_feat": np.float32, "node_opcode": np.uint8,
                 "node_config_feat": np.float32, "node_config_ids": np.int64, "node_splits": np.int64,
                 "config_runtime": np.int64, "config_inverse": np.int32}
TILE_DTYPES = {"node_feat": np.float32, "node_opcode": np.uint8, "edge_index": np.int64,
               "config_feat": np.float32, "config_runtime": np.int64,
               "config_runtime_normalizers": np.int64, "config_inverse": np.int32}


def load_npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="session")
def exported(synth_shards, tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("export") / "npz"
    report = export(synth_shards, dst)
    assert report.graphs == len(tpuprep.open_dataset(synth_shards).graph_ids())
    return dst


@pytest.fixture(scope="session")
def exported_packed(synth_shards, tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("export-packed") / "npz"
    export(synth_shards, dst, packed=True)
    return dst


@pytest.fixture(scope="session")
def exported_real(real_shards, tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("export-real") / "npz"
    export(real_shards, dst)
    return dst


def check_file(g: tpuprep.GraphRecord, z: dict[str, np.ndarray], *, packed: bool) -> None:
    """Every key of an exported file against load_graph: names and order, dtypes, shapes, values."""
    where = g.graph_id
    c_u = g.num_unique_configs
    if g.kind == "layout":
        assert list(z) == list(LAYOUT_KEY_ORDER), where
        dtypes = LAYOUT_DTYPES | ({"node_config_feat": np.int32} if packed else {})
        nc = len(g.node_config_ids)
        assert z["node_config_feat"].shape == ((c_u, nc, 3) if packed else (c_u, nc, 18)), where
        want = g.config_codes if packed else g.node_config_feat().astype(np.float32)
        assert np.array_equal(z["node_config_feat"], want), where
        assert np.array_equal(z["node_config_ids"], g.node_config_ids), where
        assert z["node_splits"].shape == (1, len(g.node_splits)) and np.array_equal(z["node_splits"][0], g.node_splits)
    else:
        assert list(z) == list(TILE_KEY_ORDER), where
        dtypes = TILE_DTYPES
        assert z["config_feat"].shape == (c_u, 24) and np.array_equal(z["config_feat"], g.config_feat), where
        normalizers = np.ones(c_u, np.int64) if g.split == "test" else g.config_runtime_normalizers
        assert np.array_equal(z["config_runtime_normalizers"], normalizers), where
    for key, dtype in dtypes.items():
        assert z[key].dtype == np.dtype(dtype), f"{where}: {key} is {z[key].dtype}, want {np.dtype(dtype)}"
    assert np.array_equal(z["node_feat"], g.node_feat) and z["node_feat"].shape == (len(g.node_index), 140)
    assert np.array_equal(z["node_opcode"], g.node_opcode), where
    assert z["edge_index"].shape == g.edge_index.shape and np.array_equal(z["edge_index"], g.edge_index), where
    runtime = np.zeros(c_u, np.int64) if g.split == "test" else g.config_runtime
    assert g.split == "test" or g.config_runtime is not None
    assert np.array_equal(z["config_runtime"], runtime), where
    assert np.array_equal(z["config_inverse"], g.config_inverse), where


@pytest.mark.parametrize("fixture", ["exported", "exported_packed", "exported_real"])
def test_every_key_matches_load_graph(fixture, request):
    root = request.getfixturevalue(fixture)
    shards = request.getfixturevalue("real_shards" if fixture == "exported_real" else "synth_shards")
    ds = tpuprep.open_dataset(shards)
    expected, kinds = set(), set()
    for gid in ds.graph_ids():
        g = ds.load_graph(gid)
        rel = npz_relpath(gid, g.collection, g.split)
        assert rel == g.source_file, "the export tree is the input tree"
        check_file(g, load_npz(root / rel), packed=fixture == "exported_packed")
        expected.add(rel)
        kinds.add((g.kind, g.split))
    assert {p.relative_to(root).as_posix() for p in root.rglob("*.npz")} == expected
    assert not [p for p in root.rglob("*") if p.is_file() and p.suffix != ".npz"], "stray temporary files"
    if fixture != "exported_real":
        assert kinds == {(k, s) for k in ("layout", "tile") for s in ("train", "valid", "test")}


def test_tree_is_the_tpugraphs_tree(exported):
    layout = sorted({p.relative_to(exported).parts[:4] for p in (exported / "layout").rglob("*.npz")})
    assert layout == [("layout", f, s, sp) for f in ("nlp", "xla") for s in ("default", "random")
                      for sp in ("test", "train", "valid")]
    assert sorted(p.name for p in (exported / "tile" / "xla").iterdir()) == ["test", "train", "valid"]


def test_files_are_np_savez_compressed_output_and_deterministic(synth_shards, exported, exported_packed, tmp_path):
    again = tmp_path / "again"
    export(synth_shards, again)
    for path in sorted(exported.rglob("*.npz")):
        data = path.read_bytes()
        assert (again / path.relative_to(exported)).read_bytes() == data, f"{path.name}: not deterministic"
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **load_npz(path))
        assert buffer.getvalue() == data, f"{path.name}: not what np.savez_compressed writes"
        with zipfile.ZipFile(path) as zf:
            assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in zf.infolist())
    packed = sorted(exported_packed.rglob("*.npz"))
    assert [p.relative_to(exported_packed) for p in packed] == [p.relative_to(exported) for p in sorted(exported.rglob("*.npz"))]
    for path in packed:
        z, plain = load_npz(path), load_npz(exported / path.relative_to(exported_packed))
        for key in plain:
            if key != "node_config_feat":
                assert np.array_equal(z[key], plain[key]) and z[key].dtype == plain[key].dtype


def test_chunked_decoding_gives_the_same_file(real_shards, tmp_path):
    """node_config_feat is decoded and compressed in row chunks: any chunk size gives the same bytes."""
    ds = tpuprep.open_dataset(real_shards)
    g = ds.load_graph("layout:xla:default:alexnet_train_batch_32")
    assert g.num_unique_configs > 1000
    write_npz(tmp_path / "one.npz", graph_members(g))
    write_npz(tmp_path / "many.npz", graph_members(g, chunk_bytes=10_000))  # ~5 rows per chunk
    assert (tmp_path / "one.npz").read_bytes() == (tmp_path / "many.npz").read_bytes()


def test_config_inverse_rebuilds_every_original_config(synth_root, exported):
    """Pruning keeps every configurable node in order, so ``node_config_feat[config_inverse]`` is the
    original file's node_config_feat, config by config (tile: config_feat); each duplicate group keeps
    its minimum runtime."""
    for original in sorted((synth_root / "npz").rglob("*.npz")):
        rel = original.relative_to(synth_root / "npz")
        z, o = load_npz(exported / rel), load_npz(original)
        inv = z["config_inverse"]
        key = "node_config_feat" if rel.parts[0] == "layout" else "config_feat"
        assert np.array_equal(z[key][inv], o[key]), rel
        if rel.parts[-2] == "test":
            assert not z["config_runtime"].any()
        elif key == "node_config_feat":  # layout: the group minimum
            group_min = np.full(len(z[key]), np.iinfo(np.int64).max)
            np.minimum.at(group_min, inv, o["config_runtime"])
            assert np.array_equal(group_min, z["config_runtime"]), rel


def test_exported_files_are_valid_tpuprep_inputs(exported, synth_shards, tmp_path):
    """Building the export again without pruning or re-padding reproduces the shards' graphs; dedup
    finds no duplicates left."""
    report = build(exported, tmp_path / "rebuilt", BuildOptions(prune=False, repad=False))
    assert not report.quarantined, report.quarantined
    a, b = tpuprep.open_dataset(synth_shards), tpuprep.open_dataset(tmp_path / "rebuilt")
    assert a.graph_ids() == b.graph_ids()
    for gid in a.graph_ids():
        g, h = a.load_graph(gid), b.load_graph(gid)
        for key in ("node_feat", "node_opcode", "edge_index", "node_config_ids", "node_splits", "config_codes",
                    "config_feat", "config_runtime", "config_runtime_normalizers"):
            x, y = getattr(g, key), getattr(h, key)
            assert (x is None) == (y is None) and (x is None or np.array_equal(x, y)), (gid, key)
        assert np.array_equal(h.config_inverse, np.arange(g.num_unique_configs)), gid


# --------------------------------------------------------------------------- an existing npz loader


class BaselineLayoutPartition:
    """What the official TpuGraphs layout baseline does with npz files (tf replaced by NumPy): read every
    key, flatten node_config_feat to (c * nc, 18), concatenate all graphs, index them by ranges."""

    def __init__(self):
        self.data = defaultdict(list)
        self.num = {k: [0] for k in ("nodes", "edges", "configs", "config_nodes", "splits")}

    def add_npz_file(self, graph_id: str, npz_file) -> None:
        npz_data = dict(npz_file.items())
        num_configs, num_config_nodes = npz_data["node_config_feat"].shape[:2]
        assert npz_data["node_config_feat"].shape[2] == 18
        npz_data["node_splits"] = npz_data["node_splits"].reshape([-1])
        npz_data["argsort_config_runtime"] = np.argsort(npz_data["config_runtime"])
        npz_data["node_config_feat"] = npz_data["node_config_feat"].reshape((num_configs * num_config_nodes, -1))
        for key, ndarray in npz_data.items():
            self.data[key].append(ndarray)
        self.data["graph_id"].append(np.array(graph_id))
        assert num_config_nodes == npz_data["node_config_ids"].shape[0]
        assert npz_data["node_feat"].shape[0] == npz_data["node_opcode"].shape[0]
        assert num_configs == npz_data["config_runtime"].shape[0]
        for k, v in (("nodes", npz_data["node_feat"].shape[0]), ("edges", npz_data["edge_index"].shape[0]),
                     ("configs", num_configs), ("config_nodes", num_config_nodes),
                     ("splits", npz_data["node_splits"].shape[0])):
            self.num[k].append(v)

    def finalize(self) -> None:
        self.arrays = {k: np.concatenate(self.data[k], axis=0) for k in (
            "node_feat", "node_opcode", "edge_index", "node_config_feat", "config_runtime", "node_config_ids",
            "node_splits")}
        self.ranges = {k: np.cumsum(v) for k, v in self.num.items()}
        self.ranges["flat_configs"] = np.cumsum([0] + [c * n for c, n in zip(
            self.num["configs"][1:], self.num["config_nodes"][1:], strict=True)])
        self.graph_ids = [str(g) for g in self.data["graph_id"]]

    def get_item(self, i: int) -> dict[str, np.ndarray]:
        def cut(key, rng):
            return self.arrays[key][self.ranges[rng][i]:self.ranges[rng][i + 1]]

        c = self.ranges["configs"][i + 1] - self.ranges["configs"][i]
        nc = self.ranges["config_nodes"][i + 1] - self.ranges["config_nodes"][i]
        flat = cut("node_config_feat", "flat_configs")
        return {"node_feat": cut("node_feat", "nodes"), "node_ops": cut("node_opcode", "nodes"),
                "edges": cut("edge_index", "edges").astype(np.int32), "config_runtimes": cut("config_runtime", "configs"),
                "node_config_ids": cut("node_config_ids", "config_nodes").astype(np.int32),
                "node_splits": cut("node_splits", "splits"),
                "node_config_features": flat.reshape(c, nc, -1)}


def test_an_official_style_layout_loader_reads_the_export(exported, synth_shards):
    ds = tpuprep.open_dataset(synth_shards)
    checked = 0
    for split_dir in sorted(exported.glob("layout/*/*/*")):
        partition = BaselineLayoutPartition()
        for path in sorted(split_dir.glob("*.npz")):
            partition.add_npz_file(path.stem, np.load(path))
        partition.finalize()
        coll = "layout:" + ":".join(split_dir.parts[-3:-1])
        for i, stem in enumerate(partition.graph_ids):
            item, g = partition.get_item(i), ds.load_graph(f"{coll}:{stem}")
            assert np.array_equal(item["node_feat"], g.node_feat) and np.array_equal(item["node_ops"], g.node_opcode)
            assert np.array_equal(item["edges"], g.edge_index) and np.array_equal(item["node_splits"], g.node_splits)
            assert np.array_equal(item["node_config_ids"], g.node_config_ids)
            assert np.array_equal(item["node_config_features"], g.node_config_feat())
            if g.config_runtime is not None:
                assert np.array_equal(item["config_runtimes"], g.config_runtime)
            checked += 1
    assert checked == len([g for g in ds.graph_ids() if g.startswith("layout:")])


def test_a_kaggle_style_tile_loader_reads_the_export(exported, synth_shards):
    """The usual tile recipe: target = config_runtime / config_runtime_normalizers per config."""
    ds = tpuprep.open_dataset(synth_shards)
    for path in sorted(exported.glob("tile/xla/*/*.npz")):
        tile_dict = dict(np.load(path))
        g = ds.load_graph(f"tile:xla:{path.stem}")
        target = tile_dict["config_runtime"] / tile_dict["config_runtime_normalizers"]
        if g.split == "test":
            assert not target.any()
        else:
            assert np.array_equal(target, g.config_runtime / g.config_runtime_normalizers)
        assert tile_dict["config_feat"].shape == (len(target), 24)
        assert tile_dict["edge_index"].T.shape == (2, len(g.edge_index))


# --------------------------------------------------------------------------- options and command line


def test_collections_and_splits_select(synth_shards, tmp_path):
    report = export(synth_shards, tmp_path / "a", collections=["layout:xla"], splits=["valid", "test"])
    assert report.files and all(f.startswith("layout/xla/") and f.split("/")[3] in ("valid", "test")
                                for f in report.files)
    ds = tpuprep.open_dataset(synth_shards)
    assert report.graphs == sum(len(ds.graph_ids(c, s)) for c in ds.collections if c.startswith("layout:xla")
                                for s in ("valid", "test"))
    with pytest.raises(UsageError, match="unknown split"):
        export(synth_shards, tmp_path / "b", splits=["validation"])
    with pytest.raises(UsageError, match="no graph"):
        export(synth_shards, tmp_path / "c", collections=["layout:tpu"])
    with pytest.raises(UsageError, match="inside the shard folder"):
        export(synth_shards, synth_shards / "npz")


def test_export_command(synth_shards, tmp_path):
    runner = CliRunner()
    out = tmp_path / "cli"
    result = runner.invoke(main, ["export", "--shards", str(synth_shards), "--dst-npz", str(out), "--packed",
                                        "--collections", "tile", "--splits", "test,train"])
    assert result.exit_code == 0, result.output
    assert "exported" in result.output and "packed" in result.output
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.npz"))
    ds = tpuprep.open_dataset(synth_shards)
    assert files == sorted(npz_relpath(g, "tile:xla", s) for s in ("test", "train") for g in ds.graph_ids("tile:xla", s))
    layout = runner.invoke(main, ["export", "--shards", str(synth_shards), "--dst-npz", str(out), "--packed", "-q",
                                        "--collections", "layout:nlp:random", "--splits", "valid"])
    assert layout.exit_code == 0 and layout.output == ""
    z = load_npz(next((out / "layout" / "nlp" / "random" / "valid").glob("*.npz")))
    assert z["node_config_feat"].dtype == np.int32 and z["node_config_feat"].shape[2] == 3
    bad = runner.invoke(main, ["export", "--shards", str(synth_shards), "--dst-npz", str(out), "--splits", "dev"])
    assert bad.exit_code == 2 and "unknown split" in bad.output
    (tmp_path / "empty").mkdir()
    missing = runner.invoke(main, ["export", "--shards", str(tmp_path / "empty"), "--dst-npz", str(out), "-q"])
    assert missing.exit_code == 1 and "manifest.json" in missing.output
