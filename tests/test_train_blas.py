"""The trainer's BLAS thread limit (tpuprep/train/_blas.py) goes through threadpoolctl."""

from __future__ import annotations

import threadpoolctl

from tpuprep.train._blas import blas_threads, reset_controller


def _blas_threads() -> list[int]:
    return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]


def test_blas_threads_limits_and_restores():
    # the controller kept by an earlier test may predate a BLAS loaded since (scipy's, by the tests
    # that compare with scipy): as documented, reset_controller() picks it up
    reset_controller()
    before = _blas_threads()
    assert before, "NumPy's BLAS is not visible to threadpoolctl"
    with blas_threads(1):
        assert _blas_threads() == [1] * len(before)
    assert _blas_threads() == before
    with blas_threads(None):
        assert _blas_threads() == before


def test_libraries_are_scanned_once_not_on_every_entry(monkeypatch):
    """A fresh threadpool_limits rescans every loaded library (≈ 2 ms); the kept controller does not."""
    scans = []
    original = threadpoolctl.ThreadpoolController.__init__

    def counting(self, *args, **kwargs):
        scans.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(threadpoolctl.ThreadpoolController, "__init__", counting)
    reset_controller()
    for _ in range(20):
        with blas_threads(1):
            pass
    assert len(scans) == 1
