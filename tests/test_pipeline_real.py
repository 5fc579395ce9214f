"""The whole pipeline on real TpuGraphs-format files: exact against the ground truth we have."""

from __future__ import annotations

import numpy as np
from realdata import real_path

import tpuprep
from tpuprep.verify import verify


def test_verify_proves_real_shards_exact(real_tree, real_shards):
    report = verify(real_tree, real_shards)
    assert report.problems == []
    assert report.graphs_checked == 17  # 1 layout fixture + alexnet + 15 tile kernels


def test_dedup_counts_match_real_statistics(real_shards):
    ds = tpuprep.open_dataset(real_shards)
    alexnet = ds.load_graph("layout:xla:default:alexnet_train_batch_32")
    assert (alexnet.num_configs, alexnet.num_unique_configs) == (47_712, 29_905)
    sizes, counts = np.unique(alexnet.group_size, return_counts=True)
    histogram = dict(zip(sizes.tolist(), counts.tolist(), strict=True))
    assert histogram[1] == 19_927 and histogram[2] == 5_925 and histogram[58] == 1
    fixture = ds.load_graph("layout:xla:default:main__.10904")
    assert (fixture.num_configs, fixture.num_unique_configs) == (112, 91)
    tile_unique = {"copy.25_4d1e36cc29e3e6d8": 10, "fusion.232_579e7b2c540f0929": 60,
                   "reshape.37_24aa8731e7561309": 1, "fusion.191_4ae805e53b8d2b8a": 579}
    for stem, unique in tile_unique.items():
        assert ds.load_graph(f"tile:xla:{stem}").num_unique_configs == unique


def test_repadding_equals_regenerated_ground_truth(real_shards):
    """Pruned (K = 1): the kept nodes equal the truth's rows on all 140 columns, but where the length of
    dimensions is undecided (the two variadic reduces, when kept: cols 31–36 left 0-padded)."""
    truth = np.load(real_path("repadded", "main__.10904.pad-1.npz"))["node_feat"]
    ds = tpuprep.open_dataset(real_shards)
    g = ds.load_graph("layout:xla:default:main__.10904")
    undecided = ds.graph_row(g.graph_id)["dimensions_undecided"]
    exact = (g.node_feat == truth[g.node_index]).all(axis=1)
    assert (~exact).sum() == undecided <= 2 and len(exact) < 3163


# node_feat column groups of the figures in docs/spec.md §2.2
GROUPS = {"31-36": list(range(31, 37)), "95-98, 101-104": [*range(95, 99), *range(101, 105)],
          "134-139": list(range(134, 140))}
GROUPS["others"] = sorted(set(range(140)) - {c for cols in GROUPS.values() for c in cols})


def exact_by_group(got: np.ndarray, truth: np.ndarray) -> dict[str, int]:
    """Nodes whose columns of each group (and all 140) equal the truth's."""
    out = {name: int((got[:, cols] == truth[:, cols]).all(axis=1).sum()) for name, cols in GROUPS.items()}
    return out | {"all 140": int((got == truth).all(axis=1).sum())}


def test_unpruned_build_equals_the_truth_on_every_real_node(tmp_path, real_tree):
    """The figures of docs/spec.md §2.2: a --no-prune build, load_graph().node_feat against the truth —
    main__.10904 against real/repadded, the 15 tile kernels against their protobuf (tests/hlo_proto.py)."""
    import hlo_proto

    from tpuprep.build import build
    from tpuprep.options import BuildOptions

    build(real_tree, tmp_path, BuildOptions(prune=False))
    ds = tpuprep.open_dataset(tmp_path)
    g = ds.load_graph("layout:xla:default:main__.10904")
    truth = np.load(real_path("repadded", "main__.10904.pad-1.npz"))["node_feat"]
    assert g.node_feat.shape == (3163, 140)
    assert exact_by_group(g.node_feat, truth) == {"31-36": 3161, "95-98, 101-104": 3163, "134-139": 3163,
                                                  "others": 3163, "all 140": 3161}  # 99.94 %
    assert ds.graph_row(g.graph_id)["dimensions_undecided"] == 2
    tile = {name: 0 for name in [*GROUPS, "all 140"]}
    for name, instructions in hlo_proto.tile_modules(real_path("pb", "op_tuning_data.pb")):
        (gid,) = [i for i in ds.graph_ids("tile:xla") if i.startswith(f"tile:xla:{name}_")]
        t = ds.load_graph(gid)
        for group, count in exact_by_group(t.node_feat, hlo_proto.truth(*_input(real_tree, gid), instructions)).items():
            tile[group] += count
    assert tile == dict.fromkeys(tile, 294)  # 100 %
    totals = ds.manifest["collections"]
    assert totals["layout:xla:default"]["totals"]["dimensions_undecided"] == 2
    assert totals["tile:xla"]["totals"]["dimensions_undecided"] == 0
    assert ds.manifest["options"]["repad_rule"] == 2


def _input(tree, gid: str) -> tuple[np.ndarray, np.ndarray]:
    """(node_feat, node_opcode) of a tile graph's input file under the real tree."""
    with np.load(tree / "tile" / "xla" / "train" / f"{gid.rsplit(':', 1)[1]}.npz") as z:
        return z["node_feat"], z["node_opcode"]


def test_every_original_config_and_runtime_is_rebuilt(real_shards):
    src = np.load(real_path("reconstructed", "alexnet_train_batch_32.npz"))
    g = tpuprep.open_dataset(real_shards).load_graph("layout:xla:default:alexnet_train_batch_32")
    np.testing.assert_array_equal(g.node_config_feat()[g.config_inverse], src["node_config_feat"])
    np.testing.assert_array_equal(g.config_runtime_original, src["config_runtime"])
    best = np.full(g.num_unique_configs, np.iinfo(np.int64).max)
    np.minimum.at(best, g.config_inverse, src["config_runtime"])
    np.testing.assert_array_equal(g.config_runtime, best)
    assert g.config_runtime.dtype == np.int64 and g.config_codes.dtype == np.int32
    assert g.node_config_feat([5, 0]).shape == (2, 26, 18)


def test_pruning_follows_tgraph_rule_on_alexnet(real_shards):
    g = tpuprep.open_dataset(real_shards).load_graph("layout:xla:default:alexnet_train_batch_32")
    src = np.load(real_path("reconstructed", "alexnet_train_batch_32.npz"))
    configurable = set(src["node_config_ids"].tolist())
    original_edges = g.node_index[g.edge_index]
    # K = 1: every kept edge has a configurable endpoint
    assert all(u in configurable or v in configurable for u, v in original_edges.tolist())
    assert set(g.node_index[g.node_config_ids].tolist()) == configurable
    assert g.num_configs == 47_712 and len(g.node_index) < 372
