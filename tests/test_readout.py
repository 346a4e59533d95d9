"""Tests of the ridge readout: streamed statistics and the λ-grid solve against numpy computations on
materialised states, the algebra of RidgeStats, accuracy counting and the random baseline."""

from __future__ import annotations

import numpy as np
import pytest

import esnfed_core.readout as readout
from esnfed_core.readout import (
    Counts,
    RidgeStats,
    StatsAccumulator,
    count_correct,
    evaluate,
    predict,
    random_baseline,
    ridge_stats,
    solve,
)
from esnfed_core.reservoir import ReservoirConfig, build_reservoir, run_batch
from float32_bounds import readout_bound, readout_rtol, stats_bounds

LAMBDAS = [1e-5, 1e-4, 1e-3, 1e-2, 0.1, 0.5, 1.0]
C = 4


@pytest.fixture
def res():
    return build_reservoir(ReservoirConfig(3, 30, 0.9, 0.4, 0.9), 17)


def materialise(res, x, y, batch_size=None):
    """Every state as a row (window-major) and one-hot targets: what streaming avoids building.

    With ``batch_size`` the states are computed in the same batches as the streamed statistics,
    so both see the very same float32 states (the same products of the same shapes)."""
    step = batch_size or len(x)
    s = np.concatenate(
        [run_batch(res, x[lo : lo + step]).transpose(1, 0, 2) for lo in range(0, len(x), step)]
    ).reshape(-1, res.units)
    return s, np.eye(C)[y.reshape(-1).astype(int)]


# Across different batch splits the float32 states differ by BLAS rounding: OpenBLAS picks its
# kernel per CPU (Haswell, SkylakeX, Zen...) and blocks each product by its shape, so a window's
# row of X(B x N) @ W can round differently for another B. test_reservoir bounds that difference
# by 1e-6 per state (states lie in [-1, 1]); from it follow elementwise bounds on the sums:
# |dA_cj| <= sum_t |onehot_tc| |ds_tj| <= n_steps * d  and
# |dB_ij| <= sum_t |s_ti| |ds_tj| + |s'_tj| |ds_ti| <= 2 * n_steps * d,
# plus the float32 rounding of each side's chunk products (tests/float32_bounds.py; both sides
# have it, hence the factor 2).
STATE_ATOL = 1e-6


def assert_stats_close_across_splits(p, q, s, onehot):
    da, db = stats_bounds(s, onehot, state_atol=STATE_ATOL)
    assert np.all(np.abs(p.a - q.a) <= 2 * da) and np.all(np.abs(p.b - q.b) <= 2 * db)


def assert_stats_near_exact(stats, s, onehot):
    """Streamed statistics against the exact float64 sums of the same float32 states."""
    da, db = stats_bounds(s, onehot)
    assert np.all(np.abs(stats.a - onehot.T @ s) <= da + 1e-12)
    assert np.all(np.abs(stats.b - s.T @ s) <= db + 1e-12)


def test_stats_equal_products_of_materialised_states(res, make_windows):
    x, y = make_windows(9, 40, 3, C)
    stats = ridge_stats(res, x, y, C, batch_size=4)
    # The same batches: the same float32 states, so only the chunks' float32 rounding differs
    # from the exact float64 sums (it is far below the bound: a few float32 ulps in practice).
    s, onehot = materialise(res, x, y, batch_size=4)
    s = s.astype(np.float64)
    assert_stats_near_exact(stats, s, onehot)
    assert np.abs(stats.b - s.T @ s).max() <= 1e-5 * np.abs(s.T @ s).max()
    # All windows in one batch: other float32 states, within the bound derived above.
    s1, _ = materialise(res, x, y)
    assert np.abs(s1 - s).max() <= STATE_ATOL
    s1 = s1.astype(np.float64)
    whole = RidgeStats(onehot.T @ s1, s1.T @ s1, len(s1), len(x))
    assert_stats_close_across_splits(stats, whole, s1, onehot)
    assert np.array_equal(stats.b, stats.b.T)
    assert (stats.n_steps, stats.n_windows) == (9 * 40, 9)
    assert stats.a.dtype == stats.b.dtype == np.float64


