"""The whole pipeline on real TpuGraphs-format files: exact against the ground truth we have."""

from __future__ import annotations

import numpy as np
from realdata import real_path

import tpuprep
from tpuprep.verify import verify

REPAD_COLUMNS = [*range(95, 99), *range(101, 105), *range(134, 140)]


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
    truth = np.load(real_path("repadded", "main__.10904.pad-1.npz"))["node_feat"]
    g = tpuprep.open_dataset(real_shards).load_graph("layout:xla:default:main__.10904")
    np.testing.assert_array_equal(g.node_feat[:, REPAD_COLUMNS], truth[g.node_index][:, REPAD_COLUMNS])


def test_unpruned_repadding_covers_all_3163_nodes(tmp_path, real_tree):
    from tpuprep.build import build
    from tpuprep.options import BuildOptions

    build(real_tree, tmp_path, BuildOptions(prune=False), collections=["layout"])
    g = tpuprep.open_dataset(tmp_path).load_graph("layout:xla:default:main__.10904")
    truth = np.load(real_path("repadded", "main__.10904.pad-1.npz"))["node_feat"]
    assert g.node_feat.shape == (3163, 140)
    np.testing.assert_array_equal(g.node_feat[:, REPAD_COLUMNS], truth[:, REPAD_COLUMNS])


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
