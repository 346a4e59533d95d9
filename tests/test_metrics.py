"""Continual metrics from counts and accuracy matrices (ACC, forgetting, BWT, FWT), and activation
histograms with their KL divergence to N(μ, σ²), checked against hand computations,
numpy.histogram, the closed-form Gaussian KL and the convexity FedIP's argument rests on."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special

from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from esnfed_core.metrics import (
    CONTINUAL_METRICS,
    ActivationHistogram,
    accuracy_matrix,
    activation_histogram,
    activation_histograms,
    average_accuracy,
    backward_transfer,
    continual_metrics,
    forgetting,
    forward_transfer,
    gaussian_kl,
    histogram_values,
    mean_forgetting,
    step_accuracy,
    stream_accuracy,
)
from esnfed_core.readout import evaluate
from esnfed_core.reservoir import ReservoirConfig, build_reservoir, run_batch
from esnfed_core.validation import ParameterError

# Model after context i (rows) on context j (columns); contexts have 10, 30 and 20 steps.
CORRECT = np.array([[9, 3, 0], [4, 27, 2], [5, 15, 18]])
TOTAL = np.array([10, 30, 20])


def test_accuracy_matrix_divides_by_the_context_sizes():
    expected = np.array([[0.9, 0.1, 0.0], [0.4, 0.9, 0.1], [0.5, 0.5, 0.9]])
    np.testing.assert_allclose(accuracy_matrix(CORRECT, TOTAL), expected)


def test_stream_accuracy_pools_counts_of_the_contexts_seen():
    # After context 1: (4 + 27) / (10 + 30), not the mean of 0.4 and 0.9.
    expected = [9 / 10, 31 / 40, 38 / 60]
    np.testing.assert_allclose(stream_accuracy(CORRECT, TOTAL), expected)


def test_forgetting_is_best_past_accuracy_minus_final():
    # Context 0: best of 0.9 (after 0) and 0.4 (after 1) minus 0.5; context 1: 0.9 − 0.5.
    acc = accuracy_matrix(CORRECT, TOTAL)
    np.testing.assert_allclose(forgetting(acc), [0.4, 0.4])
    assert mean_forgetting(acc) == pytest.approx(0.4)
    assert np.isnan(mean_forgetting(np.array([[0.75]])))


# A hand-made accuracy matrix: row i the model after context i, column j the test data of context j.
# Context 0 is learnt better after context 1 (0.5 -> 0.8) and partly forgotten after context 2
# (0.6): its forgetting (0.8 − 0.6) and its backward transfer (0.6 − 0.5) differ.
R = np.array([[0.5, 0.2, 0.1],
              [0.8, 0.8, 0.4],
              [0.6, 0.5, 0.9]])


def test_average_accuracy_is_the_final_row_s_mean():
    assert average_accuracy(R) == pytest.approx((0.6 + 0.5 + 0.9) / 3)
    assert average_accuracy(np.array([[0.75]])) == 0.75


def test_backward_transfer_is_final_minus_just_learnt_on_the_earlier_contexts():
    # ((0.6 − 0.5) + (0.5 − 0.8)) / 2; forgetting takes the best past accuracy instead (0.8 on 0)
    assert backward_transfer(R) == pytest.approx(-0.1)
    np.testing.assert_allclose(forgetting(R), [0.2, 0.3])
    assert mean_forgetting(R) == pytest.approx(0.25)
    # without any later gain, forgetting is −BWT
    monotone = np.array([[0.9, 0.0], [0.7, 0.8]])
    assert mean_forgetting(monotone) == pytest.approx(-backward_transfer(monotone)) == pytest.approx(0.2)


def test_forward_transfer_is_the_accuracy_before_learning_a_context_minus_the_reference():
    # R[0, 1] = 0.2 and R[1, 2] = 0.4 against chance 1/4: (−0.05 + 0.15) / 2
    assert forward_transfer(R, 0.25) == pytest.approx(0.05)
    # or a reference per context (the first is never used: no model precedes context 0)
    assert forward_transfer(R, np.array([9.0, 0.1, 0.2])) == pytest.approx((0.1 + 0.2) / 2)
    assert continual_metrics(R, 0.25) == pytest.approx(
        {"acc": 2.0 / 3, "forgetting": 0.25, "bwt": -0.1, "fwt": 0.05})
    assert tuple(continual_metrics(R, 0.25)) == CONTINUAL_METRICS


def test_a_context_without_test_data_is_left_out_of_every_average():
    r = R.copy()
    r[:, 1] = np.nan  # context 1 has no test data (a NaN column, as accuracy_matrix gives)
    got = continual_metrics(r, 0.25)
    assert got == pytest.approx({"acc": 0.75, "forgetting": 0.2, "bwt": 0.1, "fwt": 0.15})
    single = continual_metrics(np.array([[0.7]]), 0.25)  # one context: nothing to forget or transfer
    assert single["acc"] == 0.7 and all(np.isnan(single[k]) for k in ("forgetting", "bwt", "fwt"))
    assert np.isnan(average_accuracy(np.full((2, 2), np.nan)))


def test_the_accuracy_matrix_is_checked():
    for bad in (np.zeros((2, 3)), np.zeros(3), np.zeros((0, 0))):
        with pytest.raises(ValueError, match="^acc: expected a square accuracy matrix"):
            continual_metrics(bad, 0.25)


def test_context_without_data_is_nan_and_left_out_of_the_stream():
    correct = np.array([[5, 0], [4, 0]])
    total = np.array([10, 0])
    acc = accuracy_matrix(correct, total)
    assert np.isnan(acc[:, 1]).all() and acc[1, 0] == 0.4
    np.testing.assert_allclose(stream_accuracy(correct, total), [0.5, 0.4])


def test_counts_shape_is_checked():
    with pytest.raises(ValueError, match="correct"):
        stream_accuracy(np.zeros((2, 3)), np.ones(3))


def test_histogram_matches_numpy_per_unit_and_clips_into_the_edge_bins():
    rng = np.random.default_rng(0)
    vals = rng.uniform(-1.2, 1.2, size=(7, 5, 3))  # (steps, windows, units)
    h = histogram_values(vals, bins=8)
    clipped = np.clip(vals, -1.0, 1.0 - 1e-12)
    for u in range(3):
        ref, _ = np.histogram(clipped[..., u].ravel(), bins=8, range=(-1.0, 1.0))
        np.testing.assert_array_equal(h.counts[u], ref)
    assert h.n_values == 35
    np.testing.assert_allclose(h.density().sum() * 0.25, 1.0)
    np.testing.assert_allclose((h.unit_density() * 0.25).sum(axis=1), 1.0)
    both = h + h
    np.testing.assert_array_equal(both.counts, 2 * h.counts)
    with pytest.raises(ValueError, match="cannot add histograms with different bins"):
        h + histogram_values(vals, bins=4)


def _gauss_counts(edges, m, s, n=10**9):
    cdf = scipy.special.ndtr((edges - m) / s)
    return np.round(np.diff(cdf) * n)


@pytest.mark.parametrize("m, s, mu, sigma", [(0.0, 0.2, 0.0, 0.2), (0.1, 0.15, 0.0, 0.3),
                                             (-0.2, 0.1, 0.1, 0.25), (0.0, 0.15, 0.0, 0.05)])
def test_kl_of_a_binned_gaussian_matches_the_closed_form(m, s, mu, sigma):
    # The samples' own mass outside [-1, 1] is negligible (> 6 s away), so only binning differs.
    edges = np.linspace(-1, 1, 2001)
    counts = _gauss_counts(edges, m, s)
    closed = np.log(sigma / s) + (s**2 + (m - mu) ** 2) / (2 * sigma**2) - 0.5
    assert gaussian_kl(counts, edges, mu, sigma) == pytest.approx(closed, rel=2e-3, abs=2e-4)


def test_kl_is_finite_far_in_the_tails_and_nan_when_empty():
    edges = np.linspace(-1, 1, 101)
    counts = np.zeros(100)
    counts[95] = 10  # values near 0.9 against N(0, 0.05²): about 160 nats per value
    kl = gaussian_kl(counts, edges, 0.0, 0.05)
    assert np.isfinite(kl) and kl > 100
    assert np.isnan(gaussian_kl(np.zeros(100), edges, 0.0, 0.5))
    with pytest.raises(ParameterError, match="^sigma:"):
        gaussian_kl(counts, edges, 0.0, 0.0)


def test_kl_methods_agree_with_the_function():
    rng = np.random.default_rng(1)
    h = histogram_values(np.tanh(rng.normal(0, 0.5, size=(400, 4))), bins=50)
    per_unit = h.kl(0.0, 0.4)
    for u in range(4):
        assert per_unit[u] == pytest.approx(gaussian_kl(h.counts[u], h.edges, 0.0, 0.4))
    assert h.mean_kl(0.0, 0.4) == pytest.approx(per_unit.mean())
    assert h.pooled_kl(0.0, 0.4) == pytest.approx(gaussian_kl(h.counts.sum(0), h.edges, 0.0, 0.4))


@st.composite
def _clients(draw):
    """2-6 clients' histograms on one set of bins (each with at least one value), their weights p_c
    (summing to 1) and an IP target (μ, σ) of the papers' search space."""
    bins = draw(st.integers(3, 30))
    n = draw(st.integers(2, 6))
    counts = draw(hnp.arrays(np.int64, (n, bins), elements=st.integers(0, 10**6)))
    counts[:, draw(st.integers(0, bins - 1))] += 1
    weights = np.asarray(draw(st.lists(st.floats(0.01, 1.0), min_size=n, max_size=n)))
    return (np.linspace(-1.0, 1.0, bins + 1), counts, weights / weights.sum(),
            draw(st.floats(-0.5, 0.5)), draw(st.floats(0.05, 1.05)))


