"""PNG plots for ``tpuprep evaluate``: predicted vs true rank per graph, and score histograms.

matplotlib is used when it is installed (it is not a dependency of tpuprep); otherwise a small built-in
rasteriser (NumPy + zlib, a 3×5 pixel font) draws the same plots, so ``evaluate --out`` always writes
its PNGs. ``backend`` forces one or the other ("matplotlib", "builtin"; "auto" = try matplotlib).
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

import numpy as np

Panel = tuple[str, np.ndarray, np.ndarray]  # (title, true values (c,), predicted scores (c,))
MAX_POINTS = 3000

_GLYPHS = {
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001010010010",
    "8": "111101111101111", "9": "111101111001111", "A": "010101111101101", "B": "110101110101110",
    "C": "011100100100011", "D": "110101101101110", "E": "111100110100111", "F": "111100110100100",
    "G": "011100101101011", "H": "101101111101101", "I": "111010010010111", "J": "001001001101010",
    "K": "101101110101101", "L": "100100100100111", "M": "101111111101101", "N": "110101101101101",
    "O": "010101101101010", "P": "110101110100100", "Q": "010101101110011", "R": "110101110101101",
    "S": "011100010001110", "T": "111010010010010", "U": "101101101101111", "V": "101101101101010",
    "W": "101101111111101", "X": "101101010101101", "Y": "101101010010010", "Z": "111001010100111",
    ".": "000000000000010", "-": "000000111000000", ":": "000010000010000", "=": "000111000111000",
    "(": "001010010010001", ")": "100010010010100", "/": "001001010100100", "_": "000000000000111",
    ",": "000000000010100", "+": "000010111010000", "%": "101001010100101", " ": "0" * 15,
    "?": "111001011000010",
}
_COLORS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40)]


def _ranks01(values: np.ndarray) -> np.ndarray:
    """Normalised ranks in [0, 1] (ties share the lowest rank of their group)."""
    v = np.asarray(values, np.float64)
    if len(v) < 2:
        return np.zeros(len(v))
    order = np.argsort(v, kind="stable")
    ranks = np.empty(len(v))
    sv = v[order]
    first = np.r_[0, np.flatnonzero(sv[1:] != sv[:-1]) + 1]
    group_start = np.repeat(first, np.diff(np.r_[first, len(v)]))
    ranks[order] = group_start
    return ranks / (len(v) - 1)


def _subsample(n: int, k: int = MAX_POINTS) -> np.ndarray:
    return np.arange(n) if n <= k else np.linspace(0, n - 1, k).astype(np.int64)


def _have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _pick(backend: str) -> str:
    if backend not in ("auto", "matplotlib", "builtin"):
        raise ValueError("backend must be auto, matplotlib or builtin")
    if backend == "auto":
        return "matplotlib" if _have_matplotlib() else "builtin"
    return backend


# ---- built-in rasteriser -----------------------------------------------------------------------
class Canvas:
    """An RGB uint8 image (h, w, 3) with just enough drawing for the evaluation plots."""

    def __init__(self, w: int, h: int):
        self.img = np.full((h, w, 3), 255, np.uint8)

    def fill(self, x0: int, y0: int, x1: int, y1: int, color: tuple[int, int, int]) -> None:
        h, w, _ = self.img.shape
        x0, x1 = max(0, min(x0, x1)), min(w, max(x0, x1))
        y0, y1 = max(0, min(y0, y1)), min(h, max(y0, y1))
        if x1 > x0 and y1 > y0:
            self.img[y0:y1, x0:x1] = color

    def box(self, x0: int, y0: int, x1: int, y1: int, color: tuple[int, int, int] = (0, 0, 0)) -> None:
        self.fill(x0, y0, x1 + 1, y0 + 1, color)
        self.fill(x0, y1, x1 + 1, y1 + 1, color)
        self.fill(x0, y0, x0 + 1, y1 + 1, color)
        self.fill(x1, y0, x1 + 1, y1 + 1, color)

    def dots(self, xs: np.ndarray, ys: np.ndarray, color: tuple[int, int, int], r: int = 1) -> None:
        h, w, _ = self.img.shape
        xs = np.asarray(np.rint(xs), np.int64)
        ys = np.asarray(np.rint(ys), np.int64)
        for dx in range(-r, r + 1):
            for dy in range(-r, r + 1):
                x, y = xs + dx, ys + dy
                ok = (x >= 0) & (x < w) & (y >= 0) & (y < h)
                self.img[y[ok], x[ok]] = color

    def text(self, x: int, y: int, s: str, scale: int = 2, color: tuple[int, int, int] = (0, 0, 0)) -> None:
        for k, ch in enumerate(s.upper()):
            g = _GLYPHS.get(ch, _GLYPHS["?"])
            for i, bit in enumerate(g):
                if bit == "1":
                    r, c = divmod(i, 3)
                    px, py = x + (4 * k + c) * scale, y + r * scale
                    self.fill(px, py, px + scale, py + scale, color)

    def save(self, path: str | os.PathLike[str]) -> None:
        write_png(path, self.img)


def write_png(path: str | os.PathLike[str], img: np.ndarray) -> None:
    """Write an (h, w, 3) uint8 image as an 8-bit RGB PNG."""
    h, w, _ = img.shape
    raw = b"".join(b"\x00" + np.ascontiguousarray(img[y]).tobytes() for y in range(h))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + tag + data
                + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))
    Path(path).write_bytes(png)


def _builtin_scatter(path: str | os.PathLike[str], panels: list[Panel], title: str) -> None:
    size, pad = 260, 40
    cols = min(2, max(1, len(panels)))
    rows = max(1, (len(panels) + cols - 1) // cols)
    cv = Canvas(cols * (size + 2 * pad), rows * (size + 2 * pad) + 30)
    cv.text(10, 8, title, 3)
    for k, (name, truth, pred) in enumerate(panels):
        ox = (k % cols) * (size + 2 * pad) + pad
        oy = (k // cols) * (size + 2 * pad) + pad + 30
        cv.box(ox, oy, ox + size, oy + size)
        idx = _subsample(len(truth))
        tx, py = _ranks01(truth)[idx], _ranks01(pred)[idx]
        cv.dots(ox + tx * size, oy + size - py * size, _COLORS[0], 1)
        cv.text(ox, oy - 16, name[-40:], 1)
        cv.text(ox + size // 2 - 30, oy + size + 6, "TRUE RANK", 1)
        cv.text(ox - 30, oy + size // 2, "PRED", 1)
    cv.save(path)


def _builtin_hist(path: str | os.PathLike[str], series: dict[str, np.ndarray], title: str,
                  lo: float, hi: float, bins: int) -> None:
    w, h, pad = 560, 320, 50
    cv = Canvas(w + 2 * pad, h + 2 * pad + 20)
    cv.text(10, 8, title, 3)
    ox, oy = pad, pad + 20
    cv.box(ox, oy, ox + w, oy + h)
    edges = np.linspace(lo, hi, bins + 1)
    counts = {k: np.histogram(np.clip(v, lo, hi), edges)[0] for k, v in series.items()}
    top = max([int(c.max()) for c in counts.values() if len(c)] + [1])
    bw = w / bins
    n_series = max(1, len(series))
    for s, (label, c) in enumerate(counts.items()):
        color = _COLORS[s % len(_COLORS)]
        for b in range(bins):
            x0 = int(ox + b * bw + s * bw / n_series)
            x1 = int(ox + b * bw + (s + 1) * bw / n_series)
            cv.fill(x0, int(oy + h - c[b] / top * (h - 10)), x1, oy + h, color)
        cv.fill(ox + w - 150, oy + 10 + 14 * s, ox + w - 140, oy + 20 + 14 * s, color)
        cv.text(ox + w - 135, oy + 12 + 14 * s, label[:16], 1)
    for v in (lo, (lo + hi) / 2, hi):
        cv.text(int(ox + (v - lo) / (hi - lo) * w) - 10, oy + h + 8, f"{v:.2f}", 1)
    cv.text(ox - 30, oy, str(top), 1)
    cv.save(path)


# ---- public API --------------------------------------------------------------------------------
def plot_rank_scatter(path: str | os.PathLike[str], panels: list[Panel], title: str = "",
                      backend: str = "auto") -> str:
    """Predicted rank vs true rank (normalised to 0..1) for a few graphs; returns the backend used."""
    use = _pick(backend)
    if use == "builtin":
        _builtin_scatter(path, panels, title)
        return use
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

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
    return use


def plot_histogram(path: str | os.PathLike[str], series: dict[str, np.ndarray], title: str = "",
                   xlabel: str = "", lo: float = -1.0, hi: float = 1.0, bins: int = 20,
                   backend: str = "auto") -> str:
    """Overlaid histograms of per-graph scores (NaN dropped); returns the backend used."""
    clean = {k: np.asarray(v, np.float64)[np.isfinite(np.asarray(v, np.float64))] for k, v in series.items()}
    use = _pick(backend)
    if use == "builtin":
        _builtin_hist(path, clean, title, lo, hi, bins)
        return use
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    edges = np.linspace(lo, hi, bins + 1)
    for label, v in clean.items():
        ax.hist(np.clip(v, lo, hi), bins=edges, alpha=0.55, label=f"{label} (mean {np.mean(v):.3f})"
                if len(v) else label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("graphs")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return use
