"""The versioned commit-msg hook (.githooks/commit-msg, CONTRIBUTING.md): a subject over 72 characters
is refused, by the script on its own and by a real ``git commit`` in a throw-away repository that
enables it the documented way (``git config core.hooksPath``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HOOK = REPO / ".githooks" / "commit-msg"


def run_hook(tmp_path: Path, message: str) -> subprocess.CompletedProcess:
    msg = tmp_path / "COMMIT_EDITMSG"
    msg.write_text(message, encoding="utf-8")
    return subprocess.run([sys.executable, str(HOOK), str(msg)], capture_output=True, text=True)


def test_hook_is_an_executable_file():
    assert HOOK.is_file() and os.access(HOOK, os.X_OK), "git ignores a hook that is not executable"
    assert HOOK.read_text().startswith("#!")


@pytest.mark.parametrize("length", [1, 50, 72])
def test_subject_up_to_72_characters_is_accepted(tmp_path, length):
    result = run_hook(tmp_path, "x" * length + "\n\n" + "a long body line " * 40 + "\n")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


@pytest.mark.parametrize("length", [73, 203])
def test_subject_over_72_characters_is_refused_with_one_line(tmp_path, length):
    result = run_hook(tmp_path, "y" * length + "\n\nbody\n")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"is {length} characters, at most 72" in lines[0]


def test_comments_and_leading_blank_lines_are_not_the_subject(tmp_path):
    """git strips ``#`` lines after the hook ran: the subject is the first line it will keep."""
    long_comment = "# " + "c" * 100
    assert run_hook(tmp_path, f"{long_comment}\n\n   \nShort subject\n# {'d' * 90}\n").returncode == 0
    assert run_hook(tmp_path, f"{long_comment}\n\n{'s' * 80}\n").returncode == 1


def test_characters_are_counted_not_bytes(tmp_path):
    """72 characters with multi-byte ones (× is 2 bytes in UTF-8) pass; 73 do not."""
    assert run_hook(tmp_path, "×" * 72 + "\n").returncode == 0
    assert run_hook(tmp_path, "×" * 73 + "\n").returncode == 1


def test_real_git_commit_honours_the_hook(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    shutil.copytree(REPO / ".githooks", repo / ".githooks")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org", "GIT_CONFIG_NOSYSTEM": "1",
           "HOME": str(tmp_path)}

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env)

    assert git("init", "-q").returncode == 0
    assert git("config", "core.hooksPath", ".githooks").returncode == 0
    (repo / "f.txt").write_text("1\n")
    git("add", "f.txt")
    refused = git("commit", "-q", "-m", "z" * 73, "-m", "why")
    assert refused.returncode != 0 and "at most 72" in refused.stderr
    assert git("rev-parse", "--verify", "-q", "HEAD").returncode != 0, "nothing may be committed"
    accepted = git("commit", "-q", "-m", "Add f.txt", "-m", "the why, in the body " * 20)
    assert accepted.returncode == 0, accepted.stderr
    assert git("log", "--format=%s").stdout.strip() == "Add f.txt"
