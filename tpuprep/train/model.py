"""A small GraphSAGE ranking model in NumPy with a hand-written backward pass (no autodiff framework).

Shapes: n nodes, H = ``hidden``, H2 = ``head_hidden``, B configs in a batch, nc configurable nodes.

Graph encoder (config-independent part, computed once per graph and step — the "static" pass)::

    pre  = X W_x + b_x + E_op[opcode]                        (n, H)    X: (n, 177) see features.py
    h_0  = gelu(pre)
    h_l  = h_{l−1} + gelu(h_{l−1} W_self + (P_in h_{l−1}) W_in + (P_out h_{l−1}) W_out + b_l),  l = 1..L
    S    = Σ_i h_L[i]                                        (H,)

Layout configs (per config b): configurable node j gets ``cfg_j = Σ_s E_cfg[s, value_{b,j,s}+1]`` added
to ``pre`` — i.e. the 18 slots as 7-way one-hots through one linear map. Only nodes within l hops of a
configurable node change, so the model keeps ``δ_l = h_l^b − h_l`` on the region ``R_l`` only
(features.py) and pools ``(S + Σ_{R_L} δ_L^b) / n``. That is exactly the full per-config forward pass
at a fraction of its cost.

Tile: graph embedding ``g = S / n`` fused late with the config inputs f (B, 42): log-scaled ``config_feat``
and the output bounds set against the kernel's iteration space (``features.tile_config_features``).

Head: ``s^b = gelu(pooled^b W_p [+ f^b W_c] [+ z^b W_summary] + b_p) · w_o + b_o [+ K w_prior z^b_c]``
— one score per config, higher = slower; z (B, 5) are the layout config summaries of
``features.config_summary`` (violation ratio, shares of nodes and of work whose layout left its mode),
straight to the head. The prior term (layout with derived features, ``ModelConfig.prior`` = K > 0):
z_c = the share of the compute ops' work whose output left its modal layout
(``features.COMPUTE_SHARE``), through one learned scalar ``w_prior`` (initialised to 1). With K = 1000
a config whose compute share is larger by 0.001 scores one hinge margin higher from the start: the
model begins as the ranking that share gives — the additive structure of layout runtimes, a jump for
each conv/dot leaving its modal layout, growing with its work — and the graph network learns the rest,
above all the order of configs that share does not separate (in ``default`` collections most configs
leave no compute op's modal layout). Training moves ``w_prior`` like any weight, so a collection whose
runtimes do not follow the share can turn it down; ``prior`` 0 removes the term.

Every parameter lives in a flat ``dict[str, ndarray]``; :func:`forward` returns scores and a cache,
:func:`backward` returns gradients with the same keys. float64 is used by the gradient checks, float32
for training. Initialisation is seeded (NumPy PCG64) and the whole computation is deterministic.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .features import (
    COMPUTE_SHARE,
    N_DERIVED,
    N_FEAT,
    N_LAYOUT_VALUES,
    N_OPCODES,
    N_SLOTS,
    N_SUMMARY,
    N_TILE_INPUT,
    PreparedGraph,
    config_summary,
    derived_config_features,
)
from .kernels import config_embed, rows_scatter_add

Params = dict[str, np.ndarray]

_GELU_C = math.sqrt(2.0 / math.pi)
MAX_CHUNK_ELEMS = 1 << 21  # per-config activations of one chunk: ≤ 2M values (8 MB in float32)
KEEP_BYTES = 256 * 2 ** 20
"""Most bytes of chunk activations :func:`forward` keeps for :func:`backward`; the chunks past it are
recomputed there (the same arithmetic, so the same gradients bit for bit). A 64-config batch of a graph
whose regions hold ~30,000 nodes (nc = 3,541 in the ``full`` profile) would otherwise keep ≈ 2 GB."""


def gelu_ref(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation, in plain NumPy (reference for the fused kernel)."""
    return 0.5 * x * (1.0 + np.tanh(_GELU_C * (x + 0.044715 * x**3)))


