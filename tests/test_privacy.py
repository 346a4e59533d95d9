"""Tests of the Gaussian mechanism (esnfed_core.privacy, private_trial): ε = ∞ is the non-private
trial bit for bit, the noise scale is the accountant's, the noise has the stated variance, and one
unit moves the clipped sum by at most the clipping norm (the stated L2 sensitivity)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import scipy.optimize
import scipy.stats

from esnfed_core.privacy import (
    DPSpec, add_noise, client_stats_share, client_update_share, clip_norm, clipped_mean_stats, epsilon_of, ip_sigma,
    mean_stats, noise_multiplier, private_average, private_stats, psd_projection, share_std, stats_bound, stats_sigma,
    sum_std,
)
from esnfed_core.private_trial import fit_private, noise_rng, unit_stats
from esnfed_core.readout import RidgeStats, ridge_stats
from esnfed_core.reservoir import ReservoirConfig, build_reservoir
from esnfed_core.settings import Settings
from esnfed_core.trial import fit
from esnfed_core.validation import ParameterError
from experiment_data import leave_one_out_moves, trial_data

CONFIG = {"units": 10, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 0.8, "sigma": 0.3,
          "rounds": 2, "local_epochs": 1}
SETTINGS = Settings(lambdas=(1e-4, 1e-2, 1.0), batch_size=5, ip={"batch_size": 4})


def analytic_gaussian_sigma(eps: float, delta: float) -> float:
    """σ of the analytic Gaussian mechanism (Balle & Wang 2018, Thm. 8) for sensitivity 1: the
    exact (ε, δ) curve δ(σ) = Φ(1/2σ − εσ) − e^ε Φ(−1/2σ − εσ), solved here independently."""
    phi = scipy.stats.norm.cdf

    def gap(s: float) -> float:
        return phi(0.5 / s - eps * s) - math.exp(eps) * phi(-0.5 / s - eps * s) - delta

    return scipy.optimize.brentq(gap, 1e-2, 1e3, xtol=1e-12)


@pytest.mark.parametrize("algo", ["incfed", "fedip"])
def test_infinite_epsilon_is_the_nonprivate_trial(algo):
    data, _ = trial_data(pct="100")
    spec = DPSpec(math.inf, 1e-3)
    private = fit_private(algo, CONFIG, 7, data, SETTINGS, spec)
    plain = fit(algo, CONFIG, 7, data, SETTINGS, score=True)
    assert np.array_equal(private.readout, plain.readout)
    assert private.lam == plain.lam
    assert np.array_equal(private.reservoir.gain, plain.reservoir.gain)
    assert np.array_equal(private.reservoir.bias, plain.reservoir.bias)


@pytest.mark.parametrize("algo", ["incfed", "fedip"])
def test_finite_epsilon_changes_the_readout_and_is_seeded(algo):
    data, _ = trial_data(pct="100")
    spec = DPSpec(1.0, 1e-3)
    a = fit_private(algo, CONFIG, 7, data, SETTINGS, spec)
    b = fit_private(algo, CONFIG, 7, data, SETTINGS, spec)
    plain = fit(algo, CONFIG, 7, data, SETTINGS, score=True)
    assert np.array_equal(a.readout, b.readout)
    assert not np.allclose(a.readout, plain.readout)
    assert np.all(np.isfinite(a.readout))


@pytest.mark.parametrize(("eps", "delta"), [(1.0, 1e-5), (0.5, 1 / 81), (4.0, 1 / 25)])
def test_noise_multiplier_is_the_analytic_gaussian(eps, delta):
    # PLD discretisation is pessimistic (a slightly larger z); 0.5 % covers it at these ε.
    z = noise_multiplier(eps, delta)
    assert z == pytest.approx(analytic_gaussian_sigma(eps, delta), rel=5e-3)
    assert epsilon_of(z, delta) == pytest.approx(eps, rel=1e-3)


def test_composition_of_k_gaussians_is_one_with_sqrt_k_sensitivity():
    # k Gaussian mechanisms of noise z compose exactly to one of noise z/√k (Dong et al. 2019, GDP).
    z1, z9 = noise_multiplier(2.0, 1e-4), noise_multiplier(2.0, 1e-4, releases=9)
    assert z9 == pytest.approx(3.0 * z1, rel=5e-3)
    assert noise_multiplier(math.inf, 1e-4) == 0.0


def test_spec_rejects_bad_values():
    for kw, message in (({"epsilon": 0.0, "delta": 1e-3}, "epsilon: must be > 0.0, got 0.0"),
                        ({"epsilon": 1.0, "delta": 1.0}, "delta: must be < 1.0, got 1.0"),
                        ({"epsilon": 1.0, "delta": 1e-3, "relation": "group"},
                         "relation: expected one of user, got 'group'"),
                        ({"epsilon": 1.0, "delta": 1e-3, "clip": 1.5}, "clip: must be <= 1.0, got 1.5")):
        with pytest.raises(ParameterError, match=f"^{re.escape(message)}$"):
            DPSpec(**kw)


def _variance_in_chi2_interval(noise: np.ndarray, sigma: float) -> bool:
    """(n)·s²/σ² of zero-mean draws is χ²(n): inside its central 99.9 % interval (a fresh seed
    fails with probability 0.1 %; the seed is fixed, so the test is deterministic)."""
    n = noise.size
    stat = float(np.sum(noise**2)) / sigma**2
    lo, hi = scipy.stats.chi2.ppf([5e-4, 1 - 5e-4], n)
    return lo <= stat <= hi


def test_noise_has_the_stated_variance():
    rng = np.random.default_rng(11)
    sigma = 2.5
    a_noise, b_noise = [], []
    for _ in range(40):
        a, b = add_noise(np.zeros((3, 12)), np.zeros((12, 12)), sigma, rng)
        assert np.array_equal(b, b.T)
        a_noise.append(a.ravel())
        b_noise.append(b[np.triu_indices(12)])
    assert _variance_in_chi2_interval(np.concatenate(a_noise), sigma)
    assert _variance_in_chi2_interval(np.concatenate(b_noise), sigma)
    assert not _variance_in_chi2_interval(np.concatenate(a_noise), 1.1 * sigma)


def test_fedip_average_noise_has_the_stated_variance():
    spec = DPSpec(2.0, 1e-4, ip_clip=0.3)
    start = np.linspace(-1, 1, 20)
    rng = np.random.default_rng(3)
    k = 4
    draws = np.concatenate([private_average(start, [start] * k, [5] * k, spec, rng, releases=3) - start
                            for _ in range(100)])
    sigma = noise_multiplier(2.0, 1e-4, 3) * 0.3 / k
    assert _variance_in_chi2_interval(draws, sigma)


def test_fedip_update_clipping_bounds_one_client():
    """At a finite ε, with clipping active (every update longer than C_ip = 0.5), removing one
    client (K public: 3) moves the released round average by at most C_ip / K, the same noise
    drawn on both sides; the longest update moves it by exactly that."""
    spec = DPSpec(2.0, 1e-5, ip_clip=0.5)
    start = np.linspace(-1.0, 1.0, 6)
    rng = np.random.default_rng(4)
    locals_ = [start + rng.normal(0.0, s, 6) for s in (1.0, 2.0, 5.0)]
    assert all(np.linalg.norm(x - start) > spec.ip_clip for x in locals_)

    def release(clients):
        return private_average(start, clients, [1] * len(clients), spec, np.random.default_rng(9), clients=3)

    full = release(locals_)
    for i in range(3):
        moved = float(np.linalg.norm(full - release(locals_[:i] + locals_[i + 1:])))
        assert moved == pytest.approx(spec.ip_clip / 3, rel=1e-9)


@pytest.mark.parametrize("eps", [math.inf, 2.0])
def test_fedip_average_records_each_update_norm_before_clipping(eps):
    """``norms`` collects ‖x_c − start‖ before clipping (what privacy_clip_sweep's clipped fraction
    counts) and leaves the aggregate's bits alone, noise included."""
    spec = DPSpec(eps, 1e-4, ip_clip=2.0)
    start, locals_ = np.zeros(6), [np.ones(6), 3 * np.ones(6)]
    norms: list[float] = []
    got = private_average(start, locals_, [1, 3], spec, np.random.default_rng(0), norms=norms)
    assert norms == pytest.approx([math.sqrt(6), 3 * math.sqrt(6)])
    assert np.array_equal(got, private_average(start, locals_, [1, 3], spec, np.random.default_rng(0)))


