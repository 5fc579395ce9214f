"""Config-level random access (issue #14): layout configs row groups of a fixed number of configs,
``Dataset.sample_configs``, ``load_graph(configs=False)``, tied configurable nodes stored once, and the
duplicate-group runtime spread the shards carry."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest
from reference import ref_stored_columns

import tpuprep
from tpuprep.build import build
from tpuprep.shards import parquet as parquet_module
from tpuprep.shards import writer as writer_module
from tpuprep.shards.writer import quality_counts

GROUP = 16


@pytest.fixture(scope="module")
def small_groups(tmp_path_factory, synth_root):
    """The tiny synthetic tree built with 16 layout configs per row group (so graphs span several)."""
    dst = tmp_path_factory.mktemp("small-groups")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(writer_module, "LAYOUT_CONFIGS_ROW_GROUP_ROWS", GROUP)
        mp.setattr(writer_module, "LAYOUT_CONFIGS_ROW_GROUP_CODE_BYTES", 0)
        build(synth_root / "npz", dst)
    return dst


def _layout_configs_groups(shards):
    for path in sorted(shards.glob("layout/*/*/configs/*.parquet")):
        pf = pq.ParquetFile(path)
        for rg in range(pf.metadata.num_row_groups):
            yield path, rg, pf.read_row_group(rg, columns=["graph_id", "config_id"])


def test_layout_rows_per_group_follow_the_code_budget():
    assert writer_module.layout_rows_per_group(1) == (32 << 10) // 12
    assert writer_module.layout_rows_per_group(40) == (32 << 10) // 480
    assert writer_module.layout_rows_per_group(373) == 64  # the floor


@pytest.mark.parametrize("fixture", ["synth_shards", "small_groups"])
def test_layout_configs_are_cut_in_small_row_groups(fixture, request):
    """Every layout configs row group holds one graph's configs, on a fixed grid of layout_rows_per_group(nt)
    configs (16 in the small_groups build), so config_id r of a graph is in its row group r // size."""
    shards = request.getfixturevalue(fixture)
    ds = tpuprep.open_dataset(shards)
    spans: dict[str, int] = {}
    for path, rg, t in _layout_configs_groups(shards):
        ids = set(t.column("graph_id").to_pylist())
        assert len(ids) == 1, f"{path.name} row group {rg} spans graphs {ids}"
        gid = ids.pop()
        size = GROUP if fixture == "small_groups" else \
            writer_module.layout_rows_per_group(ds.graph_row(gid)["num_config_columns"])
        assert t.num_rows <= size, f"{path.name} row group {rg} holds {t.num_rows} configs > {size}"
        assert t.column("config_id").to_numpy()[0] == spans.get(gid, 0) * size, "a row group starts off the grid"
        spans[gid] = spans.get(gid, 0) + 1
    for gid, n in spans.items():
        size = GROUP if fixture == "small_groups" else \
            writer_module.layout_rows_per_group(ds.graph_row(gid)["num_config_columns"])
        assert n == -(-ds.load_graph(gid).num_unique_configs // size), gid
    if fixture == "small_groups":
        assert max(spans.values()) > 3


def _cases(ds):
    """One layout and one tile graph of every split, the largest of each."""
    out = []
    for kind in ("layout", "tile"):
        for split in ("train", "valid", "test"):
            ids = [g for g in ds.graph_ids(split=split) if g.startswith(kind)]
            if ids:
                out.append(max(ids, key=lambda g: ds.load_graph(g).num_unique_configs))
    return out


def test_sample_configs_equals_load_graph_rows(small_groups):
    ds = tpuprep.open_dataset(small_groups)
    cases = _cases(ds)
    assert {ds.load_graph(g).kind for g in cases} == {"layout", "tile"}
    for gid in cases:
        g = ds.load_graph(gid)
        u = g.num_unique_configs
        for k, seed in ((5, 0), (40, 3), (u, 1), (10 * u + 3, 2), (0, 0)):
            s = ds.sample_configs(gid, k, seed=seed)
            want = np.random.default_rng(seed).choice(u, min(k, u), replace=False)
            assert s.rows.dtype == np.int64 and s.rows.shape == (min(k, u),)
            assert np.array_equal(s.rows, want), "rows are not the documented draw"
            assert len(set(s.rows.tolist())) == len(s.rows) and ((s.rows >= 0) & (s.rows < u)).all()
            if g.config_runtime is None:
                assert s.config_runtime is None and s.config_runtime_spread is None
            else:
                assert s.config_runtime.dtype == np.int64
                assert np.array_equal(s.config_runtime, g.config_runtime[s.rows])
                assert np.array_equal(s.config_runtime_spread, g.config_runtime_spread[s.rows])
                assert (s.config_runtime_spread >= 0).all()
            assert np.array_equal(s.group_size, g.group_size[s.rows])
            assert np.array_equal(s.first_index, g.first_index[s.rows])
            if g.kind == "layout":
                nc = len(g.node_config_ids)
                assert s.node_config_feat.dtype == np.int8 and s.node_config_feat.shape == (len(s.rows), nc, 18)
                assert np.array_equal(s.node_config_feat, g.node_config_feat(s.rows))
                assert s.config_feat is None
            else:
                assert s.config_feat.dtype == np.float32 and s.config_feat.shape == (len(s.rows), 24)
                assert np.array_equal(s.config_feat, g.config_feat[s.rows])
                norm = g.config_runtime_normalizers
                assert (s.config_runtime_normalizers is None) == (norm is None)
                if norm is not None:
                    assert np.array_equal(s.config_runtime_normalizers, norm[s.rows])
            for name in ("rows", "config_runtime", "node_config_feat", "config_feat", "group_size"):
                value = getattr(s, name)
                assert value is None or value.flags.writeable, f"{name} is read-only"
        same = ds.sample_configs(gid, 7, seed=11)
        assert np.array_equal(same.rows, ds.sample_configs(gid, 7, seed=11).rows)
        if u > 20:
            assert not np.array_equal(same.rows, ds.sample_configs(gid, 7, seed=12).rows)


def test_sample_configs_reads_only_the_row_groups_of_the_sample(small_groups, monkeypatch):
    ds = tpuprep.open_dataset(small_groups)
    gid = max(ds.graph_ids("layout:xla:default"), key=lambda g: ds.load_graph(g).num_unique_configs)
    u = ds.load_graph(gid).num_unique_configs
    assert u > 4 * GROUP
    seen: list[tuple[str, list[int]]] = []
    read_columns: list[list[str]] = []
    real = parquet_module.read_row_groups

    def spy(pf, path, rgs, columns=None, **kwargs):
        seen.append((str(path), list(rgs)))
        read_columns.append(list(columns))
        return real(pf, path, rgs, columns, **kwargs)

    monkeypatch.setattr(parquet_module, "read_row_groups", spy)
    from tpuprep.shards import pages
    direct = pages.sampled_codes

    def spy_direct(chunks, firsts, sizes, width, fetch):  # the codes pages read directly: that column only
        got = direct(chunks, firsts, sizes, width, fetch)
        if got is not None:
            seen.append(("/configs/", [int(f) // GROUP for f in firsts]))
            read_columns.append(["codes"])
        return got

    monkeypatch.setattr(pages, "sampled_codes", spy_direct)
    real_one = parquet_module.read_row_group

    def whole(pf, path, rg, columns=None):
        if "/configs/" in str(path):
            pytest.fail(f"a whole configs row group was read: {path} {rg}")
        return real_one(pf, path, rg, columns)

    monkeypatch.setattr(parquet_module, "read_row_group", whole)
    ds2 = tpuprep.open_dataset(small_groups)
    ds2.configs.derived.get(gid)  # the structure (read once, into the derived cache) is not under test
    s = ds2.sample_configs(gid, 3, seed=5)
    groups = sorted(rg for _, rgs in seen for rg in rgs)
    assert groups == sorted({int(r) // GROUP for r in s.rows})
    assert all("/configs/" in p for p, _ in seen)
    # the per-config fields come from the structure (derived once, kept): only ids and codes are read
    assert read_columns in ([["config_id", "codes"]], [["codes"]])  # pyarrow's read, or the pages directly
    seen.clear()
    read_columns.clear()
    blocks = list(ds2.iter_config_blocks(gid, 4, s.rows))  # read_configs: the same columns, the same cache
    assert read_columns and all(c in (["config_id", "codes"], ["codes"]) for c in read_columns)
    assert np.array_equal(np.concatenate([b.config_runtime for b in blocks]), s.config_runtime)
    assert np.array_equal(s.config_runtime, ds.load_graph(gid).config_runtime[s.rows])  # the stored column


def test_derived_columns_are_kept_within_their_byte_bound(small_groups, monkeypatch):
    """One cache holds a layout graph's tie array and derived columns, for sample_configs and read_configs
    alike (ConfigBatches reads through read_configs), bounded in bytes; load_graph keeps nothing there."""
    ds = tpuprep.open_dataset(small_groups)
    cache = ds.configs.derived
    ids = ds.graph_ids("layout:xla:default")[:4]
    for gid in ids[:3]:
        ds.load_graph(gid)
    assert len(cache) == 0
    ds.sample_configs(ids[0], 2)
    ds.read_configs(ids[1], [0])
    list(ds.iter_config_blocks(ids[2], 3, [1, 0]))
    assert list(cache.entries) == ids[:3]
    ds.read_configs(ids[0], [1, 0])  # a hit moves it to the end
    assert list(cache.entries) == [ids[1], ids[2], ids[0]]
    for gid, entry in cache.entries.items():
        structure = ds.load_graph(gid, configs=False)
        assert np.array_equal(entry.tie, structure.config_node_tie)
        assert entry.nbytes == entry.tie.nbytes + sum(a.nbytes for a in entry.columns.values() if a is not None)
    assert cache.nbytes == sum(e.nbytes for e in cache.entries.values()) > 0
    monkeypatch.setattr(cache, "max_bytes", 1)
    ds.sample_configs(ids[3], 2)  # a new graph: the bound drops the others, the newest always stays
    assert list(cache.entries) == [ids[3]]
    assert cache.nbytes == cache.entries[ids[3]].nbytes


def _spy(real, log: list[str]):
    def spy(pf, path, *args, **kwargs):
        log.append(str(path))
        return real(pf, path, *args, **kwargs)
    return spy


def test_load_graph_without_configs_reads_no_configs_row_group(small_groups, monkeypatch):
    ds = tpuprep.open_dataset(small_groups)
    for gid in _cases(ds):
        full = ds.load_graph(gid)
        fresh = tpuprep.open_dataset(small_groups)
        read: list[str] = []
        for name in ("read_row_group", "read_row_groups"):
            monkeypatch.setattr(parquet_module, name, _spy(getattr(parquet_module, name), read))
        g = fresh.load_graph(gid, configs=False)
        monkeypatch.undo()
        assert read and not [p for p in read if "/configs/" in p], read
        for name in ("node_feat", "edge_index", "node_opcode", "node_index", "config_inverse", "node_config_ids",
                     "config_runtime_original", "config_runtime_normalizers_original", "config_node_tie"):
            a, b = getattr(g, name), getattr(full, name)
            assert (a is None) == (b is None) and (a is None or np.array_equal(a, b)), name
        for name in ("config_runtime", "group_size", "first_index", "config_codes", "config_feat",
                     "config_runtime_normalizers", "config_runtime_spread"):
            assert getattr(g, name) is None, name
        assert g.num_unique_configs == full.num_unique_configs
        with pytest.raises(ValueError, match="configs=False"):
            g.node_config_feat()


def test_shards_store_each_tied_column_once(synth_shards):
    ds = tpuprep.open_dataset(synth_shards)
    for gid in ds.graph_ids("layout:xla:random"):
        row = ds.graph_row(gid)
        g = ds.load_graph(gid)
        assert row["num_config_columns"] == int(g.config_node_tie.max()) + 1 <= row["num_config_nodes"]
        firsts = ref_stored_columns(g.config_node_tie)
        flat = g.config_codes[:, firsts].transpose(1, 0, 2).reshape(len(firsts), -1)
        assert len(np.unique(flat, axis=0)) == len(firsts), f"{gid}: two stored columns are equal"


def test_quality_counts_and_spread():
    g = SimpleNamespace(config_runtime_original=np.array([100, 100, 200, 205, 300, 301, 50], np.int64),
                        config_inverse=np.array([0, 0, 1, 1, 2, 2, 3], np.int32),
                        group_size=np.array([2, 2, 2, 1], np.int32), num_unique_configs=4)
    assert quality_counts(g) == (3, 1)  # 200 vs 205 disagree by 2.5 %; 300 vs 301 by 0.33 %
    lo, hi = writer_module.group_runtime_spread(g)
    assert lo.tolist() == [100, 200, 300, 50] and hi.tolist() == [100, 205, 301, 50]
    g.config_runtime_original = None
    assert quality_counts(g) == (3, None)
