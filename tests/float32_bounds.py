"""Error bounds of the ridge statistics and readouts, for tests that compare them across paths.

StatsAccumulator sums each chunk of at most ``m = readout._GRAM_CHUNK_ROWS`` rows as a float32
product before adding it into float64. A float32 sum of m products of float32 numbers is off by
at most γ_m·Σ|terms| with γ_m = m·u/(1 − m·u), u = 2⁻²⁴ (Higham, Accuracy and Stability of
Numerical Algorithms, §3.1; each product's own rounding is within the same γ). So, elementwise,
|ΔB| ≤ γ_m·|S|ᵀ|S| and |ΔA| ≤ γ_m·Yᵀ|S|. When the two sides also ran other batch splits, their
float32 states differ by at most δ each (test_reservoir: δ = 1e-6), which adds 2·n·δ to |ΔB|
and n·δ to |ΔA| (n rows, |s| ≤ 1).

A readout W = A(B + λI)⁻¹ solved from perturbed statistics then satisfies, with M = B + λI,
(W' − W)M' = ΔA − W·ΔB, hence ‖W' − W‖ ≤ ‖M⁻¹‖(‖ΔA‖ + ‖W‖‖ΔB‖) / (1 − ‖M⁻¹‖‖ΔB‖) (2-norms,
bounded by Frobenius norms of the elementwise bounds), plus float64 rounding of the solves.
"""

from __future__ import annotations

import numpy as np

import esnfed_core.readout as readout

U32 = 2.0**-24


def gamma(m: int) -> float:
    return m * U32 / (1 - m * U32)


def stats_bounds(s: np.ndarray, onehot: np.ndarray, *, chunk_rows: int | None = None,
                 state_atol: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Elementwise bounds (|ΔA|, |ΔB|) for the statistics of the rows ``s`` (n, N) with one-hot
    targets (n, C) against the exact float64 sums (module docstring)."""
    m = min(chunk_rows or readout._GRAM_CHUNK_ROWS, len(s))
    g = gamma(m)
    abs_s = np.abs(np.asarray(s, np.float64))
    n = len(s)
    da = g * (onehot.T @ abs_s) + n * state_atol
    db = g * (abs_s.T @ abs_s) + 2 * n * state_atol
    return da, db


def readout_rtol(b: np.ndarray, lam: float, sides: int = 1, bias: bool = False) -> float:
    """Practical relative tolerance of a readout solved from streamed statistics against the
    float64 path (or, ``sides`` = 2, against another streamed readout): 2·u·cond(B + λI) per side.
    Each entry of B ends a chunk as a float32 number (relative rounding u), and the solve amplifies
    a relative perturbation of B by at most cond; the factor 2 covers the summation within and
    over chunks (measured 0.05–0.3·u·cond: tests/test_readout.py). With ``bias`` (the
    statistics of [S, 1]) the penalty leaves the last entry out, as readout.solve does."""
    penalty = np.eye(len(b))
    if bias:
        penalty[-1, -1] = 0.0
    return sides * 2 * U32 * np.linalg.cond(b + lam * penalty)


def readout_bound(b: np.ndarray, w: np.ndarray, lam: float, da: np.ndarray, db: np.ndarray) -> float:
    """Bound on ‖W' − W‖_F for W = A(B + λI)⁻¹ and statistics perturbed within (da, db)."""
    minv = 1.0 / (np.linalg.eigvalsh(b)[0] + lam)
    ndb, nda = np.linalg.norm(db), np.linalg.norm(da)
    denom = 1.0 - minv * ndb
    if denom <= 0:
        return np.inf
    # float64 rounding of the two Cholesky solves: cond·n·2⁻⁵³ relative, ample as 1e-9 here.
    return minv * (nda + np.linalg.norm(w, 2) * ndb) / denom + 1e-9 * np.linalg.norm(w)