@pytest.mark.parametrize("eps", [math.inf, 1.0])
def test_fit_private_records_fedip_update_norms_and_changes_nothing(eps):
    """One norm per client and round (ε = ∞ too, the natural scale ip_clip is set against); the
    model is the one fitted without recording. With L2-normalised IP steps a client's round update
    is at most √2·η per step (‖Δg‖ = ‖Δb‖ = η), here 3 mini-batches of 4 windows a round."""
    data, _ = trial_data(pct="100")
    spec = DPSpec(eps, 1e-3, ip_clip=0.01)
    norms: list[float] = []
    a = fit_private("fedip", CONFIG, 7, data, SETTINGS, spec, ip_norms=norms)
    b = fit_private("fedip", CONFIG, 7, data, SETTINGS, spec)
    assert np.array_equal(a.readout, b.readout) and np.array_equal(a.reservoir.gain, b.reservoir.gain)
    assert len(norms) == CONFIG["rounds"] * len(data.train)
    assert SETTINGS.ip.normalize_step and all(len(u.x) == 12 for u in data.train.values())
    steps = 3 * CONFIG["local_epochs"]
    assert all(0 < n <= steps * math.sqrt(2) * SETTINGS.ip.eta * (1 + 1e-4) for n in norms)


def test_states_in_unit_cube_bound_the_mean_statistics(make_windows):
    res = build_reservoir(ReservoirConfig(3, 15, 0.9, 1.0, 20.0), 1)  # saturating: |s| near 1
    x, y = make_windows(6, 40, 3, 4)
    a, b = mean_stats(ridge_stats(res, 5 * x, y, 4))
    assert math.sqrt(np.sum(a * a) + np.sum(b * b)) <= stats_bound(15)
    assert np.trace(b) > 0.8 * 15  # mean ‖s‖² near its bound N: the states do reach the corners


