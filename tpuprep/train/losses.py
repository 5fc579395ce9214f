"""Pairwise ranking losses over the configs of one graph (TGraph eq. 8, and RankNet).

For a batch of B configs with scores s (B,) (higher = slower) and targets r (B,) (true runtime, or
runtime / normalizer for tile), the pairs P = {(i, j) : r_i > r_j} give

* hinge:   L = (1/|P|) Σ_P max(0, margin − (s_i − s_j))
* ranknet: L = (1/|P|) Σ_P log(1 + exp(−(s_i − s_j)))

Both return (loss, dL/ds (B,) float64); a batch without any ordered pair gives (0, zeros).
"""

from __future__ import annotations

import numpy as np

LOSSES = ("hinge", "ranknet")


def pairwise_loss(scores: np.ndarray, target: np.ndarray, kind: str = "hinge",
                  margin: float = 1.0) -> tuple[float, np.ndarray]:
    """Mean pairwise loss of ``scores`` (B,) against ``target`` (B,) and its gradient (B,) float64."""
    if kind not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {kind!r}")
    s = np.asarray(scores, np.float64)
    t = np.asarray(target)
    if s.shape != t.shape or s.ndim != 1:
        raise ValueError(f"scores and target must be (B,) of equal length, got {s.shape} and {t.shape}")
    mask = t[:, None] > t[None, :]  # (i slower than j)
    n_pairs = int(mask.sum())
    if n_pairs == 0:
        return 0.0, np.zeros_like(s)
    diff = s[:, None] - s[None, :]
    if kind == "hinge":
        active = mask & (diff < margin)
        loss = float(np.where(active, margin - diff, 0.0).sum() / n_pairs)
        coef = active.astype(np.float64)  # dL/d diff_ij = −coef_ij / |P|
    else:
        # softplus(−diff) computed stably; d/d diff = −sigmoid(−diff)
        neg = -diff
        sp = np.maximum(neg, 0.0) + np.log1p(np.exp(-np.abs(neg)))
        loss = float(np.where(mask, sp, 0.0).sum() / n_pairs)
        sig = np.exp(-np.logaddexp(0.0, diff))  # sigmoid(−diff)
        coef = np.where(mask, sig, 0.0)
    grad = (-coef.sum(axis=1) + coef.sum(axis=0)) / n_pairs
    return loss, grad
