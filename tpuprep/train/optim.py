"""AdamW with global-norm gradient clipping and a warm-up + cosine learning-rate schedule."""

from __future__ import annotations

import math

import numpy as np

Params = dict[str, np.ndarray]


def lr_at(step: int, total: int, base_lr: float, warmup_frac: float = 0.05,
          final_frac: float = 0.05, progress: float | None = None) -> float:
    """Learning rate at 0-based ``step`` of ``total``: linear warm-up, then cosine down to final_frac·lr.

    ``progress`` (a fraction of the run, e.g. elapsed ÷ time budget) overrides the step count when it is
    further along, so a run cut short by a time budget still warms up and decays within that budget.
    """
    total = max(int(total), 1)
    warm = max(1, round(warmup_frac * total))
    if progress is not None and progress * total > step:
        step = min(int(progress * total), total - 1)
    if step < warm:
        return base_lr * (step + 1) / warm
    prog = min(1.0, (step - warm) / max(1, total - warm))
    return base_lr * (final_frac + (1.0 - final_frac) * 0.5 * (1.0 + math.cos(math.pi * prog)))


class AdamW:
    """Adam with decoupled weight decay on matrices (ndim ≥ 2) and gradient clipping (global L2 norm)."""

    def __init__(self, params: Params, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-5, clip_norm: float | None = 1.0):
        self.b1, self.b2 = betas
        self.eps = eps
        self.weight_decay = weight_decay
        self.clip_norm = clip_norm
        self.t = 0
        self.m = {k: np.zeros_like(v, dtype=np.float64) for k, v in params.items()}
        self.v = {k: np.zeros_like(v, dtype=np.float64) for k, v in params.items()}

    def step(self, params: Params, grads: Params, lr: float) -> float:
        """Update ``params`` in place; returns the gradient norm before clipping."""
        norm = math.sqrt(sum(float(np.sum(np.square(g, dtype=np.float64))) for g in grads.values()))
        scale = 1.0
        if self.clip_norm is not None and norm > self.clip_norm:
            scale = self.clip_norm / (norm + 1e-12)
        self.t += 1
        c1 = 1.0 - self.b1**self.t
        c2 = 1.0 - self.b2**self.t
        for k, p in params.items():
            g = grads[k].astype(np.float64) * scale
            m, v = self.m[k], self.v[k]
            m *= self.b1
            m += (1.0 - self.b1) * g
            v *= self.b2
            v += (1.0 - self.b2) * g * g
            upd = lr * (m / c1) / (np.sqrt(v / c2) + self.eps)
            if self.weight_decay and p.ndim >= 2:
                upd = upd + lr * self.weight_decay * p.astype(np.float64)
            p -= upd.astype(p.dtype)
        return norm

    def state(self) -> dict[str, np.ndarray]:
        """Optimizer moments and step as flat arrays (for checkpoints)."""
        out = {f"adam_m/{k}": v for k, v in self.m.items()}
        out.update({f"adam_v/{k}": v for k, v in self.v.items()})
        out["adam_t"] = np.array(self.t)
        return out
