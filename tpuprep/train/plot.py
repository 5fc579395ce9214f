"""PNG plots for ``tpuprep evaluate --out``: predicted vs true rank per graph, and score histograms.

The plots are drawn by matplotlib, the optional ``plot`` extra (``pip install 'tpuprep[plot]'``); tpuprep
itself does not depend on it. Without it there are no plots: :func:`missing` returns the one line that
says so and how to get them, and ``evaluate.write_outputs`` writes the tables alone.
"""

from __future__ import annotations

import os

import numpy as np

Panel = tuple[str, np.ndarray, np.ndarray]  # (title, true values (c,) float, predicted scores (c,) float)
MAX_POINTS = 3000  # a scatter panel draws at most this many configs, evenly spaced over the graph's configs
NO_PLOTS = "no plots: matplotlib is not installed (pip install 'tpuprep[plot]'); the tables are written"


def missing() -> str | None:
    """None when matplotlib can be imported; otherwise :data:`NO_PLOTS`, the line to show the user."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return NO_PLOTS
    return None


def _pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _ranks01(values: np.ndarray) -> np.ndarray:
    """(c,) values → (c,) float64 ranks normalised to [0, 1] (ties share the lowest rank of their group)."""
    v = np.asarray(values, np.float64)
    if len(v) < 2:
        return np.zeros(len(v))
    order = np.argsort(v, kind="stable")
    ranks = np.empty(len(v))
    sv = v[order]
    first = np.r_[0, np.flatnonzero(sv[1:] != sv[:-1]) + 1]
    ranks[order] = np.repeat(first, np.diff(np.r_[first, len(v)]))
    return ranks / (len(v) - 1)


def _subsample(n: int, k: int = MAX_POINTS) -> np.ndarray:
    """Indices of at most k of n points, evenly spaced (all of them when n ≤ k)."""
    return np.arange(n) if n <= k else np.linspace(0, n - 1, k).astype(np.int64)


def plot_rank_scatter(path: str | os.PathLike[str], panels: list[Panel], title: str = "") -> None:
    """Predicted rank vs true rank (both normalised to 0..1), one panel per graph, to a PNG at ``path``."""
    plt = _pyplot()
    cols = min(2, max(1, len(panels)))
    rows = max(1, (len(panels) + cols - 1) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 4.0 * rows), squeeze=False)
    for ax in axes.ravel()[len(panels):]:
        ax.axis("off")
    for ax, (name, truth, pred) in zip(axes.ravel(), panels, strict=False):
        idx = _subsample(len(truth))
        ax.scatter(_ranks01(truth)[idx], _ranks01(pred)[idx], s=3, alpha=0.5)
        ax.plot([0, 1], [0, 1], color="grey", lw=0.8)
        ax.set_title(name if len(name) < 48 else "…" + name[-46:], fontsize=8)
        ax.set_xlabel("true rank (0 = fastest)")
        ax.set_ylabel("predicted rank")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_histogram(path: str | os.PathLike[str], series: dict[str, np.ndarray], title: str = "",
                   xlabel: str = "", lo: float = -1.0, hi: float = 1.0, bins: int = 20) -> None:
    """Overlaid histograms of per-graph scores (label → (g,) float; NaN dropped, values clipped to [lo, hi])."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    edges = np.linspace(lo, hi, bins + 1)
    for label, values in series.items():
        v = np.asarray(values, np.float64)
        v = v[np.isfinite(v)]
        ax.hist(np.clip(v, lo, hi), bins=edges, alpha=0.55,
                label=f"{label} (mean {np.mean(v):.3f})" if len(v) else label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("graphs")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