def test_one_unit_moves_the_clipped_sum_by_at_most_the_clipping_norm():
    data, _ = trial_data(pct="100")
    res = build_reservoir(ReservoirConfig(3, 10, 0.9, 0.5, 0.8), 2)
    units = unit_stats(res, data, SETTINGS)
    assert len(units) == 4
    bound = 0.05 * stats_bound(10)
    clipped = [clipped_mean_stats(u, bound) for u in units]
    # the released sums of the neighbouring data sets (each user left out in turn): at most C apart
    assert all(0 < moved <= bound * (1 + 1e-12) for moved in leave_one_out_moves(units, bound))
    assert any(math.isclose(math.sqrt(np.sum(a * a) + np.sum(b * b)), bound) for a, b in clipped)


def test_private_stats_at_infinity_is_the_plain_sum():
    rng = np.random.default_rng(0)
    units = [RidgeStats(rng.normal(size=(2, 3)), np.eye(3) * (i + 1), 10, 1) for i in range(3)]
    total = private_stats(units, DPSpec(math.inf, 1e-3), rng)
    assert np.array_equal(total.a, units[0].a + units[1].a + units[2].a)
    assert (total.n_steps, total.n_windows) == (30, 3)


def test_psd_projection():
    b = np.array([[1.0, 2.0], [2.0, 1.0]])  # eigenvalues 3 and -1
    p = psd_projection(b)
    assert np.all(np.linalg.eigvalsh(p) >= -1e-12)
    assert np.allclose(p, 1.5 * np.ones((2, 2)))


def _uncorrelated(x: np.ndarray, y: np.ndarray) -> bool:
    """Pearson's test of zero correlation at the 0.1 % level."""
    return scipy.stats.pearsonr(x, y).pvalue > 1e-3


def test_noise_is_independent_across_rounds_releases_and_entries():
    """The noise is central (the server adds one draw per released number): draws of consecutive
    FedIP rounds, of the final IncFed release and of neighbouring entries are uncorrelated. A
    generator reseeded every round (the same noise each round) fails the same test."""
    spec = DPSpec(1.0, 1e-4, ip_clip=0.2)
    start = np.zeros(16)
    rounds, trials = 3, 200
    per_round = [[] for _ in range(rounds)]
    release_a = []
    for t in range(trials):
        rng = np.random.default_rng([t, 77])
        for r in range(rounds):  # one generator through the rounds, as fit_private's
            per_round[r].append(private_average(start, [start] * 4, [1] * 4, spec, rng, releases=rounds + 1))
        a, _ = add_noise(np.zeros((4, 4)), np.zeros((4, 4)), 1.0, rng)  # the IncFed release's A noise
        release_a.append(a.ravel())
    x = [np.concatenate(p) for p in per_round]
    assert _uncorrelated(x[0], x[1]) and _uncorrelated(x[1], x[2]) and _uncorrelated(x[0], x[2])
    assert _uncorrelated(x[2], np.concatenate(release_a))  # last round vs the IncFed release
    entries = np.stack(per_round[0])  # (trials, 16)
    assert _uncorrelated(entries[:, :-1].ravel(), entries[:, 1:].ravel())
    reseeded = [np.concatenate([private_average(start, [start] * 4, [1] * 4, spec, np.random.default_rng(t))
                                for t in range(trials)]) for _ in range(2)]
    assert not _uncorrelated(*reseeded)


