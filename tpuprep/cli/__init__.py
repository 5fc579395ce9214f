"""The ``tpuprep`` command line (click), one module per group of commands:

``build`` (build) · ``data`` (info, verify, export) · ``run`` (TOML run files) · ``synth`` (synth, demo) ·
``train`` (train, evaluate, predict) · ``common`` (exit codes, the error guard, progress, summaries).
"""

from . import build, data, run, synth, train  # noqa: F401  (each registers its commands on main)
from .common import EXIT_FATAL, EXIT_OK, EXIT_QUARANTINED, EXIT_USAGE
from .group import main

__all__ = ["EXIT_FATAL", "EXIT_OK", "EXIT_QUARANTINED", "EXIT_USAGE", "main"]
