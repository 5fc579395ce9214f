"""Run a command and report its wall time and the peak RSS of any process it started.

``python -m benchmarks.measure -- CMD ...`` prints one JSON line: {"wall_s", "peak_rss_mb", "returncode"}.
``getrusage(RUSAGE_CHILDREN).ru_maxrss`` is the largest RSS among all waited-for descendants, so
worker processes of a pool count too.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from dataclasses import dataclass


@dataclass
class Measurement:
    wall_s: float
    peak_rss_mb: float
    returncode: int


def measure(cmd: list[str], env: dict | None = None) -> Measurement:
    """Measure ``cmd`` from a fresh helper process (so earlier children do not count)."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.measure", "--", *cmd], env=env,
                         capture_output=True, text=True, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"measurement of {cmd} failed:\n{out.stderr[-3000:]}")
    m = Measurement(**json.loads(lines[-1]))
    if m.returncode not in (0, 3):
        raise RuntimeError(f"{cmd} exited with {m.returncode}:\n{out.stderr[-3000:]}")
    return m


def main(argv: list[str]) -> None:
    cmd = argv[argv.index("--") + 1 :]
    start = time.perf_counter()
    proc = subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    rss_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({"wall_s": wall, "peak_rss_mb": rss_kb / 1024, "returncode": proc.returncode}))


if __name__ == "__main__":
    main(sys.argv)