def test_window_level_is_refused_in_one_line_naming_the_key_and_why():
    """privacy.relation: window claimed a guarantee it lacks: per-user z-scoring makes one raw window
    change every window of its user, and a FedIP client that stays moves its clipped update by up
    to 2·ip_clip while the rounds are noised for ip_clip. It is refused by the params check (the
    schema delegates to it) and by DPSpec for a caller of the core that skips it."""
    from esnfed_core.errors import ConfigError
    from esnfed_stages.params.privacy import neighbouring_units, privacy_params

    with pytest.raises(ConfigError) as err:
        privacy_params({"privacy": {"epsilons": [1.0], "relation": "window"}})
    line = str(err.value)
    assert line.startswith("params.yaml: privacy.relation: window level is not implemented: ") and "\n" not in line
    assert "z-scored per user" in line and "2·ip_clip" in line and line.endswith("use user")
    with pytest.raises(ParameterError, match=r"^relation: window level is not implemented: [^\n]*2·ip_clip"):
        DPSpec(1.0, 1e-3, "window")
    data, _ = trial_data(pct="100")
    assert neighbouring_units(data) == len(data.train) == 4  # δ's n: the users


# Distributed noise (the SecAgg+ Flower apps): each client adds N(0, σ²/K_min) to its clipped
# contribution, so a sum of K' >= K_min shares carries N(0, σ²·K'/K_min), the central σ² at K' = K_min.
K_MIN = 3


def _share_noise(k: int, draws: int, spec: DPSpec, stats: list[RidgeStats], rng) -> tuple[np.ndarray, np.ndarray]:
    """``draws`` sums of ``k`` clients' shares minus the sum of their clipped means: the noise of the
    sum (A entries, B's upper triangle), and check that each share's B is symmetric."""
    bound = spec.clip * stats_bound(stats[0].units)
    clean_a = sum(clipped_mean_stats(s, bound)[0] for s in stats[:k])
    clean_b = sum(clipped_mean_stats(s, bound)[1] for s in stats[:k])
    iu = np.triu_indices(stats[0].units)
    a_noise, b_noise = [], []
    for _ in range(draws):
        shares = [client_stats_share(s, spec, K_MIN, rng, releases=2) for s in stats[:k]]
        assert all(np.array_equal(b, b.T) for _, b in shares)
        a_noise.append((sum(a for a, _ in shares) - clean_a).ravel())
        b_noise.append((sum(b for _, b in shares) - clean_b)[iu])
    return np.concatenate(a_noise), np.concatenate(b_noise)


@pytest.fixture(scope="module")
def four_units():
    """Four users' statistics on one reservoir: two below the clipping norm, two above it."""
    data, _ = trial_data(pct="100")
    res = build_reservoir(ReservoirConfig(data.n_inputs, 12, 0.9, 0.5, 0.8), 3)
    return unit_stats(res, data, SETTINGS)


def test_distributed_shares_sum_to_the_central_noise_variance(four_units):
    """K_min shares sum to noise of variance σ² (the central mechanism's, σ = z·C); K' = 4 > K_min
    survivors to σ²·4/3, which the same test tells from σ² (and σ² from σ²·4/3)."""
    spec = DPSpec(2.0, 1e-4, clip=0.05)
    sigma = stats_sigma(spec, 12, releases=2)
    assert sigma == pytest.approx(noise_multiplier(2.0, 1e-4, 2) * 0.05 * stats_bound(12), rel=1e-12)
    rng = np.random.default_rng(21)
    a3, b3 = _share_noise(K_MIN, 60, spec, four_units, rng)
    a4, b4 = _share_noise(4, 60, spec, four_units, rng)
    assert a3.size + b3.size == 60 * (3 * 12 + 78)
    for noise in (a3, b3):
        assert _variance_in_chi2_interval(noise, sigma)
        assert not _variance_in_chi2_interval(noise, sum_std(sigma, 4, K_MIN))
    for noise in (a4, b4):
        assert _variance_in_chi2_interval(noise, sum_std(sigma, 4, K_MIN))
        assert not _variance_in_chi2_interval(noise, sigma)
    assert sum_std(sigma, K_MIN, K_MIN) == pytest.approx(sigma) and share_std(sigma, K_MIN) == sigma / math.sqrt(3)


