"""One runner factory for ``tpuprep build`` and ``tpuprep run`` (``runners.make_runner``): the same
runner for the same settings, ``DASK_SCHEDULER_ADDRESS`` read in one place, and this process set up
as a converter whenever it converts the files itself."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tpuprep.cli import main
from tpuprep.pipeline import ClusterSpec
from tpuprep.request import open_runner
from tpuprep.runners import make_runner
from tpuprep.runners.dask_cluster import ClusterError, SchedulerAddressError
from tpuprep.runners.local import SerialRunner


def test_a_run_files_dask_cluster_without_an_address_is_never_run_serially(monkeypatch):
    # type = "dask" with neither scheduler nor scheduler_file means DASK_SCHEDULER_ADDRESS; unset, it
    # is one line, not a silent fall-back to running everything in this process
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    with pytest.raises(ClusterError, match="no Dask scheduler given"):
        open_runner(ClusterSpec("dask"))


def test_dask_scheduler_address_selects_a_cluster_only_when_nothing_else_is_asked_for(monkeypatch):
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "not-an-address")
    # a command's one worker follows the variable (its malformed value is named by the variable) ...
    with pytest.raises(SchedulerAddressError, match="DASK_SCHEDULER_ADDRESS 'not-an-address'"):
        make_runner(1, use_env=True)
    with pytest.raises(SchedulerAddressError, match="DASK_SCHEDULER_ADDRESS 'not-an-address'"):
        open_runner(ClusterSpec("dask"))
    # ... a run file's serial cluster and a library's make_runner(1) do not
    assert isinstance(open_runner(ClusterSpec("serial")), SerialRunner)
    assert isinstance(make_runner(1), SerialRunner)


@pytest.mark.parametrize("command", ["build", "run"])
def test_both_commands_set_up_this_process_to_convert_when_it_runs_the_tasks(tmp_path, synth_root, monkeypatch,
                                                                             command):
    from tpuprep.runners import worker

    calls = []
    monkeypatch.setattr(worker, "as_converter", lambda: calls.append(1))
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    src, dst = synth_root / "npz" / "tile", tmp_path / "shards"
    if command == "build":
        args = ["build", "--src", str(src), "--dst", str(dst), "-q"]
    else:
        run = tmp_path / "run.toml"
        run.write_text(f'src = "{src}"\ndst = "{dst}"\n[cluster]\ntype = "serial"\n')
        args = ["run", str(run), "-q"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert calls == [1] and (dst / "manifest.json").exists()
