"""Tests of the synthetic TpuGraphs generator (tpuprep.synth, docs/spec.md §6).

Generates the ``tiny`` profile (every collection and split) and the ``small`` profile restricted to
three layout collections (for statistics); the whole module runs in well under 30 s.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tpuprep import synth

LAYOUT_KEYS = {
    "edge_index": (np.int64, 2),
    "node_feat": (np.float32, 2),
    "node_opcode": (np.uint8, 1),
    "node_config_feat": (np.float32, 3),
    "node_config_ids": (np.int64, 1),
    "node_splits": (np.int64, 2),
    "config_runtime": (np.int64, 1),
}
TILE_KEYS = {
    "node_feat": (np.float32, 2),
    "node_opcode": (np.uint8, 1),
    "edge_index": (np.int64, 2),
    "config_feat": (np.float32, 2),
    "config_runtime": (np.int64, 1),
    "config_runtime_normalizers": (np.int64, 1),
}
STATS_COLLECTIONS = ("layout:xla:default", "layout:xla:random", "layout:nlp:random")


# ------------------------------------------------------------------------------------------ helpers


def load(path: Path) -> dict[str, np.ndarray]:
    """Every member of an npz, read like a careful loader does (no pickles)."""
    with np.load(path, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def specs_of(profile: str, collection: str | None = None) -> list[synth.FileSpec]:
    return [s for s in synth.file_plan(profile, 0) if collection in (None, s.collection)]


def rank_rule(node_feat: np.ndarray) -> np.ndarray:
    """The pipeline's re-padding rank rule (docs/spec.md §2.2), written independently of the generator."""
    dims = node_feat[:, 21:27]
    nonzero = dims != 0
    r_dims = np.where(nonzero.any(1), 6 - np.argmax(nonzero[:, ::-1], axis=1), 0)
    r_perm = node_feat[:, 134:140].max(1).astype(np.int64) + 1
    scalar = ~nonzero.any(1) & (node_feat[:, 28] == 1)
    tuple_ = node_feat[:, 18] == 1
    return np.where(tuple_ | scalar, 0, np.maximum(r_dims, r_perm))


