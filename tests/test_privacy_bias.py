"""The Gaussian mechanism with the readout bias (params.yaml readout.bias): the released statistics
are of the augmented states [s; 1] ∈ [-1, 1]^(N+1), so the clipping bound and the L2 sensitivity
are √((N+1) + (N+1)²) (docs/privacy.md, "The readout bias"); ε = ∞ is the non-private trial with
the bias, bit for bit; the privacy document and table say which bound was used."""

from __future__ import annotations

import math

import numpy as np
import pytest

from esnfed_core.privacy import (
    DPSpec, add_noise, clipped_mean_stats, mean_stats, private_stats, stats_bound, stats_sigma,
)
from esnfed_core.private_trial import fit_private, unit_stats
from esnfed_core.readout import RidgeStats, ridge_stats
from esnfed_core.reservoir import ReservoirConfig, build_reservoir
from esnfed_core.settings import Settings
from esnfed_core.trial import fit
from experiment_data import leave_one_out_moves, trial_data

CONFIG = {"units": 10, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 0.8, "sigma": 0.3,
          "rounds": 2, "local_epochs": 1, "budget": 2}
ON = Settings(lambdas=(1e-4, 1e-2, 1.0), batch_size=5, ip={"batch_size": 4}, readout_bias=True)


def test_the_bound_with_the_constant_feature_is_the_n_plus_1_bound_and_is_attained():
    n, c = 6, 3
    rng = np.random.default_rng(0)
    s = np.hstack([rng.choice([-1.0, 1.0], (50, n)), np.ones((50, 1))])  # corners of [-1, 1]^(N+1)
    y = np.eye(c)[rng.integers(0, c, 50)]
    a, b = mean_stats(RidgeStats(y.T @ s, s.T @ s, 50, 1, True))
    # ‖(Ā, B̄)‖_F: a mean of terms of norm² (N+1) + (N+1)²; here every ‖[s; 1]‖² = N+1 exactly,
    # and the per-step terms align only partly: the bound holds, strictly unless the rows repeat
    norm = math.sqrt(np.sum(a * a) + np.sum(b * b))
    assert norm <= stats_bound(n + 1) * (1 + 1e-12)
    one = np.tile(s[:1], (50, 1))  # one corner repeated: the mean is one term, the bound is attained
    y1 = np.tile(y[:1], (50, 1))
    a, b = mean_stats(RidgeStats(y1.T @ one, one.T @ one, 50, 1, True))
    norm = math.sqrt(np.sum(a * a) + np.sum(b * b))
    assert math.isclose(norm, stats_bound(n + 1), rel_tol=1e-12)
    assert norm > stats_bound(n)  # the bound without the bias column would under-clip
    assert stats_bound(n + 1) == math.sqrt((n + 1) + (n + 1) ** 2)


def test_saturated_augmented_statistics_stay_within_the_bound(make_windows):
    res = build_reservoir(ReservoirConfig(3, 15, 0.9, 1.0, 20.0), 1)  # saturating: |s| near 1
    x, y = make_windows(6, 40, 3, 4)
    stats = ridge_stats(res, 5 * x, y, 4, bias=True)
    a, b = mean_stats(stats)
    assert stats.units == 16
    assert math.sqrt(np.sum(a * a) + np.sum(b * b)) <= stats_bound(stats.units)
    assert np.trace(b) > 0.8 * 15 + 1  # mean ‖[s; 1]‖² near its bound N+1


def test_private_stats_clip_and_noise_with_the_n_plus_1_bound():
    data, _ = trial_data(pct="100")
    res = build_reservoir(ReservoirConfig(3, 10, 0.9, 0.5, 0.8), 2)
    units = unit_stats(res, data, ON)
    assert all(u.bias and u.units == 11 for u in units)
    spec = DPSpec(1.0, 1e-3, clip=0.05)
    got = private_stats(units, spec, np.random.default_rng(3), releases=2)
    bound = 0.05 * stats_bound(11)
    a_sum, b_sum = np.zeros((3, 11)), np.zeros((11, 11))
    for u in units:
        a, b = clipped_mean_stats(u, bound)
        a_sum, b_sum = a_sum + a, b_sum + b
    a_want, b_want = add_noise(a_sum, b_sum, stats_sigma(spec, 11, 2), np.random.default_rng(3))
    assert got.bias and np.array_equal(got.a, a_want)
    assert np.allclose(got.b, b_want, atol=np.abs(b_want).max())  # B then projected onto the PSD cone
    assert stats_sigma(spec, 11, 2) > stats_sigma(spec, 10, 2)  # the noise scale follows the bound


