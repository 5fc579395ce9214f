"""benchmarks/RESULTS.md is read by maintainers for the current figures first: it opens with one table
(metric, current value, goal, command, machine), stays short (the full notebook is in git), and every
command in the table runs an existing benchmark. What the README quotes comes from that table, and every
``RESULTS.md §N`` citation in the repository names a section of its dated history."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "RESULTS.md"
MAX_LINES = 700
COLUMNS = ["metric", "current", "goal", "command", "machine"]
CITING = ["tpuprep", "tests", "benchmarks", "docs", "pipelines", "README.md", "CONTRIBUTING.md"]


def cells(line: str) -> list[str]:
    """The cells of one Markdown table row (outer pipes dropped, whitespace stripped)."""
    return [c.strip() for c in line.strip().strip("|").split("|")]


def current_table(text: str) -> list[dict[str, str]]:
    """The rows of the first table under ``## Current figures``, as {column: cell}."""
    section = text.split("\n## Current figures\n", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("|")]
    header = cells(lines[0])
    assert header == COLUMNS, header
    assert set(lines[1].replace("|", "").strip()) <= set("-: ")
    return [dict(zip(header, cells(ln), strict=True)) for ln in lines[2:]]


def command_target(command: str) -> tuple[Path, list[str]]:
    """The file a table command runs (a benchmarks module or a repository script) and its options.

    ``python -m benchmarks ...`` is benchmarks/__main__.py, ``python -m benchmarks.x ...`` benchmarks/x.py,
    ``python path/to/script.py ...`` that file. Options after ``--`` belong to an inner command.
    """
    words = shlex.split(command)
    assert words[0] == "python", f"{command!r}: a table command starts with python"
    if words[1] == "-m":
        module, rest = words[2], words[3:]
        assert module == "benchmarks" or module.startswith("benchmarks."), f"{command!r}: not a benchmark"
        target = REPO / "benchmarks" / ("__main__.py" if module == "benchmarks" else module.split(".", 1)[1] + ".py")
    else:
        target, rest = REPO / words[1], words[2:]
    rest = rest[: rest.index("--")] if "--" in rest else rest
    return target, [w.split("=", 1)[0] for w in rest if w.startswith("--")]


def with_siblings(target: Path) -> str:
    """The source of ``target`` and of the modules beside it that it imports (``from train_torch_gnn import
    parse_args``: a script may take its options from a sibling), where options are looked for."""
    source = target.read_text()
    siblings = re.findall(r"^from (\w+) import", source, re.M)
    return "\n".join([source, *((target.parent / f"{m}.py").read_text() for m in siblings
                                 if (target.parent / f"{m}.py").is_file())])


def test_results_opens_with_the_current_figures_table():
    lines = RESULTS.read_text().splitlines()
    assert lines[0] == "# Benchmark results"
    headings = [i for i, ln in enumerate(lines) if ln.startswith("## ")]
    assert lines[headings[0]] == "## Current figures", "the first section must be the table of current figures"
    first_table = next(i for i, ln in enumerate(lines) if ln.startswith("|"))
    assert headings[0] < first_table < (headings[1] if len(headings) > 1 else len(lines))
    assert first_table < 30, "the table must open the page, not follow a long preamble"
    assert cells(lines[first_table]) == COLUMNS


def test_results_is_at_most_700_lines():
    n = len(RESULTS.read_text().splitlines())
    assert n <= MAX_LINES, f"benchmarks/RESULTS.md has {n} lines (at most {MAX_LINES}: git keeps the history)"


def test_every_table_row_is_complete_and_on_the_stated_machine():
    rows = current_table(RESULTS.read_text())
    assert len(rows) >= 10
    for row in rows:
        assert all(row[c] for c in COLUMNS), row
        assert "2 cores" in row["machine"] and "24 GB" in row["machine"], row
    metrics = [r["metric"] for r in rows]
    assert len(set(metrics)) == len(metrics), "one row per metric"


def test_every_command_in_the_table_names_an_existing_benchmark():
    """A row with a value runs today: its module exists and is runnable, and knows every option the row
    gives it. A "pending" row names the benchmark being written for it; it must exist once the row has a
    value."""
    rows = current_table(RESULTS.read_text())
    checked = 0
    for row in rows:
        commands = re.findall(r"`([^`]+)`", row["command"])
        assert commands, f"{row['metric']}: no command"
        for command in commands:
            target, options = command_target(command)
            if row["current"] == "pending":
                continue
            assert target.is_file(), f"{row['metric']}: {command!r} runs {target.relative_to(REPO)}, which does not exist"
            source = with_siblings(target)
            assert target.name == "__main__.py" or '__name__ == "__main__"' in source, f"{command!r} is not runnable"
            for option in options:
                assert f'"{option}"' in source, f"{command!r}: {target.name} has no option {option}"
            checked += 1
    assert checked >= 10


QUOTING = ["benchmarks/RESULTS.md", "README.md", "CONTRIBUTING.md", "docs", "tpuprep/train/README.md",
           "pipelines/README.md"]
QUOTED = re.compile(r"python -m benchmarks(?:\.\w+)?(?:[ \t]+(?:\\\n[ \t]*)?[^\s`#|]+)*")


def quoted_commands(text: str) -> list[str]:
    """Every ``python -m benchmarks[.x] ...`` command a page quotes (in a code span or block, continued lines
    joined), up to the end of its line, a backtick, a comment or a table cell's end."""
    return [" ".join(m.group(0).replace("\\\n", " ").split()) for m in QUOTED.finditer(text)]