@settings(max_examples=300, deadline=None)
@given(_clients())
def test_the_weighted_clients_kl_bounds_the_kl_of_their_mixture(clients):
    """DP eq. 6, FedIP's argument: KL is convex in its first argument, so the clients' weighted
    KL divergences to the target bound the divergence of their mixture (the global distribution),
    Σ_c p_c KL(q_c‖N) ≥ KL(Σ_c p_c q_c‖N), with the project's histogram KL. The gap is exactly
    Σ_c p_c KL(q_c‖m), m the mixture (the target's terms cancel): checked to float rounding, so a KL
    that mishandles the target's mass or the weights fails here, not only one that is not convex."""
    edges, counts, p, mu, sigma = clients
    q = counts / counts.sum(axis=1, keepdims=True)
    mixture = p @ q
    weighted = float(p @ gaussian_kl(counts, edges, mu, sigma))
    global_kl = float(gaussian_kl(mixture, edges, mu, sigma))
    with np.errstate(divide="ignore", invalid="ignore"):
        gap = float(sum(pc * np.sum(np.where(qc > 0, qc * np.log(qc / mixture), 0.0)) for pc, qc in zip(p, q)))
    tol = 1e-9 * (1.0 + abs(weighted))
    assert weighted >= global_kl - tol
    assert weighted - global_kl == pytest.approx(gap, abs=tol)


