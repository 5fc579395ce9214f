"""The whole pipeline on a synthetic tree (every collection and split): verify, schemas, options, CLI."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import tpuprep
from tpuprep.build import build
from tpuprep.cli import main
from tpuprep.options import BuildOptions
from tpuprep.shards.schema import COMPRESSIONS, SCHEMA_VERSION, manifest_schema, table_schema
from tpuprep.tpugraphs import REPADDED_COLUMNS
from tpuprep.verify import verify


def test_verify_proves_synthetic_shards_exact(synth_root, synth_shards):
    report = verify(synth_root / "npz", synth_shards)
    assert report.problems == []
    assert report.graphs_checked == len(list((synth_root / "npz").rglob("*.npz")))


def test_every_shard_matches_its_schema_file(synth_shards):
    manifest = json.loads((synth_shards / "manifest.json").read_text())
    jsonschema.validate(manifest, manifest_schema())
    assert {s["table"] for s in manifest["shards"]} == {"layout_graphs", "layout_configs", "tile_graphs", "tile_configs"}
    for shard in manifest["shards"]:
        pf = pq.ParquetFile(synth_shards / shard["path"])
        expected = table_schema(shard["table"]).arrow
        assert pf.schema_arrow.equals(expected, check_metadata=False), shard["path"]
        for got, want in zip(pf.schema_arrow, expected, strict=True):
            assert got.nullable == want.nullable and got.metadata == want.metadata
        meta = pf.schema_arrow.metadata
        assert meta[b"schema_version"] == SCHEMA_VERSION.encode() and meta[b"table"] == shard["table"].encode()
        assert pf.metadata.num_rows == shard["rows"]
        ts = table_schema(shard["table"])
        for rg in range(pf.metadata.num_row_groups):  # each column compressed as its schema says
            for c in range(pf.metadata.num_columns):
                col = pf.metadata.row_group(rg).column(c)
                want = COMPRESSIONS[ts.compression(col.path_in_schema.split(".")[0])]
                assert col.compression == want, (shard["path"], col.path_in_schema)
        if shard["table"] == "layout_configs":  # ids and counts are not worth compressing (its schema file)
            names = [pf.metadata.row_group(0).column(c).path_in_schema for c in range(pf.metadata.num_columns)]
            codecs = {n: pf.metadata.row_group(0).column(c).compression for c, n in enumerate(names)}
            plain = ("graph_id", "config_id", "group_size", "first_index")
            assert codecs == {n: "UNCOMPRESSED" if n in plain else "ZSTD" for n in names}
            with pytest.raises(KeyError, match="no column 'codez'"):
                ts.compression("codez")


def test_layout_row_groups_never_span_two_graphs(synth_shards):
    for path in synth_shards.glob("layout/*/*/configs/*.parquet"):
        meta = pq.ParquetFile(path).metadata
        for rg in range(meta.num_row_groups):
            stats = meta.row_group(rg).column(0).statistics
            assert stats.has_min_max and stats.min == stats.max


def test_feature_statistics_and_folds(synth_shards):
    ds = tpuprep.open_dataset(synth_shards)
    for cid in ds.collections:
        feats = np.concatenate([ds.load_graph(g).node_feat[:, :134] for g in ds.graph_ids(cid, "train")]).astype(np.float64)
        stats = ds.stats(cid)
        np.testing.assert_allclose(stats["node_feat_mean"], feats.mean(0), rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(stats["node_feat_std"], feats.std(0), rtol=1e-7, atol=1e-9)
        for gid in ds.graph_ids(cid):
            g = ds.load_graph(gid)
            assert g.fold == ds.fold(gid) and 0 <= g.fold < 5


def test_test_split_is_deduplicated_with_null_runtimes(synth_shards):
    ds = tpuprep.open_dataset(synth_shards)
    for cid in ds.collections:
        for gid in ds.graph_ids(cid, "test"):
            g = ds.load_graph(gid)
            assert g.config_runtime is None and g.config_runtime_original is None
            assert g.num_unique_configs <= g.num_configs and len(g.config_inverse) == g.num_configs
            if g.kind == "tile":
                assert g.config_runtime_normalizers is None


@pytest.mark.parametrize("options", [
    BuildOptions(prune=False), BuildOptions(repad=False), BuildOptions(dedup=False),
    BuildOptions(hops=0), BuildOptions(hops=2),
], ids=["no-prune", "no-repad", "no-dedup", "hops0", "hops2"])
def test_build_options_verify_and_do_what_they_say(tmp_path, synth_root, options):
    src = synth_root / "npz"
    build(src, tmp_path, options, collections=["layout:xla", "tile"])
    assert verify(src, tmp_path, collections=["layout:xla", "tile"]).problems == []
    ds = tpuprep.open_dataset(tmp_path)
    graphs = [ds.load_graph(g) for g in ds.graph_ids()]
    layout = [g for g in graphs if g.kind == "layout"]
    if not options.prune:
        assert all(np.array_equal(g.node_index, np.arange(len(g.node_index))) for g in layout)
        assert all(len(g.node_index) == np.load(src / g.source_file)["node_feat"].shape[0] for g in layout)
    if not options.repad:
        assert not any((g.node_feat[:, REPADDED_COLUMNS] == -1).any() for g in graphs)
    else:
        assert any((g.node_feat[:, REPADDED_COLUMNS] == -1).any() for g in graphs)
    if not options.dedup:
        assert all(g.num_unique_configs == g.num_configs for g in graphs)
    if options.hops == 0:
        assert all(len(g.node_index) == len(g.node_config_ids) for g in layout)


def test_cli_synth_build_info_dry_run(tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["synth", "--dst", str(tmp_path / "s"), "--profile", "tiny", "--seed", "3",
                                  "--collections", "tile:xla", "-q"])
    assert result.exit_code == 0, result.output
    src = tmp_path / "s" / "npz"
    result = runner.invoke(main, ["build", "--src", str(src), "--dst", str(tmp_path / "d"), "--dry-run"])
    assert result.exit_code == 0 and "would convert 7 files" in result.output
    assert not (tmp_path / "d").exists()
    result = runner.invoke(main, ["build", "--src", str(src / "tile" / "xla" / "train"), "--dst", str(tmp_path / "d")])
    assert result.exit_code == 0, result.output
    assert "tile:xla" in result.output and "3 converted, 0 reused, 0 quarantined" in result.output
    info = runner.invoke(main, ["info", str(tmp_path / "d")])
    assert info.exit_code == 0 and "tile:xla" in info.output and "0 quarantined" in info.output
    assert runner.invoke(main, ["info", str(tmp_path)]).exit_code == 1


def test_demo_runs_the_main_job(tmp_path):
    result = CliRunner().invoke(main, ["demo", "--keep", str(tmp_path), "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "all exact" in result.output and "layout:xla:random" in result.output
    assert (tmp_path / "shards" / "manifest.json").exists()


def test_tile_files_are_batched_per_split_even_when_splits_interleave(synth_root, monkeypatch):
    """Inputs come sorted by graph id, which interleaves train/valid/test: batching must not break a
    run at every split change (it once made one task and one shard file per tile file)."""
    from tpuprep import build as build_module
    from tpuprep.inputs import discover

    inputs, _ = discover(synth_root / "npz", None, None)
    tiles = [i for i in inputs if i.kind == "tile"]
    assert len({i.split for i in tiles}) == 3
    monkeypatch.setattr(build_module, "TILE_BATCH_FILES", 2)
    batches = build_module.plan_batches(inputs)
    assert sorted(i.relpath for b in batches for i in b) == sorted(i.relpath for i in inputs)
    for b in batches:
        assert len({(i.kind, i.collection, i.split) for i in b}) == 1
        assert len(b) == 1 or (b[0].kind == "tile" and len(b) <= 2)
    for split in ("train", "valid", "test"):
        group = [i.graph_id for i in tiles if i.split == split]
        runs = [[i.graph_id for i in b] for b in batches if b[0].kind == "tile" and b[0].split == split]
        assert [g for run in runs for g in run] == sorted(group)  # contiguous, in graph-id order
        assert len(runs) == -(-len(group) // 2)  # as few runs as the limit allows
