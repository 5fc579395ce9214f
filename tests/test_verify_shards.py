"""``verify/shards.py``: verify's checks of the shard folder itself, each reached by a tampered fact and
held to the line that names the cause (issue #36: ids compared after sorting, ``<`` for ``!=`` and a
reordered quarantine list all passed, because other checks failed the shard with another message).

The manifest-only checks (``check_totals``, ``check_quarantine``) run on manifest dicts; the shard checks
(``check_shards``) on a private copy of the tiny build with one fact changed (``test_hostile_read``'s
helpers rewrite a shard and fix the manifest's sha256, so only the semantic check can speak).
"""

from __future__ import annotations

import copy

import pyarrow as pa
import pytest
from test_hostile_read import (
    GRAPH,
    edit_manifest,
    first_graph,
    read_manifest_json,
    rewrite_shard,
    shard_of,
    tamper_cell,
)
from test_verify_stored import edit_graph_configs

import tpuprep
from tpuprep.shards.manifest import COUNT_FIELDS
from tpuprep.verify.report import VerifyReport
from tpuprep.verify.shards import check_quarantine, check_shards, check_totals

# ---------------------------------------------------------------------------------- the manifest alone


def _inputs(*paths_and_status: tuple[str, str]) -> list[dict]:
    return [{"path": p, "status": s, "graph_id": "tile:xla:" + p.rsplit("/", 1)[1].removesuffix(".npz")}
            for p, s in paths_and_status]


@pytest.mark.parametrize(("listed", "ok"), [
    (["tile/xla/train/a.npz", "tile/xla/train/c.npz"], True),
    (["tile/xla/train/c.npz", "tile/xla/train/a.npz"], False),  # the same files, another order
    (["tile/xla/train/a.npz"], False),
    (["tile/xla/train/a.npz", "tile/xla/train/c.npz", "tile/xla/train/b.npz"], False),
    (["tile/xla/train/a.npz", "tile/xla/train/a.npz"], False),
])
def test_the_quarantine_list_is_the_quarantined_inputs_in_their_order(listed, ok):
    manifest = {"inputs": _inputs(("tile/xla/train/a.npz", "quarantined"), ("tile/xla/train/b.npz", "ok"),
                                  ("tile/xla/train/c.npz", "quarantined")),
                "quarantine": [{"file": f, "key": None, "error": "x"} for f in listed]}
    problems: list[str] = []
    check_quarantine(manifest, problems)
    assert problems == ([] if ok else [f"manifest.json: quarantine lists {len(listed)} files, inputs have 2 "
                                       "quarantined ones (or in another order)"])


@pytest.fixture(scope="module")
def manifest(synth_shards) -> dict:
    return read_manifest_json(synth_shards)


def test_the_tiny_builds_totals_are_consistent(manifest):
    problems: list[str] = []
    check_totals(manifest, problems)
    assert problems == []


@pytest.mark.parametrize("field", COUNT_FIELDS)
@pytest.mark.parametrize("change", [1, -1])
@pytest.mark.parametrize("where", ["train", None])
def test_a_total_off_by_one_either_way_is_named_with_its_sum(manifest, field, change, where):
    m = copy.deepcopy(manifest)
    coll = m["collections"][GRAPH]
    target = coll["totals"] if where is None else coll["splits"][where]
    want = target[field]
    target[field] += change
    problems: list[str] = []
    check_totals(m, problems)
    place = "totals" if where is None else f"splits.{where}"
    assert problems == [f"manifest.json: collections['{GRAPH}'].{place}.{field} is {want + change}, the inputs "
                        f"and shards sum to {want}"]


@pytest.mark.parametrize("change", [1, -1])
def test_an_input_count_off_either_way_breaks_its_split_and_collection_totals(manifest, change):
    m = copy.deepcopy(manifest)
    entry = next(i for i in m["inputs"] if i.get("graph_id", "").startswith(GRAPH) and "/train/" in i["path"])
    entry["counts"]["nodes_after"] += change
    problems: list[str] = []
    check_totals(m, problems)
    assert [p.split(" is ")[0] for p in problems] == [
        f"manifest.json: collections['{GRAPH}'].totals.nodes_after",
        f"manifest.json: collections['{GRAPH}'].splits.train.nodes_after"]


def test_a_collection_listed_without_inputs_or_missing_is_named(manifest):
    m = copy.deepcopy(manifest)
    m["collections"]["layout:xla:other"] = copy.deepcopy(m["collections"][GRAPH])
    del m["collections"][GRAPH]
    problems: list[str] = []
    check_totals(m, problems)
    assert problems == ["manifest.json: collection layout:xla:other is listed in collections, but has no converted "
                        "input",
                        f"manifest.json: collection {GRAPH} is missing from collections, but has converted inputs"]


# ---------------------------------------------------------------------------------------- the shards


def _shard_problems(shards) -> list[str]:
    report = VerifyReport()
    check_shards(tpuprep.open_dataset(shards), report)
    assert report.shards_checked == len(read_manifest_json(shards)["shards"])
    return report.problems


def test_the_untouched_tiny_build_has_no_shard_problem(synth_shards):
    assert _shard_problems(synth_shards) == []


@pytest.mark.parametrize(("a", "b"), [(2, 3), (0, 1)])
def test_configs_rows_out_of_config_id_order_are_named(shards, a, b):
    """Two rows trading config_ids: the set is still 0..c_u−1 (a check after sorting, or of the count,
    passes); the order is not."""
    gid = first_graph(shards, GRAPH, "train")
    n = tpuprep.open_dataset(shards).num_unique_configs(gid)
    rel = shard_of(shards, gid, "configs")[1].relative_to(shards).as_posix()

    def swap(rows):
        rows["config_id"][a], rows["config_id"][b] = rows["config_id"][b], rows["config_id"][a]

    edit_graph_configs(shards, gid, swap)
    assert _shard_problems(shards) == [f"{rel}: configs rows of {gid} are not config_id 0..{n - 1} in order"]