def test_pooled_client_histograms_are_the_window_weighted_mixture():
    """FedIP weighs client c by p_c = n_c / n: pooling the clients' histograms (ActivationHistogram
    +) is that mixture, so the pooled KL is bounded by the n_c-weighted clients' KL (eq. 6)."""
    rng = np.random.default_rng(3)
    hists = [histogram_values(np.tanh(rng.normal(m, s, size=(n, 1))), bins=40)
             for m, s, n in ((0.0, 0.2, 500), (0.4, 0.1, 1500), (-0.3, 0.5, 1000))]
    pooled = sum(hists[1:], hists[0])
    n = np.array([h.n_values for h in hists], dtype=np.float64)
    weighted = float(n @ [h.pooled_kl(0.0, 0.3) for h in hists] / n.sum())
    assert pooled.pooled_kl(0.0, 0.3) < weighted - 0.1  # clients this different: a clear gap


def _res():
    res = build_reservoir(ReservoirConfig(3, 10, 0.9, 0.4, 0.8), 0)
    return res.with_ip(np.linspace(0.7, 1.3, 10), np.linspace(-0.1, 0.1, 10))


def test_activation_histograms_stream_the_states_and_the_activations():
    res = _res()
    x = np.random.default_rng(2).standard_normal((37, 9, 3)).astype(np.float32)

    def batched(parts, kind):
        """The reference from the same batches of windows as the streamed side: float32 products of
        other shapes may round differently and move a value across a bin edge."""
        out = []
        for xb in parts:
            states = run_batch(res, xb)
            xnet = np.empty_like(states)
            run_batch(res, xb, xnet_out=xnet)
            out.append((states if kind == "state" else np.tanh(xnet * res.gain + res.bias)).reshape(-1, 10))
        return histogram_values(np.concatenate(out), 20).counts

    in_eights = [x[i:i + 8] for i in range(0, 37, 8)]
    got = activation_histogram(res, x, kind="state", bins=20, batch_size=8)
    np.testing.assert_array_equal(got.counts, batched(in_eights, "state"))
    got = activation_histogram(res, x, kind="activation", bins=20, batch_size=8)
    np.testing.assert_array_equal(got.counts, batched(in_eights, "activation"))
    assert got.n_values == 37 * 9
    per_ctx = activation_histograms(res, [x[:10], x[10:]], bins=20)
    np.testing.assert_array_equal((per_ctx[0] + per_ctx[1]).counts, batched([x[:10], x[10:]], "state"))
    empty = activation_histogram(res, x[:0], bins=20)
    assert isinstance(empty, ActivationHistogram) and empty.n_values == 0
    with pytest.raises(ParameterError, match="^kind:"):
        activation_histogram(res, x, kind="pre")


def test_step_accuracy_sums_to_the_pooled_accuracy():
    res = _res()
    rng = np.random.default_rng(3)
    x = rng.standard_normal((25, 6, 3)).astype(np.float32)
    y = rng.integers(0, 3, size=(25, 6))
    w = rng.standard_normal((3, 10))
    correct, total = step_accuracy(res, x, y, w, batch_size=7)
    assert correct.shape == total.shape == (6,)
    assert (total == 25).all()
    assert correct.sum() == evaluate(res, x, y, w).correct[0]
