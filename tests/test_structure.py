"""The rules the package's layout keeps (docs/architecture.md, "Rules the layout keeps"), checked on the
source with ``ast`` — nothing is imported, so a cycle is found even where Python's lazy, function-level
imports would hide it at run time:

- no import cycles between modules, counting imports inside functions as well as module-level ones; a
  package importing its own submodules (its public face, e.g. ``tpuprep/__init__.py`` re-exporting the
  reader) is not an edge of a cycle, but a cycle among other modules through it is;
- no module imports a private name (``_name``) or a private module (``_name.py``) of another package area
  (the first component under ``tpuprep``: ``shards``, ``train``, ``build``, ...);
- no module is longer than ``MAX_LINES`` lines (aim for ~650; split a module before it reaches the limit).

The checker is tested on a tiny synthetic package with a planted cycle, private import and oversize
module, so a checker that finds nothing cannot pass for a clean repository.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "tpuprep"
MAX_LINES = 1000
"""Hard limit on a module's lines (the whole file, as ``wc -l`` counts). New modules aim for ~650."""


@dataclass
class Report:
    """What :func:`check` found: each list holds one human-readable line per violation."""

    cycles: list[str] = field(default_factory=list)
    private: list[str] = field(default_factory=list)
    oversize: list[str] = field(default_factory=list)
    largest: tuple[int, str] = (0, "")

    @property
    def problems(self) -> list[str]:
        return self.cycles + self.private + self.oversize


