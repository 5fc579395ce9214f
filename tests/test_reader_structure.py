"""The reading room (issue #37 item 2, ``docs/architecture.md`` "Reading shards"): ``Dataset`` is a facade
composed of parts with one job each — no mixins, no part reaching into another's private state —, the
dataset keeps one bounded cache of derived per-graph columns (ties included) that ``sample_configs``,
``read_configs`` and ``ConfigBatches`` all read through, and a sampled batch touches a handful of modules.
"""

from __future__ import annotations

import ast
import inspect
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import tpuprep
from tpuprep.sampling.batches import ConfigBatches
from tpuprep.sampling.cache import CachedGraph
from tpuprep.shards import reader

REPO = Path(__file__).resolve().parent.parent
SHARDS = REPO / "tpuprep" / "shards"
READING = ("reader", "shard_files", "shard_index", "loads", "sampled", "scans", "derived")
"""The modules of the reading room: the facade and its parts."""
LAYOUT = "layout:xla:random"


def private_reaches(source: str) -> list[str]:
    """Attribute reads of a private name (``x._y``) on anything but ``self``/``cls``, a module or a name
    imported: a part reaching into another part's state (``self.files._named``, ``ds._index``)."""
    tree = ast.parse(source)
    modules = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)
               for alias in node.names}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = node.value
            if isinstance(owner, ast.Name) and (owner.id in ("self", "cls") or owner.id in modules):
                continue
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def facade_problems(cls: type, longest: int = 3) -> list[str]:
    """Why ``cls`` is not a facade over its parts: a base class besides ``object`` (a mixin), or a public
    method of more than ``longest`` statements besides its docstring that is not about the manifest."""
    problems = [f"{cls.__name__} derives from {b.__name__}" for b in cls.__bases__ if b is not object]
    manifest = {"splits", "graph_ids", "stats", "normalizer", "fold", "__init__", "__repr__"}
    for name, member in vars(cls).items():
        if not inspect.isfunction(member) or name in manifest or (name.startswith("_") and name != "__init__"):
            continue
        body = ast.parse(inspect.getsource(member).strip()).body[0].body
        body = body[1:] if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else body
        if len(body) > longest:
            problems.append(f"{cls.__name__}.{name} holds {len(body)} statements: hand it to a part")
    return problems


def test_dataset_is_a_facade_composed_of_parts():
    assert facade_problems(reader.Dataset) == []


def test_the_facade_check_sees_a_mixin_and_a_method_doing_the_work():
    class Mixin:
        pass

    class Heavy(Mixin):
        def load(self, x):
            """Docstring."""
            a = x + 1
            b = a * 2
            c = b - 3
            return c

    assert facade_problems(Heavy) == ["Heavy derives from Mixin", "Heavy.load holds 4 statements: hand it to a part"]


@pytest.mark.parametrize("module", READING)
def test_no_part_reaches_into_another_parts_state(module):
    assert private_reaches((SHARDS / f"{module}.py").read_text()) == []


def test_the_reach_check_sees_one():
    source = "import numpy as np\nclass A:\n    def f(self):\n        return self.files._named, np._x, self._ok\n"
    assert private_reaches(source) == ["line 4: self.files._named"]


def test_one_derived_cache_serves_samples_reads_and_batches(synth_shards):
    """ConfigBatches stops passing columns down: its entries hold none, and its batches fill the dataset's
    cache, the same one ``sample_configs`` and ``read_configs`` use (ties included)."""
    ds = tpuprep.open_dataset(synth_shards)
    assert "columns" not in {f for f in CachedGraph.__dataclass_fields__}
    ids = ds.graph_ids(LAYOUT, "train")
    batches = ConfigBatches(ds, LAYOUT, k=3, cache_bytes=1, strategy="stratified")  # large: read per batch
    got = list(batches)
    assert sorted(ds.configs.derived.entries) == sorted({b.graph_id for b in got}) == ids
    for b in got:
        entry = ds.configs.derived.entries[b.graph_id]
        assert np.array_equal(entry.tie, b.structure.config_node_tie)
        assert np.array_equal(b.sample.group_size, entry.columns["group_size"][b.sample.rows])
        assert np.array_equal(b.sample.config_runtime, ds.load_graph(b.graph_id).config_runtime[b.sample.rows])
    held = dict(ds.configs.derived.entries)
    ds.sample_configs(ids[0], 2)
    ds.read_configs(ids[-1], [0])
    assert all(ds.configs.derived.entries[g] is held[g] for g in ids)  # hits: nothing derived twice


def modules_touched(call) -> list[str]:
    """The tpuprep modules (paths below the package) whose code runs during ``call()``."""
    package = os.path.dirname(tpuprep.__file__)
    seen: set[str] = set()

    def profile(frame, event, arg):
        name = frame.f_code.co_filename
        if name.startswith(package):
            seen.add(os.path.relpath(name, package))

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return sorted(seen)


READ = ["shards/reader.py", "shards/arguments.py", "shards/sampled.py", "shards/derived.py", "shards/shard_index.py",
        "shards/shard_files.py", "shards/pages.py", "io/local_store.py", "kernels/planes.py", "kernels/base7.py"]
"""The modules a warm sampled read of a layout graph runs code in (``docs/architecture.md``, "Reading shards"):
the facade and the argument checks, the configs part and its derived cache, the index, the files and the page
decoder, the store, the two decoding kernels. Before the reading room: 13 (the four mixins of ``Dataset``
bounced a read between their modules; ``read_configs`` read every stored column through pyarrow)."""


def test_a_sampled_read_and_a_batch_touch_a_handful_of_modules(synth_shards):
    """A warm ``read_configs`` of a large layout graph (its row groups' codes pages read directly) runs code
    in the 10 modules of ``READ``; a ``ConfigBatches`` batch adds the sampler's three (14 before)."""
    ds = tpuprep.open_dataset(synth_shards)
    gid = max(ds.graph_ids(LAYOUT, "train"), key=ds.num_unique_configs)
    batches = ConfigBatches(ds, LAYOUT, k=8, cache_bytes=1, graph_ids=[gid])
    batches.batch(gid, 0, epoch=0)  # warm: footers, index, structure, derived columns
    touched = modules_touched(lambda: ds.read_configs(gid, [0, 5, 2]))
    assert touched == sorted(READ), touched
    touched = modules_touched(lambda: batches.batch(gid, 1, epoch=0))
    assert touched == sorted([*READ, "sampling/batches.py", "sampling/cache.py", "sampling/strategies.py"]), touched
