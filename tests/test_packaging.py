"""What a user sees of the package before running it (issue #12): the licence, the links and a long
description (README.md) that stands alone outside the project's workspace."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from email.parser import Parser
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_license_file_is_the_apache_2_text_and_is_declared():
    text = (REPO / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text.splitlines()) > 150
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]


def test_project_urls_are_real_links():
    urls = tomllib.loads((REPO / "pyproject.toml").read_text())["project"].get("urls")
    assert urls, "pyproject.toml has no [project.urls]"
    for name, url in urls.items():
        assert re.fullmatch(r"https://[\w.-]+\.[a-z]+/\S+", url), f"{name}: {url!r} is not a link"


def test_readme_stands_alone():
    """No path that leaves the repository (``../shared/SPEC.md`` does not exist for a PyPI reader), and
    every repository file the README names exists."""
    text = (REPO / "README.md").read_text()
    assert "../" not in text and "SPEC.md" not in text
    path = r"((?:docs|schemas|pipelines|benchmarks|tpuprep|tests)/[\w./-]+\.(?:md|json|py))"
    named = set(re.findall(f"`{path}`", text)) | set(re.findall(rf"\]\({path}(?:#[\w-]*)?\)", text))
    assert "docs/readers.md" in named and "docs/schema.md" in named
    missing = sorted(p for p in named if not (REPO / p).exists())
    assert not missing, f"README.md names files that do not exist: {missing}"


def _source_tree(src: Path) -> Path:
    """What an sdist holds, copied to ``src``: pyproject.toml, README, LICENSE, schemas/, tpuprep/."""
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "schemas", src / "schemas")
    shutil.copytree(REPO / "tpuprep", src / "tpuprep", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    return src


def test_built_metadata_carries_licence_and_urls(tmp_path):
    """setuptools itself turns pyproject.toml into the METADATA a wheel ships (License-File, Project-URL)."""
    src = _source_tree(tmp_path / "src")
    (tmp_path / "meta").mkdir()
    code = ("from setuptools import build_meta as b; import sys; "
            "print(b.prepare_metadata_for_build_wheel(sys.argv[1]))")
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path / "meta")], cwd=src,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    dist_info = run.stdout.strip().splitlines()[-1]
    meta = Parser().parsestr((tmp_path / "meta" / dist_info / "METADATA").read_text())
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert (tmp_path / "meta" / dist_info / "licenses" / "LICENSE").read_text() == (REPO / "LICENSE").read_text()
    links = meta.get_all("Project-URL") or []
    assert links and all(re.fullmatch(r"[^,]+, https://\S+", u) for u in links), links


def test_the_wheel_ships_every_data_file_the_package_reads(tmp_path):
    """A regular (non-editable) install must carry the schemas and the synth profiles: tpuprep reads
    them with importlib.resources at run time."""
    src = _source_tree(tmp_path / "src")
    code = "from setuptools import build_meta as b; import sys; print(b.build_wheel(sys.argv[1]))"
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path / "dist")], cwd=src,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    wheel = tmp_path / "dist" / run.stdout.strip().splitlines()[-1]
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = {f"tpuprep/schemas/{p.name}" for p in (REPO / "schemas").glob("*.json")}
    wanted.add("tpuprep/synth/profiles.toml")
    assert wanted <= names, sorted(wanted - names)
