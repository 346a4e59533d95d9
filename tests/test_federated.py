"""Tests of the federated readouts: IncFed equals centralised ridge for any client split, FedAvg is
the window-weighted mean of local ridge readouts, and both send the documented amount of floats;
IncFed also against reservoirpy's Ridge node."""

from __future__ import annotations

import numpy as np
import pytest

from esnfed_core.aggregate import weighted_average
from esnfed_core.federated import Client, fedavg, incfed
from esnfed_core.messages import CommLedger
from esnfed_core.readout import predict, ridge_stats, solve
from esnfed_core.reservoir import ReservoirConfig, build_reservoir, run_batch
from esnfed_core.validation import ParameterError
from float32_bounds import gamma, readout_rtol

LAMBDAS = [1e-5, 1e-3, 0.1, 1.0]
C, N = 4, 30


@pytest.fixture
def res():
    return build_reservoir(ReservoirConfig(3, N, 0.9, 0.4, 0.9), 23)


def make_clients(x, y, sizes, batch_size=4, bias=False):
    bounds = np.cumsum([0, *sizes])
    assert bounds[-1] == len(x)
    return [
        Client(f"c{i}", x[lo:hi], y[lo:hi], C, batch_size=batch_size, bias=bias)
        for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:]))
    ]


def rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


@pytest.mark.parametrize("sizes", [[23], [6, 17], [1, 2, 4, 1, 3, 2, 5, 3, 2]])
def test_incfed_equals_centralised_ridge(res, make_windows, sizes):
    x, y = make_windows(23, 30, 3, C)
    ledger = CommLedger()
    # Clients stream in batches of 4 windows, the centralised run in one batch of 23.
    result = incfed(res, make_clients(x, y, sizes), LAMBDAS, ledger)
    central = solve(ridge_stats(res, x, y, C), LAMBDAS)
    assert result.readouts.shape == central.shape == (len(LAMBDAS), C, N)
    assert (result.stats.n_windows, result.stats.n_steps) == (23, 23 * 30)
    states = run_batch(res, x)
    s = states.reshape(-1, N).astype(np.float64)
    for lam, w, wc in zip(LAMBDAS, result.readouts, central):
        # Other batch splits: other float32 states (1e-6, as before) and other float32 rounding
        # of the statistics' chunk products on both sides (tests/float32_bounds.py).
        assert rel(w, wc) <= 1e-6 + readout_rtol(result.stats.b, lam, sides=2)
        # The same predictions, except at near-ties: steps whose top-two margin is within what
        # the readout difference and predict()'s float32 scoring (W cast, N products: within
        # γ_{N+1}·|s|·|w|) can move a score. Rounding, which differs by BLAS kernel, may flip
        # those (measured here: the smallest margin is only ~3x the score difference).
        top2 = np.sort(s @ wc.T, axis=1)[:, -2:]
        moved = np.abs(s @ (w - wc).T).max(axis=1) + 2 * gamma(N + 1) * (np.abs(s) @ np.abs(wc).T).max(axis=1)
        can_flip = (top2[:, 1] - top2[:, 0] <= 2 * moved).reshape(states.shape[:2]).T  # (B, T) as predict
        differ = predict(states, w) != predict(states, wc)
        assert not np.any(differ & ~can_flip)
        assert can_flip.mean() <= 0.01  # not vacuous: nearly every step must agree
    k = len(sizes)
    totals = ledger.totals("incfed")
    assert totals["up_floats"] == k * (N * N + N * C)
    assert totals["down_floats"] == k * N * C
    assert totals["rounds"] == 1


def test_fedavg_with_one_client_equals_centralised(res, make_windows):
    x, y = make_windows(15, 30, 3, C, seed=1)
    w = fedavg(res, make_clients(x, y, [15], batch_size=4), 1e-3)
    # The client streams in batches of 4: the same float32 states as this centralised run, so the
    # same readout up to float64 rounding (other batch splits round the states differently).
    assert rel(w, solve(ridge_stats(res, x, y, C, batch_size=4), 1e-3)) <= 1e-12
    whole = ridge_stats(res, x, y, C)
    assert rel(w, solve(whole, 1e-3)) <= 1e-5 + readout_rtol(whole.b, 1e-3, sides=2)