def gelu_pair(x: np.ndarray, want_grad: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """(gelu(x), gelu'(x)) elementwise (the derivative only if want_grad), same dtype as x.

    In-place NumPy ufuncs: NumPy's SIMD tanh is several times faster here than a scalar Numba loop.
    """
    x2 = np.square(x)
    t = x2 * (_GELU_C * 0.044715)
    t += _GELU_C
    t *= x
    np.tanh(t, out=t)  # t = tanh(c (x + a x^3))
    y = t + 1.0
    y *= 0.5  # y = (1 + t) / 2 for now
    d = None
    if want_grad:
        d = np.square(t)
        np.subtract(1.0, d, out=d)
        d *= x
        d *= 0.5 * _GELU_C
        x2 *= 3 * 0.044715
        x2 += 1.0
        d *= x2
        d += y  # d = (1 + t)/2 + x (1 − t²) c (1 + 3 a x²) / 2
    y *= x
    return y, d


def gelu(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (smooth, so finite differences check its backward)."""
    return gelu_pair(x, False)[0]


def gelu_grad(x: np.ndarray) -> np.ndarray:
    """d gelu(x) / dx, elementwise."""
    return gelu_pair(x, True)[1]  # type: ignore[return-value]


def check_prior(prior: float) -> None:
    """ValueError unless ``prior`` (``ModelConfig.prior``) is a finite number ≥ 0."""
    if not (math.isfinite(prior) and prior >= 0):
        raise ValueError(f"prior must be a finite number ≥ 0, got {prior!r}")


@dataclass(frozen=True)
class ModelConfig:
    """Architecture hyper-parameters. kind: "layout" or "tile"; dtype: "float32" or "float64"."""

    kind: str = "layout"
    hidden: int = 64
    head_hidden: int = 64
    layers: int = 2
    dtype: str = "float32"
    derived: bool = True  # layout: hand-made layout features + violation ratio (features.py)
    prior: float = 1000.0  # layout with derived: K, score units per unit of the compute share (0: no term)

    def __post_init__(self) -> None:
        if self.kind not in ("layout", "tile"):
            raise ValueError(f"kind must be 'layout' or 'tile', got {self.kind!r}")
        if self.hidden < 1 or self.head_hidden < 1 or self.layers < 1:
            raise ValueError("hidden, head_hidden and layers must be ≥ 1")
        if self.dtype not in ("float32", "float64"):
            raise ValueError("dtype must be 'float32' or 'float64'")
        check_prior(self.prior)

    @property
    def has_prior(self) -> bool:
        """Whether the model has the prior term (layout, derived features, prior > 0)."""
        return self.kind == "layout" and self.derived and self.prior > 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


def init_params(cfg: ModelConfig, seed: int) -> Params:
    """Seeded initial parameters (scaled normal, 1/√fan_in; residual branches and the output scaled down)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    h, h2 = cfg.hidden, cfg.head_hidden
    dt = np.dtype(cfg.dtype)

    def normal(shape: tuple[int, ...], fan_in: int, gain: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * (gain / math.sqrt(fan_in))).astype(dt)

    p: Params = {
        "w_x": normal((N_FEAT, h), N_FEAT),
        "b_x": np.zeros(h, dt),
        "e_op": normal((N_OPCODES, h), 4),
    }
    if cfg.kind == "layout":
        p["e_cfg"] = normal((N_SLOTS, N_LAYOUT_VALUES, h), N_SLOTS)
    for lay in range(1, cfg.layers + 1):
        p[f"l{lay}_w_self"] = normal((h, h), h, 0.5)
        p[f"l{lay}_w_in"] = normal((h, h), h, 0.5)
        p[f"l{lay}_w_out"] = normal((h, h), h, 0.5)
        p[f"l{lay}_b"] = np.zeros(h, dt)
    p["w_p"] = normal((h, h2), h)
    if cfg.kind == "layout" and cfg.derived:
        p["w_d"] = normal((N_DERIVED, h), N_DERIVED)
        p["w_summary"] = normal((N_SUMMARY, h2), 1, 0.5)
    if cfg.kind == "tile":
        p["w_c"] = normal((N_TILE_INPUT, h2), N_TILE_INPUT)
    p["b_p"] = np.zeros(h2, dt)
    p["w_o"] = normal((h2,), h2, 0.5)
    p["b_o"] = np.zeros(1, dt)
    if cfg.has_prior:
        p["w_prior"] = np.ones(1, dt)
    return p


@dataclass
class StaticCache:
    """Config-independent activations of one graph: pre (n,H); h[l], z[l], a_in[l], a_out[l]; S (H,)."""

    pre: np.ndarray
    h: list[np.ndarray]
    z: list[np.ndarray | None]
    a_in: list[np.ndarray | None]
    a_out: list[np.ndarray | None]
    total: np.ndarray


@dataclass
class ChunkCache:
    """What the backward pass needs from the forward pass of one chunk of configs."""

    batch: np.ndarray
    pooled: np.ndarray
    dgelu_q: np.ndarray
    u: np.ndarray
    dgelu_p0: np.ndarray | None = None
    layer: list[dict[str, np.ndarray]] = field(default_factory=list)
    derived: np.ndarray | None = None
    summary: np.ndarray | None = None  # (B, N_SUMMARY) config-level features (features.config_summary)

    def nbytes(self) -> int:
        """Bytes of the arrays this cache holds beyond the batch (the caller's)."""
        arrays = [self.pooled, self.dgelu_q, self.u, self.dgelu_p0, self.derived, self.summary]
        arrays += [a for layer in self.layer for a in layer.values()]
        return sum(a.nbytes for a in arrays if a is not None)


@dataclass
class Cache:
    """Everything :func:`backward` needs from one :func:`forward` call: the static pass, the batch and
    per chunk (lo, hi, its activations, or None when they are recomputed in :func:`backward`)."""

    static: StaticCache
    batch: np.ndarray
    chunks: list[tuple[int, int, ChunkCache | None]]


def static_forward(params: Params, pg: PreparedGraph, layers: int) -> StaticCache:
    """The config-independent pass over the whole graph (see module docstring)."""
    x = pg.x.astype(params["w_x"].dtype, copy=False)
    pre = x @ params["w_x"] + params["b_x"] + params["e_op"][pg.opcode]
    h = [gelu(pre)]
    z: list[np.ndarray | None] = [None]
    a_in: list[np.ndarray | None] = [None]
    a_out: list[np.ndarray | None] = [None]
    for lay in range(1, layers + 1):
        hp = h[-1]
        ai = pg.p_in.apply(hp)
        ao = pg.p_out.apply(hp)
        zl = (hp @ params[f"l{lay}_w_self"] + ai @ params[f"l{lay}_w_in"]
              + ao @ params[f"l{lay}_w_out"] + params[f"l{lay}_b"])
        h.append(hp + gelu(zl))
        z.append(zl)
        a_in.append(ai)
        a_out.append(ao)
    return StaticCache(pre, h, z, a_in, a_out, h[-1].sum(axis=0))


def _mm(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(B, r, H) @ (H, K) as one BLAS call."""
    return (a.reshape(-1, a.shape[-1]) @ w).reshape(*a.shape[:-1], w.shape[1])


def _layout_delta(params: Params, pg: PreparedGraph, st: StaticCache, values: np.ndarray,
                  derived: np.ndarray | None, layers: int, keep: bool) -> tuple[np.ndarray, np.ndarray | None, list[dict[str, np.ndarray]]]:
    """Per-config δ_L (B, |R_L|, H) on the last region; gelu'(p0) (B, nc, H) and per-layer caches if keep."""
    dt = params["w_x"].dtype
    b = values.shape[0]
    r0 = pg.regions[0]
    cfg = np.empty((b, len(r0), params["e_cfg"].shape[2]), dt)
    config_embed(np.ascontiguousarray(values, dtype=np.int8), params["e_cfg"], cfg, False)
    if derived is not None:
        cfg += _mm(derived, params["w_d"])
    p0 = st.pre[r0][None] + cfg
    g0, dg0 = gelu_pair(p0, keep)
    d = g0 - st.h[0][r0][None]
    caches: list[dict[str, np.ndarray]] = [{}]
    for lay in range(1, layers + 1):
        reg = pg.regions[lay]
        rp = d.shape[1]  # R_{l-1} is the prefix of R_l
        ai = pg.sub_in[lay].apply(d)  # type: ignore[union-attr]
        ao = pg.sub_out[lay].apply(d)  # type: ignore[union-attr]
        zs = st.z[lay][reg]  # type: ignore[index]
        zb = _mm(ai, params[f"l{lay}_w_in"])
        zb += _mm(ao, params[f"l{lay}_w_out"])
        zb[:, :rp] += _mm(d, params[f"l{lay}_w_self"])
        zb += zs[None]
        gz, dgz = gelu_pair(zb, keep)
        gz -= gelu(zs)[None]
        gz[:, :rp] += d  # δ_l = [δ_{l-1}; 0] + gelu(z^b) − gelu(z)
        caches.append({"d": d, "ai": ai, "ao": ao, "dgelu_zb": dgz, "zs": zs} if keep else {})
        d = gz
    return d, dg0, caches


def chunk_size(pg: PreparedGraph, cfg: ModelConfig, max_elems: int = MAX_CHUNK_ELEMS) -> int:
    """Configs per chunk so that one per-config activation (chunk, |R_L|, H) has ≤ max_elems values."""
    if cfg.kind == "tile":
        return 1 << 30
    per_config = max(1, len(pg.regions[cfg.layers]) * cfg.hidden)
    return max(1, max_elems // per_config)


def _forward_chunk(params: Params, pg: PreparedGraph, st: StaticCache, batch: np.ndarray,
                   cfg: ModelConfig, keep: bool) -> tuple[np.ndarray, ChunkCache | None]:
    n = max(pg.n_nodes, 1)
    layer_caches: list[dict[str, np.ndarray]] = []
    dg0 = None
    derived = summary = None
    if cfg.kind == "layout":
        if cfg.derived:
            derived, viol = derived_config_features(pg, batch, params["w_x"].dtype)
            summary = config_summary(pg, derived, viol)
        d, dg0, layer_caches = _layout_delta(params, pg, st, batch, derived, cfg.layers, keep)
        pooled = (st.total[None] + d.sum(axis=1)) / n
        q = pooled @ params["w_p"] + params["b_p"]
        if summary is not None:
            q = q + summary @ params["w_summary"]
    else:
        pooled = np.broadcast_to(st.total / n, (batch.shape[0], st.total.shape[0]))
        q = pooled @ params["w_p"] + batch.astype(params["w_c"].dtype, copy=False) @ params["w_c"] \
            + params["b_p"]
    u, dgu = gelu_pair(q, keep)
    scores = u @ params["w_o"] + params["b_o"][0]
    if cfg.has_prior:
        assert summary is not None
        scores += prior_input(summary, cfg) * params["w_prior"][0]
    if not keep:
        return scores, None
    return scores, ChunkCache(batch, pooled, dgu, u, dg0, layer_caches, derived, summary)  # type: ignore[arg-type]


def prior_input(summary: np.ndarray, cfg: ModelConfig) -> np.ndarray:
    """(B,) K · z_c: the prior term's input from the config summaries (B, N_SUMMARY), same dtype."""
    return summary[:, COMPUTE_SHARE] * summary.dtype.type(cfg.prior)


def forward(params: Params, pg: PreparedGraph, batch: np.ndarray, cfg: ModelConfig,
            static: StaticCache | None = None, keep: bool = True,
            chunk: int | None = None, keep_bytes: int | None = None) -> tuple[np.ndarray, Cache | None]:
    """Scores (B,) for a batch of configs of one graph, higher = slower.

    batch: layout — decoded values (B, nc, 18) int8 in −1..5 (``GraphRecord.node_config_feat(rows)``);
    tile — config inputs (B, 42) float (:func:`features.tile_config_features`).
    ``static`` may be passed in to reuse the config-independent pass across batches (inference).
    With ``keep=False`` no cache is returned (inference; saves memory). Configs are processed in
    chunks of ``chunk`` (default :func:`chunk_size`) so that per-config arrays stay small enough to be
    recycled by the allocator instead of being freshly mapped (and page-faulted) at every step. With
    ``keep``, chunk activations are kept up to ``keep_bytes`` (default ``KEEP_BYTES``); :func:`backward`
    recomputes the rest, so a step's memory stays bounded on the largest graphs.
    """
    if cfg.kind == "layout":
        if batch.ndim != 3 or batch.shape[1:] != (len(pg.regions[0]), N_SLOTS):
            raise ValueError(f"layout batch must be (B, {len(pg.regions[0])}, 18), got {batch.shape}")
    elif batch.ndim != 2 or batch.shape[1] != N_TILE_INPUT:
        raise ValueError(f"tile batch must be (B, {N_TILE_INPUT}), got {batch.shape}")
    st = static if static is not None else static_forward(params, pg, cfg.layers)
    step = chunk or chunk_size(pg, cfg)
    b = batch.shape[0]
    scores = np.empty(b, params["w_x"].dtype)
    budget = KEEP_BYTES if keep_bytes is None else keep_bytes
    kept = 0
    chunks: list[tuple[int, int, ChunkCache | None]] = []
    for lo in range(0, b, step):
        hi = min(b, lo + step)
        s, cc = _forward_chunk(params, pg, st, batch[lo:hi], cfg, keep and kept <= budget)
        scores[lo:hi] = s
        if keep:
            kept += cc.nbytes() if cc is not None else 0
            chunks.append((lo, hi, cc if kept <= budget else None))
    return scores, (Cache(st, batch, chunks) if keep else None)


def _backward_chunk(params: Params, pg: PreparedGraph, st: StaticCache, cc: ChunkCache,
                    ds: np.ndarray, cfg: ModelConfig, g: Params,
                    extra_dz: list[np.ndarray | None], extra_dpre: np.ndarray) -> np.ndarray:
    """Head and per-config backward of one chunk; accumulates into g / extra_dz / extra_dpre.

    Returns the chunk's gradient with respect to S = Σ_i h_L[i] (H,).
    """
    dt = params["w_x"].dtype
    n = max(pg.n_nodes, 1)
    layers = cfg.layers
    if cfg.has_prior:
        assert cc.summary is not None
        g["w_prior"][0] += prior_input(cc.summary, cfg) @ ds
    g["w_o"] += cc.u.T @ ds
    g["b_o"][0] += ds.sum()
    dq = (ds[:, None] * params["w_o"][None]) * cc.dgelu_q
    g["w_p"] += cc.pooled.T @ dq
    g["b_p"] += dq.sum(axis=0)
    dpooled = dq @ params["w_p"].T  # (B, H)
    if cc.summary is not None:
        g["w_summary"] += cc.summary.T @ dq
    if cfg.kind == "tile":
        g["w_c"] += cc.batch.astype(dt, copy=False).T @ dq
        return dpooled.sum(axis=0) / n
    b = ds.shape[0]
    gd = np.broadcast_to((dpooled / n)[:, None, :], (b, len(pg.regions[layers]), dpooled.shape[1]))
    for lay in range(layers, 0, -1):
        c = cc.layer[lay]
        reg = pg.regions[lay]
        dprev = c["d"]
        h = dprev.shape[2]
        rp = dprev.shape[1]
        dzb = gd * c["dgelu_zb"]
        ex = extra_dz[lay]
        assert ex is not None
        ex[reg] += dzb.sum(axis=0) - gd.sum(axis=0) * gelu_grad(c["zs"])
        flat = dzb.reshape(-1, h)
        dzp = np.ascontiguousarray(dzb[:, :rp])
        g[f"l{lay}_w_self"] += dprev.reshape(-1, h).T @ dzp.reshape(-1, h)
        g[f"l{lay}_w_in"] += c["ai"].reshape(-1, h).T @ flat
        g[f"l{lay}_w_out"] += c["ao"].reshape(-1, h).T @ flat
        gprev = _mm(dzp, params[f"l{lay}_w_self"].T)
        gprev += gd[:, :rp]
        gprev += pg.sub_in_t[lay].apply(_mm(dzb, params[f"l{lay}_w_in"].T))  # type: ignore[union-attr]
        gprev += pg.sub_out_t[lay].apply(_mm(dzb, params[f"l{lay}_w_out"].T))  # type: ignore[union-attr]
        gd = gprev
    r0 = pg.regions[0]
    dp0 = gd * cc.dgelu_p0
    config_embed(np.ascontiguousarray(cc.batch, dtype=np.int8), g["e_cfg"], np.ascontiguousarray(dp0), True)
    if cc.derived is not None:
        g["w_d"] += cc.derived.reshape(-1, N_DERIVED).T @ dp0.reshape(-1, dp0.shape[2])
    extra_dpre[r0] += dp0.sum(axis=0) - gd.sum(axis=0) * gelu_grad(st.pre[r0])
    return dpooled.sum(axis=0) / n


def backward(params: Params, pg: PreparedGraph, cache: Cache, dscores: np.ndarray,
             cfg: ModelConfig) -> Params:
    """Gradients of Σ_b dscores[b] · scores[b] with respect to every parameter (same keys and dtypes)."""
    dt = params["w_x"].dtype
    g: Params = {k: np.zeros_like(v) for k, v in params.items()}
    ds = np.asarray(dscores, dt)
    st = cache.static
    layers = cfg.layers
    extra_dz: list[np.ndarray | None] = [None] + [np.zeros_like(st.h[0]) for _ in range(layers)]
    extra_dpre = np.zeros_like(st.pre)
    d_total = np.zeros(st.total.shape, dt)
    for lo, hi, cc in cache.chunks:
        if cc is None:  # past forward's keep_bytes: recomputed, then dropped after its backward
            cc = _forward_chunk(params, pg, st, cache.batch[lo:hi], cfg, True)[1]
            assert cc is not None
        d_total += _backward_chunk(params, pg, st, cc, ds[lo:hi], cfg, g, extra_dz, extra_dpre)
    # static pass
    dh = np.broadcast_to(d_total, st.h[-1].shape).copy()
    for lay in range(layers, 0, -1):
        zl = st.z[lay]
        dz = dh * gelu_grad(zl)
        if extra_dz[lay] is not None:
            dz += extra_dz[lay]
        hp = st.h[lay - 1]
        g[f"l{lay}_w_self"] += hp.T @ dz
        g[f"l{lay}_w_in"] += st.a_in[lay].T @ dz  # type: ignore[union-attr]
        g[f"l{lay}_w_out"] += st.a_out[lay].T @ dz  # type: ignore[union-attr]
        g[f"l{lay}_b"] += dz.sum(axis=0)
        dh = (dh + dz @ params[f"l{lay}_w_self"].T + pg.p_in_t.apply(dz @ params[f"l{lay}_w_in"].T)
              + pg.p_out_t.apply(dz @ params[f"l{lay}_w_out"].T))
    dpre = dh * gelu_grad(st.pre)
    dpre += extra_dpre
    g["w_x"] += pg.x.astype(dt, copy=False).T @ dpre
    g["b_x"] += dpre.sum(axis=0)
    rows_scatter_add(pg.opcode, np.ascontiguousarray(dpre), g["e_op"])
    return g


def reference_layout_scores(params: Params, pg: PreparedGraph, values: np.ndarray,
                            cfg: ModelConfig) -> np.ndarray:
    """Naive per-config forward over the WHOLE graph (no regions); for tests of the region shortcut."""
    out = []
    for b in range(values.shape[0]):
        x = pg.x.astype(params["w_x"].dtype)
        pre = x @ params["w_x"] + params["b_x"] + params["e_op"][pg.opcode]
        emb = params["e_cfg"][np.arange(N_SLOTS)[None, :], values[b].astype(np.int64) + 1].sum(axis=1)
        summary = None
        if cfg.derived:
            dfeat, vr = derived_config_features(pg, values[b:b + 1], params["w_x"].dtype)
            emb = emb + dfeat[0] @ params["w_d"]
            summary = config_summary(pg, dfeat, vr)[0]
        pre[pg.config_pos] += emb
        h = gelu(pre)
        for lay in range(1, cfg.layers + 1):
            z = (h @ params[f"l{lay}_w_self"] + pg.p_in.apply(h) @ params[f"l{lay}_w_in"]
                 + pg.p_out.apply(h) @ params[f"l{lay}_w_out"] + params[f"l{lay}_b"])
            h = h + gelu(z)
        pooled = h.mean(axis=0)
        q = pooled @ params["w_p"] + params["b_p"]
        if summary is not None:
            q = q + summary @ params["w_summary"]
        u = gelu(q)
        prior = summary[COMPUTE_SHARE] * cfg.prior * params["w_prior"][0] if cfg.has_prior else 0.0
        out.append(u @ params["w_o"] + params["b_o"][0] + prior)
    return np.array(out)
