"""The re-padding rule of cols 31–36 (``dimensions``, docs/spec.md §2.2) end to end: ``verify`` catches
shards whose cols 31–36 or undecided counts differ from its own copy of the rule, the manifest records the
rule (``options.repad_rule``), shards of schema 3.2 (rule 1, before the rule was recorded) are still read
and verified by their own rule, and ``tpuprep synth`` writes every ``dimensions`` list at the length the
rule gives it (so synthetic data exercise the rule)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from reference import ref_dimensions_length
from test_hostile_read import (
    GRAPH,
    edit_manifest,
    first_graph,
    problems_of,
    read_manifest_json,
    rewrite_shard,
    shard_of,
    tamper_cell,
)

import tpuprep
from tpuprep.errors import BadShards
from tpuprep.moments import feature_moments, merge_moments
from tpuprep.options import REPAD_RULE, BuildOptions


def _undo_padding(node_feat: list) -> list:
    """A copy with one node's cols 31–36 as the input had them: all −1 back to 0 (padding undone)."""
    rows = [list(row) for row in node_feat]
    k = next(k for k, row in enumerate(rows) if row[31:37] == [-1.0] * 6)
    rows[k][31:37] = [0.0] * 6
    return rows


def test_verify_catches_cols_31_36_left_unpadded(shards, src):
    tamper_cell(shards, first_graph(shards), "graphs", "node_feat", _undo_padding)
    problems = problems_of(src, shards)
    assert any("node_feat differs from the input's kept rows re-padded by the docs/spec.md §2.2 rule 2" in p
               for p in problems), problems


def test_verify_catches_a_wrong_undecided_count(shards, src):
    tamper_cell(shards, first_graph(shards), "graphs", "dimensions_undecided", lambda v: v + 1)
    assert any("graphs column dimensions_undecided is 1, expected 0" in p for p in problems_of(src, shards))


@pytest.mark.parametrize("where", ["input", "totals"])
def test_verify_catches_a_wrong_undecided_total(shards, src, where):
    def bump(m: dict) -> None:
        if where == "input":
            next(i for i in m["inputs"] if i.get("graph_id", "").startswith(GRAPH))["counts"]["dimensions_undecided"] += 1
        else:
            m["collections"][GRAPH]["totals"]["dimensions_undecided"] += 1
    edit_manifest(shards, bump)
    expected = "manifest counts.dimensions_undecided" if where == "input" else "totals.dimensions_undecided"
    assert any(expected in p for p in problems_of(src, shards))


def test_the_manifest_records_the_rule(synth_shards):
    m = tpuprep.open_dataset(synth_shards).manifest
    assert m["schema_version"] == "3.3" and m["options"]["repad_rule"] == REPAD_RULE == 2
    assert BuildOptions(repad=False).to_dict()["repad_rule"] is None
    assert BuildOptions().fingerprint() != BuildOptions(repad=False).fingerprint()
    for coll in m["collections"].values():  # synthetic dimensions are all decided and consistent
        assert coll["totals"]["dimensions_undecided"] == coll["totals"]["anomalies"] == 0


def test_verify_says_it_does_not_know_a_newer_rule(shards, src):
    edit_manifest(shards, lambda m: m["options"].update(repad_rule=REPAD_RULE + 1))
    problems = problems_of(src, shards)
    assert problems and all("which this tpuprep does not know (its rule is 2): not verified" in p for p in problems)


@pytest.mark.parametrize("edit, message", [
    (lambda m: m["options"].pop("repad_rule"), "options: has no 'repad_rule'"),
    (lambda m: m["options"].update(repad_rule="2"), "options.repad_rule: is the string '2', expected"),
    (lambda m: m["options"].update(repad_rule=None), "options.repad_rule: is null, expected"),
    (lambda m: m["options"].update(repad_rule=0), "options.repad_rule: is 0, expected"),
    (lambda m: m["collections"][GRAPH]["totals"].pop("dimensions_undecided"), "has no 'dimensions_undecided'"),
    (lambda m: m["inputs"][0]["counts"].pop("dimensions_undecided"), "has no 'dimensions_undecided'"),
], ids=["no-rule", "rule-string", "rule-null", "rule-0", "no-total", "no-input-count"])
def test_a_3_3_manifest_must_say_the_rule_and_the_undecided_counts(shards, edit, message):
    edit_manifest(shards, edit)
    with pytest.raises(BadShards, match=message):
        tpuprep.open_dataset(shards)


def test_a_3_3_graphs_shard_must_have_the_undecided_column(shards):
    gid = first_graph(shards)
    rewrite_shard(shards, shard_of(shards, gid, "graphs")[1], lambda t: t.drop_columns(["dimensions_undecided"]))
    with pytest.raises(BadShards, match="column dimensions_undecided is missing"):
        tpuprep.open_dataset(shards).load_graph(gid)


# --------------------------------------------------------------------------------------- schema 3.2