def test_one_unit_moves_the_clipped_sum_by_at_most_the_clipping_norm_with_bias():
    data, _ = trial_data(pct="100")
    res = build_reservoir(ReservoirConfig(3, 10, 0.9, 0.5, 0.8), 2)
    units = unit_stats(res, data, ON)
    bound = 0.05 * stats_bound(11)
    for u in units:
        a, b = mean_stats(u)
        assert math.sqrt(np.sum(a * a) + np.sum(b * b)) <= stats_bound(11) * (1 + 1e-12)
        assert math.sqrt(np.sum(a * a) + np.sum(b * b)) > bound  # every user is clipped
    # the released sums of the neighbouring data sets (each user left out in turn): at most C apart,
    # and at least C/√2 (a clipped unit has ‖(Ā, B̄)‖_F = C; B̄'s upper triangle holds ≥ half of ‖B̄‖²)
    assert all(bound / math.sqrt(2) < moved <= bound * (1 + 1e-12) for moved in leave_one_out_moves(units, bound))


@pytest.mark.parametrize("algo", ["incfed", "fedip", "fedavg", "fedclip-naive"])
def test_infinite_epsilon_with_bias_is_the_nonprivate_trial(algo):
    data, _ = trial_data(pct="100")
    cfg = {**CONFIG, "lambda": 1e-2} if algo == "fedavg" else CONFIG
    from esnfed_core.method import Method  # noqa: PLC0415

    cfg = {k: v for k, v in cfg.items() if k in Method.parse(algo).config_keys or k == "lambda"}
    private = fit_private(algo, cfg, 7, data, ON, DPSpec(math.inf, 1e-3))
    plain = fit(algo, cfg, 7, data, ON, score=algo != "fedavg")
    assert private.readout.shape == (data.n_classes, 11)
    assert np.array_equal(private.readout, plain.readout)


@pytest.mark.parametrize("algo", ["incfed", "fedip", "fedavg", "fedclip-naive"])
def test_finite_epsilon_with_bias_releases_n_plus_1_columns(algo):
    data, _ = trial_data(pct="100")
    cfg = {**CONFIG, "lambda": 1e-2} if algo == "fedavg" else CONFIG
    from esnfed_core.method import Method  # noqa: PLC0415

    cfg = {k: v for k, v in cfg.items() if k in Method.parse(algo).config_keys or k == "lambda"}
    spec = DPSpec(1.0, 1e-3)
    a = fit_private(algo, cfg, 7, data, ON, spec)
    b = fit_private(algo, cfg, 7, data, ON, spec)
    assert a.readout.shape == (data.n_classes, 11) and np.all(np.isfinite(a.readout))
    assert np.array_equal(a.readout, b.readout)  # seeded
    plain = fit_private(algo, cfg, 7, data, ON, DPSpec(math.inf, 1e-3))
    assert not np.allclose(a.readout, plain.readout)


def test_the_table_names_the_n_plus_1_bound_where_a_run_had_the_bias():
    from esnfed_stages.report.privacy_report import _clip_bound  # noqa: PLC0415

    assert _clip_bound({"wesad": {}, "hhar": {}}) == "clip·√(N+N²)"
    assert _clip_bound({"wesad": {"readout_bias": True}}) == "clip·√((N+1)+(N+1)²) (readout.bias)"
    mixed = _clip_bound({"wesad": {"readout_bias": True}, "hhar": {}})
    assert mixed.startswith("clip·√(N+N²)") and "N+1" in mixed and "WESAD" in mixed
