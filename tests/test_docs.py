"""The documentation that users read is generated or executed, never just written: docs/schema.md is
rebuilt from schemas/, every example file under docs/examples/ is linked from the docs and run by a test
(docs/readers.md explains them and holds no long code), the type table matches what polars, DuckDB and
HuggingFace report, and the dataset card loads with ``datasets.load_dataset`` offline, with the split names
and features it declares."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from test_readers import EXAMPLES, REPO, SAMPLERS, STACKS, hf_env, require

from tpuprep.io.storage import resolve
from tpuprep.shards import schema_doc
from tpuprep.shards.card import HF_SPLITS, config_name, hf_features, render_card
from tpuprep.shards.manifest import read_manifest
from tpuprep.shards.schema import TABLES, manifest_schema, table_schema

DOCS = REPO / "docs"
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)


# --------------------------------------------------------------------------- docs/schema.md


def test_schema_md_is_up_to_date():
    current = schema_doc.render_schema_reference()
    assert (DOCS / "schema.md").read_text() == current, (
        "docs/schema.md is out of date: run `python -m tpuprep.shards.schema_doc > docs/schema.md`")


def test_schema_doc_command(tmp_path, capsys):
    """`python -m tpuprep.shards.schema_doc` prints the reference; `--check FILE` fails on a stale or missing file."""
    printed = subprocess.run([sys.executable, "-m", "tpuprep.shards.schema_doc"], cwd=tmp_path, capture_output=True, text=True)
    assert printed.returncode == 0 and printed.stdout == schema_doc.render_schema_reference()
    assert schema_doc.main(["--check", str(DOCS / "schema.md")]) == 0
    stale = tmp_path / "schema.md"
    stale.write_text((DOCS / "schema.md").read_text().replace("| `graph_id` |", "| `graph` |", 1))
    assert schema_doc.main(["--check", str(stale)]) == 1
    assert schema_doc.main(["--check", str(tmp_path / "absent.md")]) == 1
    assert "out of date" in capsys.readouterr().err


def test_schema_reference_covers_every_column_and_manifest_field():
    text = schema_doc.render_schema_reference()
    for name in TABLES:
        ts = table_schema(name)
        assert f"### `{name}`" in text and ts.description in text
        for col in ts.columns:
            row = f"| `{col['name']}` | `{col['type']}` | {'yes' if col['nullable'] else 'no'} |"
            assert row in text, f"{name}.{col['name']} is missing or wrong in the reference"

    def fields(node, path):
        for key, child in node.get("properties", {}).items():
            yield f"{path}.{key}" if path else key
            yield from fields(child, f"{path}.{key}" if path else key)

    for path in fields(manifest_schema(), ""):
        assert f"| `{path}` |" in text, f"manifest field {path} is missing from the reference"


# --------------------------------------------------------------------------- docs/readers.md


def test_readers_md_explains_and_links_the_examples():
    """docs/readers.md explains; the code is in docs/examples/ (issue #37 item 3): the page is at most 600
    lines, shows no code block longer than a few lines, and every example file is linked from a docs page."""
    text = (DOCS / "readers.md").read_text()
    assert len(text.splitlines()) <= 600, "docs/readers.md: at most 600 lines (code goes to docs/examples/)"
    for info, body in FENCE.findall(text):
        assert len(body.splitlines()) <= 8, f"a {len(body.splitlines())}-line block ```{info} in readers.md: make it an example file"
    linked = {Path(m).name for page in DOCS.glob("*.md")
              for m in re.findall(r"\]\((examples/\w+\.py)\)", page.read_text())}
    examples = {p.name for p in EXAMPLES.glob("*.py")}
    assert examples - linked == set(), f"examples no docs page links: {sorted(examples - linked)}"


def examples_run_by_tests() -> set[str]:
    """The example files some test runs: those a test file names, plus the read_/sample_ loaders that
    tests/test_readers.py runs per stack (it builds their names from STACKS and SAMPLERS)."""
    examples = {p.name for p in EXAMPLES.glob("*.py")}
    run = {f"read_{s}.py" for s in STACKS} | {f"sample_{s}.py" for s in SAMPLERS}
    for test in (REPO / "tests").glob("test_*.py"):
        if test.name != "test_docs.py":
            run |= examples & set(re.findall(r"\w+\.py", test.read_text()))
    return run & examples


def test_every_example_is_run_by_a_test():
    examples = {p.name for p in EXAMPLES.glob("*.py")}
    assert len(examples) >= 15
    assert examples - examples_run_by_tests() == set(), "an example no test runs: add its test"


def test_docs_links_resolve():
    for page in [*DOCS.glob("*.md"), REPO / "README.md", REPO / "CONTRIBUTING.md"]:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"


def test_export_md_lists_the_exported_keys():
    from tpuprep.export import LAYOUT_KEY_ORDER, TILE_KEY_ORDER

    rows = re.findall(r"^\| (layout|tile) \| `(\w+)` \|", (DOCS / "export.md").read_text(), re.M)
    assert [k for kind, k in rows if kind == "layout"] == list(LAYOUT_KEY_ORDER)
    assert [k for kind, k in rows if kind == "tile"] == list(TILE_KEY_ORDER)


# --------------------------------------------------------------------------- types per stack


def _first_shards(root: Path) -> dict[str, Path]:
    """table name -> one shard file of that table."""
    out = {}
    for s in read_manifest(root)["shards"]:
        out.setdefault(s["table"], root / s["path"])
    assert sorted(out) == sorted(TABLES), sorted(out)
    return out


def test_type_table_matches_polars_and_duckdb(synth_shards):
    import duckdb
    import polars as pl

    for table, path in _first_shards(synth_shards).items():
        file_schema = pq.read_schema(path)
        polars_schema = pl.scan_parquet(path).collect_schema()
        con = duckdb.connect()
        duck = {r[0]: r[1] for r in con.execute("DESCRIBE SELECT * FROM read_parquet(?)", [str(path)]).fetchall()}
        for col in table_schema(table).columns:
            name, typ = col["name"], col["type"]
            assert file_schema.field(name).type == table_schema(table).arrow.field(name).type
            assert str(polars_schema[name]) == schema_doc.polars_type(typ), (table, name, polars_schema[name])
            assert duck[name] == schema_doc.duckdb_type(typ), (table, name, duck[name])


def test_type_table_and_card_features_match_hf_datasets(synth_shards):
    require("datasets")
    from datasets import Features

    for table, path in _first_shards(synth_shards).items():
        features = Features.from_arrow_schema(pq.read_schema(path))
        assert Features._from_yaml_list(hf_features(table)) == features, table
        for col in table_schema(table).columns:
            assert repr(features[col["name"]]) == schema_doc.hf_type(col["type"]), (table, col["name"])


# --------------------------------------------------------------------------- the dataset card


def _front_matter(card: str) -> dict:
    m = re.match(r"---\n(.*?)\n---\n", card, re.S)
    assert m, "the card has no YAML front matter"
    return yaml.safe_load(m.group(1))


def test_card_is_written_by_build_and_reproducible(synth_shards):
    manifest = read_manifest(synth_shards)
    card = (synth_shards / "README.md").read_text()
    assert card == render_card(manifest, resolve(str(synth_shards))) == render_card(manifest, synth_shards)
    assert render_card(manifest) == render_card(json.loads(json.dumps(manifest)))


def test_card_configs_cover_every_shard_once(synth_shards):
    manifest = read_manifest(synth_shards)
    meta = _front_matter((synth_shards / "README.md").read_text())
    assert meta["license"] and meta["pretty_name"] and meta["task_categories"] == ["graph-ml"]
    expected = {config_name(c, t) for c in manifest["collections"] for t in ("graphs", "configs")}
    assert {c["config_name"] for c in meta["configs"]} == expected
    info = {i["config_name"]: i for i in meta["dataset_info"]}
    assert set(info) == expected
    covered = []
    reverse = {v: k for k, v in HF_SPLITS.items()}
    for conf in meta["configs"]:
        splits = [f["split"] for f in conf["data_files"]]
        assert set(splits) <= {"train", "validation", "test"} and len(set(splits)) == len(splits)
        assert re.fullmatch(r"\w+", conf["config_name"])
        rows = {s["name"]: s["num_examples"] for s in info[conf["config_name"]]["splits"]}
        for f in conf["data_files"]:
            files = sorted(p.relative_to(synth_shards).as_posix() for p in synth_shards.glob(f["path"]))
            assert files, f"{conf['config_name']}/{f['split']}: {f['path']} matches nothing"
            listed = [s for s in manifest["shards"] if s["path"] in files]
            assert len(listed) == len(files), "a data_files glob matches a file that is not a shard"
            assert {s["split"] for s in listed} == {reverse[f["split"]]}
            assert rows[f["split"]] == sum(s["rows"] for s in listed)
            covered += files
    assert sorted(covered) == sorted(s["path"] for s in manifest["shards"]), "every shard in exactly one config"


HF_CARD_SCRIPT = r"""
import json, sys
from datasets import load_dataset
root, configs = sys.argv[1], json.loads(sys.argv[2])
out = {}
for name, files in configs.items():
    by_card = load_dataset(root, name)
    by_files = load_dataset("parquet", data_files=files)
    out[name] = {
        "splits": sorted(by_card), "rows": {s: by_card[s].num_rows for s in by_card},
        "same_as_data_files": all(by_card[s].num_rows == by_files[s].num_rows
                                  and by_card[s].features == by_files[s].features for s in by_card),
        "features": repr(by_card[next(iter(by_card))].features),
    }
default = load_dataset(root)
out["no_config"] = {s: default[s].num_rows for s in default}
print("RESULT" + json.dumps(out))
"""


def test_card_loads_with_hf_datasets_offline(synth_shards, tmp_path):
    """``load_dataset(<shard folder>, <config>)`` uses the card's data_files and split names, offline, and
    gives the same rows and features as ``load_dataset("parquet", data_files=...)``."""
    require("datasets")
    meta = _front_matter((synth_shards / "README.md").read_text())
    configs = {c["config_name"]: {f["split"]: str(synth_shards / f["path"]) for f in c["data_files"]}
               for c in meta["configs"]}
    proc = subprocess.run([sys.executable, "-c", HF_CARD_SCRIPT, str(synth_shards), json.dumps(configs)],
                          cwd=tmp_path, env=hf_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.split("RESULT", 1)[1])
    info = {i["config_name"]: {s["name"]: s["num_examples"] for s in i["splits"]} for i in meta["dataset_info"]}
    for name in configs:
        assert result[name]["splits"] == sorted(configs[name]), name
        assert result[name]["rows"] == info[name], name
        assert result[name]["same_as_data_files"], name
    assert "validation" in {s for c in configs.values() for s in c}, "the synthetic tree has valid files"
    # no config name: the card's default config (the first one) is loaded
    assert result["no_config"] == result[next(iter(configs))]["rows"]


def test_card_dataset_info_is_enforced_by_hf_datasets(synth_shards, tmp_path):
    """datasets checks the card's num_examples: a card that lies about a split fails to load (so the
    dataset_info block is really read, not ignored)."""
    require("datasets")
    copy = tmp_path / "shards"
    shutil.copytree(synth_shards, copy)
    card = (copy / "README.md").read_text()
    meta = _front_matter(card)
    name = meta["dataset_info"][0]["config_name"]
    rows = meta["dataset_info"][0]["splits"][0]["num_examples"]
    head, rest = card.split(f"config_name: {name}\n  features:", 1)
    rest = rest.replace(f"num_examples: {rows}\n", f"num_examples: {rows + 1}\n", 1)
    (copy / "README.md").write_text(head + f"config_name: {name}\n  features:" + rest)
    script = ("import sys\nfrom datasets import load_dataset\n"
              "load_dataset(sys.argv[1], sys.argv[2])\n")
    proc = subprocess.run([sys.executable, "-c", script, str(copy), name], cwd=tmp_path, env=hf_env(tmp_path),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "NonMatchingSplitsSizesError" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("split", ["train", "valid", "test"])
def test_card_split_names(split):
    assert re.fullmatch(r"\w+", HF_SPLITS[split])
    assert HF_SPLITS[split] == {"valid": "validation"}.get(split, split)


def test_readme_opens_with_the_two_setup_commands_that_ci_runs():
    """The README's first code block is exactly two commands for a fresh machine — the main job on the
    embedded default, then the tests — and .ci/run takes them from there rather than from a copy."""
    readme = (REPO / "README.md").read_text()
    first_block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    demo, tests = first_block.strip().splitlines()
    assert demo.startswith("python3 -m venv .venv") and demo.endswith("tpuprep demo")
    assert tests.startswith("python3 -m venv .venv") and tests.endswith("python -m pytest")
    ci = (REPO / ".ci" / "run").read_text()
    assert "README.md" in ci and "pytest" not in ci.replace("pytest collected no tests", "")
    got = subprocess.run(["bash", "-c", "awk '/^```bash/ {inside = 1; next} /^```/ {if (inside) exit} inside' README.md"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout.splitlines()
    assert got == [demo, tests]