def test_fedavg_is_the_window_weighted_mean_of_local_readouts(res, make_windows):
    x, y = make_windows(23, 30, 3, C, seed=2)
    sizes, lam = [3, 8, 12], 1e-2
    ledger = CommLedger()
    w = fedavg(res, make_clients(x, y, sizes), lam, ledger)
    # Independent: each client's ridge from its materialised states with numpy's solver.
    local, lo, slack = [], 0, 0.0
    for n_c in sizes:
        s = run_batch(res, x[lo : lo + n_c]).transpose(1, 0, 2).reshape(-1, N).astype(np.float64)
        onehot = np.eye(C)[y[lo : lo + n_c].reshape(-1).astype(int)]
        local.append(np.linalg.solve(s.T @ s + lam * np.eye(N), s.T @ onehot).T)
        # the client's float32 statistics move its readout by ≤ readout_rtol of its norm
        slack += n_c / sum(sizes) * readout_rtol(s.T @ s, lam) * np.linalg.norm(local[-1])
        lo += n_c
    want = sum(n_c * w_c for n_c, w_c in zip(sizes, local)) / sum(sizes)
    assert rel(w, want) <= 1e-6 + slack / np.linalg.norm(want)
    # The weights matter here: the plain mean of the local readouts is clearly different.
    assert rel(np.mean(local, axis=0), want) > 1e-3
    totals = ledger.totals("fedavg")
    assert totals["up_floats"] == totals["down_floats"] == len(sizes) * N * C


def test_weighted_average_against_numpy():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((2, 3)) for _ in range(4)]
    weights = [5, 0, 2, 9]
    np.testing.assert_allclose(
        weighted_average(arrays, weights), np.average(np.stack(arrays), axis=0, weights=weights),
        rtol=1e-14,
    )
    for bad in ([1, -1, 1, 1], [0, 0, 0, 0]):
        with pytest.raises(ValueError, match="weights"):
            weighted_average(arrays, bad)


def test_federation_rejects_bad_input(res, make_windows):
    x, y = make_windows(4, 10, 3, C)
    with pytest.raises(ValueError, match="no clients"):
        incfed(res, [], LAMBDAS)
    with pytest.raises(ValueError, match="no clients"):
        fedavg(res, [], 0.1)
    with pytest.raises(ValueError, match="client c: 4 windows but 3 label rows"):
        Client("c", x, y[:3], C)
    with pytest.raises(ParameterError, match=r"lambda: must be >= 0.0, got -0.1"):
        fedavg(res, make_clients(x, y, [4]), -0.1)


def test_incfed_equals_reservoirpys_ridge(res, make_windows):
    """Cross-check with an independent implementation: reservoirpy 0.4.2's ``Ridge`` node
    (reservoirpy/nodes/ridge.py: per-series XᵀX and XᵀY summed by its ``master``, then
    ``scipy.linalg.solve(XᵀX + λI, XᵀY)``; ``fit_bias=False`` as PROTOCOL §2 has no readout bias),
    fitted on every window's states as one series, equals the IncFed server's readout over three
    clients."""
    from reservoirpy.nodes import Ridge

    x, y = make_windows(15, 30, 3, C, seed=4)
    result = incfed(res, make_clients(x, y, [4, 5, 6]), LAMBDAS, CommLedger())
    states = run_batch(res, x).astype(np.float64)  # (T, B, N)
    series = [states[:, i] for i in range(len(x))]
    targets = [np.eye(C)[y[i].astype(int)] for i in range(len(x))]
    for lam, w in zip(LAMBDAS, result.readouts):
        node = Ridge(ridge=lam, fit_bias=False).fit(series, targets)
        theirs = node.Wout.T
        assert theirs.shape == w.shape == (C, N)
        assert not np.any(node.bias)
        # As above: IncFed's clients stream other batches (other float32 states, 1e-6) and round
        # the statistics' chunk products in float32; reservoirpy sums float64 products.
        assert rel(w, theirs) <= 1e-6 + readout_rtol(result.stats.b, lam, sides=2)
    # λ matters at these sizes, so matching every λ of the grid is not one match repeated.
    assert rel(result.readouts[0], result.readouts[-1]) > 1e-3


def augmented(states: np.ndarray) -> np.ndarray:
    """Rows [s, 1] of float64 states (T, B, N), window-major: the readout bias's feature vector."""
    s = states.transpose(1, 0, 2).reshape(-1, states.shape[2]).astype(np.float64)
    return np.hstack([s, np.ones((len(s), 1))])


