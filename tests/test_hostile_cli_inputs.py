"""Hostile values of options, variables and run-file keys (issue #27 items 11 and 12): a scheduler file that is
a FIFO or a device, a log file on a full device, absurd timeouts and ``$`` in storage options each give ONE
line and an exit code, never a hang, an unbounded read or a traceback."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from npzfactory import tile_arrays, write

from tpuprep.cli.common import guard, log, open_log
from tpuprep.errors import UsageError
from tpuprep.pipeline import PipelineError, interpolate, parse_pipeline

CLI = "import sys; from tpuprep.cli import main; sys.exit(main())"
MEMORY_CAP = 3 << 30
"""Address space of a CLI subprocess reading /dev/zero: an unbounded read (the bug) ends in MemoryError
instead of eating the machine."""


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def _tpuprep(*args: object, timeout: float = 120, env: dict[str, str] | None = None,
             cap_memory: bool = False) -> subprocess.CompletedProcess:
    """``tpuprep ARGS`` in a subprocess (``cap_memory``: of ``MEMORY_CAP`` bytes of address space); killed
    (failing the test) after ``timeout``."""
    environ = {k: v for k, v in os.environ.items() if k not in ("TPUPREP_DASK_TIMEOUT", "DASK_SCHEDULER_ADDRESS")}
    try:
        return subprocess.run([sys.executable, "-c", CLI, *map(str, args)], capture_output=True, text=True,
                              timeout=timeout, env=environ | (env or {}),
                              preexec_fn=_cap_memory if cap_memory else None)
    except subprocess.TimeoutExpired:
        pytest.fail(f"tpuprep {' '.join(map(str, args))} still running after {timeout} s (a hang)")


def _one_line(result: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    assert result.returncode == code, (result.returncode, result.stderr[-3000:])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-3000:]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cli-inputs") / "npz"
    write(root, "tile/xla/train/t.npz", tile_arrays())
    return root


# --------------------------------------------------------------------------- item 11: --scheduler-file


@pytest.mark.parametrize(("option", "code", "says"), [("--scheduler-file", 2, "is a FIFO, not a regular file"),
                                                     ("--log-file", 1, "ENXIO")])
def test_a_fifo_nobody_writes_or_reads_is_one_line_not_a_hang(src, tmp_path, option, code, says):
    """A scheduler file that is a FIFO is refused at once (usage); a log FIFO nobody reads fails to open
    without blocking (ENXIO): one line each, nothing built."""
    fifo = tmp_path / "named.fifo"
    os.mkfifo(fifo)
    result = _tpuprep("build", "--src", src, "--dst", tmp_path / "out", "-q", option, fifo, timeout=60)
    _one_line(result, code, str(fifo), says)
    assert not (tmp_path / "out").exists()


def test_scheduler_file_dev_zero_is_refused_without_reading_it(src, tmp_path):
    result = _tpuprep("build", "--src", src, "--dst", tmp_path / "out", "-q", "--scheduler-file", "/dev/zero",
                      timeout=60, cap_memory=True)
    _one_line(result, 2, "/dev/zero is a character device, not a regular file")


def test_run_file_scheduler_file_that_is_a_device_is_refused(src, tmp_path):
    run_file = tmp_path / "job.toml"
    run_file.write_text(f'src = "{src}"\ndst = "{tmp_path / "out"}"\n[cluster]\nscheduler_file = "/dev/zero"\n')
    result = _tpuprep("run", run_file, "-q", timeout=60, cap_memory=True)
    _one_line(result, 2, "/dev/zero is a character device")


def test_scheduler_file_is_read_with_a_size_bound(tmp_path):
    from tpuprep.runners.dask_cluster import (
        SCHEDULER_FILE_MAX_BYTES,
        SchedulerFileError,
        read_scheduler_file,
    )

    big = tmp_path / "scheduler.json"
    with open(big, "wb") as fh:
        fh.truncate(64 * SCHEDULER_FILE_MAX_BYTES)  # sparse: 64 MB that cost no disk
    with pytest.raises(SchedulerFileError, match=r"larger than 1,048,576 bytes"):
        read_scheduler_file(big)
    small = tmp_path / "ok.json"
    small.write_text('{"address": "tcp://127.0.0.1:1"}')
    assert read_scheduler_file(small) == b'{"address": "tcp://127.0.0.1:1"}'
    assert issubclass(SchedulerFileError, UsageError)


# --------------------------------------------------------------------------- item 12: --log-file /dev/full


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("command", ["build", "verify", "run"])
def test_log_file_on_a_full_device_is_one_line(src, tmp_path, command):
    if command == "run":
        run_file = tmp_path / "job.toml"
        run_file.write_text(f'src = "{src}"\ndst = "{tmp_path / "out"}"\n[cluster]\ntype = "serial"\n')
        args = ["run", run_file]
    else:
        args = [command, "--src", src, "--dst", tmp_path / "out" if command == "build" else tmp_path]
    result = _tpuprep(*args, "-q", "--log-file", "/dev/full")
    _one_line(result, 1, "/dev/full: No space left on device (ENOSPC)")
    assert "Traceback" not in result.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_a_log_that_breaks_in_a_thread_is_reported_once_and_fails_the_command(capsys):
    """The progress ticker logs from its own thread: the failure is kept, and said once at the end."""

    def command() -> int:
        open_log("/dev/full")
        ticker = threading.Thread(target=log, args=("converting: 1/2 files",))
        ticker.start()
        ticker.join()
        return 0

    assert guard(command) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: /dev/full: No space left on device (ENOSPC) (the --log-file is incomplete)"]


# --------------------------------------------------------------------------- item 12: timeouts


@pytest.mark.parametrize("value", ["1e300", "inf", "604801"])
def test_dask_timeout_variable_is_bounded(src, tmp_path, value):
    result = _tpuprep("build", "--src", src, "--dst", tmp_path / "out", "-q", "--scheduler", "tcp://127.0.0.1:1",
                      env={"TPUPREP_DASK_TIMEOUT": value}, timeout=60)
    _one_line(result, 2, f"TPUPREP_DASK_TIMEOUT={value!r}", "at most 604800")


@pytest.mark.parametrize("value", ["inf", "1e300", "nan"])
def test_run_file_timeout_is_bounded(src, tmp_path, value):
    run_file = tmp_path / "job.toml"
    run_file.write_text(f'src = "{src}"\ndst = "{tmp_path / "out"}"\n[cluster]\nscheduler = "tcp://127.0.0.1:1"\n'
                        f"timeout = {value}\n")
    result = _tpuprep("run", run_file, "-q", timeout=60)
    _one_line(result, 2, "[cluster.timeout] must be > 0 and at most 604800 seconds")


def test_runner_refuses_an_absurd_timeout():
    from tpuprep.runners.dask_cluster import DaskRunner

    for kw in ({"timeout": 1e300}, {"connect_timeout": float("inf")}, {"no_workers_timeout": -1.0}):
        with pytest.raises(UsageError, match="must be > 0 and at most"):
            DaskRunner("tcp://127.0.0.1:1", **kw)


def test_dask_connect_timeout_from_dask_config_is_bounded(src, tmp_path):
    result = _tpuprep("build", "--src", src, "--dst", tmp_path / "out", "-q", "--scheduler", "tcp://127.0.0.1:1",
                      env={"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "1e300"}, timeout=60)
    _one_line(result, 2, "distributed.comm.timeouts.connect must be > 0 and at most")


def test_a_week_is_still_a_valid_timeout(tmp_path):
    p = parse_pipeline('src = "a"\ndst = "b"\n[cluster]\nscheduler = "tcp://h:1"\ntimeout = 604800\n', tmp_path / "x.toml")
    assert p.cluster.timeout == 604800.0


# --------------------------------------------------------------------------- item 12: $ in storage options


SECRETS = ["p@$5w0rd", "ab${cd", "${1}", "trailing$", "$ space", "$$literal", "a$$b$$", "${}"]


@pytest.mark.parametrize("secret", SECRETS)
def test_a_secret_with_a_dollar_never_fails_to_parse(tmp_path, secret, monkeypatch):
    monkeypatch.delenv("cd", raising=False)
    text = f'src = "a"\ndst = "s3://bucket/p"\n[dst_storage_options]\nsecret = \'{secret}\'\n'
    p = parse_pipeline(text, tmp_path / "x.toml")
    assert p.dst_storage_options["secret"] == secret.replace("$$", "$")


def test_dollar_rules_of_run_files(monkeypatch):
    monkeypatch.setenv("TPUPREP_T_KEY", "AKID")
    monkeypatch.delenv("TPUPREP_T_UNSET", raising=False)
    assert interpolate("$TPUPREP_T_KEY/${TPUPREP_T_KEY}x") == "AKID/AKIDx"
    assert interpolate("$$TPUPREP_T_KEY") == "$TPUPREP_T_KEY"  # escaped: not expanded
    assert interpolate("$5$") == "$5$"
    with pytest.raises(KeyError, match="TPUPREP_T_UNSET"):
        interpolate("x$TPUPREP_T_UNSET")


def test_an_unset_variable_in_a_storage_option_names_the_key_not_the_value(tmp_path, monkeypatch):
    monkeypatch.delenv("TPUPREP_T_UNSET", raising=False)
    text = 'src = "a"\ndst = "s3://bucket/p"\n[dst_storage_options]\nsecret = "hunter2$TPUPREP_T_UNSET"\n'
    with pytest.raises(PipelineError) as caught:
        parse_pipeline(text, tmp_path / "x.toml")
    message = str(caught.value)
    assert "[dst_storage_options.secret] environment variable TPUPREP_T_UNSET is not set" in message
    assert "hunter2" not in message and "\n" not in message


def test_a_path_with_a_lone_dollar_is_kept(tmp_path):
    p = parse_pipeline('src = "data$5"\ndst = "out$"\n', tmp_path / "x.toml")
    assert p.src == (tmp_path / "data$5").resolve() and p.dst == (tmp_path / "out$").resolve()


def test_run_with_a_dollar_secret_is_not_a_traceback(src, tmp_path):
    """The whole command: a run file whose secret holds ``$5`` gets past parsing (then stops at the store,
    which this test does not have, with one line)."""
    run_file = tmp_path / "job.toml"
    run_file.write_text(f'src = "{src}"\ndst = "s3x://bucket/p"\n[dst_storage_options]\nsecret = "p@$5w0rd"\n')
    result = _tpuprep("run", run_file, "-q", timeout=60)
    assert "Traceback" not in result.stderr and "Invalid placeholder" not in result.stderr
    line = _one_line(result, 2, "s3x")
    assert "p@$5w0rd" not in line