def modules(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name → file, for every ``.py`` under ``root / package`` (``pkg/__init__.py`` is ``pkg``)."""
    out: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _targets(name: str, path: Path, node: ast.Import | ast.ImportFrom, mods: dict[str, Path]):
    """(imported module, imported name or None) per alias of one import statement, absolute names."""
    if isinstance(node, ast.Import):
        return [(alias.name, None) for alias in node.names]
    if node.level:
        base = name.split(".")
        if path.name != "__init__.py":
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    out = []
    for alias in node.names:
        full = f"{target}.{alias.name}"
        out.append((full, None) if full in mods else (target, alias.name))
    return out


def _area(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _sccs(nodes: list[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (iterative Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def check(root: Path, package: str = PACKAGE, max_lines: int = MAX_LINES) -> Report:
    """Check the package ``root / package`` against the three rules; see the module docstring."""
    mods = modules(root, package)
    edges: dict[str, set[str]] = {}
    report = Report()
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target, imported in _targets(name, path, node, mods):
                while target and target not in mods and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target not in mods or target == name:
                    continue
                # a package importing its own submodules is its public face, not an edge of a cycle
                if not (name in mods and mods[name].name == "__init__.py" and target.startswith(name + ".")):
                    edges.setdefault(name, set()).add(target)
                if _area(name) == _area(target):
                    continue
                where = f"{path.relative_to(root)}:{node.lineno}"
                if imported and _is_private(imported):
                    report.private.append(f"{where}: {name} imports the private name {target}.{imported}")
                if _is_private(target.rsplit(".", 1)[-1]):
                    report.private.append(f"{where}: {name} imports the private module {target}")
        lines = len(path.read_bytes().splitlines())
        report.largest = max(report.largest, (lines, name))
        if lines > max_lines:
            report.oversize.append(f"{path.relative_to(root)}: {lines} lines (at most {max_lines}): split it")
    report.cycles = [" -> ".join(comp) for comp in _sccs(sorted(mods), edges)]
    return report


# --------------------------------------------------------------------------- the repository


def test_repository_keeps_the_layout_rules():
    report = check(REPO)
    assert len(modules(REPO, PACKAGE)) > 50, "the package was not found: is REPO right?"
    assert not report.problems, "\n".join(report.problems)


def test_architecture_doc_points_at_this_test():
    text = (REPO / "docs" / "architecture.md").read_text()
    assert "tests/test_structure.py" in text and "../shared" not in text


# --------------------------------------------------------------------------- the checker itself


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


CLEAN = {
    "pkg/__init__.py": "from .a.core import run\n\ndef lazy():\n    from .b import helper\n    return helper\n",
    "pkg/a/__init__.py": "from . import core\n",
    "pkg/a/core.py": "from ..b.helper import public\nfrom . import _impl\n\ndef run():\n    return public()\n",
    "pkg/a/_impl.py": "def _secret():\n    return 1\n",
    "pkg/a/user.py": "from ._impl import _secret\nfrom pkg.a.core import run\n",
    "pkg/b/__init__.py": "",
    "pkg/b/helper.py": "import os\nimport pkg\n\ndef public():\n    return os.sep\n",
}


def test_checker_passes_a_clean_package(tmp_path):
    """Same-area private imports, a package face re-exporting its submodules and stdlib imports are fine."""
    report = check(write(tmp_path, CLEAN), "pkg", max_lines=20)
    assert report.problems == []
    assert report.largest[0] == 5


def test_checker_finds_a_cycle_through_a_function_level_import(tmp_path):
    files = {**CLEAN, "pkg/b/helper.py": "def public():\n    from pkg.a import user\n    return user\n"}
    report = check(write(tmp_path, files), "pkg", max_lines=20)
    assert report.cycles == ["pkg.a.core -> pkg.a.user -> pkg.b.helper"]
    assert report.private == [] and report.oversize == []


def test_checker_finds_a_cycle_of_relative_imports_two_levels_up(tmp_path):
    files = {**CLEAN, "pkg/a/_impl.py": "from ..b import helper\n",
             "pkg/b/helper.py": "from ..a.core import run\n"}
    report = check(write(tmp_path, files), "pkg", max_lines=20)
    assert report.cycles == ["pkg.a._impl -> pkg.a.core -> pkg.b.helper"]


def test_checker_finds_private_names_and_modules_across_areas(tmp_path):
    files = {**CLEAN, "pkg/b/reader.py": "from pkg.a._impl import _secret\nfrom ..a import _impl\n"
                                          "import pkg.a._impl\n"}
    report = check(write(tmp_path, files), "pkg", max_lines=20)
    assert report.cycles == [] and report.oversize == []
    assert report.private == [
        "pkg/b/reader.py:1: pkg.b.reader imports the private name pkg.a._impl._secret",
        "pkg/b/reader.py:1: pkg.b.reader imports the private module pkg.a._impl",
        "pkg/b/reader.py:2: pkg.b.reader imports the private module pkg.a._impl",
        "pkg/b/reader.py:3: pkg.b.reader imports the private module pkg.a._impl",
    ]


def test_checker_finds_an_oversize_module(tmp_path):
    files = {**CLEAN, "pkg/b/big.py": "x = 1\n" * 21}
    report = check(write(tmp_path, files), "pkg", max_lines=20)
    assert report.oversize == ["pkg/b/big.py: 21 lines (at most 20): split it"]
    assert report.largest == (21, "pkg.b.big")
    assert check(tmp_path, "pkg", max_lines=21).oversize == []


def test_checker_agrees_with_python_about_a_real_cycle(tmp_path):
    """A planted module-level cycle is one Python itself refuses to import (the checker is not inventing)."""
    files = {**CLEAN, "pkg/b/helper.py": "from pkg.a.user import run\n\ndef public():\n    return run\n"}
    write(tmp_path, files)
    assert check(tmp_path, "pkg", max_lines=20).cycles
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(ImportError):
            __import__("pkg.a.core")
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == "pkg" or m.startswith("pkg.")]:
            del sys.modules[name]


# --------------------------------------------------------------------------- the contract is in the repository

SPEC = REPO / "docs" / "spec.md"
CITED = ["tpuprep", "tests", "benchmarks", "docs", "pipelines", "README.md", "CONTRIBUTING.md"]
OLD_CITATIONS = ("SPEC §", "shared/SPEC", "shared/tools", "shared/seeds")
OLD_CITATION_KEPT = {
    # the test that the README never links outside the repository names what it guards against
    ("tests/test_packaging.py", '"""No path that leaves the repository (``../shared/SPEC.md`` does not exist'),
}


def cited_files() -> list[Path]:
    out = []
    for name in CITED:
        p = REPO / name
        out += [p] if p.is_file() else [f for f in sorted(p.rglob("*")) if f.suffix in (".py", ".md", ".toml")]
    return [f for f in out if f != Path(__file__).resolve()]


def spec_sections(text: str) -> set[str]:
    """Section numbers of docs/spec.md: ``## 3. Shards`` gives "3", ``**2.1 Pruning**`` gives "2.1"."""
    top = re.findall(r"^## (\d+)\. ", text, re.M)
    sub = re.findall(r"^\*\*(\d+\.\d+) ", text, re.M)
    return set(top) | set(sub)


def citations(text: str) -> list[str]:
    """Section numbers cited as ``docs/spec.md §2.1`` (also ```docs/spec.md` §2.1`` and ``§3, §5`` lists)."""
    out = []
    for m in re.finditer(r"docs/spec\.md`?\s+((?:§\s*\d+(?:\.\d+)?(?:\s*[,–-]\s*)?)+)", text):
        out += re.findall(r"§\s*(\d+(?:\.\d+)?)", m.group(1))
    return out


def test_citation_parser():
    assert citations("x (docs/spec.md §3, §5) y docs/spec.md §2.1; `docs/spec.md` §2.4 and §9") == \
        ["3", "5", "2.1", "2.4"]
    assert spec_sections("## 2. T\n**2.1 Pruning** (x)\n**2.2 Re** y\n## 10. Z\n### 3. no\n") == \
        {"2", "2.1", "2.2", "10"}


def test_every_spec_citation_names_a_section_of_docs_spec_md():
    sections = spec_sections(SPEC.read_text())
    assert {"1", "2", "2.1", "2.2", "2.3", "2.4", "3", "4", "5", "6", "7"} <= sections
    bad, count = [], 0
    for f in cited_files():
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            for sec in citations(line):
                count += 1
                if sec not in sections:
                    bad.append(f"{f.relative_to(REPO)}:{n}: docs/spec.md §{sec} does not exist")
    assert count >= 20, "the citations were not found: is the pattern right?"
    assert not bad, "\n".join(bad)


def test_nothing_cites_the_contract_outside_the_repository():
    found = set()
    for f in cited_files():
        for line in f.read_text(encoding="utf-8").splitlines():
            if any(old in line for old in OLD_CITATIONS):
                found.add((str(f.relative_to(REPO)), line.strip()[:100]))
    stale = {hit for hit in found if not any(hit[0] == k[0] and hit[1].startswith(k[1][:60]) for k in OLD_CITATION_KEPT)}
    assert not stale, "cite docs/spec.md (or the test data ../shared/real) instead:\n" + "\n".join(map(str, sorted(stale)))