def row_groups(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(inverse (c,), counts (u,)) of identical rows of a float32 (c, ...) array.

    Rows are compared through two independent 64-bit hashes of their bit patterns (a collision of
    both is out of reach for these sizes), which is much faster than sorting wide rows.
    """
    words = np.ascontiguousarray(rows.reshape(len(rows), -1)).view(np.uint32).astype(np.uint64)
    mix = np.random.default_rng(12345).integers(1, 2**63, size=(words.shape[1], 2), dtype=np.uint64)
    keys = np.ascontiguousarray(words @ (mix | np.uint64(1)))
    _, inverse, counts = np.unique(
        keys.view(np.dtype((np.void, 16)))[:, 0], return_inverse=True, return_counts=True
    )
    return inverse.ravel(), counts


def modal_output(node_feat: np.ndarray, opcode: int) -> tuple[float, float]:
    """The (slot 0, slot 1) output layout a conv/dot node takes by default: its own layout order."""
    layout = [int(v) for v in node_feat[134:140]]
    if opcode == synth.DOT:
        return float(layout[0]), float(layout[1])
    b, f = int(node_feat[105]), int(node_feat[106])
    return (float(b), float(f)) if layout.index(b) < layout.index(f) else (float(f), float(b))


# ----------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, synth.SynthSummary, list[str]]:
    root = tmp_path_factory.mktemp("tiny")
    seen: list[str] = []
    summary = synth.synthesize(root, "tiny", 0, progress=seen.append)
    return root, summary, seen


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("small")
    synth.synthesize(root, "small", 0, collections=STATS_COLLECTIONS)
    return root


def tree_files(root: Path, collection: str, split: str | None = None) -> list[Path]:
    folder = root / "npz" / collection.replace(":", "/")
    return sorted(folder.glob(f"{split or '*'}/*.npz"))


# ------------------------------------------------------------------------------------ tree and API


def test_summary_progress_and_tree(tiny) -> None:
    root, summary, seen = tiny
    prof = synth.PROFILES["tiny"]
    assert seen == summary.files
    assert (
        len(summary.files) == len(summary.truth_files) == sum(sum(c) for c in prof.counts.values())
    )
    for collection in synth.COLLECTIONS:
        assert summary.counts[collection].files == sum(prof.counts[collection])
        for split, expected in zip(synth.SPLITS, prof.counts[collection], strict=True):
            assert len(tree_files(root, collection, split)) == expected >= 1
    on_disk = sum((root / f).stat().st_size for f in summary.files)
    assert summary.total_bytes == on_disk < 2_000_000
    configs = {c: 0 for c in synth.COLLECTIONS}
    for rel, truth_rel in zip(summary.files, summary.truth_files, strict=True):
        assert truth_rel == "truth/" + rel[len("npz/") : -len(".npz")] + ".npy"
        truth = np.load(root / truth_rel, allow_pickle=False)
        assert truth.dtype == np.float64 and truth.ndim == 1 and (truth > 0).all()
        collection = ":".join(Path(rel).parts[1:-2])
        configs[collection] += len(truth)
    assert {c: n.configs for c, n in summary.counts.items()} == configs


def test_keys_dtypes_and_shapes(tiny) -> None:
    root, summary, _ = tiny
    for rel in summary.files:
        path = root / rel
        with zipfile.ZipFile(path) as zf:  # DEFLATE members, like np.savez_compressed
            assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_DEFLATED}
        arrays = load(path)
        expected = TILE_KEYS if "/tile/" in rel else LAYOUT_KEYS
        assert list(arrays) == list(expected)
        for key, (dtype, ndim) in expected.items():
            assert arrays[key].dtype == dtype, (rel, key)
            assert arrays[key].ndim == ndim, (rel, key)
        n = arrays["node_feat"].shape[0]
        assert arrays["node_feat"].shape == (n, 140) and arrays["node_opcode"].shape == (n,)
        assert arrays["edge_index"].shape[1] == 2
        c = arrays["config_runtime"].shape[0]
        if "/tile/" in rel:
            assert arrays["config_feat"].shape == (c, 24)
            assert arrays["config_runtime_normalizers"].shape == (c,)
        else:
            nc = arrays["node_config_ids"].shape[0]
            assert arrays["node_config_feat"].shape == (c, nc, 18)
            assert arrays["node_splits"].shape[0] == 1


def test_files_are_what_savez_compressed_writes(tiny, tmp_path: Path) -> None:
    root, summary, _ = tiny
    for rel in summary.files:
        arrays = load(root / rel)
        np.savez_compressed(tmp_path / "again.npz", **arrays)
        assert (root / rel).read_bytes() == (tmp_path / "again.npz").read_bytes(), rel


def test_streamed_member_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    big = rng.integers(-1, 6, size=(1000, 23, 18)).astype(np.float32)
    chunks = (big[i : i + 97] for i in range(0, len(big), 97))  # 11 uneven chunks
    streamed = synth.StreamedArray(big.shape, np.dtype(np.float32), chunks)
    path = tmp_path / "s.npz"
    synth.write_npz(path, [("a", np.arange(3)), ("node_config_feat", streamed)])
    back = load(path)
    assert list(back) == ["a", "node_config_feat"]
    assert back["node_config_feat"].dtype == np.float32
    np.testing.assert_array_equal(back["node_config_feat"], big)
    np.savez_compressed(tmp_path / "ref.npz", a=np.arange(3), node_config_feat=big)
    assert path.read_bytes() == (tmp_path / "ref.npz").read_bytes()
    short = synth.StreamedArray((5, 2), np.dtype(np.float32), iter([np.zeros((3, 2), np.float32)]))
    with pytest.raises(ValueError, match="3 rows"):
        synth.write_npz(tmp_path / "bad.npz", [("x", short)])
    assert not (tmp_path / "bad.npz").exists() and not list(tmp_path.glob(".*"))  # no temporary left


def test_failed_truth_write_leaves_nothing_behind(tmp_path: Path) -> None:
    """write_npy (truth side files) is atomic like write_npz: a failed write leaves no temporary."""
    from tpuprep.io.npz_writer import write_npy

    target = tmp_path / "truth" / "t.npy"
    assert write_npy(target, np.arange(4.0)) == target.stat().st_size
    np.testing.assert_array_equal(np.load(target), np.arange(4.0))
    with pytest.raises(ValueError, match="pickle"):
        write_npy(tmp_path / "truth" / "bad.npy", np.array([object()]))
    assert sorted(p.name for p in (tmp_path / "truth").iterdir()) == ["t.npy"]


def test_deterministic_and_order_independent(tiny, tmp_path: Path) -> None:
    root, summary, _ = tiny
    again = synth.synthesize(tmp_path / "again", "tiny", 0)
    assert again.files == summary.files
    for rel in summary.files + summary.truth_files:
        assert (root / rel).read_bytes() == (tmp_path / "again" / rel).read_bytes(), rel
    subset = ["layout:nlp:random", "tile:xla"]
    part = synth.synthesize(tmp_path / "part", "tiny", 0, collections=subset)
    expected = [
        f for f in summary.files if f.split("/")[1:3] in (["layout", "nlp"], ["tile", "xla"])
    ]
    expected = [f for f in expected if "/default/" not in f]
    assert part.files == expected
    for rel in part.files + part.truth_files:
        assert (root / rel).read_bytes() == (tmp_path / "part" / rel).read_bytes(), rel
    other = synth.synthesize(tmp_path / "seed1", "tiny", 1, collections=["tile:xla"])
    assert other.files != [f for f in summary.files if "/tile/" in f]
    prefix = synth.synthesize(tmp_path / "part", "tiny", 0, collections=["layout:nlp:random", "tile"])
    assert prefix.files == part.files and prefix.reused == len(part.files)  # prefixes select like build


def _stamp(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns


def test_resume_skips_finished_files_and_redoes_damaged_ones(tiny, tmp_path: Path) -> None:
    """A second run keeps every file that is still as recorded and rewrites the rest, identically."""
    ref_root, ref, _ = tiny
    root = tmp_path / "t"
    first = synth.synthesize(root, "tiny", 0)
    assert first.reused == 0 and first.files == ref.files
    layout = [f for f in first.files if "/layout/" in f]
    truncated, missing, flipped = root / layout[0], root / layout[1], root / first.files[0]
    truncated.write_bytes(truncated.read_bytes()[:-100])  # as if copied back incompletely
    missing.unlink()
    raw = bytearray(flipped.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # same size, different content
    flipped.write_bytes(bytes(raw))
    lost_truth = root / first.truth_files[-1]
    lost_truth.unlink()
    stale = truncated.with_name(f".{truncated.name}.tmp-99999")  # left by a killed writer
    stale.write_bytes(b"partial")
    with open(root / "synth-journal.jsonl", "a") as fh:
        fh.write('{"npz": "npz/tile/xla/train/x.npz", "trunc')  # a run killed while appending
    damaged = {truncated, missing, flipped, root / first.files[-1]}
    untouched = {root / f: _stamp(root / f) for f in first.files if root / f not in damaged}
    seen: list[str] = []
    again = synth.synthesize(root, "tiny", 0, progress=seen.append)
    assert again.reused == len(first.files) - 4 and seen == again.files == first.files
    assert {p: _stamp(p) for p in untouched} == untouched  # not rewritten
    for rel in first.files + first.truth_files:
        assert (root / rel).read_bytes() == (ref_root / rel).read_bytes(), rel
    assert not stale.exists()
    assert (again.total_bytes, again.truth_bytes) == (first.total_bytes, first.truth_bytes)
    assert {c: (n.files, n.configs) for c, n in again.counts.items()} == {
        c: (n.files, n.configs) for c, n in first.counts.items()
    }
    # another seed (same names for layout train files) is not taken for this one
    other = synth.synthesize(root, "tiny", 1, collections=["layout:xla:random"])
    assert other.reused == 0


def test_journal_ignores_documentation_but_not_code() -> None:
    from tpuprep.synth.journal import _code_of

    code = 'def f(x):\n    return x + 1\n'
    documented = '"""Module."""\n# a comment\ndef f(x):\n    """Add one."""\n    return x + 1  # one\n'
    assert _code_of(code) == _code_of(documented)
    assert _code_of(code) != _code_of(code.replace("+ 1", "+ 2"))


def test_fraction_keeps_the_first_files_of_every_split() -> None:
    full = synth.file_plan("full", 0)
    quarter = synth.file_plan("full", 0, fraction=0.25)
    assert set(quarter) <= set(full)
    counts = {
        (c, sp): sum(1 for s in quarter if (s.collection, s.split) == (c, sp))
        for c in synth.COLLECTIONS
        for sp in synth.SPLITS
    }
    assert counts == {
        ("tile:xla", "train"): 1428, ("tile:xla", "valid"): 169, ("tile:xla", "test"): 211,
        ("layout:xla:default", "train"): 16, ("layout:xla:default", "valid"): 2,
        ("layout:xla:default", "test"): 2,
        ("layout:xla:random", "train"): 18, ("layout:xla:random", "valid"): 2,
        ("layout:xla:random", "test"): 2,
        ("layout:nlp:default", "train"): 50, ("layout:nlp:default", "valid"): 5,
        ("layout:nlp:default", "test"): 5,
        ("layout:nlp:random", "train"): 52, ("layout:nlp:random", "valid"): 5,
        ("layout:nlp:random", "test"): 5,
    }  # fmt: skip
    assert all(s.index < counts[s.collection, s.split] for s in quarter)
    layout = [s for s in quarter if s.collection != "tile:xla"]
    big = [s for s in layout if synth.layout_config_count(s, "full") == synth.MAX_CONFIGS]
    assert len(big) >= 20 and {s.collection for s in big} == set(synth.COLLECTIONS[1:])
    tiny = synth.file_plan("tiny", 0, fraction=0.01)  # every split keeps at least one file
    assert len(tiny) == sum(1 for c in synth.PROFILES["tiny"].counts.values() for k in c if k)
    for bad in (0.0, -0.5, 1.5, float("nan")):
        with pytest.raises(ValueError, match="fraction"):
            synth.file_plan("tiny", 0, fraction=bad)


def test_fraction_tree_is_a_subset_of_the_whole_tree(tiny, tmp_path: Path) -> None:
    root, summary, _ = tiny
    half = synth.synthesize(tmp_path / "half", "tiny", 0, fraction=0.5)
    assert half.fraction == 0.5 and set(half.files) < set(summary.files)
    assert len(half.files) == 2 + 1 + 1 + 4 * 3  # tile (3, 2, 2) -> (2, 1, 1); layout (1, 1, 1) each
    for rel in half.files + half.truth_files:
        assert (tmp_path / "half" / rel).read_bytes() == (root / rel).read_bytes(), rel


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown profile"):
        synth.synthesize(tmp_path, "huge")
    with pytest.raises(ValueError, match="unknown collection"):
        synth.synthesize(tmp_path, "tiny", collections=["layout:xla:genetic"])


# ------------------------------------------------------------------------------------- invariants


def test_layout_invariants(tiny) -> None:
    root, _, _ = tiny
    for collection in synth.COLLECTIONS[1:]:
        for path in tree_files(root, collection):
            a = load(path)
            n = a["node_feat"].shape[0]
            e = a["edge_index"]
            assert (e[:, 0] > e[:, 1]).all() and e.min() >= 0 and e.max() < n
            order = np.lexsort((e[:, 1], e[:, 0]))
            assert (order == np.arange(len(e))).all()
            assert len(np.unique(e, axis=0)) == len(e)
            ids = a["node_config_ids"]
            assert (np.diff(ids) > 0).all() and len(ids) > 0
            assert set(a["node_opcode"][ids].tolist()) <= set(synth.CONFIGURABLE_OPCODES)
            configurable = np.isin(a["node_opcode"], synth.CONFIGURABLE_OPCODES)
            assert configurable.sum() == len(ids)  # every conv/dot/reshape node is configurable
            splits = a["node_splits"][0]
            assert splits[0] == 0 and splits[-1] == n and (np.diff(splits) > 0).all()
            cfg = a["node_config_feat"]
            assert ((cfg >= -1) & (cfg <= 5) & (cfg == np.round(cfg))).all()
            feat = a["node_feat"]
            assert (feat[:, 1] == 0).all()
            assert (feat[:, 2:21].sum(1) == 1).all() and set(np.unique(feat[:, 2:21])) == {0.0, 1.0}
            assert feat[:, 0].sum() >= len(splits) - 1  # a root per computation
            tuples = feat[:, 18] == 1
            assert (feat[tuples, 21:29] == [0] * 7 + [1]).all()
            assert (feat[tuples, 134:140] == 0).all()
            products = (28, 44, 52, 60, 68, 76, 84, 112, 116, 120, 124, 128, 132)
            no_window = feat[:, 37:93].sum(1) == 6  # only the six empty products
            assert (feat[no_window][:, [44, 52, 60, 68, 76, 84]] == 1).all()
            assert set(products) == set(synth.PRODUCT_COLUMNS)
            runtime = a["config_runtime"]
            if "/test/" in str(path):
                assert (runtime == 0).all()
            else:
                assert runtime.min() > 2**24


def test_tile_invariants(tiny) -> None:
    root, _, _ = tiny
    for path in tree_files(root, "tile:xla"):
        a = load(path)
        e, n = a["edge_index"], a["node_feat"].shape[0]
        assert (e[:, 0] > e[:, 1]).all() and e.max() < n
        assert (np.lexsort((e[:, 1], e[:, 0])) == np.arange(len(e))).all()
        cf = a["config_feat"]
        assert (cf[:, 16:24] == 0).all()  # input_bounds always empty: product 0 too
        out = cf[:, 8:14]
        has = (out != 0).any(1)
        assert (cf[has, 15] == np.prod(np.where(out[has] == 0, 1, out[has]), axis=1)).all()
        assert (cf[~has, 15] == 0).all()
        rt, norm = a["config_runtime"], a["config_runtime_normalizers"]
        if "/test/" in str(path):
            assert (rt == 0).all() and (norm == 1).all()
        else:
            assert (norm == norm[0]).all() and norm[0] in rt and (rt > 0).all()


def test_tile_bounds_follow_the_output_layout_like_the_real_files() -> None:
    """Output bounds run over the iteration space's dims major to minor by its layout, in units of 128
    lanes (minor-most) and 8 sublanes (next), like the real files (test_train_model checks those); the
    trainer's tile_iteration_dims finds that space from the file alone."""
    from tpuprep.train.features import tile_iteration_dims

    permuted = 0
    for spec in specs_of("small", "tile:xla")[:120]:
        graph = synth.tile_graph_for(spec, "small", 0)
        meta = graph.meta
        if meta["kind"] == "reshape":
            continue
        rng = np.random.default_rng(spec.index)
        feat, _, _ = synth.tile_configs(graph, rng, 40)
        dims, layout = meta["iter_dims"], meta["iter_layout"]
        physical = [dims[a] for a in reversed(layout)]
        permuted += physical != list(dims)
        r = len(dims)
        ext = tile_iteration_dims(graph.node_feat, feat, graph.edge_index)
        np.testing.assert_array_equal(ext[:r], physical)
        unit = np.ones(r)
        unit[max(r - 2, 0):] = [8, 128][2 - min(r, 2):]
        assert (feat[:, 8:8 + r] <= np.minimum(128, np.ceil(np.array(physical) / unit))).all()
        assert (feat[:, 8 + r:14] == 0).all() and (feat[:, 8:8 + r] >= 1).all()
    assert permuted >= 10  # non-default output layouts are covered


def test_names_and_test_hashes(tiny) -> None:
    root, _, _ = tiny
    hexname = re.compile(r"^[0-9a-f]{32}$")
    for family in ("xla", "nlp"):
        default = {p.stem for p in tree_files(root, f"layout:{family}:default", "test")}
        random = {p.stem for p in tree_files(root, f"layout:{family}:random", "test")}
        assert default == random and all(hexname.match(s) for s in default)
        for split in ("train", "valid"):
            stems = {p.stem for p in tree_files(root, f"layout:{family}:random", split)}
            assert stems and not any(hexname.match(s) for s in stems)
            assert all(re.match(r"^[A-Za-z0-9_.\-]+$", s) for s in stems)
    tile = re.compile(r"^(fusion|copy|reshape)\.\d+_-?[0-9a-f]{1,16}$")
    stems = [p.stem for p in tree_files(root, "tile:xla")]
    assert all(tile.match(s) for s in stems) and len(set(stems)) == len(stems)


def test_rank_rule_recovers_true_ranks(tiny, small) -> None:
    cases = [(tiny[0], "tiny", s) for s in specs_of("tiny")]
    cases += [(small, "small", s) for s in specs_of("small", "layout:xla:random")]
    zero_dims = 0
    for root, profile, spec in cases:
        a = load(root / spec.relpath)
        if spec.collection == "tile:xla":
            graph = synth.tile_graph_for(spec, profile)
        else:
            graph = synth.layout_graph_for(spec, profile)[0]
        np.testing.assert_array_equal(graph.node_feat, a["node_feat"])
        feat = a["node_feat"]
        rank = graph.rank
        np.testing.assert_array_equal(rank_rule(feat), rank)
        zero_dims += int(((feat[:, 21:27] != 0).sum(1) != rank).sum())
        layout = feat[:, 134:140]
        for r in range(7):
            rows = layout[rank == r]
            assert (rows[:, r:] == 0).all()
            if r >= 1:
                assert (np.sort(rows[:, :r], axis=1) == np.arange(r)).all()
        conv = a["node_opcode"] == synth.CONVOLUTION
        for i in np.flatnonzero(conv):
            spatial = rank[i] - 2
            assert (feat[i, 95 + spatial : 99] == 0).all() and (
                feat[i, 101 + spatial : 105] == 0
            ).all()
        assert (feat[~conv][:, 93:107] == 0).all()
    assert zero_dims > 0  # zero-size dims exist, so "count the non-zero dims" would be wrong


def test_config_value_patterns(tiny, small) -> None:
    paths = [p for c in synth.COLLECTIONS[1:] for p in tree_files(tiny[0], c)]
    paths += tree_files(small, "layout:xla:default", "train")[:4]
    tied = 0
    for path in paths:
        a = load(path)
        cfg, ops = a["node_config_feat"], a["node_opcode"][a["node_config_ids"]]
        feat = a["node_feat"][a["node_config_ids"]]
        set_ = cfg != -1
        conv, dot, reshape = ops == synth.CONVOLUTION, ops == synth.DOT, ops == synth.RESHAPE
        expected_conv = np.zeros(18, bool)
        expected_conv[[0, 1, 6, 7, 12, 13]] = True
        assert (set_[:, conv] == expected_conv).all()
        for j in np.flatnonzero(conv):
            assert set(np.unique(cfg[:, j, :2])) <= {feat[j, 105], feat[j, 106]}
        assert (set_[:, dot, 0] & set_[:, dot, 1]).all()
        assert (set_[:, dot, 6] == set_[:, dot, 12]).all()  # operands set together or both −1
        assert not set_[:, :, 14:].any()  # slots 14-17: never set
        assert not set_[:, ~reshape][
            :, :, [3, 4, 5, 9, 10, 11]
        ].any()  # only reshapes go past 2 dims
        for j in np.flatnonzero(reshape):
            for block in (cfg[:, j, 0:6], cfg[:, j, 6:12]):
                on = block != -1
                assert (np.diff(on.astype(int), axis=1) <= 0).all()  # set slots form a prefix
                k = on.sum(1)
                srt = np.sort(np.where(on, block, 99), axis=1)
                assert (np.where(np.arange(6) < k[:, None], srt == np.arange(6), True)).all()
        tied += cfg.shape[1] - len(row_groups(cfg.transpose(1, 0, 2))[1])
        assert abs((cfg == -1).mean() - 0.69) < 0.06
    assert tied > 0  # some nodes carry identical choices in every row


def test_isolated_configurable_node(tiny) -> None:
    root, _, _ = tiny
    isolated = 0
    for collection in synth.COLLECTIONS[1:]:
        for path in tree_files(root, collection):
            a = load(path)
            degree = np.bincount(a["edge_index"].ravel(), minlength=a["node_feat"].shape[0])
            isolated += int((degree[a["node_config_ids"]] == 0).sum())
    assert isolated >= 2


# ------------------------------------------------------------------------------------- statistics


def test_duplicate_rates_and_runtime_noise(small, tiny) -> None:
    targets = {"layout:xla:default": 0.44, "layout:xla:random": 0.30, "layout:nlp:random": 0.0006}
    for collection, target in targets.items():
        rows = dups = 0
        for split in ("train", "valid"):
            for path in tree_files(small, collection, split):
                a = load(path)
                cfg = a["node_config_feat"]
                inverse, counts = row_groups(cfg)
                rows += len(cfg)
                dups += len(cfg) - len(counts)
                rt = a["config_runtime"]
                spreads = []
                for g in np.flatnonzero(counts > 1)[:20]:  # duplicates differ slightly
                    group = rt[inverse == g]
                    assert group.max() / group.min() - 1 < 0.01
                    spreads.append(np.ptp(group))
                if len(spreads) >= 5:
                    assert max(spreads) > 0
        rate = dups / rows
        if target > 0.01:
            assert abs(rate - target) < 0.05, (collection, rate)
        else:
            assert 0 < rate < 0.003, (collection, rate)
    for path in tree_files(tiny[0], "layout:nlp:default"):
        cfg = load(path)["node_config_feat"]
        assert len(row_groups(cfg)[1]) >= 0.99 * len(cfg)


def test_graph_shape_statistics(small) -> None:
    nodes = edges = 0
    minus_one = values = 0
    for collection in STATS_COLLECTIONS:
        for path in tree_files(small, collection):
            a = load(path)
            nodes += a["node_feat"].shape[0]
            edges += a["edge_index"].shape[0]
            minus_one += int((a["node_config_feat"] == -1).sum())
            values += a["node_config_feat"].size
            nc, n = len(a["node_config_ids"]), a["node_feat"].shape[0]
            assert 0.005 < nc / n < 0.25
            assert 300 * 0.5 <= n <= 2000 * 1.6
    assert abs(edges / nodes - 1.6) < 0.1
    assert abs(minus_one / values - 0.69) < 0.03


def test_runtimes_follow_the_truth_and_modal_rows_are_fast(small) -> None:
    multimodal = 0
    for collection in ("layout:xla:default", "layout:xla:random"):
        for path in tree_files(small, collection, "train"):
            rel = path.relative_to(small / "npz")
            truth = np.load(small / "truth" / rel.with_suffix(".npy"), allow_pickle=False)
            a = load(path)
            rt = a["config_runtime"]
            assert truth.shape == rt.shape and np.abs(rt / truth - 1).max() < 0.005
            ids, cfg = a["node_config_ids"], a["node_config_feat"]
            modal = np.ones(len(rt), bool)
            for j, node in enumerate(ids):
                op = int(a["node_opcode"][node])
                if op in (synth.CONVOLUTION, synth.DOT):
                    want = modal_output(a["node_feat"][node], op)
                    modal &= (cfg[:, j, 0] == want[0]) & (cfg[:, j, 1] == want[1])
            assert modal.any()
            assert truth[modal].max() <= truth.min() * 1.006  # only operand/reshape terms left
            multimodal += truth.max() / truth.min() > 1.05
    assert multimodal >= 3


def test_conv_and_dot_cost_is_multiply_adds() -> None:
    """The runtime model's per-node cost is multiply-adds: output elements × window (conv) or ×
    contraction size (dot; batch dims excluded, weight gradients contract the leading dim). The
    trainer's estimate from node_feat and edges alone (features.node_work) must find the same."""
    from tpuprep.train.features import node_work

    dots = batched = not_minor = 0
    for spec in specs_of("small"):
        if not spec.collection.endswith("random") or spec.split == "test":
            continue
        graph, _, _ = synth.layout_graph_for(spec, "small", 0)
        nf, edges = graph.node_feat, graph.edge_index
        ids, op = graph.node_config_ids, graph.node_opcode.astype(np.int64)
        major = np.isin(op[ids], [synth.CONVOLUTION, synth.DOT])
        cost = np.array([c.cost for c in graph.configurable])
        work = node_work(nf, op, edges, ids)
        np.testing.assert_allclose(work[major], cost[major], rtol=1e-6, err_msg=spec.program)
        for j in np.flatnonzero(op[ids] == synth.DOT):
            operands = edges[edges[:, 0] == ids[j], 1]
            size = nf[:, 28].astype(np.float64)
            k = cost[j] / size[ids[j]]
            dots += 1
            batched += not np.isclose(k * k, size[operands].prod() ** (2 / len(operands)) / size[ids[j]])
            not_minor += all(k != nf[v, 21:27][nf[v, 21:27] > 0][-1] for v in operands)
    assert dots > 100 and batched > 10 and not_minor > 10  # batch dims and gradient dots are covered


# --------------------------------------------------------------------------------------- profiles


def test_profiles_sizes() -> None:
    assert set(synth.PROFILES) == {"tiny", "small", "bench", "full"}
    full = synth.file_plan("full", 0)
    published = {
        "tile:xla": (5709, 676, 844),
        "layout:xla:random": (69, 7, 8),
        "layout:xla:default": (61, 7, 8),
        "layout:nlp:random": (207, 20, 17),
        "layout:nlp:default": (198, 20, 17),
    }
    for collection, counts in published.items():
        got = tuple(
            sum(1 for s in full if (s.collection, s.split) == (collection, sp))
            for sp in synth.SPLITS
        )
        assert got == counts
    assert len(full) == 7868
    tests = [synth.layout_config_count(s, "full") for s in full if s.split == "test" and s.program]
    assert sorted(set(tests)) == [1000, 1001] and tests.count(1001) == 2
    small = [s for s in synth.file_plan("small", 0) if s.collection == "tile:xla"]
    assert [sum(s.split == sp for s in small) for sp in synth.SPLITS] == [200, 40, 40]


def test_bench_has_one_graph_at_the_real_maximum() -> None:
    specs = [s for s in synth.file_plan("bench", 0) if s.program]
    big = [s for s in specs if synth.layout_config_count(s, "bench") == synth.MAX_CONFIGS]
    assert len(big) == 1
    graph, plan, _ = synth.layout_graph_for(big[0], "bench")
    nc = len(plan.node_config_ids)
    assert nc >= 350 and synth.MAX_CONFIGS * nc * 18 * 4 >= 2.5e9
    assert graph.node_feat.shape[0] < 20_000


def test_cli_fraction_and_resume(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from tpuprep.cli import main

    args = ["synth", "--dst", str(tmp_path / "s"), "--profile", "tiny", "--fraction", "0.5"]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0 and "16 files in" in first.output, first.output
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0 and "16 files (16 already there)" in again.output, again.output
    for bad in ("0", "1.5"):
        wrong = CliRunner().invoke(main, [*args[:-1], bad])
        assert wrong.exit_code == 2 and "--fraction" in wrong.output
    unknown = CliRunner().invoke(main, [*args, "--collections", "xla:random"])  # the id lacks "layout:"
    assert unknown.exit_code == 2 and "--collections 'xla:random' names no collection" in unknown.output
    assert "Traceback" not in unknown.output


# ------------------------------------------------------------------- the full profile's size plan (#16)


@pytest.fixture(scope="module")
def full_plan() -> list[synth.PlannedFile]:
    return synth.layout_size_plan("full", 0)  # ~25 s: every layout program of full is built, none written


def _train_valid(plan: list[synth.PlannedFile], collection: str | None = None) -> list[synth.PlannedFile]:
    return [p for p in plan if p.spec.split != "test" and collection in (None, p.spec.collection)]


def test_full_plan_matches_the_published_totals(full_plan) -> None:
    """TPUGRAPHS.md §1: train + valid node_config_feat ≈ 400 GB inflated (tolerance ±5 %); the TGraph
    paper: mean c over 11,000 (layout:xla:random) and over 66,000 (layout:nlp:random) (tolerance: at
    most 10 % over); several graphs at c = 100,040 in every layout collection."""
    targets = synth.FULL_TARGETS
    total = sum(p.config_feat_bytes for p in _train_valid(full_plan))
    assert abs(total / targets["config_feat_train_valid_bytes"] - 1) <= 0.05, total / 1e9
    for collection, mean_c in targets["mean_configs"].items():
        files = _train_valid(full_plan, collection)
        got = sum(p.configs for p in files) / len(files)
        assert mean_c <= got <= 1.1 * mean_c, (collection, got)
    for collection in synth.COLLECTIONS[1:]:
        pinned = [p for p in _train_valid(full_plan, collection) if p.configs == synth.MAX_CONFIGS]
        assert len(pinned) >= targets["max_config_files"], collection
    assert sorted({p.configs for p in full_plan if p.spec.split == "test"}) == [1000, 1001]
    assert len(full_plan) == 639 and all(p.config_nodes > 0 for p in full_plan)


def test_size_plan_is_what_synthesize_writes(tiny) -> None:
    root, _, _ = tiny
    plan = synth.layout_size_plan("tiny", 0)
    assert len(plan) == 16
    for p in plan:
        with zipfile.ZipFile(root / p.spec.relpath) as zf, zf.open("node_config_feat.npy") as fh:
            np.lib.format.read_magic(fh)
            shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
        assert shape == (p.configs, p.config_nodes, 18) and dtype == np.float32, p.spec.relpath
        assert p.config_feat_bytes == int(np.prod(shape)) * 4


def test_synth_dry_run_prints_the_plan_totals_and_writes_nothing(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from tpuprep.cli import main

    dst = tmp_path / "never"
    r = CliRunner().invoke(main, ["synth", "--dst", str(dst), "--profile", "tiny", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert not dst.exists()
    plan = synth.layout_size_plan("tiny", 0)
    train_valid = sum(p.config_feat_bytes for p in plan if p.spec.split != "test")
    assert f"node_config_feat, train + valid: {train_valid / 1e6:,.2f} MB" in r.output
    assert "16 layout files and 7 tile files" in r.output
    rows = [line.split() for line in r.output.splitlines() if line.split()[:2] == ["layout:xla:random", "train"]]
    xr = [p for p in plan if (p.spec.collection, p.spec.split) == ("layout:xla:random", "train")]
    assert rows == [["layout:xla:random", "train", "2", "0", f"{sum(p.configs for p in xr) / 2:,.0f}",
                     str(max(p.config_nodes for p in xr)), f"{sum(p.config_feat_bytes for p in xr) / 1e6:,.2f}",
                     "MB"]]
