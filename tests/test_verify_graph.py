"""``verify/graph.py`` beside the code: the per-graph checks that compare arrays as sets or by counts
were planted with ``<`` for ``!=``, a sorted comparison and a ``>=`` at the 1 % edge, and passed
(issue #36's mutation pass): each is held here to the fact it checks and the line it says. The
quality and graphs-row checks run on described graphs (``SimpleNamespace``); the others on a tampered
copy of the tiny build (``test_hostile_read``'s helpers)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from test_hostile_read import GRAPH, first_graph, tamper_cell

import tpuprep
from tpuprep.shards.schema import SCHEMA_VERSION
from tpuprep.tpugraphs import graph_fold
from tpuprep.verify import verify
from tpuprep.verify.graph import _check_quality, check_graph_row
from tpuprep.verify.reference import InputFacts


class _Rows:
    """What the checks ask of a ``Dataset``: a graphs row and the manifest's options and version."""

    def __init__(self, **row):
        self.row, self.manifest = row, {"options": {"folds": 5}, "schema_version": SCHEMA_VERSION}

    def graph_row(self, _gid):
        return self.row


@pytest.mark.parametrize(("runtimes", "noisy"), [([100, 101, 7, 7], 0),  # exactly 1 % apart: not noisy
                                                  ([100, 102, 7, 7], 1), ([100, 101, 7, 8], 1)])
def test_a_group_is_noisy_only_beyond_one_percent(runtimes, noisy):
    g = SimpleNamespace(graph_id="g", config_inverse=np.array([0, 0, 1, 1]))
    problems: list[str] = []
    _check_quality(_Rows(num_duplicate_groups=2, num_noisy_groups=noisy), g, np.array(runtimes, np.int64), problems)
    assert problems == []
    _check_quality(_Rows(num_duplicate_groups=2, num_noisy_groups=1 - noisy), g, np.array(runtimes), problems)
    assert problems == [f"g: graphs column num_noisy_groups is {1 - noisy}, expected {noisy}"]


def _row_case(gid: str = "tile:xla:t") -> tuple:
    inp = SimpleNamespace(graph_id=gid, collection="tile:xla", split="train", relpath="tile/xla/train/t.npz", size=50)
    facts = InputFacts(nodes_before=5, edges_before=4, configs=6, nodes_after=5, edges_after=4, anomalies=0, undecided=0,
                       config_nodes=None)
    counts = {"configs": 6, "unique_configs": 3, "nodes_before": 5, "nodes_after": 5, "edges_before": 4,
              "edges_after": 4, "bytes_in": 50, "anomalies": 0, "dimensions_undecided": 0}
    row = {"graph_id": gid, "collection": "tile:xla", "split": "train", "source_file": inp.relpath,
           "source_sha256": "s" * 64, "source_bytes": 50, "fold": graph_fold(gid, 5), "num_nodes_original": 5,
           "num_edges_original": 4, "num_nodes": 5, "num_edges": 4, "num_configs": 6, "num_repad_anomalies": 0,
           "dimensions_undecided": 0,
           "num_unique_configs": 3}
    return inp, {"bytes": 50, "counts": counts}, facts, row


def test_a_graphs_row_and_manifest_entry_as_the_input_says_pass():
    inp, entry, facts, row = _row_case()
    problems: list[str] = []
    check_graph_row(_Rows(**row), inp, entry, "s" * 64, facts, problems)
    assert problems == []


@pytest.mark.parametrize("change", [1, -1])
def test_the_manifest_bytes_off_either_way_are_named(change):
    inp, entry, facts, row = _row_case()
    entry["bytes"] += change
    problems: list[str] = []
    check_graph_row(_Rows(**row), inp, entry, "s" * 64, facts, problems)
    assert problems == [f"tile/xla/train/t.npz: manifest bytes is {50 + change}, the file has 50"]


@pytest.mark.parametrize("name", ["configs", "nodes_after", "edges_before", "bytes_in", "anomalies", "dimensions_undecided"])
@pytest.mark.parametrize("change", [1, -1])
def test_a_manifest_count_off_either_way_is_named(name, change):
    inp, entry, facts, row = _row_case()
    want = entry["counts"][name]
    entry["counts"][name] += change
    problems: list[str] = []
    check_graph_row(_Rows(**row), inp, entry, "s" * 64, facts, problems)
    assert problems == [f"tile/xla/train/t.npz: manifest counts.{name} is {want + change}, expected {want}"]


@pytest.mark.parametrize("column", ["num_nodes", "num_edges_original", "source_bytes", "fold", "dimensions_undecided"])
def test_a_graphs_column_off_by_one_is_named(column):
    inp, entry, facts, row = _row_case()
    want = row[column]
    row[column] += 1
    problems: list[str] = []
    check_graph_row(_Rows(**row), inp, entry, "s" * 64, facts, problems)
    assert problems == [f"tile:xla:t: graphs column {column} is {want + 1}, expected {want}"]


def _swap(i: int, j: int):
    def change(values: list) -> list:
        values = list(values)
        values[i], values[j] = values[j], values[i]
        return values
    return change


def test_unique_configs_trading_their_minimum_runtimes_are_named(shards, src):
    """Two unique configs' runtimes swapped: the same values (a check of the sorted minima passes), the
    wrong configs."""
    gid = first_graph(shards, GRAPH, "train")
    runtimes = tpuprep.open_dataset(shards).load_graph(gid).config_runtime
    a, b = 0, int(np.flatnonzero(runtimes != runtimes[0])[0])

    def swap(_):
        return int(runtimes[b])

    def back(_):
        return int(runtimes[a])

    tamper_cell(shards, gid, "configs", "runtime", swap, row=a)
    tamper_cell(shards, gid, "configs", "runtime", back, row=b)
    problems = [p for p in verify(src, shards, collections=[GRAPH]).problems if not p.startswith("manifest.json")]
    assert f"{gid}: config_runtime is not the group minimum" in problems


def test_two_kept_edges_in_another_order_are_named(shards, src):
    """The same edges in another order: the spec keeps the input's edge order."""
    gid = first_graph(shards, GRAPH, "train")
    tamper_cell(shards, gid, "graphs", "edge_index", _swap(0, 1))
    problems = verify(src, shards, collections=[GRAPH]).problems
    assert f"{gid}: edges differ from the input's kept edges (or their order)" in problems


def test_unique_configs_that_never_occur_are_named_out_of_first_occurrence_order():
    """Configs 1 and 2 referenced by no original row: their first occurrences tie (past the end), which is
    no order; the first_index and group_size lines come too."""
    from tpuprep.verify.graph import _check_groups

    g = SimpleNamespace(graph_id="g", config_inverse=np.zeros(4, np.int32), num_unique_configs=3,
                        first_index=np.array([0, 1, 2]), group_size=np.array([2, 1, 1]),
                        config_runtime=None, config_runtime_spread=None)
    problems: list[str] = []
    _check_groups(g, None, None, problems)
    assert problems == ["g: first_index is not the first occurrence",
                        "g: unique configs are not numbered in first-occurrence order", "g: group_size mismatch"]
