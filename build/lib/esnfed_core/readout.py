"""Ridge readout from sufficient statistics: accumulate (A, B, n) batch by batch, solve for a λ grid.

Each chunk of rows is a float32 product (BLAS syrk: half the products of a general GEMM), added
into float64 sums; the same batches therefore give the same sums up to float64 rounding whatever
the split into clients: this is what makes IncFed equal centralised ridge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import scipy.linalg

from esnfed_core.quote import quote
from esnfed_core.reservoir import DTYPE, Reservoir, iter_states
from esnfed_core.validation import Bound, ParameterError, check_param

LAMBDA = Bound(low=0.0)  # ridge penalty λ (params.yaml readout.lambdas, continual.lambda)

# Rows of states per float32 product SᵀS (and YᵀS) before it is added into the float64 sums: the
# float32 rounding of a chunk's sums grows with its rows (worst case rows·2⁻²⁴ relative), and a
# smaller chunk adds one N×N float64 addition per chunk (4096 rows at 400 units: ~2 % more).
_GRAM_CHUNK_ROWS = 4096


@dataclass(frozen=True, eq=False)
class RidgeStats:
    """Sufficient statistics of a ridge readout: A = YᵀS (C, N), B = SᵀS (N, N), and counts.

    ``n_steps`` counts the time steps (rows of S), ``n_windows`` the windows they came from.
    Statistics add with ``+``; the sum over clients equals the statistics of the pooled data.
    With ``bias`` (params.yaml readout.bias, the papers' eq. 1) S is the augmented [S, 1]: A is
    (C, N+1), B (N+1, N+1), the last entry the constant feature (B's corner = n_steps), and
    :func:`solve` leaves that entry unpenalised.
    """

    a: np.ndarray
    b: np.ndarray
    n_steps: int
    n_windows: int
    bias: bool = False

    def __post_init__(self) -> None:
        a, b = np.asarray(self.a), np.asarray(self.b)
        if a.ndim != 2 or b.ndim != 2 or b.shape != (a.shape[1], a.shape[1]):
            raise ParameterError(f"RidgeStats: expected A (C, N) and B (N, N), got {a.shape} and {b.shape}")
        check_param("RidgeStats.n_steps", self.n_steps, integer=True, low=0)
        check_param("RidgeStats.n_windows", self.n_windows, integer=True, low=0)

    @classmethod
    def zeros(cls, units: int, n_classes: int, bias: bool = False) -> "RidgeStats":
        n = units + int(bias)
        return cls(np.zeros((n_classes, n)), np.zeros((n, n)), 0, 0, bias)

    @property
    def units(self) -> int:
        """Columns of the readout: N, or N + 1 with ``bias``."""
        return self.b.shape[0]

    @property
    def n_classes(self) -> int:
        return self.a.shape[0]

    def __add__(self, other: "RidgeStats") -> "RidgeStats":
        if not isinstance(other, RidgeStats):
            return NotImplemented
        if other.a.shape != self.a.shape or other.bias != self.bias:
            raise ValueError(f"RidgeStats: cannot add shapes {self.a.shape} and {other.a.shape} "
                             f"(bias {self.bias} and {other.bias})")
        return RidgeStats(
            self.a + other.a, self.b + other.b,
            self.n_steps + other.n_steps, self.n_windows + other.n_windows, self.bias,
        )

    def __radd__(self, other):  # lets sum() start from 0
        if isinstance(other, int) and other == 0:
            return self
        return NotImplemented


class StatsAccumulator:
    """Mutable accumulator of RidgeStats over batches of states (time-major) and labels.

    Per chunk of ``_GRAM_CHUNK_ROWS`` rows of the float32 states, ``chunkᵀ·chunk`` (numpy hands
    it to float32 syrk) and the class sums are float32 products, added into float64 sums: 2-3x
    cheaper than converting the chunk to float64 first (BENCHMARKS.md, "Accelerator path"), at a
    float32 rounding of each chunk's sums (relative ≲ 1e-7 in practice; tests/test_readout.py
    bounds it). Only numpy's BLAS is used, as in the recurrence: alternating with scipy's
    separately threaded OpenBLAS makes the two thread pools spin against each other on 2 cores.

    With ``bias`` the statistics are those of the augmented states [S, 1] (RidgeStats.bias): the
    constant column's entries (state sums, class counts, step count) are added in float64 next
    to the same float32 products, so the (N, N) block is the bits of the statistics without bias.
    """

    def __init__(self, units: int, n_classes: int, bias: bool = False):
        check_param("units", units, integer=True, low=1)
        check_param("n_classes", n_classes, integer=True, low=1)
        self.units = int(units)
        self.n_classes = int(n_classes)
        self.bias = bool(bias)
        n = self.units + int(self.bias)
        self._a = np.zeros((self.n_classes, n))
        self._b = np.zeros((n, n))
        # Views of the state block (the whole arrays without bias: the same in-place sums).
        self._a_states = self._a[:, : self.units]
        self._b_states = self._b[: self.units, : self.units]
        self._gram = np.empty((self.units, self.units), DTYPE)
        self._n_steps = 0
        self._n_windows = 0

    def add(self, states: np.ndarray, labels: np.ndarray) -> None:
        """Add states (T, B, N) with per-step labels (B, T)."""
        if np.ndim(states) != 3 or np.shape(states)[2] != self.units:
            raise ParameterError(
                f"states: expected (steps, windows, {self.units}), got shape {np.shape(states)}"
            )
        t_len, b, n = states.shape
        y = _flat_labels(labels, t_len, b, self.n_classes)
        s = np.ascontiguousarray(states, dtype=DTYPE).reshape(t_len * b, n)
        step = _GRAM_CHUNK_ROWS
        for lo in range(0, len(s), step):
            chunk = s[lo : lo + step]
            np.matmul(chunk.T, chunk, out=self._gram)
            self._b_states += self._gram
            self._a_states += _class_sums(chunk, y[lo : lo + step], self.n_classes)
            if self.bias:  # the constant feature's row and column: Σs, n, and class counts
                sums = chunk.sum(axis=0, dtype=np.float64)
                self._b[: n, n] += sums
                self._b[n, : n] += sums
                self._b[n, n] += len(chunk)
                self._a[:, n] += np.bincount(y[lo : lo + step], minlength=self.n_classes)
        self._n_steps += t_len * b
        self._n_windows += b

    def add_windows(self, res: Reservoir, x: np.ndarray, labels: np.ndarray, batch_size: int = 256) -> None:
        """Add the states of windows ``x`` (W, T, U) with per-step ``labels`` (W, T), streamed by
        batch. A call per user keeps one state block alive: the last batch is released on return."""
        _check_windows(x, labels)
        for sb in iter_states(res, x, batch_size):
            self.add(sb.states, labels[sb.index])

    def result(self) -> RidgeStats:
        # Symmetrise explicitly so B is exactly symmetric whatever the BLAS did.
        b = 0.5 * (self._b + self._b.T)
        return RidgeStats(self._a.copy(), b, self._n_steps, self._n_windows, self.bias)


def _flat_labels(labels: np.ndarray, t_len: int, b: int, n_classes: int) -> np.ndarray:
    """Validate per-step labels (B, T) and flatten them time-major, like the states."""
    labels = np.asarray(labels)
    if labels.shape != (b, t_len):
        raise ParameterError(f"labels: expected shape {(b, t_len)}, got {labels.shape}")
    if labels.dtype.kind not in "iu":
        integral = labels.dtype.kind == "f" and np.all(np.isfinite(labels))
        if not integral or np.any(labels != np.round(labels)):
            raise ParameterError(f"labels: expected integer class indices, got dtype {labels.dtype}")
    y = labels.T.reshape(-1).astype(np.intp)
    if y.size and (y.min() < 0 or y.max() >= n_classes):
        raise ParameterError(f"labels: values must lie in [0, {n_classes}), got {y.min()}..{y.max()}")
    return y


def _class_sums(rows: np.ndarray, y: np.ndarray, n_classes: int) -> np.ndarray:
    """Σ of the rows of each class: the one-hot product YᵀS without building Y row-major."""
    onehot = np.zeros((n_classes, len(y)), rows.dtype)
    onehot[y, np.arange(len(y))] = 1.0
    return onehot @ rows


def _check_windows(x: np.ndarray, labels: np.ndarray) -> None:
    if np.ndim(labels) != 2 or np.ndim(x) < 1 or np.shape(labels)[0] != np.shape(x)[0]:
        raise ParameterError(
            f"labels: expected one row per window ({np.shape(x)[:2]}), got shape {np.shape(labels)}"
        )


def ridge_stats(
    res: Reservoir, x: np.ndarray, labels: np.ndarray, n_classes: int, batch_size: int = 256,
    bias: bool = False,
) -> RidgeStats:
    """Statistics of windows ``x`` (W, T, U) with per-step ``labels`` (W, T), streamed by batch
    (of the augmented states [S, 1] with ``bias``)."""
    acc = StatsAccumulator(res.units, n_classes, bias)
    acc.add_windows(res, x, labels, batch_size)
    return acc.result()


SOLVERS = ("cholesky", "pinv32")
# pinv32's cut-off relative to the largest singular value: torch's Tensor.pinverse default (the
# authors' call), which numpy's pinv applies the same way (cut σ ≤ rcond·σ_max).
PINV32_RCOND = 1e-15


def check_solver(solver: str) -> None:
    if solver not in SOLVERS:
        raise ParameterError(f"solver: expected one of {', '.join(SOLVERS)}, got {quote(solver)}")


def solve(stats: RidgeStats, lambdas: Sequence[float] | float, solver: str = "cholesky") -> np.ndarray:
    """Readouts W = A (B + λI)⁻¹ for each λ: shape (L, C, N), or (C, N) for a scalar λ.

    ``solver``:
      - ``cholesky`` (default): float64 Cholesky solve per λ (B + λI is symmetric positive
        definite); when it is numerically singular (λ = 0 and dead units) a least-squares solve.
      - ``pinv32``: the authors' numerics, W = A · pinv(B + λI) with A, B + λI and the
        pseudo-inverse in float32, as their ``A @ B.pinverse()`` in torch: ``Tensor.pinverse``'s
        default cut-off is rcond = 1e-15 (PINV32_RCOND; not torch.linalg.pinv's default
        N·eps(float32)), below float32's resolution, so no singular value is ever cut and the
        smallest ones, float32 rounding noise of B, are inverted too. λ does not help at small
        values: in float32, B_ii + λ rounds to B_ii once λ is under half the spacing of floats
        at B_ii, i.e. from the first power of 2 above 2²⁴·λ on, so for every B_ii ≥ 2²⁵·λ (3.4e3
        at λ = 1e-4; 70k steps of a 300-unit reservoir leave every diagonal entry unchanged at
        λ = 1e-5 and 75–98 % of them at 1e-4): the small-λ end of the authors' grid is
        regularised by rounding alone. The result is returned as float64.

    Statistics with ``bias`` give (C, N+1) readouts whose last column is the bias b_out: the
    penalty is λ·diag(1, ..., 1, 0), ridge with an unpenalised intercept, which is what
    reservoirpy's ``Ridge(fit_bias=True)`` computes by centring (tests/test_federated.py).
    """
    check_solver(solver)
    scalar = np.ndim(lambdas) == 0
    lams = np.atleast_1d(np.asarray(lambdas, dtype=np.float64))
    for lam in lams:
        LAMBDA.check("lambda", float(lam))
    n = stats.units
    out = np.empty((len(lams), stats.n_classes, n))
    if solver == "pinv32":
        a32 = stats.a.astype(np.float32)
        b32 = stats.b.astype(np.float32)
        eye32 = _penalty(n, stats.bias, np.float32)
        for i, lam in enumerate(lams):
            m = b32 + np.float32(lam) * eye32
            out[i] = a32 @ np.linalg.pinv(m, rcond=PINV32_RCOND)
        return out[0] if scalar else out
    eye = _penalty(n, stats.bias, np.float64)
    for i, lam in enumerate(lams):
        m = stats.b + lam * eye
        try:
            c = scipy.linalg.cho_factor(m, lower=False, check_finite=False)
            out[i] = scipy.linalg.cho_solve(c, stats.a.T, check_finite=False).T
        except np.linalg.LinAlgError:
            out[i] = scipy.linalg.lstsq(m, stats.a.T)[0].T
    return out[0] if scalar else out


def _penalty(n: int, bias: bool, dtype) -> np.ndarray:
    """The ridge penalty's pattern: the identity, with 0 on the bias entry (the last) when ``bias``."""
    eye = np.eye(n, dtype=dtype)
    if bias:
        eye[-1, -1] = 0
    return eye


@dataclass(frozen=True)
class Counts:
    """Correct and total predicted time steps, per readout in a grid (adds with ``+``)."""

    correct: np.ndarray
    total: int

    def __add__(self, other: "Counts") -> "Counts":
        return Counts(self.correct + other.correct, self.total + other.total)

    @property
    def accuracy(self) -> np.ndarray:
        return self.correct / max(self.total, 1)


def predict(states: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Per-step class predictions (argmax) for states (T, B, N) and readout (C, N), or (C, N+1)
    whose last column is the bias: (B, T)."""
    t_len, b, n = states.shape
    scores = states.reshape(t_len * b, n) @ w[:, :n].T.astype(DTYPE)
    if w.shape[1] == n + 1:
        scores += w[:, n].astype(DTYPE)
    return scores.argmax(axis=1).reshape(t_len, b).T


def grid_scores(rows: np.ndarray, readouts: np.ndarray) -> np.ndarray:
    """Float32 outputs (R, L·C) of readouts (L, C, N) — or (L, C, N+1), the last column the bias,
    added — on state rows (R, N), in one GEMM."""
    n = rows.shape[1]
    ll, c, cols = readouts.shape
    if cols not in (n, n + 1):
        raise ParameterError(f"readouts: expected (L, C, {n}) or (L, C, {n + 1}), got shape {readouts.shape}")
    scores = rows @ readouts[:, :, :n].reshape(ll * c, n).T.astype(DTYPE)
    if cols == n + 1:
        scores += readouts[:, :, n].reshape(ll * c).astype(DTYPE)
    return scores


def count_correct(states: np.ndarray, labels: np.ndarray, readouts: np.ndarray) -> Counts:
    """Correct steps of each readout in ``readouts`` (L, C, N) — or (L, C, N+1), the last column
    the bias — on one batch, in one GEMM."""
    t_len, b, n = states.shape
    if np.ndim(readouts) != 3 or readouts.shape[2] not in (n, n + 1):
        raise ParameterError(f"readouts: expected (L, C, {n}) or (L, C, {n + 1}), got shape {np.shape(readouts)}")
    ll, c, _ = readouts.shape
    y = _flat_labels(labels, t_len, b, c)
    scores = grid_scores(states.reshape(t_len * b, n), readouts).reshape(t_len * b, ll, c)
    pred = scores.argmax(axis=2)
    correct = (pred == y[:, None]).sum(axis=0)
    return Counts(correct.astype(np.int64), t_len * b)


def evaluate(
    res: Reservoir, x: np.ndarray, labels: np.ndarray, readouts: np.ndarray, batch_size: int = 256
) -> Counts:
    """Accuracy counts of readouts (L, C, N) — or one (C, N) — on windows ``x``, streamed."""
    _check_windows(x, labels)
    grid = readouts if readouts.ndim == 3 else readouts[None]
    total = Counts(np.zeros(len(grid), np.int64), 0)
    for sb in iter_states(res, x, batch_size):
        total = total + count_correct(sb.states, labels[sb.index], grid)
    return total


def random_baseline(labels: np.ndarray, n_classes: int, seed: int) -> Counts:
    """Counts of a uniformly random prediction per time step (the IncFed tables' baseline)."""
    check_param("n_classes", n_classes, integer=True, low=1)
    rng = np.random.default_rng(seed)
    y = np.asarray(labels).reshape(-1)
    pred = rng.integers(0, n_classes, size=y.shape)
    return Counts(np.array([int((pred == y).sum())]), int(y.size))