@pytest.mark.parametrize("sizes", [[23], [6, 17], [1, 2, 4, 1, 3, 2, 5, 3, 2]])
def test_incfed_with_bias_equals_centralised_ridge_with_bias(res, make_windows, sizes):
    """readout.bias: the clients' augmented statistics sum to the pooled ones, so the server's
    (C, N+1) readouts equal centralised ridge with bias; the messages grow by the bias entries."""
    x, y = make_windows(23, 30, 3, C)
    ledger = CommLedger()
    result = incfed(res, make_clients(x, y, sizes, bias=True), LAMBDAS, ledger)
    central_stats = ridge_stats(res, x, y, C, bias=True)
    central = solve(central_stats, LAMBDAS)
    assert result.stats.bias and result.readouts.shape == central.shape == (len(LAMBDAS), C, N + 1)
    assert result.stats.b[N, N] == central_stats.b[N, N] == 23 * 30  # step counts: exact in float64
    for lam, w, wc in zip(LAMBDAS, result.readouts, central):
        # as test_incfed_equals_centralised_ridge, with the penalty that spares the bias entry
        assert rel(w, wc) <= 1e-6 + readout_rtol(result.stats.b, lam, sides=2, bias=True)
    assert np.abs(central[0][:, N]).max() > 1e-3  # a bias was fitted (not a zero column)
    k = len(sizes)
    totals = ledger.totals("incfed")
    assert totals["up_floats"] == k * ((N + 1) ** 2 + (N + 1) * C)
    assert totals["down_floats"] == k * (N + 1) * C
    plain = CommLedger()
    incfed(res, make_clients(x, y, sizes), LAMBDAS, plain)
    # exactly the bias entries more: 2N + 1 of B and C of A up, C down, 8 bytes (float64) each
    more = plain.totals("incfed")
    assert totals["up_floats"] - more["up_floats"] == k * (2 * N + 1 + C)
    assert totals["up_bytes"] - more["up_bytes"] == 8 * k * (2 * N + 1 + C)
    assert totals["down_bytes"] - more["down_bytes"] == 8 * k * C


def test_incfed_with_bias_equals_reservoirpys_ridge_with_fit_bias(res, make_windows):
    """The fit_bias=True counterpart of test_incfed_equals_reservoirpys_ridge: reservoirpy 0.4.2's
    ``Ridge.master`` centres XᵀX and XᵀY by the sample means, solves without the bias and sets
    bias = Ȳ − X̄·W (reservoirpy/nodes/ridge.py): ridge with an unpenalised intercept, which is
    what readout.solve computes from the augmented statistics with penalty λ·diag(1, …, 1, 0)."""
    from reservoirpy.nodes import Ridge

    x, y = make_windows(15, 30, 3, C, seed=4)
    result = incfed(res, make_clients(x, y, [4, 5, 6], bias=True), LAMBDAS, CommLedger())
    states = run_batch(res, x).astype(np.float64)  # (T, B, N)
    series = [states[:, i] for i in range(len(x))]
    targets = [np.eye(C)[y[i].astype(int)] for i in range(len(x))]
    for lam, w in zip(LAMBDAS, result.readouts):
        node = Ridge(ridge=lam, fit_bias=True).fit(series, targets)
        theirs = np.hstack([node.Wout.T, np.asarray(node.bias).reshape(C, 1)])
        assert theirs.shape == w.shape == (C, N + 1)
        # As the fit_bias=False test: other batches (1e-6) and float32 chunk products, here with the
        # conditioning of the augmented system (the bias entry unpenalised).
        assert rel(w, theirs) <= 1e-6 + readout_rtol(result.stats.b, lam, sides=2, bias=True)
        assert np.abs(node.bias).max() > 1e-3  # reservoirpy fitted a bias worth comparing
    assert rel(result.readouts[0], result.readouts[-1]) > 1e-3


def test_fedavg_with_bias_averages_the_bias_like_the_weights(res, make_windows):
    x, y = make_windows(23, 30, 3, C, seed=2)
    sizes, lam = [3, 8, 12], 1e-2
    ledger = CommLedger()
    w = fedavg(res, make_clients(x, y, sizes, bias=True), lam, ledger)
    assert w.shape == (C, N + 1)
    # Independent: each client's ridge with an unpenalised intercept on its materialised states.
    penalty = np.diag([1.0] * N + [0.0])
    local, lo, slack = [], 0, 0.0
    for n_c in sizes:
        s = augmented(run_batch(res, x[lo : lo + n_c]))
        onehot = np.eye(C)[y[lo : lo + n_c].reshape(-1).astype(int)]
        local.append(np.linalg.solve(s.T @ s + lam * penalty, s.T @ onehot).T)
        slack += n_c / sum(sizes) * readout_rtol(s.T @ s, lam, bias=True) * np.linalg.norm(local[-1])
        lo += n_c
    want = sum(n_c * w_c for n_c, w_c in zip(sizes, local)) / sum(sizes)
    assert rel(w, want) <= 1e-6 + slack / np.linalg.norm(want)
    # the bias column is averaged with the same weights (its own check, not hidden in the norm)
    assert np.allclose(w[:, N], want[:, N], rtol=0, atol=1e-6 + slack)
    assert rel(np.mean(local, axis=0)[:, N], want[:, N]) > 1e-3  # the weights matter for the bias
    totals = ledger.totals("fedavg")
    assert totals["up_floats"] == totals["down_floats"] == len(sizes) * (N + 1) * C
