"""The reading room (issue #37 item 2, ``docs/architecture.md`` "Reading shards"): ``Dataset`` is a facade
composed of parts with one job each — no mixins, no part reaching into another's private state.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from tpuprep.shards import reader

REPO = Path(__file__).resolve().parent.parent
SHARDS = REPO / "tpuprep" / "shards"
READING = ("reader", "shard_files", "shard_index", "loads", "sampled", "scans", "derived")
"""The modules of the reading room: the facade and its parts."""


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