def test_a_share_is_the_clipped_mean_plus_add_noise_at_sigma_over_root_k_min(four_units):
    """The share clips as private_stats clips (one norm C for (Ā, B̄)) and draws add_noise's noise
    at σ/√K_min: the same generator state gives the same bits. A user above C is clipped to C."""
    spec = DPSpec(1.0, 1e-3, clip=0.05)
    bound = 0.05 * stats_bound(12)
    norms = [math.hypot(np.linalg.norm(a), np.linalg.norm(b)) for a, b in map(mean_stats, four_units)]
    assert min(norms) > bound  # every user is clipped: the clipping is exercised
    for s in four_units:
        got = client_stats_share(s, spec, K_MIN, np.random.default_rng(5))
        a, b = clipped_mean_stats(s, bound)
        want = add_noise(a, b, stats_sigma(spec, 12) / math.sqrt(K_MIN), np.random.default_rng(5))
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        assert math.hypot(np.linalg.norm(a), np.linalg.norm(b)) == pytest.approx(bound)


def test_distributed_ip_update_shares_sum_to_the_central_round_noise():
    """FedIP: K_min clients' shares of clipped updates sum to Σ clip(Δ_c) + N(0, σ_ip²); divided by
    K_min that is private_average's noise std σ_ip/K (K = K_min); one update longer than C_ip is
    clipped to C_ip."""
    spec = DPSpec(2.0, 1e-4, ip_clip=0.3)
    rng = np.random.default_rng(8)
    updates = [np.full(20, 0.01), np.linspace(-1, 1, 20), np.zeros(20)]  # norms 0.045, 2.6 (clipped), 0
    clean = sum(clip_norm(u, 0.3) for u in updates)
    assert np.linalg.norm(clip_norm(updates[1], 0.3)) == pytest.approx(0.3)
    draws = np.concatenate([sum(client_update_share(u, spec, K_MIN, rng, releases=3) for u in updates) - clean
                            for _ in range(150)])
    sigma = ip_sigma(spec, releases=3)
    assert sigma == pytest.approx(noise_multiplier(2.0, 1e-4, 3) * 0.3, rel=1e-12)
    assert _variance_in_chi2_interval(draws, sigma)
    assert _variance_in_chi2_interval(draws / K_MIN, sigma / K_MIN)  # private_average's (Σ + N(0, σ²)) / K
    assert not _variance_in_chi2_interval(draws, 1.2 * sigma)


def test_distributed_shares_at_infinity_are_the_plain_contributions(four_units):
    """ε = ∞: the share is the unclipped per-step means (what SecAgg+ IncFed sends) and the update
    itself, bit for bit; K_min below 1 is refused."""
    spec = DPSpec(math.inf, 1e-4, clip=0.05)
    for s in four_units:
        got, want = client_stats_share(s, spec, K_MIN, np.random.default_rng(0)), mean_stats(s)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    u = np.linspace(-5, 5, 8)
    np.testing.assert_array_equal(client_update_share(u, spec, K_MIN, np.random.default_rng(0)), u)
    with pytest.raises(ParameterError, match="min_clients"):
        share_std(1.0, 0)


def test_noise_rng_is_the_private_trials_generator():
    """The central Flower apps draw from noise_rng(seed): fit_private's release equals private_stats
    of the same units drawn from it (the noise stream is one function, not two copies)."""
    data, _ = trial_data(pct="100")
    spec = DPSpec(4.0, 1e-3, clip=0.05)
    model = fit_private("incfed", CONFIG, 7, data, SETTINGS, spec)
    from esnfed_core.readout import solve
    from esnfed_core.trial import make_reservoir, sub_seeds

    res = make_reservoir(CONFIG, data.n_inputs, sub_seeds(7)["reservoir"])
    stats = private_stats(unit_stats(res, data, SETTINGS), spec, noise_rng(7))
    readouts = solve(stats, list(SETTINGS.lambdas))
    np.testing.assert_array_equal(model.readout, readouts[list(SETTINGS.lambdas).index(model.lam)])
