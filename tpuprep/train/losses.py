"""Ranking losses over the configs of one graph: pairwise (TGraph eq. 8, RankNet) and listwise (ListMLE).

For a batch of B configs with scores s (B,) (higher = slower) and targets r (B,) (true runtime, or
runtime / normalizer for tile), the pairs P = {(i, j) : r_i > r_j} give

* hinge:   L = (1/|P|) Σ_P max(0, margin − (s_i − s_j))
* ranknet: L = (1/|P|) Σ_P log(1 + exp(−(s_i − s_j)))
* listmle: with π the configs slowest first (by r; ties by position), the negative log-likelihood of π
  under the Plackett–Luce model of the scores, per config: L = (1/B) Σ_i (log Σ_{k≥i} exp(s_πk) − s_πi)

All return (loss, dL/ds (B,) float64); a batch without any ordered pair gives (0, zeros).

Pair weights (``weight``, hinge and ranknet; the loss is Σ_P w_ij · loss_ij / Σ_P w_ij): "none" counts
every ordered pair alike (w = 1); "floor" (the trainer's default) w_ij = min(1, |log r_i − log r_j| ÷
TIE_FLOOR), so pairs whose runtimes differ by about the measurement noise (near-ties) count in
proportion to their gap and clearly ordered pairs fully; "logdiff" w_ij = |log r_i − log r_j| (large
gaps dominate).
"""

from __future__ import annotations

import numpy as np

LOSSES = ("hinge", "ranknet", "listmle")
PAIR_WEIGHTS = ("none", "logdiff", "floor")
TIE_FLOOR = 3e-3
"""Runtime gap (|Δ log runtime|) from which a pair counts fully under the "floor" weights: ~5 × the
synthetic layout noise σ ≤ 6e-4 (a difference of two measurements has σ√2), 0.3 % of the runtime."""


def pairwise_loss(scores: np.ndarray, target: np.ndarray, kind: str = "hinge",
                  margin: float = 1.0, weight: str = "none") -> tuple[float, np.ndarray]:
    """Mean pairwise loss of ``scores`` (B,) against ``target`` (B,) and its gradient (B,) float64.
    ``weight``: the pair weights of the pairwise losses (module docstring; listmle has none)."""
    if kind not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {kind!r}")
    if weight not in PAIR_WEIGHTS:
        raise ValueError(f"pair weight must be one of {PAIR_WEIGHTS}, got {weight!r}")
    s = np.asarray(scores, np.float64)
    t = np.asarray(target)
    if s.shape != t.shape or s.ndim != 1:
        raise ValueError(f"scores and target must be (B,) of equal length, got {s.shape} and {t.shape}")
    mask = t[:, None] > t[None, :]  # (i slower than j)
    n_pairs = int(mask.sum())
    if n_pairs == 0:
        return 0.0, np.zeros_like(s)
    if kind == "listmle":
        return listmle_loss(s, t)
    if weight != "none":
        lt = np.log(np.maximum(t.astype(np.float64), np.finfo(np.float64).tiny))
        w = np.where(mask, lt[:, None] - lt[None, :], 0.0)  # (B, B) ≥ 0, 0 off the pairs
        if weight == "floor":
            w = np.minimum(w / TIE_FLOOR, 1.0)
        norm = float(w.sum())
        if norm <= 0.0:
            return 0.0, np.zeros_like(s)
    else:
        w, norm = mask.astype(np.float64), float(n_pairs)
    diff = s[:, None] - s[None, :]
    if kind == "hinge":
        active = mask & (diff < margin)
        loss = float((np.where(active, margin - diff, 0.0) * w).sum() / norm)
        coef = np.where(active, w, 0.0)  # dL/d diff_ij = −coef_ij / norm
    else:
        # softplus(−diff) computed stably; d/d diff = −sigmoid(−diff)
        neg = -diff
        sp = np.maximum(neg, 0.0) + np.log1p(np.exp(-np.abs(neg)))
        loss = float((np.where(mask, sp, 0.0) * w).sum() / norm)
        sig = np.exp(-np.logaddexp(0.0, diff))  # sigmoid(−diff)
        coef = np.where(mask, sig, 0.0) * w
    grad = (-coef.sum(axis=1) + coef.sum(axis=0)) / norm
    return loss, grad


def listmle_loss(scores: np.ndarray, target: np.ndarray) -> tuple[float, np.ndarray]:
    """ListMLE of ``scores`` (B,) float64 against ``target`` (B,): (loss, dL/ds (B,) float64).

    a = the scores ordered slowest first, c_i = log Σ_{k≥i} exp(a_k) (a reversed running logaddexp);
    L = (1/B) Σ_i (c_i − a_i) and dL/da_k = (Σ_{i≤k} exp(a_k − c_i) − 1) / B (each term ≤ 1).
    """
    order = np.argsort(-np.asarray(target, np.float64), kind="stable")
    a = scores[order]
    c = np.logaddexp.accumulate(a[::-1])[::-1]
    n = len(a)
    loss = float((c - a).sum() / n)
    below = np.tril(np.ones((n, n), bool))  # [k, i]: i ≤ k
    ga = (np.where(below, np.exp(np.minimum(a[:, None] - c[None, :], 0.0)), 0.0).sum(axis=1) - 1.0) / n
    grad = np.empty_like(a)
    grad[order] = ga
    return loss, grad
