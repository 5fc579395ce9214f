"""Numba kernels of the NumPy model: batched sparse aggregation and the layout embedding and its adjoint.

Everything else in the model is dense BLAS matmuls through NumPy. The kernels loop in a fixed order, so
results are bit-for-bit reproducible run to run.
"""

from __future__ import annotations

from ..kernels.jit import kernel


@kernel
def csr_spmm_batched(indptr, indices, weights, x, out):
    """out[b, i, :] = Σ_{p in indptr[i]:indptr[i+1]} weights[p] · x[b, indices[p], :].

    indptr (r+1,) int64, indices (nnz,) int64 column ids into axis 1 of x, weights (nnz,) float;
    x (B, k, H) float; out (B, r, H) float, overwritten.
    """
    nb = x.shape[0]
    h = x.shape[2]
    r = indptr.shape[0] - 1
    for b in range(nb):
        for i in range(r):
            for q in range(h):
                out[b, i, q] = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                w = weights[p]
                j = indices[p]
                for q in range(h):
                    out[b, i, q] += w * x[b, j, q]


@kernel
def config_embed(values, table, emb, adjoint):
    """The 18-slot layout embedding (``adjoint`` False) and its adjoint, the gradient (True).

    values (B, nc, 18) int8 in −1..5; table (18, 7, H) float; emb (B, nc, H) float.
    False: emb[b, j, :] = Σ_s table[s, values[b, j, s] + 1, :] (emb overwritten).
    True: table[s, values[b, j, s] + 1, :] += emb[b, j, :] (emb is the output gradient; table, the
    table's gradient, is accumulated in place).
    """
    nb, nc, ns = values.shape
    h = table.shape[2]
    for b in range(nb):
        for j in range(nc):
            if not adjoint:
                for q in range(h):
                    emb[b, j, q] = 0.0
            for s in range(ns):
                v = values[b, j, s] + 1
                if adjoint:
                    for q in range(h):
                        table[s, v, q] += emb[b, j, q]
                else:
                    for q in range(h):
                        emb[b, j, q] += table[s, v, q]


@kernel
def rows_scatter_add(index, src, out):
    """out[index[i], :] += src[i, :]; index (n,) int64, src (n, H), out (m, H) accumulated in place."""
    h = src.shape[1]
    for i in range(index.shape[0]):
        r = index[i]
        for q in range(h):
            out[r, q] += src[i, q]

