"""``cli/common.py`` beside the code: the helpers every command's output goes through (numbers, times,
option lists, the one-line error of an ``OSError``), the guard's exit codes and its one exception (a
closed pipe), and the exit code of a dry run that refused inputs. Found by a mutation pass (issue #36):
each of these could be broken in one line without any test noticing."""

from __future__ import annotations

import errno

import click
import pytest
from click.testing import CliRunner
from npzfactory import tile_arrays, write

from tpuprep.build import BuildReport
from tpuprep.cli import main
from tpuprep.cli.common import (
    EXIT_FATAL,
    EXIT_OK,
    EXIT_QUARANTINED,
    EXIT_USAGE,
    FiniteFloatRange,
    clock,
    comma_list,
    describe_os_error,
    guard,
    human,
    report_build,
)
from tpuprep.errors import FatalError, UsageError


@pytest.mark.parametrize("text", ["inf", "nan", "1e400"])
def test_a_finite_float_option_refuses_infinity_and_nan_even_where_the_range_is_open(text):
    with pytest.raises(click.BadParameter, match="not a finite number"):
        FiniteFloatRange(0, min_open=True).convert(text, None, None)
    assert FiniteFloatRange(0, min_open=True).convert("1e300", None, None) == 1e300


@pytest.mark.parametrize(("n", "text"), [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KB"), (1536, "1.5 KB"),
                                         (1024**2, "1.0 MB"), (5 * 1024**4, "5.0 TB"), (3 * 1024**5, "3072.0 TB")])
def test_human_sizes_step_at_1024(n, text):
    assert human(n) == text


@pytest.mark.parametrize(("seconds", "text"), [(0, "0:00:00"), (59.4, "0:00:59"), (3725, "1:02:05"),
                                               (36000 + 61, "10:01:01")])
def test_clock_is_hours_minutes_seconds(seconds, text):
    assert clock(seconds) == text


@pytest.mark.parametrize(("value", "items"), [(None, None), ("", None), ("a", ["a"]), ("a, b,,c ,", ["a", "b", "c"]),
                                              (" , ", [])])
def test_comma_lists_drop_blanks(value, items):
    assert comma_list(value) == items


def test_an_os_error_is_one_line_with_its_file_and_errno_name_once():
    assert describe_os_error(OSError(errno.ENOSPC, "No space left on device", "/d/x")) == \
        "/d/x: No space left on device (ENOSPC)"
    assert describe_os_error(OSError(errno.ENOSPC, "No space left on device (ENOSPC)", "/d/x")) == \
        "/d/x: No space left on device (ENOSPC)"
    assert describe_os_error(OSError(errno.EXDEV, "Invalid cross-device link", "/a", None, "/b")) == \
        "/a -> /b: Invalid cross-device link (EXDEV)"


@pytest.mark.parametrize(("exc", "code"), [(UsageError("u"), EXIT_USAGE), (FatalError("f"), EXIT_FATAL),
                                           (OSError(errno.EIO, "I/O error"), EXIT_FATAL),
                                           (KeyboardInterrupt(), EXIT_FATAL)])
def test_the_guard_turns_what_stops_a_command_into_one_line_and_its_code(exc, code, capsys):
    def body():
        raise exc

    assert guard(body) == code
    assert capsys.readouterr().err.count("\n") == 1


def test_a_closed_pipe_is_left_to_click_not_reported_as_an_error(capsys):
    def body():
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    with pytest.raises(BrokenPipeError):
        guard(body)
    assert capsys.readouterr().err == ""


def test_a_bug_keeps_its_traceback():
    def body():
        raise ZeroDivisionError("a bug")

    with pytest.raises(ZeroDivisionError):
        guard(body)


@pytest.mark.parametrize(("records", "code"), [([], EXIT_OK), ([{"path": "x.npz", "status": "quarantined",
                                                                  "key": None, "error": "bad"}], EXIT_QUARANTINED)])
def test_a_dry_run_that_refuses_inputs_exits_3(records, code, capsys):
    report = BuildReport({"inputs": ["a.npz"]}, records, dry_run=True)
    assert report_build(report, dry_run=True, quiet=False, started=0.0, dst="out") == code
    assert "would convert 1 files; " + str(len(records)) + " refused" in capsys.readouterr().out


def test_a_dry_run_of_a_tree_with_a_refused_entry_exits_3(tmp_path):
    src = tmp_path / "npz"
    write(src, "tile/xla/train/t.npz", tile_arrays())
    (src / "tile/xla/train/link.npz").symlink_to(src / "tile/xla/train/t.npz")
    result = CliRunner().invoke(main, ["build", "--src", str(src), "--dst", str(tmp_path / "out"), "--dry-run"])
    assert result.exit_code == EXIT_QUARANTINED and "1 refused" in result.output
    assert not (tmp_path / "out").exists()
