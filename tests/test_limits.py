"""``limits.py`` beside the code: each bound at its edge (the limit passes, one more is refused with the
file, the key and the limit named), the ratio bound, the DEFLATE bound, ``TPUPREP_INPUT_LIMIT_SCALE``,
and which members are bounded at all (those the build reads; issue #36 item 10). The members are
described directly (``Member``: what ``NpzFile`` parsed from the headers), so no file is needed."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from tpuprep.errors import BadInput, UsageError
from tpuprep.io.npz import Member
from tpuprep.limits import (
    DEFLATE_MAX_RATIO,
    ENV_SCALE,
    LIMITS,
    RATIO_FREE_BYTES,
    check_input_limits,
    limits_for,
)


def _member(key: str, shape: tuple, dtype: str = "<f4", compress_size: int | None = None) -> Member:
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize + 128
    return Member(key, 8, size if compress_size is None else compress_size, size, 0, 0, shape, np.dtype(dtype),
                  False, 128)


def _file(*members: Member) -> SimpleNamespace:
    return SimpleNamespace(path="g.npz", members={m.key: m for m in members})


@pytest.fixture(autouse=True)
def _no_scale(monkeypatch):
    monkeypatch.delenv(ENV_SCALE, raising=False)


@pytest.mark.parametrize("kind", ["layout", "tile"])
@pytest.mark.parametrize(("key", "what", "field"), [("node_feat", "nodes", "nodes"), ("edge_index", "edges", "edges"),
                                                     ("config_runtime", "configs", "configs")])
def test_each_row_limit_passes_at_its_edge_and_refuses_one_more(kind, key, what, field):
    limit = getattr(LIMITS[kind], field)
    width = {"node_feat": (140,), "edge_index": (2,), "config_runtime": ()}[key]
    small = "<i1" if key != "node_feat" else "<f4"
    check_input_limits(_file(_member(key, (limit, *width), small, compress_size=10**9)), kind)
    with pytest.raises(BadInput, match=rf"^g\.npz \[{key}\]: {what} {limit + 1:,} exceeds the limit of {limit:,} "
                                       rf"for a {kind} file"):
        check_input_limits(_file(_member(key, (limit + 1, *width), small, compress_size=10**9)), kind)


def test_configurable_nodes_are_bounded_in_layout_files_only():
    limit = LIMITS["layout"].config_nodes
    check_input_limits(_file(_member("node_config_ids", (limit,), "<i1")), "layout")
    with pytest.raises(BadInput, match=rf"configurable nodes {limit + 1:,} exceeds"):
        check_input_limits(_file(_member("node_config_ids", (limit + 1,), "<i1")), "layout")
    check_input_limits(_file(_member("node_config_ids", (limit + 1,), "<i1")), "tile")  # not a tile key


def _sized(key: str, inflated: int, compressed: int = 10**9, method: int = 8) -> Member:
    """A member of ``inflated`` bytes stored in ``compressed`` bytes (``method`` 8: DEFLATE, 0: STORED)."""
    return Member(key, method, compressed, inflated, 0, 0, (1,), np.dtype("<i8"), False, 0)


def test_the_streamed_member_has_its_own_bound_and_the_others_the_read_whole_one():
    streamed, whole = LIMITS["layout"].config_bytes, LIMITS["layout"].whole_bytes
    check_input_limits(_file(_sized("node_config_feat", streamed)), "layout")
    with pytest.raises(BadInput, match=rf"\[node_config_feat\]: inflated bytes {streamed + 1:,} exceeds"):
        check_input_limits(_file(_sized("node_config_feat", streamed + 1)), "layout")
    check_input_limits(_file(_sized("node_splits", whole)), "layout")
    with pytest.raises(BadInput, match=rf"\[node_splits\]: inflated bytes \(read whole\) {whole + 1:,} exceeds"):
        check_input_limits(_file(_sized("node_splits", whole + 1)), "layout")


@pytest.mark.parametrize(("inflated", "compressed", "refused"), [
    (RATIO_FREE_BYTES, 4000, False),  # small members are free of the ratio bound (1049 : 1)
    (400 * 10_500, 10_500, False),  # exactly 400 : 1, above 4 MiB
    (400 * 10_500 + 1, 10_500, True),
    (800 * 10**4, 10**4, True),
])
def test_a_member_read_whole_is_held_to_400_to_1_above_4_mib(inflated, compressed, refused):
    m = _sized("node_splits", inflated, compressed)
    if refused:
        with pytest.raises(BadInput, match=r"\[node_splits\]: inflates .* above the limit of 400 : 1"):
            check_input_limits(_file(m), "layout")
    else:
        check_input_limits(_file(m), "layout")


def test_no_member_may_claim_more_than_deflate_can_make_even_one_never_read():
    limit = DEFLATE_MAX_RATIO * 1000 + (1 << 20)
    for key in ("junk", "node_feat"):
        check_input_limits(_file(_sized(key, limit, 1000)), "tile")
        with pytest.raises(BadInput, match=rf"\[{key}\]: declares {limit + 1:,} bytes from 1,000 compressed bytes"):
            check_input_limits(_file(_sized(key, limit + 1, 1000)), "tile")
    check_input_limits(_file(_sized("junk", limit + 1, 1000, method=0)), "tile")  # STORED: no such claim


def test_a_member_the_build_never_reads_is_not_bounded():
    check_input_limits(_file(_member("junk", (10**8, 140), compress_size=10**8)), "layout")  # 560 : 1, 56 GB
    check_input_limits(_file(_sized("node_config_feat", 10**12, 10**10)), "tile")  # not a tile key


@pytest.mark.parametrize("text", ["-1", "0", "nan", "inf", "-inf", "two", "1e400"])
def test_a_scale_that_is_not_a_positive_finite_number_is_a_usage_error(monkeypatch, text):
    monkeypatch.setenv(ENV_SCALE, text)
    with pytest.raises(UsageError, match=rf"{ENV_SCALE}='{text}' is not a positive number"):
        limits_for("tile")


def test_the_scale_multiplies_every_limit_and_the_ratio_up_to_deflates(monkeypatch):
    monkeypatch.setenv(ENV_SCALE, "2.5")
    got, base = limits_for("layout"), LIMITS["layout"]
    assert (got.nodes, got.edges, got.configs, got.config_nodes, got.config_bytes, got.whole_bytes) == tuple(
        int(v * 2.5) for v in (base.nodes, base.edges, base.configs, base.config_nodes, base.config_bytes,
                               base.whole_bytes))
    assert got.ratio == 1000.0 and limits_for("tile").config_nodes is None
    monkeypatch.setenv(ENV_SCALE, "10")
    assert limits_for("tile").ratio == DEFLATE_MAX_RATIO
    monkeypatch.setenv(ENV_SCALE, " 1 ")
    assert limits_for("tile") is LIMITS["tile"]
    assert not math.isinf(limits_for("layout").ratio)
