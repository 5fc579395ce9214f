"""Run a command and report its wall time and the peak RSS of any process it started.

``python -m benchmarks.measure [--poll] -- CMD ...`` prints one JSON line: {"wall_s", "peak_rss_mb",
"returncode", "cpu_s", "load_before", "load_after"}. ``getrusage(RUSAGE_CHILDREN).ru_maxrss`` is the
largest RSS among all waited-for descendants, so worker processes of a pool count too; ``cpu_s`` is
their user + system CPU time; ``load_*`` the 1-minute load average before and after (the machine is
shared: a load above the core count means the command did not have the cores to itself).

With ``--poll`` the line also has "processes": every process of the command's tree (the command, the
workers it spawned, …) with its role and its peak RSS (VmHWM from ``/proc/<pid>/status``, sampled every
0.2 s while it runs, so a peak reached in a process's last 0.2 s may be missed: "peak_rss_mb" above stays
the exact maximum over all of them).
"""

from __future__ import annotations

import contextlib
import json
import resource
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

POLL_S = 0.2


@dataclass
class Measurement:
    wall_s: float
    peak_rss_mb: float
    returncode: int
    cpu_s: float = 0.0
    load_before: float = 0.0
    load_after: float = 0.0
    processes: list[dict] = field(default_factory=list)


def measure(cmd: list[str], env: dict | None = None, per_process: bool = False) -> Measurement:
    """Measure ``cmd`` from a fresh helper process (so earlier children do not count).

    per_process: also sample each process of the command's tree (``Measurement.processes``: dicts
    with pid, role and peak_rss_mb, largest first).
    """
    poll = ["--poll"] if per_process else []
    out = subprocess.run([sys.executable, "-m", "benchmarks.measure", *poll, "--", *cmd], env=env,
                         capture_output=True, text=True, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"measurement of {cmd} failed:\n{out.stderr[-3000:]}")
    m = Measurement(**json.loads(lines[-1]))
    if m.returncode not in (0, 3):
        raise RuntimeError(f"{cmd} exited with {m.returncode}:\n{out.stderr[-3000:]}")
    return m


def _children() -> dict[int, list[int]]:
    """ppid -> pids of every process now running."""
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text()
                ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
                kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _tree(root: int) -> list[int]:
    kids, out, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, []))
    return out


def _hwm_mb(pid: int) -> float:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _role(pid: int, root: int) -> str:
    if pid == root:
        return "main"
    with contextlib.suppress(OSError):
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        if "resource_tracker" in cmdline:
            return "resource tracker"
        if "spawn_main" in cmdline or "forkserver" in cmdline:
            return "worker"
        return cmdline[:60].strip() or "process"
    return "process"


def _run_polled(cmd: list[str]) -> tuple[int, list[dict]]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    seen: dict[int, dict] = {}
    while proc.poll() is None:
        for pid in _tree(proc.pid):
            hwm = _hwm_mb(pid)
            row = seen.setdefault(pid, {"pid": pid, "role": "", "peak_rss_mb": 0.0})
            if hwm > 0:  # the role again each time: between fork and exec a child shows its parent's cmdline
                row["role"] = _role(pid, proc.pid)
            row["peak_rss_mb"] = max(row["peak_rss_mb"], round(hwm, 1))
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=POLL_S)
    rows = [r | {"role": r["role"] or "process"} for r in seen.values()]
    return proc.returncode, sorted(rows, key=lambda p: -p["peak_rss_mb"])


def _load() -> float:
    """The 1-minute load average."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def main(argv: list[str]) -> None:
    cmd = argv[argv.index("--") + 1 :]
    poll = "--poll" in argv[: argv.index("--")]
    load = _load()
    start = time.perf_counter()
    if poll:
        returncode, processes = _run_polled(cmd)
    else:
        returncode, processes = subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL).returncode, []
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = {"wall_s": wall, "peak_rss_mb": usage.ru_maxrss / 1024, "returncode": returncode,
           "cpu_s": usage.ru_utime + usage.ru_stime, "load_before": load, "load_after": _load()}
    if poll:
        out["processes"] = processes
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv)