def check_command(command: str) -> str | None:
    """None when the command runs an existing, runnable benchmark that knows each of its options."""
    target, options = command_target(command)
    if not target.is_file():
        return f"{command!r} runs {target.relative_to(REPO)}, which does not exist"
    source = with_siblings(target)
    if target.name != "__main__.py" and '__name__ == "__main__"' not in source:
        return f"{command!r} is not runnable"
    unknown = [o for o in options if f'"{o}"' not in source]
    return f"{command!r}: {target.name} has no option {', '.join(unknown)}" if unknown else None


def test_every_benchmark_command_the_docs_quote_exists():
    """Not only the table: every command RESULTS.md's history, the README and docs/ quote still runs (a
    retired benchmark is named as retired, with where git keeps it, never as a command to type)."""
    pages = []
    for name in QUOTING:
        p = REPO / name
        pages += [p] if p.is_file() else sorted(p.rglob("*.md"))
    bad, checked = [], 0
    for page in pages:
        for command in quoted_commands(page.read_text(encoding="utf-8")):
            checked += 1
            if (problem := check_command(command)) is not None:
                bad.append(f"{page.relative_to(REPO)}: {problem}")
    assert checked >= 30
    assert not bad, "\n".join(bad)


def test_quoted_commands_are_found_and_checked():
    text = ("run `python -m benchmarks.reading S --stacks ''` then\n```bash\n"
            "python -m benchmarks.scale --work W \\\n    --fraction 0.25   # run A\n"
            "python -m benchmarks.breakdown --corpus C\n```\n| x | `python -m benchmarks --corpus C --work W` |")
    found = quoted_commands(text)
    assert found == ["python -m benchmarks.reading S --stacks ''", "python -m benchmarks.scale --work W --fraction 0.25",
                     "python -m benchmarks.breakdown --corpus C", "python -m benchmarks --corpus C --work W"]
    problems = [check_command(c) for c in found]
    assert problems[0] is None and problems[1] is None and problems[3] is None
    assert "breakdown.py, which does not exist" in problems[2]
    assert "has no option --nope" in check_command("python -m benchmarks.reading S --nope 3")
    # an example that takes its flags from the module beside it (train_pyg.py from train_torch_gnn.py)
    assert check_command("python docs/examples/train_pyg.py --shards S --time-budget 1") is None
    assert "has no option --nope" in check_command("python docs/examples/train_pyg.py --nope 1")


def test_command_parser_catches_what_it_must():
    assert command_target("python -m benchmarks --corpus C --work W") == (
        REPO / "benchmarks" / "__main__.py", ["--corpus", "--work"])
    assert command_target("python -m benchmarks.measure -- tpuprep --help") == (
        REPO / "benchmarks" / "measure.py", [])
    assert command_target("python docs/examples/x.py --shards S") == (REPO / "docs/examples/x.py", ["--shards"])
    for bad in ("tpuprep build --src C", "python -m tpuprep.cli build", "python -m benchmark_s"):
        try:
            command_target(bad)
        except AssertionError:
            continue
        raise AssertionError(f"{bad!r} passed as a benchmark command")


def test_pending_rows_are_marked_exactly():
    for row in current_table(RESULTS.read_text()):
        if "pending" in row["current"].lower():
            assert row["current"] == "pending", row


# --------------------------------------------------------------------------- what quotes the page


def performance_section(readme: str) -> str:
    return readme.split("\n## Performance\n", 1)[1].split("\n## ", 1)[0]


def test_readme_quotes_the_table_not_section_numbers():
    readme = (REPO / "README.md").read_text()
    assert not re.search(r"RESULTS\.md`?,?\s*§", readme), "quote the table of benchmarks/RESULTS.md, not a section"
    perf = re.sub(r"docs/spec\.md`?\s*§\s*[\d.]+", "", performance_section(readme))  # the contract's sections
    assert "benchmarks/RESULTS.md" in perf and not re.search(r"§\s*\d", perf)


def test_figures_the_readme_performance_section_quotes_are_in_results():
    """Every figure with a decimal point or a range that the README's performance section states is
    written in RESULTS.md (so the README quotes it rather than inventing it)."""
    perf = performance_section((REPO / "README.md").read_text())
    results = RESULTS.read_text()
    figures = set(re.findall(r"\d[\d,]*\.\d+(?:–\d[\d,]*(?:\.\d+)?)?|\d+–\d+(?:\.\d+)?", perf))
    assert len(figures) >= 10
    missing = sorted(f for f in figures if f not in results)
    assert not missing, f"figures in README's performance section that RESULTS.md does not state: {missing}"


def history_sections(text: str) -> set[str]:
    return set(re.findall(r"^### (\d+)\. ", text, re.M))


def test_every_results_section_citation_resolves():
    sections = history_sections(RESULTS.read_text())
    assert {str(n) for n in range(1, 23)} <= sections
    pattern = re.compile(r"RESULTS(?:\.md)?`?,?\s+((?:§\s*\d+(?:\s*(?:,|and|–)\s*)?)+)")
    bad, found = [], 0
    files = []
    for name in CITING:
        p = REPO / name
        files += [p] if p.is_file() else [f for f in sorted(p.rglob("*")) if f.suffix in (".py", ".md", ".toml")]
    for f in files:
        text = f.read_text(encoding="utf-8")
        targets = re.findall(r"§\s*(\d+)", text) if f == RESULTS else [
            n for m in pattern.finditer(text) for n in re.findall(r"§\s*(\d+)", m.group(1))]
        for n in targets:
            found += 1
            if n not in sections:
                bad.append(f"{f.relative_to(REPO)}: RESULTS.md §{n} does not exist")
    assert found >= 20
    assert not bad, "\n".join(bad)