def _as_schema_3_2(root: Path, src: Path, *, restore: bool = True) -> None:
    """Turn a build into what tpuprep wrote at schema 3.2 (re-padding rule 1): no ``repad_rule`` option,
    no ``dimensions_undecided`` column or counts, ``schema_version`` 3.2 in the manifest and every shard's
    metadata, and (``restore``) cols 31–36 as the inputs hold them."""
    def old(table: pa.Table) -> pa.Table:
        meta = {**table.schema.metadata, b"schema_version": b"3.2"}
        if "dimensions_undecided" not in table.column_names:
            return table.replace_schema_metadata(meta)
        feats = table.column("node_feat").to_pylist()
        if restore:
            for k, (path, kept) in enumerate(zip(table.column("source_file").to_pylist(),
                                                 table.column("node_index").to_pylist(), strict=True)):
                with np.load(src / path) as z:
                    given = z["node_feat"][kept, 31:37]
                feats[k] = [[*row[:31], *map(float, dims), *row[37:]] for row, dims in zip(feats[k], given, strict=True)]
        table = table.set_column(table.schema.get_field_index("node_feat"), table.schema.field("node_feat"),
                                 pa.array(feats, table.schema.field("node_feat").type))
        return table.drop_columns(["dimensions_undecided"]).replace_schema_metadata(meta)

    for entry in read_manifest_json(root)["shards"]:
        rewrite_shard(root, root / entry["path"], old)

    def edit(m: dict) -> None:
        m["schema_version"] = "3.2"
        del m["options"]["repad_rule"]
        for cid, coll in m["collections"].items():
            for split, counts in [*coll["splits"].items(), (None, coll["totals"])]:
                del counts["dimensions_undecided"]
                counts["bytes_out"] = sum(s["bytes"] for s in m["shards"]
                                          if s["collection"] == cid and split in (None, s["split"]))
        for entry in m["inputs"]:
            entry.get("counts", {}).pop("dimensions_undecided", None)
    edit_manifest(root, edit)
    ds = tpuprep.open_dataset(root)  # the train feature statistics of the features as they now are

    def stats(m: dict) -> None:
        for cid, coll in m["collections"].items():
            if coll["node_feat_stats"] is not None:
                train = sorted(ds.graph_ids(cid, "train"))
                coll["node_feat_stats"] = merge_moments(feature_moments(ds.load_graph(g).node_feat) for g in train)
    edit_manifest(root, stats)


def test_shards_of_schema_3_2_are_read_and_verified_by_rule_1(shards, src):
    _as_schema_3_2(shards, src)
    gid = first_graph(shards)
    assert pq.ParquetFile(shard_of(shards, gid, "graphs")[1]).schema_arrow.metadata[b"schema_version"] == b"3.2"
    ds = tpuprep.open_dataset(shards)
    g = ds.load_graph(gid)
    with np.load(src / ds.graph_row(gid)["source_file"]) as z:
        np.testing.assert_array_equal(g.node_feat[:, 31:37], z["node_feat"][g.node_index, 31:37])
    assert "dimensions_undecided" not in ds.graph_row(gid)
    counts = ds.counts(GRAPH)
    assert all("dimensions_undecided" not in c and c["graphs"] > 0 for c in counts.values())
    assert problems_of(src, shards) == []


def test_verify_applies_rule_1_to_shards_of_schema_3_2(shards, src):
    """Shards whose manifest says 3.2 but whose cols 31–36 follow rule 2: verify's rule 1 sees it."""
    _as_schema_3_2(shards, src, restore=False)
    problems = problems_of(src, shards)
    assert any("re-padded by the docs/spec.md §2.2 rule 1" in p for p in problems), problems


# --------------------------------------------------------------------------------------- synth


def test_synth_writes_dimensions_as_hlo_does(tmp_path, monkeypatch):
    """Every instruction the HLO builder emits carries a ``dimensions`` list of the length the rule
    gives its opcode, from the builder's own shapes and operands (not from node_feat), 0-padded."""
    from tpuprep.synth import hlo, synthesize

    seen: dict[int, set[int]] = {}
    add = hlo.HloBuilder.add

    def checked(self, op, shape, operands=(), *, calls=(), layout=None, feats=None):
        given = len((feats or {}).get(hlo.COL_DIMENSIONS, ()))
        i = add(self, op, shape, operands, calls=calls, layout=layout, feats=feats)
        ranks = {v: self.shape[v].rank for v in (*operands, *calls)}
        length = ref_dimensions_length(op, shape.rank, bool(shape.elems), ranks)
        assert length == given, (op, shape, given, length)
        seen.setdefault(op, set()).add(given)
        return i

    monkeypatch.setattr(hlo.HloBuilder, "add", checked)
    synthesize(tmp_path, "tiny", 0)
    assert {13, 48, 70, 98} <= set(seen), sorted(seen)  # broadcast, iota, reduce, transpose
    assert seen[70] >= {1, 2} and seen[13] >= {0, 1, 2}