def test_solve_equals_numpy_solve_for_the_lambda_grid(res, make_windows):
    x, y = make_windows(9, 40, 3, C, seed=1)
    stats = ridge_stats(res, x, y, C)
    s, onehot = materialise(res, x, y)
    s = s.astype(np.float64)
    grid = solve(stats, LAMBDAS)
    assert grid.shape == (len(LAMBDAS), C, res.units)
    da, db = stats_bounds(s, onehot)
    for lam, w in zip(LAMBDAS, grid):
        # W = A (B + λI)^-1  <=>  (B + λI) Wᵀ = Aᵀ  (B symmetric); the statistics' float32
        # chunk rounding moves W by at most readout_bound (tests/float32_bounds.py).
        want = np.linalg.solve(s.T @ s + lam * np.eye(res.units), s.T @ onehot).T
        assert np.linalg.norm(w - want) <= readout_bound(s.T @ s, want, lam, da, db)
    # A scalar λ gives one (C, N) readout, equal to its entry in the grid.
    assert np.array_equal(solve(stats, LAMBDAS[2]), grid[2])
    # λ changes the answer (the grid is not solved once and copied).
    assert not np.allclose(grid[0], grid[-1])


@pytest.mark.parametrize("units, windows, steps", [(30, 9, 40), (100, 32, 200)])
def test_float32_statistics_keep_the_readout_within_float32_rounding_of_the_float64_path(
        make_windows, units, windows, steps):
    """The readout from the streamed statistics (float32 chunk products added into float64)
    against the float64 path (the same float32 states, exact float64 products and sums).

    Each entry of B ends a chunk as a float32 number (relative rounding u = 2⁻²⁴, sums over
    chunks add a few of those), and the solve amplifies a relative perturbation of B by at most
    cond(B + λI): so ‖ΔW‖/‖W‖ ≲ u·cond, allowed twice (float32_bounds.readout_rtol). Measured
    here (OpenBLAS, Haswell kernel): 0.05–0.3·u·cond. float32_bounds.readout_bound gives the
    rigorous, much looser bound, checked in the test above. For comparison, the float32 states'
    own rounding moves the readout by ~5e-7 relative from an all-float64 recurrence (BENCHMARKS)."""
    res = build_reservoir(ReservoirConfig(3, units, 0.9, 0.4, 0.9), 17)
    x, y = make_windows(windows, steps, 3, C, seed=7)
    stats = ridge_stats(res, x, y, C)
    s, onehot = materialise(res, x, y)
    s = s.astype(np.float64)
    for lam, w in zip(LAMBDAS, solve(stats, LAMBDAS)):
        m = s.T @ s + lam * np.eye(units)
        want = np.linalg.solve(m, s.T @ onehot).T
        err = np.linalg.norm(w - want) / np.linalg.norm(want)
        assert err <= readout_rtol(s.T @ s, lam), (lam, err, np.linalg.cond(m))


def test_solve_falls_back_to_least_squares_when_singular(res, make_windows):
    x, y = make_windows(6, 20, 3, C, seed=2)
    s, onehot = materialise(res, x, y)
    s = s.astype(np.float64)
    s[:, 3] = 0.0  # a dead unit: B is singular and λ = 0 leaves it so
    stats = RidgeStats(onehot.T @ s, s.T @ s, len(s), len(x))
    w = solve(stats, 0.0)
    assert np.all(np.isfinite(w))
    np.testing.assert_allclose(w @ stats.b, stats.a, atol=1e-8 * np.abs(stats.a).max())
    assert np.abs(w[:, 3]).max() <= 1e-10  # minimum-norm: nothing on the dead unit