@pytest.mark.parametrize(("what", "change"), [("rows", 1), ("rows", -1), ("row_groups", 1), ("row_groups", -1)])
def test_a_shard_holding_other_rows_or_row_groups_than_listed_is_named(shards, what, change):
    gid = first_graph(shards, GRAPH, "train")
    index, path = shard_of(shards, gid, "configs")
    have = read_manifest_json(shards)["shards"][index][what]

    def edit(m):
        m["shards"][index][what] += change
    edit_manifest(shards, edit)
    label = "rows" if what == "rows" else "row groups"
    assert f"{path.relative_to(shards).as_posix()}: holds {label} {have}, the manifest says {have + change}" in \
        _shard_problems(shards)


@pytest.mark.parametrize("end", ["first_graph", "last_graph"])
def test_a_shards_first_or_last_graph_not_as_listed_is_named(shards, end):
    gid = first_graph(shards, GRAPH, "train")
    index, path = shard_of(shards, gid, "graphs")
    entry = read_manifest_json(shards)["shards"][index]

    first = entry["first_graph"][:-1] if end == "first_graph" else entry["first_graph"]  # still covers
    last = entry["last_graph"] + "x" if end == "last_graph" else entry["last_graph"]  # the graphs it holds

    def edit(m):
        m["shards"][index].update(first_graph=first, last_graph=last)
    edit_manifest(shards, edit)
    assert _shard_problems(shards) == [f"{path.relative_to(shards).as_posix()}: graphs {entry['first_graph']}.."
                                       f"{entry['last_graph']}, the manifest says {first}..{last}"]


def test_graphs_rows_out_of_graph_id_order_are_named(shards):
    gid = first_graph(shards, GRAPH, "train")
    _, path = shard_of(shards, gid, "graphs")

    def reverse(t: pa.Table) -> pa.Table:
        return t.take(pa.array(list(range(t.num_rows))[::-1]))

    rewrite_shard(shards, path, reverse)
    rel = path.relative_to(shards).as_posix()
    assert f"{rel}: rows are not sorted by graph_id" in _shard_problems(shards)


@pytest.mark.parametrize("change", [1, -1])
def test_a_graphs_row_counting_other_configs_than_its_configs_rows_is_named(shards, change):
    gid = first_graph(shards, GRAPH, "train")
    _, graphs = shard_of(shards, gid, "graphs")
    _, configs = shard_of(shards, gid, "configs")

    def bump(t: pa.Table) -> pa.Table:
        i = t.schema.get_field_index("num_unique_configs")
        values = [v + (change if g == gid else 0) for g, v in zip(t.column("graph_id").to_pylist(),
                                                              t.column(i).to_pylist(), strict=True)]
        return t.set_column(i, t.schema.field(i), pa.array(values, t.schema.field(i).type))

    n = tpuprep.open_dataset(shards).num_unique_configs(gid)
    rewrite_shard(shards, graphs, bump)
    assert _shard_problems(shards) == [f"{configs.relative_to(shards).as_posix()}: {n} configs rows of {gid}, its "
                                       f"graphs row in {graphs.relative_to(shards).as_posix()} says "
                                       f"num_unique_configs {n + change}"]


@pytest.mark.parametrize(("column", "value"), [("split", "valid"), ("collection", "layout:xla:default")])
def test_a_graphs_row_of_another_split_or_collection_is_named(shards, column, value):
    gid = first_graph(shards, GRAPH, "train")
    _, path = shard_of(shards, gid, "graphs")

    def move(t: pa.Table) -> pa.Table:
        i = t.schema.get_field_index(column)
        values = [value if g == gid else v for g, v in zip(t.column("graph_id").to_pylist(), t.column(i).to_pylist(),
                                                             strict=True)]
        return t.set_column(i, t.schema.field(i), pa.array(values, t.schema.field(i).type))

    rewrite_shard(shards, path, move)
    have = sorted({value, GRAPH if column == "collection" else "train"})
    assert _shard_problems(shards) == [f"{path.relative_to(shards).as_posix()}: {column} column holds {have}, "
                                       f"the shard is {(GRAPH if column == 'collection' else 'train')!r}"]


def test_graphs_the_manifest_does_not_list_as_converted_are_named_per_table(shards):
    gid = first_graph(shards, GRAPH, "train")

    def unlist(m):
        next(i for i in m["inputs"] if i.get("graph_id") == gid)["status"] = "quarantined"
    edit_manifest(shards, unlist)
    problems = _shard_problems(shards)
    for table in ("graphs", "configs"):
        assert f"{GRAPH} train: {table} shards hold 1 graphs the manifest does not list, e.g. {gid}" in problems


@pytest.mark.parametrize("split", ["train", "test"])
def test_runtimes_null_on_a_labelled_split_or_present_on_test_are_named(shards, split):
    """The reader takes a runtime column holding any null as absent: one null on train (or one value on
    test) must be named by its count, either way."""
    gid = first_graph(shards, GRAPH, split)
    index, path = shard_of(shards, gid, "configs")
    rows = read_manifest_json(shards)["shards"][index]["rows"]
    tamper_cell(shards, gid, "configs", "runtime", lambda v: None if split == "train" else 5)
    nulls, holds = (1, "none") if split == "train" else (rows - 1, "only nulls")
    assert f"{path.relative_to(shards).as_posix()}: column runtime holds {nulls} nulls in {rows} rows; a {split} " \
           f"shard holds {holds}" in _shard_problems(shards)