def test_ridge_stats_add_up_like_the_pooled_data(res, make_windows):
    x, y = make_windows(12, 25, 3, C, seed=3)
    parts = [ridge_stats(res, x[lo:hi], y[lo:hi], C) for lo, hi in [(0, 2), (2, 7), (7, 12)]]
    s1, s2, s3 = parts
    whole = ridge_stats(res, x, y, C)
    left, right = (s1 + s2) + s3, s1 + (s2 + s3)
    # Same parts, other association: only float64 addition order differs.
    np.testing.assert_allclose(left.a, right.a, rtol=1e-12)
    np.testing.assert_allclose(left.b, right.b, rtol=1e-12, atol=1e-12 * np.abs(right.b).max())
    # The pooled data streams in one batch of 12 windows, the parts in batches of 2 and 5: other
    # float32 states (see STATE_ATOL). The parts pooled in the same batches give the same sums.
    s, onehot = materialise(res, x, y)
    assert_stats_close_across_splits(left, whole, s, onehot)
    pooled = StatsAccumulator(res.units, C)
    for lo, hi in [(0, 2), (2, 7), (7, 12)]:
        pooled.add_windows(res, x[lo:hi], y[lo:hi], 256)
    np.testing.assert_allclose(left.a, pooled.result().a, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(left.b, pooled.result().b, rtol=1e-12, atol=1e-12)
    for p in (left, right, whole):
        assert (p.n_steps, p.n_windows) == (12 * 25, 12)
    # Commutative bit for bit (IEEE addition is), and sum() starts from 0.
    ab, ba = s1 + s2, s2 + s1
    assert ab.a.tobytes() == ba.a.tobytes() and ab.b.tobytes() == ba.b.tobytes()
    total = sum(parts)
    assert total.b.tobytes() == left.b.tobytes() and total.n_windows == 12
    zero = RidgeStats.zeros(res.units, C)
    assert (zero + s1).b.tobytes() == s1.b.tobytes()
    with pytest.raises(ValueError, match="RidgeStats"):
        s1 + RidgeStats.zeros(res.units, C + 1)
    with pytest.raises(TypeError, match="unsupported operand type.*'RidgeStats' and 'int'"):
        s1 + 1


def test_accumulator_chunking_does_not_change_the_sums(res, make_windows, monkeypatch):
    x, y = make_windows(5, 33, 3, C, seed=4)
    states = run_batch(res, x)
    default = StatsAccumulator(res.units, C)
    default.add(states, y)
    monkeypatch.setattr(readout, "_GRAM_CHUNK_ROWS", 7)  # chunks cross window boundaries
    chunked = StatsAccumulator(res.units, C)
    chunked.add(states[:20], y[:, :20])
    chunked.add(states[20:], y[:, 20:])
    d, c = default.result(), chunked.result()
    # Other chunks, other float32 rounding of each chunk's sums: within both sides' bounds.
    s = states.transpose(1, 0, 2).reshape(-1, res.units).astype(np.float64)
    da, db = stats_bounds(s, np.eye(C)[y.reshape(-1)])
    assert np.all(np.abs(c.a - d.a) <= 2 * da) and np.all(np.abs(c.b - d.b) <= 2 * db)
    assert c.n_steps == d.n_steps == 5 * 33
    assert c.n_windows == 10  # counts windows per add() call: two time slices of 5 windows


def test_counts_equal_a_direct_argmax(res, make_windows):
    x, y = make_windows(8, 30, 3, C, seed=5)
    xv, yv = make_windows(7, 30, 3, C, seed=6)
    readouts = solve(ridge_stats(res, x, y, C), LAMBDAS[:4])
    s, _ = materialise(res, xv, yv)
    # Direct computation at the documented precision: float32 states times float32 readouts.
    scores = np.einsum("rn,lcn->lrc", s, readouts.astype(np.float32))
    direct = (scores.argmax(axis=2) == yv.reshape(-1)).sum(axis=1)
    counts = evaluate(res, xv, yv, readouts, batch_size=3)
    assert counts.correct.tolist() == direct.tolist()
    assert counts.total == 7 * 30
    np.testing.assert_allclose(counts.accuracy, direct / (7 * 30))
    # One (C, N) readout, count_correct on one batch, and predict agree with the same argmax.
    one = evaluate(res, xv, yv, readouts[1])
    assert one.correct.tolist() == [direct[1]]
    states = run_batch(res, xv)
    assert count_correct(states, yv, readouts).correct.tolist() == direct.tolist()
    pred = predict(states, readouts[1])
    assert pred.shape == (7, 30)
    assert np.array_equal(pred.reshape(-1), scores[1].argmax(axis=1))


def test_counts_add():
    total = Counts(np.array([3, 4]), 10) + Counts(np.array([1, 0]), 5)
    assert total.correct.tolist() == [4, 4] and total.total == 15
    np.testing.assert_allclose(total.accuracy, [4 / 15, 4 / 15])


def test_random_baseline_is_seeded_and_near_chance():
    labels = np.random.default_rng(0).integers(0, 6, size=(100, 200))
    a, b = random_baseline(labels, 6, seed=1), random_baseline(labels, 6, seed=1)
    assert a.correct.tolist() == b.correct.tolist() and a.total == 20_000
    assert random_baseline(labels, 6, seed=2).correct.tolist() != a.correct.tolist()
    sigma = np.sqrt((1 / 6) * (5 / 6) / a.total)
    assert abs(float(a.accuracy[0]) - 1 / 6) < 5 * sigma
    # Chance level does not depend on the label distribution.
    constant = random_baseline(np.zeros((100, 200), np.int8), 4, seed=3)
    assert abs(float(constant.accuracy[0]) - 1 / 4) < 5 * np.sqrt(0.25 * 0.75 / 20_000)


# ------------------------------------------------------------ readout.solver (docs/fidelity.md §4)
def _stats_from(s: np.ndarray, y: np.ndarray, n_classes: int) -> RidgeStats:
    onehot = np.eye(n_classes)[y]
    return RidgeStats(onehot.T @ s, s.T @ s, len(s), 1)


def test_pinv32_is_numpy_pinv_in_float32():
    rng = np.random.default_rng(3)
    s = rng.standard_normal((400, 12))
    stats = _stats_from(s, rng.integers(0, C, 400), C)
    rcond = 1e-15  # torch's Tensor.pinverse default, the authors' call
    for lam in (1e-5, 0.5):
        m32 = stats.b.astype(np.float32) + np.float32(lam) * np.eye(12, dtype=np.float32)
        want = stats.a.astype(np.float32) @ np.linalg.pinv(m32, rcond=rcond)
        got = solve(stats, lam, solver="pinv32")
        assert got.dtype == np.float64 and got.shape == (C, 12)
        np.testing.assert_array_equal(got, want.astype(np.float64))  # same computation, same shapes
    grid = solve(stats, [1e-5, 0.5], solver="pinv32")
    np.testing.assert_array_equal(grid[1], solve(stats, 0.5, solver="pinv32"))


def _exact_spectrum_stats(n_classes: int = C) -> tuple[RidgeStats, np.ndarray]:
    """Statistics whose B = P·diag(d)·Pᵀ (P a signed permutation) holds singular values d that
    float32 represents exactly and that its SVD finds exactly (each column one nonzero), spread
    from 1 down to 1e-12: below pinv's old cut-off N·eps32·σ_max ≈ 1e-6 and above 1e-15·σ_max."""
    rng = np.random.default_rng(6)
    d = np.float32([1.0, 0.5, 0.25, 1e-3, 1e-5, 1e-7, 1e-9, 1e-12]).astype(np.float64)
    n = len(d)
    p = np.zeros((n, n))
    p[np.arange(n), rng.permutation(n)] = rng.choice([-1.0, 1.0], n)
    a = rng.integers(1, 9, (n_classes, n)) / 8.0  # float32-exact
    return RidgeStats(a, (p * d) @ p.T, 1000, 1), np.linalg.inv((p * d) @ p.T)


def test_pinv32_cuts_no_singular_value_above_1e_15():
    # The authors' Tensor.pinverse() (rcond = 1e-15) inverts every singular value here, 1e-12
    # included; the exact readout is A·B⁻¹. Each entry of the float32 result is one rounded product
    # a·(1/σ) (B⁻¹ has one nonzero a row): two float32 roundings, 2·eps32 ≈ 2.4e-7 relative.
    stats, inv = _exact_spectrum_stats()
    want = stats.a @ inv
    got = solve(stats, 0.0, solver="pinv32")
    np.testing.assert_allclose(got, want, rtol=4 * float(np.finfo(np.float32).eps), atol=0)
    # The same as numpy's float32 pinv at rcond = 1e-15 (to the same float32 rounding)
    ref = stats.a.astype(np.float32) @ np.linalg.pinv(stats.b.astype(np.float32), rcond=1e-15)
    np.testing.assert_allclose(got, ref, rtol=4 * float(np.finfo(np.float32).eps), atol=0)


def test_pinv32_equals_torchs_tensor_pinverse():
    torch = pytest.importorskip("torch")
    eps32 = float(np.finfo(np.float32).eps)
    # Exact spectrum: both inverse every singular value to float32 rounding (as above).
    stats, _ = _exact_spectrum_stats()
    a32, b32 = (torch.from_numpy(m.astype(np.float32)) for m in (stats.a, stats.b))
    want = (a32 @ b32.pinverse()).numpy()  # the authors' call, default rcond
    np.testing.assert_allclose(solve(stats, 0.0, solver="pinv32"), want, rtol=4 * eps32, atol=0)
    # States with λ on the diagonal: two float32 pseudo-inverses by different LAPACK builds agree
    # to eps32·cond(B + λI) per side (×10, as tests/test_readout_bias.py), in norm.
    rng = np.random.default_rng(7)
    stats = _stats_from(rng.standard_normal((400, 12)) @ rng.standard_normal((12, 12)), rng.integers(0, C, 400), C)
    lam = 0.5
    m32 = stats.b.astype(np.float32) + np.float32(lam) * np.eye(12, dtype=np.float32)
    want = (torch.from_numpy(stats.a.astype(np.float32)) @ torch.from_numpy(m32).pinverse()).numpy()
    got = solve(stats, lam, solver="pinv32")
    tol = 10 * eps32 * np.linalg.cond(m32.astype(np.float64))
    assert np.linalg.norm(got - want) <= tol * np.linalg.norm(want)


def test_pinv32_loses_small_lambdas_to_float32_rounding():
    rng = np.random.default_rng(4)
    n = 20
    # Nearly collinear columns: B's diagonal ≈ 500 and its small eigenvalues ≈ 3e-8. In float32
    # B_ii + 1e-5 rounds to B_ii (λ under half the float spacing at B_ii ≥ 2²⁵·λ ≈ 336), so pinv32
    # at λ = 1e-5 is λ = 0's, bit for bit, and inverts B's float32 rounding noise (entries ≈ 500
    # to ±3e-5, far above its small eigenvalues), while the float64 Cholesky keeps λ.
    s = rng.standard_normal((500, 1)) @ np.ones((1, n)) + 1e-5 * rng.standard_normal((500, n))
    stats = _stats_from(s, rng.integers(0, C, 500), C)
    assert np.diag(stats.b).min() >= 2**25 * 1e-5
    pinv = solve(stats, 1e-5, solver="pinv32")
    np.testing.assert_array_equal(pinv, solve(stats, 0.0, solver="pinv32"))
    chol = solve(stats, 1e-5)
    assert np.linalg.norm(chol - pinv) > 10 * np.linalg.norm(chol)
    # Well conditioned: the two agree to float32 accuracy.
    good = _stats_from(rng.standard_normal((500, n)), rng.integers(0, C, 500), C)
    np.testing.assert_allclose(solve(good, 1.0, solver="pinv32"), solve(good, 1.0), rtol=1e-4, atol=1e-6)


def test_unknown_solver_is_rejected():
    rng = np.random.default_rng(5)
    stats = _stats_from(rng.standard_normal((50, 4)), rng.integers(0, C, 50), C)
    with pytest.raises(readout.ParameterError, match="^solver"):
        solve(stats, 0.1, solver="qr")
